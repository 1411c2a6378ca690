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
import uuid
import weakref
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
from malhar.engine import generations
from malhar.engine.application import RunningApplication
from malhar.engine.checkpoint_identity import checkpoint_identity
from malhar.engine.plan import Plan, build_plan
from malhar.engine.progress import ProgressListener, StatsDispatcher
from malhar.engine.secret_shipping import ship_secrets
from malhar.engine.slot_claims import claims_root, level0_tasks
from malhar.engine.spark_io import (
    SOURCE_NAME,
    MalharSource,
    clear_stopped_mark,
    encode_plan,
    integrity_options,
    shutdown_flag_path,
)
from malhar.engine.task import run_window
from malhar.stats import Response, StatsListener

log = logging.getLogger("malhar")


def _level_fn(
    plan: Plan, level: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run_level(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        slot = TaskContext.get().partitionId()
        yield from run_window(plan, level, slot, batches)

    return run_level


#: per session, a digest of what its registration of malhar's data source carried
_registrations: weakref.WeakKeyDictionary[SparkSession, str] = weakref.WeakKeyDictionary()


def _register_source(spark: SparkSession) -> None:
    """Registers malhar's data source in ``spark``, again only when what a registration
    carries has changed: Spark warns on every replacement, and a registration carries
    ``SparkContext.environment``, where each launch's shipped secrets travel
    (malhar/engine/secret_shipping.py): kept from an earlier launch, a later launch's
    operators found their secrets missing."""
    sc = spark.sparkContext
    carried = repr((sorted(sc.environment.items()), sc._python_includes, sc.pythonExec))
    digest = hashlib.sha256(carried.encode()).hexdigest()  # the secrets are not kept
    if _registrations.get(spark) != digest:
        spark.dataSource.register(MalharSource)
        _registrations[spark] = digest


def build_dataframe(spark: SparkSession, plan: Plan, max_windows: int | None = None) -> DataFrame:
    """The streaming DataFrame of an application: source, one stage per level."""
    _register_source(spark)
    # one lookup (SparkContext.getConf() copies the whole conf: ~135 py4j calls)
    speculation = spark.conf.get("spark.speculation", "false") == "true"
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
    return df.observe("malhar", *observed_metrics(plan.error_ports))


def observed_metrics(error_ports: list[str]) -> list[Any]:
    """What each batch observes (``progress.ProgressListener`` reads it): the window, the
    count of every error port (metric id = its index), the STATS rows' payloads.

    SQL text, one ``F.expr`` per metric: the same expressions built from column functions
    took ~290 py4j calls, a sixth of a second of every launch."""

    def name(n: str) -> str:
        return "`" + n.replace("`", "``") + "`"

    sql = ["max(`window`) AS `window`"]
    for mid, ref in enumerate(error_ports):
        sql.append(
            f"coalesce(sum(CASE WHEN `kind` = {int(E.METRIC)} AND `route` = {mid} "
            f"THEN `count` END), 0) AS {name(ref)}"
        )
    sql.append(
        f"collect_list(CASE WHEN `kind` = {int(E.STATS)} THEN CAST(`payload` AS STRING) END) "
        "AS `stats`"
    )
    return [F.expr(x) for x in sql]


#: checkpoints ``launch`` created in temporary folders: removed at exit
_TEMPORARY: list[str] = []


@atexit.register
def _remove_temporary_checkpoints() -> None:  # pragma: no cover - process exit
    for path in _TEMPORARY:
        shutil.rmtree(path, ignore_errors=True)


def _for_executors(dag: DAG) -> DAG:
    """A copy of ``dag`` without what lives on the driver only (stats listeners,
    partitioners): the plan is pickled for the executors, and those need not pickle."""
    driver_only = {A.STATS_LISTENERS.name, A.PARTITIONER.name}
    shipped = copy.copy(dag)
    shipped.operators = {}
    for name, meta in dag.operators.items():
        attributes = {k: v for k, v in meta.attributes.items() if k not in driver_only}
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
    app = RunningApplication(dag, spark, checkpoint, windows, start_query)
    app.start()
    return app


@dataclasses.dataclass
class Started:
    """One query run of an application: its plan, its query and its listeners."""

    plan: Plan
    query: StreamingQuery
    progress: ProgressListener
    stats: StatsDispatcher


def start_query(
    dag: DAG,
    spark: SparkSession,
    checkpoint: str,
    windows: int | None,
    on_response: Callable[[str, StatsListener, Response], None],
) -> Started:
    """Plan ``dag`` at its checkpoint's partitioning generation and start its query."""
    generation = generations.load(checkpoint)  # a dynamic repartitioning may have run
    dag = generations.partitioned_dag(dag, generation)
    # strict before any running repartitioning: after one, its restart must not be refused
    # (the state has moved); the fused keyed operators it made are warned of
    plan = build_plan(dag, own_routing=generation.operators, strict=not generation.operators)
    generations.apply(plan, generation)
    plan.id = uuid.uuid4().hex
    plan.checkpoint_id = checkpoint_identity(checkpoint)
    shipped, literal = ship_secrets(_for_executors(dag), spark.sparkContext.environment)
    plan.dag = shipped
    if literal:
        log.warning(
            "malhar: %s hold literal secrets that their operators cannot read as references; "
            "they travel inside the plan Spark ships to its executors (never in checkpoints)",
            ", ".join(literal),
        )
    fs, claims = claims_root(checkpoint)  # an earlier launch's slot claims
    fs.delete(claims, recursive=True)
    clear_shutdown_flag(checkpoint)
    clear_stopped_mark(checkpoint)  # a window may be in flight from now until a clean stop
    df = build_dataframe(spark, plan, windows)
    period = int(dag.attr(A.STREAMING_WINDOW_MS))
    name = f"malhar-{dag.name}-{uuid.uuid4().hex[:6]}"
    # Error-port counts and operator statistics come from the observed metrics of each
    # batch (two py4j calls per batch; see malhar/engine/progress.py)
    progress = ProgressListener(
        name,
        plan.error_ports,
        {n: plan.groups[plan.group_of[n]].partitions for n in dag.operators},
        period,
    )
    spark.streams.addListener(progress)
    stats = StatsDispatcher(progress, stats_listeners(dag), on_response)
    try:
        # Completed windows are recorded by the source (spark_io.MalharStreamReader):
        # the query itself writes nothing, so it ends in Spark's ``noop`` sink.
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", generations.spark_checkpoint(checkpoint, plan.generation))
            .queryName(name)
            .trigger(processingTime=f"{period} milliseconds")
            .start()
        )
    except BaseException:
        spark.streams.removeListener(progress)
        raise
    return Started(plan, query, progress, stats.start())


def clear_shutdown_flag(checkpoint: str) -> None:
    """Delete a shutdown flag before a query starts: it was left by a driver that died
    inside ``stop()`` (which deletes it in a ``finally``), and would end the new run at its
    first window and leave its query active. No ``stop()`` of this driver is under way: a
    query starts from ``launch`` (a new application; two live ones on one checkpoint are
    not supported) or from a repartitioning's restart, and ``stop()`` holds the same
    repartition lock from before it writes its flag until it has deleted it."""
    from malhar.util.fs import filesystem_for

    fs, flag = filesystem_for(shutdown_flag_path(checkpoint))
    if fs.delete(flag):
        log.warning(
            "malhar: removed a shutdown flag left by a driver that stopped inside stop() (%s)",
            flag,
        )


def run(dag: DAG, windows: int, **kwargs: Any) -> RunningApplication:
    """Launch ``dag`` for ``windows`` windows and wait until they are done."""
    app = launch(dag, windows=windows, **kwargs)
    app.await_completion()
    return app
