"""Start a malhar application as one Spark streaming query."""

from __future__ import annotations

import copy
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from malhar import attributes as A
from malhar.dag import DAG
from malhar.engine import envelope as E
from malhar.engine.plan import Plan, build_plan
from malhar.engine.spark_io import (
    SINK_NAME,
    SOURCE_NAME,
    MalharSink,
    MalharSource,
    encode_plan,
    shutdown_flag_path,
)
from malhar.engine.task import run_window
from malhar.engine.window_log import WindowLog

log = logging.getLogger("malhar")


def _level_fn(
    plan: Plan, level: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run_level(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        slot = TaskContext.get().partitionId()
        yield from run_window(plan, level, slot, batches)

    return run_level


def build_dataframe(spark: SparkSession, plan: Plan, max_windows: int | None = None) -> DataFrame:
    """The streaming DataFrame of an application: source, one stage per level."""
    spark.dataSource.register(MalharSource)
    spark.dataSource.register(MalharSink)
    reader = spark.readStream.format(SOURCE_NAME).option("plan", encode_plan(plan))
    if max_windows is not None:
        reader = reader.option("max_windows", str(max_windows))
    df = reader.load()
    for level in range(1, len(plan.levels)):
        df = df.repartition(plan.levels[level], "pkey").mapInArrow(
            _level_fn(plan, level), E.ENVELOPE_DDL
        )
    metrics = [F.max("window").alias("window")]
    for mid, ref in enumerate(plan.error_ports):
        cond = (F.col("kind") == E.METRIC) & (F.col("route") == mid)
        metrics.append(F.coalesce(F.sum(F.when(cond, F.col("count"))), F.lit(0)).alias(ref))
    return df.observe("malhar", *metrics)


class RunningApplication:
    """A launched application: its query, its windows, its metrics; ``stop()`` it when done."""

    def __init__(self, dag: DAG, plan: Plan, query: StreamingQuery, checkpoint: str) -> None:
        self.dag = dag
        self.plan = plan
        self.query = query
        self.checkpoint = checkpoint
        self.log = WindowLog(checkpoint)

    @property
    def last_window(self) -> int:
        """The largest completed window id (-1 before the first)."""
        return self.log.largest_completed()

    def error_counts(self, window: int) -> dict[str, int]:
        """Tuples emitted on each error port ("operator.port") in ``window``."""
        info = self.log.get(window) or {}
        return dict(info.get("errors", {}))

    def await_window(self, window: int, timeout: float = 120.0) -> None:
        """Block until ``window`` is complete; raise the query's error if it failed."""
        deadline = time.monotonic() + timeout
        while self.last_window < window:
            exc = self.query.exception()
            if exc is not None:
                raise exc
            if not self.query.isActive:
                raise RuntimeError(f"the query stopped before window {window} completed")
            if time.monotonic() > deadline:
                raise TimeoutError(f"window {window} not complete after {timeout:.0f}s")
            self.query.awaitTermination(0.05)

    def await_completion(self, timeout: float | None = None) -> None:
        """For a run with ``windows=N``: wait until the last window is processed, then stop."""
        self.query.processAllAvailable()
        exc = self.query.exception()
        if exc is not None:
            raise exc
        self.query.stop()

    def stop(self, timeout: float = 120.0) -> None:
        """Orderly stop: a last window tears every operator down, then the query ends."""
        from malhar.util.fs import filesystem_for

        if not self.query.isActive:
            return
        fs, flag = filesystem_for(shutdown_flag_path(self.checkpoint))
        fs.mkdirs(fs.dirname(flag))
        fs.create(flag, b"", overwrite=True)
        try:
            self.query.processAllAvailable()
        finally:
            fs.delete(flag)
            self.query.stop()


def launch(
    dag: DAG,
    *,
    spark: SparkSession | None = None,
    checkpoint: str | None = None,
    windows: int | None = None,
    window_ms: int | None = None,
) -> RunningApplication:
    """Validate ``dag`` and start it as a streaming query.

    Args:
        dag: the application.
        spark: the session (``malhar.build_session()`` by default).
        checkpoint: checkpoint root (local path or ``hdfs://``); the DAG's CHECKPOINT
            attribute, or a fresh temporary folder (no recovery across runs) otherwise.
        windows: stop after this many windows (tests, batch-like runs); None runs until stopped.
        window_ms: streaming window period; the DAG's STREAMING_WINDOW_MS by default.
    """
    from malhar.session import build_session

    spark = spark or build_session()
    dag = copy.copy(dag)  # the caller's DAG keeps its attributes
    dag.attributes = dict(dag.attributes)
    checkpoint = checkpoint or dag.attr(A.CHECKPOINT)
    if checkpoint is None:
        checkpoint = tempfile.mkdtemp(prefix=f"malhar-{dag.name}-")
        log.warning("malhar: no CHECKPOINT set; using %s (no recovery across runs)", checkpoint)
    dag.set_attribute(A.CHECKPOINT.name, checkpoint)
    if window_ms is not None:
        dag.set_attribute(A.STREAMING_WINDOW_MS.name, window_ms)
    plan = build_plan(dag)
    plan.id = uuid.uuid4().hex
    df = build_dataframe(spark, plan, windows)
    period = int(dag.attr(A.STREAMING_WINDOW_MS))
    query = (
        df.writeStream.format(SINK_NAME)
        .option("plan", encode_plan(plan))
        .option("checkpointLocation", f"{checkpoint.rstrip('/')}/spark")
        .queryName(f"malhar-{dag.name}-{uuid.uuid4().hex[:6]}")
        .trigger(processingTime=f"{period} milliseconds")
        .start()
    )
    return RunningApplication(dag, plan, query, checkpoint)


def run(dag: DAG, windows: int, **kwargs: Any) -> RunningApplication:
    """Launch ``dag`` for ``windows`` windows and wait until they are done."""
    app = launch(dag, windows=windows, **kwargs)
    app.await_completion()
    return app
