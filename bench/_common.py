"""Shared pieces of the engine benchmark (``bench/engine.py``).

Everything that runs inside Spark's Python workers lives here, in an importable
module, so that cloudpickle ships it *by reference*: the worker imports this
file (``bench/`` is put on ``PYTHONPATH`` before the JVM starts) and keeps its
module-level caches across tasks. That way the pre-built Arrow batches are
built once per worker process, for malhar and for the Spark baselines alike,
and neither side pays data generation inside the measured windows.

Contents:

- data: :func:`chain_batch` (``id bigint, v bigint, s string``) and
  :func:`keyed_batch` (``word string, n bigint``), cached per process;
- the chain's compute steps (:func:`step_add`, :func:`step_filter`,
  :func:`step_project`), used by malhar's operators and by the baseline's
  single ``mapInArrow`` alike;
- malhar operators: :class:`EmptyInput`, :class:`EmptyInputWithErrorPort`,
  :class:`Idle`, :class:`BatchGen`, :class:`AddOp`, :class:`FilterOp`,
  :class:`ProjectOp`, :class:`RowCount`, :class:`KeyCount`;
- Spark baselines: the streaming source :class:`BenchSource` (``format("bench_src")``),
  the sink :class:`NullSink` (``format("bench_null")``), :func:`chain_map` and the
  ``transformWithStateInPandas`` processor :class:`TwsCount`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHAIN_DDL = "id bigint, v bigint, s string"
PROJECTED_DDL = "id bigint, w bigint, s string"
KEYED_DDL = "word string, n bigint"
CHAIN_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
KEYED_SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64())])

_CACHE: dict[tuple, pa.RecordBatch] = {}


def chain_batch(rows: int, seed: int = 0) -> pa.RecordBatch:
    """``rows`` rows of ``id bigint, v bigint, s string`` (v uniform in [0, 1000))."""
    key = ("chain", rows, seed)
    if key not in _CACHE:
        rng = np.random.default_rng(seed)
        labels = np.array([f"s{i:04d}" for i in range(1000)], dtype=object)
        _CACHE[key] = pa.RecordBatch.from_arrays(
            [
                pa.array(np.arange(rows, dtype=np.int64)),
                pa.array(rng.integers(0, 1000, rows, dtype=np.int64)),
                pa.array(labels[rng.integers(0, 1000, rows)], type=pa.string()),
            ],
            schema=CHAIN_SCHEMA,
        )
    return _CACHE[key]


def keyed_batch(rows: int, keys: int, seed: int = 0) -> pa.RecordBatch:
    """``rows`` rows of ``word string, n bigint``; ``word`` uniform over ``keys`` distinct values."""
    key = ("keyed", rows, keys, seed)
    if key not in _CACHE:
        rng = np.random.default_rng(seed)
        words = np.array([f"w{i:07d}" for i in range(keys)], dtype=object)
        _CACHE[key] = pa.RecordBatch.from_arrays(
            [
                pa.array(words[rng.integers(0, keys, rows)], type=pa.string()),
                pa.array(np.ones(rows, dtype=np.int64)),
            ],
            schema=KEYED_SCHEMA,
        )
    return _CACHE[key]


# -- the chain's three compute steps (shared by malhar and the baseline) -------------------------
def step_add(b: pa.RecordBatch) -> pa.RecordBatch:
    return b.set_column(1, "v", pc.add(b.column(1), 1))


def step_filter(b: pa.RecordBatch) -> pa.RecordBatch:
    return b.filter(pc.less(b.column(1), 501))  # keeps ~50%


def step_project(b: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [b.column(0), pc.multiply(b.column(1), 2), b.column(2)], names=["id", "w", "s"]
    )


def chain_expected(rows_per_partition: int, partitions: int, windows: int) -> int:
    """Rows that survive the chain for ``windows`` windows (every partition emits the same batch)."""
    b = chain_batch(rows_per_partition)
    return step_filter(step_add(b)).num_rows * partitions * windows


# -- malhar operators -----------------------------------------------------------------------------
from malhar import InputOperator, InputPort, Operator, OutputPort, Property, State  # noqa: E402
from malhar.operator import OperatorContext  # noqa: E402


def _setup_log(context: OperatorContext) -> None:
    """Record that a partition runtime was (re)built: one line per ``setup`` call.

    The engine calls ``setup`` only when a partition's runtime is not cached in
    the worker (first window, or the task ran in another Python worker), so the
    count of lines measures the cache-miss rate of ``malhar.engine.task.acquire``.
    """
    d = os.environ.get("MALHAR_BENCH_SETUP_LOG")
    if d:
        with open(os.path.join(d, "setup.log"), "a") as f:
            f.write(f"{context.name} {context.partition} {os.getpid()}\n")


class EmptyInput(InputOperator):
    """Emits nothing, ever (the empty-window benchmark)."""

    output = OutputPort(KEYED_DDL)

    def setup(self, context: OperatorContext) -> None:
        _setup_log(context)

    def emit_tuples(self) -> None:
        pass


class EmptyInputWithErrorPort(EmptyInput):
    """``EmptyInput`` with an error port (never used): ``launch`` then collects error counts."""

    error = OutputPort(KEYED_DDL, error=True)


class Idle(Operator):
    """Receives (nothing) and emits nothing."""

    input = InputPort(KEYED_DDL)

    def setup(self, context: OperatorContext) -> None:
        _setup_log(context)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        pass


class BatchGen(InputOperator):
    """Emits one pre-built Arrow batch per window (``kind`` "chain" or "keyed")."""

    output = OutputPort(CHAIN_DDL)  # replaced per kind in KeyedGen
    rows = Property(int, default=0)
    keys = Property(int, default=0)

    def __init__(self, rows: int, keys: int = 0) -> None:
        self.configure(rows=rows, keys=keys)

    def make(self) -> pa.RecordBatch:
        return chain_batch(self.rows)

    def setup(self, context: OperatorContext) -> None:
        _setup_log(context)
        self._batch = self.make()
        self._done = False

    def begin_window(self, window_id: int) -> None:
        self._done = False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit_batch(self._batch)


class KeyedGen(BatchGen):
    output = OutputPort(KEYED_DDL)

    def make(self) -> pa.RecordBatch:
        return keyed_batch(self.rows, self.keys)


class AddOp(Operator):
    input = InputPort(CHAIN_DDL)
    output = OutputPort(CHAIN_DDL)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(step_add(batch))


class FilterOp(Operator):
    input = InputPort(CHAIN_DDL)
    output = OutputPort(CHAIN_DDL)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(step_filter(batch))


class ProjectOp(Operator):
    input = InputPort(CHAIN_DDL)
    output = OutputPort(PROJECTED_DDL)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(step_project(batch))


class RowCount(Operator):
    """Counts the rows it receives (state: one int, checkpointed with every window)."""

    input = InputPort(PROJECTED_DDL)
    rows = State(default=0)

    def setup(self, context: OperatorContext) -> None:
        _setup_log(context)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows


class KeyCount(Operator):
    """Counts tuples per key; state is a ``dict`` word -> count, pickled with every window."""

    input = InputPort(KEYED_DDL)

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def setup(self, context: OperatorContext) -> None:
        _setup_log(context)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        vc = pc.value_counts(batch.column(0))
        counts = self.counts
        for k, n in zip(
            vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True
        ):
            counts[k] = counts.get(k, 0) + n


# -- Spark baselines ------------------------------------------------------------------------------
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)


@dataclass
class BenchPartition(InputPartition):
    kind: str
    rows: int
    keys: int


class BenchReader(DataSourceStreamReader):
    """Advances its offset by one on every trigger, up to ``batches``; each partition
    yields nothing ("empty") or one cached Arrow batch ("chain" / "keyed")."""

    def __init__(self, options: dict[str, str]) -> None:
        self.kind = options.get("kind", "empty")
        self.parts = int(options.get("partitions", "2"))
        self.rows = int(options.get("rows", "0"))
        self.keys = int(options.get("keys", "0"))
        self.batches = int(options.get("batches", "1000000"))

    def initialOffset(self) -> dict:
        return {"i": 0}

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        return {"i": min(int(start["i"]) + 1, self.batches)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if start["i"] == end["i"]:
            return []
        return [BenchPartition(self.kind, self.rows, self.keys) for _ in range(self.parts)]

    def read(self, partition: BenchPartition) -> Iterator[pa.RecordBatch]:
        if partition.kind == "chain":
            yield chain_batch(partition.rows)
        elif partition.kind == "keyed":
            yield keyed_batch(partition.rows, partition.keys)

    def commit(self, end: dict) -> None:
        pass


class BenchSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_src"

    def schema(self) -> str:
        return {"chain": CHAIN_DDL, "keyed": KEYED_DDL}.get(
            self.options.get("kind", "empty"), KEYED_DDL
        )

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BenchReader(dict(self.options))


@dataclass
class Drained(WriterCommitMessage):
    rows: int = 0


class NullWriter(DataSourceStreamArrowWriter):
    """The smallest Python sink: drains its input, commits nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Drained(sum(b.num_rows for b in iterator))

    def commit(self, messages: list, batchId: int) -> None:
        pass

    def abort(self, messages: list, batchId: int) -> None:
        pass


class NullSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_null"

    def schema(self) -> str:
        return KEYED_DDL

    def streamWriter(self, schema: Any, overwrite: bool) -> NullWriter:
        return NullWriter()


def chain_map(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The baseline of the fused chain: the same three steps, then one row with the count."""
    for b in batches:
        out = step_project(step_filter(step_add(b)))
        yield pa.RecordBatch.from_arrays([pa.array([out.num_rows], pa.int64())], names=["n"])


def identity_map(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


from pyspark.sql.streaming.stateful_processor import StatefulProcessor  # noqa: E402


class TwsCount(StatefulProcessor):
    """Per-key count in a ``ValueState``; emits nothing (like ``KeyCount``)."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "c bigint")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        n = 0
        for pdf in rows:
            n += len(pdf)
        old = self.count.get()[0] if self.count.exists() else 0
        self.count.update((old + n,))
        return iter(())

    def close(self) -> None:
        pass


def count_map(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stateless reference for target 3: count per key after the shuffle, keep nothing."""
    for b in batches:
        vc = pc.value_counts(b.column(0))
        yield pa.RecordBatch.from_arrays(
            [pa.array([pc.sum(vc.field("counts")).as_py() or 0], pa.int64())], names=["n"]
        )
