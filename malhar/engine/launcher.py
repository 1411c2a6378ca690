"""Start a malhar application as one Spark streaming query."""

from __future__ import annotations

import atexit
import copy
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
import threading
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
from malhar.engine.failure import ApplicationFailed, explain
from malhar.engine.plan import Plan, build_plan
from malhar.engine.progress import ProgressListener, StatsDispatcher
from malhar.engine.slot_claims import claims_root, level0_tasks
from malhar.engine.spark_io import (
    SOURCE_NAME,
    MalharSource,
    encode_plan,
    integrity_options,
    shutdown_flag_path,
)
from malhar.engine.task import run_window
from malhar.engine.window_log import WindowLog
from malhar.stats import OperatorMetrics, Response, StatsListener

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
    speculation = spark.sparkContext.getConf().get("spark.speculation", "false") == "true"
    claim = bool(plan.dag.attr(A.SLOT_CLAIMS)) and not speculation
    slots = plan.levels[0]
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("plan", encode_plan(plan))
        .option("checkpoint", plan.checkpoint)
        .option("slots", str(slots))
        .option("tasks", str(level0_tasks(slots, spark.sparkContext.defaultParallelism, claim)))
    )
    if max_windows is not None:
        reader = reader.option("max_windows", str(max_windows))
    for key, value in integrity_options(plan.integrity_key).items():
        reader = reader.option(key, value)
    df = reader.load()
    for level in range(1, len(plan.levels)):
        df = df.repartition(plan.levels[level], "pkey").mapInArrow(
            _level_fn(plan, level), E.ENVELOPE_DDL
        )
    metrics = [F.max("window").alias("window")]
    for mid, ref in enumerate(plan.error_ports):
        cond = (F.col("kind") == E.METRIC) & (F.col("route") == mid)
        metrics.append(F.coalesce(F.sum(F.when(cond, F.col("count"))), F.lit(0)).alias(ref))
    stats = F.when(F.col("kind") == E.STATS, F.col("payload").cast("string"))
    metrics.append(F.collect_list(stats).alias("stats"))
    return df.observe("malhar", *metrics)


