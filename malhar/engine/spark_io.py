"""The Spark side of a malhar application: a streaming source that plans windows and runs
level 0, and a sink that records completed windows.

Offsets are ``{"window": id, "shutdown": bool}``; every trigger advances the
window by one, so a window is one micro-batch and a replayed batch has the
same window id.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from malhar.engine import envelope as E
from malhar.engine.plan import Plan
from malhar.engine.task import run_window
from malhar.engine.window_log import WindowLog

SOURCE_NAME = "malhar"
SINK_NAME = "malhar_sink"


def encode_plan(plan: Plan) -> str:
    return base64.b64encode(cloudpickle.dumps(plan)).decode("ascii")


def decode_plan(text: str) -> Plan:
    return cloudpickle.loads(base64.b64decode(text))


def shutdown_flag_path(checkpoint: str) -> str:
    return f"{checkpoint.rstrip('/')}/malhar/control/shutdown"


@dataclass
class WindowPartition(InputPartition):
    slot: int
    window: int
    committed: int
    shutdown: bool


class MalharStreamReader(DataSourceStreamReader):
    def __init__(self, plan: Plan, max_windows: int | None) -> None:
        self.plan = plan
        self.max_windows = max_windows
        self.first: int | None = None
        self.final: int | None = None
        self.log = WindowLog(plan.checkpoint)

    def initialOffset(self) -> dict:
        return {"window": self.log.largest_completed(), "shutdown": False}

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        window = int(start["window"])
        if self.final is not None and window >= self.final:
            return start  # this run has delivered its last window
        if self.first is None:
            self.first = window
        nxt = window + 1
        shutdown = self._shutdown_requested() or (
            self.max_windows is not None and nxt >= self.first + self.max_windows
        )
        if shutdown:
            self.final = nxt
        return {"window": nxt, "shutdown": shutdown}

    def _shutdown_requested(self) -> bool:
        from malhar.util.fs import filesystem_for

        fs, path = filesystem_for(shutdown_flag_path(self.plan.checkpoint))
        return fs.exists(path)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if end["window"] == start["window"]:
            return []
        return [
            WindowPartition(slot, int(end["window"]), int(start["window"]), bool(end["shutdown"]))
            for slot in range(self.plan.levels[0])
        ]

    def read(self, partition: WindowPartition) -> Iterator[pa.RecordBatch]:
        yield from run_window(
            self.plan,
            0,
            partition.slot,
            None,
            window=partition.window,
            committed=partition.committed,
            shutdown=partition.shutdown,
        )

    def commit(self, end: dict) -> None:
        pass


class MalharSource(DataSource):
    """``spark.readStream.format("malhar")``: the windows of one malhar application."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return E.ENVELOPE_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        plan = decode_plan(self.options["plan"])
        max_windows = self.options.get("max_windows")
        return MalharStreamReader(plan, int(max_windows) if max_windows else None)


@dataclass
class WindowDone(WriterCommitMessage):
    window: int = -1
    metrics: dict[int, int] = field(default_factory=dict)
    shutdown: bool = False


class MalharSinkWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        done = WindowDone()
        for batch in iterator:
            for row in E.iter_rows(batch):
                kind, route, window, count = row[3], row[4], row[6], row[8]
                done.window = max(done.window, window)
                if kind == E.METRIC:
                    done.metrics[route] = done.metrics.get(route, 0) + count
        return done

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, WindowDone) and m.window >= 0]
        if not done:
            return
        window = max(m.window for m in done)
        errors: dict[str, int] = {}
        for m in done:
            for mid, n in m.metrics.items():
                ref = self.plan.error_ports[mid]
                errors[ref] = errors.get(ref, 0) + n
        log = WindowLog(self.plan.checkpoint)
        log.record(window, {"batch": batchId, "errors": errors})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class MalharSink(DataSource):
    """``writeStream.format("malhar_sink")``: records each completed window."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def schema(self) -> str:
        return E.ENVELOPE_DDL

    def streamWriter(self, schema: Any, overwrite: bool) -> MalharSinkWriter:
        return MalharSinkWriter(decode_plan(self.options["plan"]))