class RunningApplication:
    """A launched application: its query, its windows, its metrics; ``stop()`` it when done."""

    def __init__(
        self,
        dag: DAG,
        plan: Plan,
        query: StreamingQuery,
        checkpoint: str,
        progress: ProgressListener | None = None,
        spark: SparkSession | None = None,
        stats: StatsDispatcher | None = None,
    ) -> None:
        self.dag = dag
        self.plan = plan
        self.query = query
        self.checkpoint = checkpoint
        self.log = WindowLog(checkpoint, plan.integrity_key)
        self._progress = progress
        self._spark = spark
        self._stats = stats

    @property
    def last_window(self) -> int:
        """The largest completed window id (-1 before the first), from the window log.

        A window is recorded once its batch is in Spark's commit log, when the next
        window starts (one trigger late); ``stop()``/``await_completion()`` return with
        the last window of the run recorded.
        """
        return self.log.largest_completed()

    def error_counts(self, window: int) -> dict[str, int]:
        """Tuples emitted on each error port ("operator.port") in ``window``.

        Known for the windows this run completed (from the query's observed metrics);
        ``{}`` for a window not completed yet, or completed by an earlier run.
        """
        if self._progress is not None:
            counts = self._progress.get(window)
            if counts is None:  # listener events are asynchronous: ask the query
                self._sync_progress()
                counts = self._progress.get(window)
            if counts is not None:
                return counts
        info = self.log.get(window) or {}  # windows recorded by the former Python sink
        return dict(info.get("errors", {}))

    def _sync_progress(self) -> None:
        if self._progress is not None:
            for p in self.query.recentProgress:
                self._progress.add(p.name, p.observedMetrics.get("malhar"))

    def metrics(self, last_windows: int = 20) -> dict[str, OperatorMetrics]:
        """Live per-operator metrics over the ``last_windows`` most recent windows:
        tuples/s in and out, mean window processing time, backlog, partitions, and the
        operators' own metrics (see :mod:`malhar.stats`)."""
        if self._progress is None:
            return {}
        return self._progress.metrics(last_windows)

    def _finish(self) -> None:
        """After the query ended: take its last metrics, unregister the listener."""
        if self._progress is None or self.query.isActive:
            return
        if self._stats is not None:
            self._stats.stop()
        self._sync_progress()
        spark, self._spark = self._spark, None
        if spark is not None:
            try:
                spark.streams.removeListener(self._progress)
            except Exception:  # the session may be gone: nothing to unregister
                log.debug("malhar: could not remove the metrics listener", exc_info=True)

    def failure(self) -> ApplicationFailed | None:
        """Why the query failed (the operator's error first), or None while it has not."""
        exc = self.query.exception()
        return None if exc is None else explain(self.dag.name, exc)

    def raise_if_failed(self) -> None:
        """Raise :class:`ApplicationFailed` (chained to Spark's exception) if the query failed."""
        failed = self.failure()
        if failed is not None:
            raise failed from failed.spark_exception

    def await_window(self, window: int, timeout: float = 120.0) -> None:
        """Block until ``window`` is complete.

        Raises:
            ApplicationFailed: the query failed (its message starts with the operator error).
            TimeoutError: ``window`` did not complete within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.last_window < window:
            self.raise_if_failed()
            if not self.query.isActive:
                raise RuntimeError(f"the query stopped before window {window} completed")
            if time.monotonic() > deadline:
                raise TimeoutError(f"window {window} not complete after {timeout:.0f}s")
            try:
                self.query.awaitTermination(0.05)
            except Exception:
                self.raise_if_failed()
                raise

    def _process_all_available(self, timeout: float | None, what: str) -> None:
        """``processAllAvailable()``, bounded by ``timeout`` seconds (None: no bound).

        Spark's call has no timeout, so a bounded wait runs it in a daemon thread;
        on timeout the query keeps running and :class:`TimeoutError` names ``what``.
        """
        failure: list[BaseException] = []

        def process() -> None:
            try:
                self.query.processAllAvailable()
            except BaseException as exc:  # re-raised in the caller's thread
                failure.append(exc)

        if timeout is None:
            process()
        else:
            waiter = threading.Thread(target=process, name="malhar-await", daemon=True)
            waiter.start()
            waiter.join(timeout)
            if waiter.is_alive():
                self.raise_if_failed()
                raise TimeoutError(f"{what}: not done after {timeout:g}s")
        if failure:
            # Spark's own exception names the Python worker, not the operator: ours first
            self.raise_if_failed()
            raise failure[0]

    def await_completion(self, timeout: float | None = None) -> None:
        """For a run with ``windows=N``: wait until the last window is processed, then stop.

        Raises:
            ApplicationFailed: the query failed.
            TimeoutError: the windows were not processed within ``timeout`` seconds; the
                application keeps running (``stop()``, ``abort()`` or wait again).
        """
        self._process_all_available(timeout, f"application {self.dag.name!r}")
        try:
            self.raise_if_failed()
            self.query.stop()
        finally:
            self._finish()

    def stop(self, timeout: float = 120.0) -> None:
        """Orderly stop: a last window tears every operator down, then the query ends.

        Raises:
            TimeoutError: the last window did not complete within ``timeout`` seconds;
                the query was then stopped at once (as :meth:`abort`), and the next
                start replays the unfinished window.
        """
        from malhar.util.fs import filesystem_for

        if not self.query.isActive:
            self._finish()
            return
        fs, flag = filesystem_for(shutdown_flag_path(self.checkpoint))
        fs.mkdirs(fs.dirname(flag))
        fs.create(flag, b"", overwrite=True)
        try:
            # returns once the source found nothing after the shutdown window, which is
            # when it records that window as complete (``MalharStreamReader.latestOffset``)
            self._process_all_available(
                timeout, f"stopping application {self.dag.name!r} (the query was aborted)"
            )
        finally:
            fs.delete(flag)
            self.query.stop()
            self._finish()

    def abort(self) -> None:
        """Stop the query now, without the orderly last window (operators are not torn
        down; the next start replays the unfinished window)."""
        try:
            self.query.stop()
        finally:
            self._finish()


#: checkpoints ``launch`` created in temporary folders: removed at exit
_TEMPORARY: list[str] = []


@atexit.register
def _remove_temporary_checkpoints() -> None:  # pragma: no cover - process exit
    for path in _TEMPORARY:
        shutil.rmtree(path, ignore_errors=True)


def _for_executors(dag: DAG) -> DAG:
    """A copy of ``dag`` without what lives on the driver only (stats listeners): the
    plan is pickled for the executors, and a listener need not pickle."""
    shipped = copy.copy(dag)
    shipped.operators = {}
    for name, meta in dag.operators.items():
        attributes = {k: v for k, v in meta.attributes.items() if k != A.STATS_LISTENERS.name}
        shipped.operators[name] = dataclasses.replace(meta, attributes=attributes)
    return shipped


def stats_listeners(dag: DAG) -> dict[str, list[StatsListener]]:
    """Per operator, its ``STATS_LISTENERS`` (and the operator itself when it is one)."""
    out = {}
    for name, meta in dag.operators.items():
        listeners = list(meta.attr(A.STATS_LISTENERS) or ())
        if isinstance(meta.operator, StatsListener):
            listeners.append(meta.operator)
        if listeners:
            out[name] = listeners
    return out


def _log_response(operator: str, listener: StatsListener, response: Response) -> None:
    if response.repartition_required:
        log.warning(
            "malhar: %r asks to repartition %r (%s)",
            type(listener).__name__,
            operator,
            response.reason or "no reason given",
        )


def literal_secrets(dag: DAG) -> list[str]:
    """``operator.property`` for each property holding a secret that is not a reference."""
    from malhar.properties import properties_of
    from malhar.redaction import secret_values
    from malhar.secrets import is_reference

    found = []
    for name, meta in dag.operators.items():
        for pname, prop in properties_of(type(meta.operator)).items():
            value = getattr(meta.operator, pname, None)
            if any(not is_reference(v) for v in secret_values(value, pname, secret=prop.secret)):
                found.append(f"{name}.{pname}")
    return found


def derived_name(checkpoint: str) -> str:
    """A stable, unique name for an unnamed application: a digest of its checkpoint location
    (the same on every restart from that checkpoint, different for every other one)."""
    where = checkpoint if "://" in checkpoint else os.path.abspath(checkpoint)
    return "app-" + hashlib.sha256(where.rstrip("/").encode()).hexdigest()[:12]


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
        checkpoint = tempfile.mkdtemp(prefix=f"malhar-{dag.name}-")  # owner-only (0700)
        _TEMPORARY.append(checkpoint)
        log.warning(
            "malhar: no CHECKPOINT set; using %s, removed when this process exits "
            "(no recovery across runs)",
            checkpoint,
        )
    dag.set_attribute(A.CHECKPOINT.name, checkpoint)
    if not dag.named:
        dag.set_attribute(A.APPLICATION_NAME, derived_name(checkpoint))
        log.warning(
            "malhar: the application has no name; using %r, derived from its checkpoint %s. "
            "Outputs key their exactly-once records (meta rows, transactional ids) by this "
            "name: give the DAG a stable name, DAG('my-app'), before it writes anywhere that "
            "outlives this checkpoint",
            dag.name,
            checkpoint,
        )
    if window_ms is not None:
        dag.set_attribute(A.STREAMING_WINDOW_MS.name, window_ms)
    plan = build_plan(dag)
    plan.id = uuid.uuid4().hex
    plan.dag = _for_executors(dag)
    literal = literal_secrets(dag)
    if literal:
        log.warning(
            "malhar: %s hold literal secrets; they travel inside the plan Spark ships to its "
            "executors (never in checkpoints). Write them as references, '${env:NAME}' or "
            "'${file:/path}', read on the executors",
            ", ".join(literal),
        )
    fs, claims = claims_root(checkpoint)  # an earlier launch's slot claims
    fs.delete(claims, recursive=True)
    df = build_dataframe(spark, plan, windows)
    period = int(dag.attr(A.STREAMING_WINDOW_MS))
    name = f"malhar-{dag.name}-{uuid.uuid4().hex[:6]}"
    # Error-port counts and operator statistics come from the observed metrics of each
    # batch (two py4j calls per batch; see malhar/engine/progress.py)
    progress = ProgressListener(
        name, plan.error_ports, {n: m.partitions for n, m in dag.operators.items()}
    )
    spark.streams.addListener(progress)
    stats = StatsDispatcher(progress, stats_listeners(dag), _log_response)
    try:
        # Completed windows are recorded by the source (spark_io.MalharStreamReader):
        # the query itself writes nothing, so it ends in Spark's ``noop`` sink.
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", f"{checkpoint.rstrip('/')}/spark")
            .queryName(name)
            .trigger(processingTime=f"{period} milliseconds")
            .start()
        )
    except BaseException:
        spark.streams.removeListener(progress)
        raise
    return RunningApplication(dag, plan, query, checkpoint, progress, spark, stats.start())


def run(dag: DAG, windows: int, **kwargs: Any) -> RunningApplication:
    """Launch ``dag`` for ``windows`` windows and wait until they are done."""
    app = launch(dag, windows=windows, **kwargs)
    app.await_completion()
    return app
