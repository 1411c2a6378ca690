"""The flagship word count, malhar against a hand-written exactly-once PySpark job (issue 5, item 11).

    python bench/wordcount.py                  # ~3 min on 2 cores: 1M lines, 2 rounds, 30 s latency
    python bench/wordcount.py --quick          # ~2 min: 300k lines, 1 round, 15 s latency
    python bench/wordcount.py --plan shuffle      # every word shuffled to the counters (§5.1)
    python bench/wordcount.py --only throughput,latency    # skip the connector ceilings
    python bench/wordcount.py --only throughput --hdfs [--no-slot-claims]   # checkpoints on HDFS

Same machine, same invocation, same generated data (``samples.wordcount_exactly_once.data.corpus``),
the same Kafka broker and PostgreSQL server (``malhar.testing.services``), one SparkSession
(``local[2]``, Spark's Kafka connector jars from ``malhar/testing/maven/spark-kafka`` on its
classpath for both engines):

- **malhar**: the flagship as committed (``samples.wordcount_exactly_once.app.populate``):
  ``KafkaTextInputOperator`` -> ``WordSplitter`` -> ``UniqueCounter`` -> ``JdbcOutputOperator``
  merge-add into ``words(word, count)``, 4 partitions of each fused into one pass per reader,
  each writer with its meta row (``--plan combine``: partial counts shuffled to a unifier and
  one writer; ``--plan shuffle``: 2 readers, every word shuffled by ``KeyCodec("word")`` to
  the 4 counters).
- **PySpark baseline**: ``spark.readStream.format("kafka")`` (Spark's own source) ->
  ``foreachBatch``: ``explode(split(value, " "))`` + ``groupBy(word).count()`` collected on the
  driver, written with psycopg2 in one transaction that locks the meta row ``(app) -> batch_id``
  (a batch at or below it is skipped), merge-adds the counts (``execute_values`` ``INSERT ... ON
  CONFLICT (word) DO UPDATE SET count = words.count + EXCLUDED.count``) and updates the meta row.

Sections (method and figures: docs/performance-wordcount.md):

1. **throughput**: a topic of 4 partitions preloaded with ``--lines`` lines; each engine drains
   it from the earliest offset into a fresh table, timed from ``launch`` / ``start()`` until the
   table holds every word (polled every 50 ms); both capped at ``--batch`` lines per micro-batch
   (malhar: ``max_records_per_window = batch / input partitions``; Spark:
   ``maxOffsetsPerTrigger = batch``) and triggered every ``--trigger-ms``. Reported: lines/s and
   words/s end to end and after the first commit, batches and their median duration; the table
   is checked exact against the corpus after every run. Rounds alternate which engine goes first.
2. **latency**: a producer *process* writes ``--rate`` lines/s for ``--duration`` s into a fresh
   topic (``message.timestamp.type=LogAppendTime``: the Kafka timestamp is when the broker
   appended the record); the engine is started before and runs until every line is counted.
   Per record: latency = wall time just after the COMMIT of the DB transaction holding the
   record's counts - its Kafka timestamp. malhar: bench-only subclasses (``bench/connectors.py``)
   log per window the Kafka offset ranges read (``LoggedKafkaTextInput``) and the time its
   transaction returned (``TimedJdbcOutput``); baseline: ``foreachBatch`` notes the time after
   ``commit()`` per batch id, and the batch's offsets come from Spark's offset log
   (``<checkpoint>/offsets/<id>``). Every record is joined to its window by offset; records of
   the first ``--warmup`` s are left out. p50 / p99 / max over all other records.
3. **connectors**: raw ceilings (``bench/connectors.py``): confluent-kafka consume-only rate vs
   ``KafkaTextInputOperator``; PostgreSQL ``COPY`` vs ``JdbcOutputOperator``.
4. **breakdown** (latency variants): the latency run of each variant (``--variants``): malhar
   with ``--plan combine``, ``poll_timeout_ms=10``, async progress tracking; PySpark with
   async progress (refused with ``foreachBatch``), in real-time and continuous mode (a fenced
   ``foreach`` writer; these modes run one long-lived task per Kafka partition, so they need
   ``--master local[4]``). Sections 2 and 4 print the per-stage breakdown of the windows and
   batches (docs/performance-wordcount.md §7).

Targets: malhar >= 1.0x the baseline's throughput; malhar's p50 and p99 below the baseline's and
its window rate >= the baseline's batch rate (section 2); Kafka input >= 60% of raw consume; JDBC
output >= 60% of raw COPY. The 1-minute load average is printed with every section.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)
# Spark's Python workers inherit this: they import the bench-only operators of
# ``connectors`` by reference (and ``samples`` for the flagship's WordSplitter).
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)

import connectors as K  # noqa: E402

from samples.wordcount_exactly_once.data import corpus, word_counts  # noqa: E402

#: Spark's Kafka consumer gets the fetch sizes of ``connectors.FETCH_CONFIG``
SPARK_FETCH = {
    f"kafka.{k}": str(v) for k, v in K.FETCH_CONFIG.items() if k != "queued.min.messages"
}

WORK = Path(tempfile.gettempdir())  # replaced by a fresh folder in main()
HDFS_ROOT: str | None = None  # --hdfs: checkpoints of both engines under this hdfs:// URL


def checkpoint_dir(prefix: str) -> str:
    """A fresh checkpoint folder: local under WORK, or on HDFS with --hdfs."""
    if HDFS_ROOT is not None:
        return f"{HDFS_ROOT}/{prefix}{uuid.uuid4().hex[:8]}"
    return tempfile.mkdtemp(prefix=prefix, dir=WORK)


# -- small helpers -----------------------------------------------------------------------------------
def loadavg() -> float:
    return os.getloadavg()[0]


def ident(name: str) -> str:
    """``name`` as a topic / table name part (variant labels hold ``+``)."""
    return "".join(c if c.isalnum() else "_" for c in name)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Table:
    """The word table of one run, read with one autocommit psycopg2 connection."""

    def __init__(self, dsn: str, name: str) -> None:
        import psycopg2

        self.name = name
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            cur.execute(f"CREATE TABLE {name} (word text PRIMARY KEY, count bigint NOT NULL)")

    def total(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT coalesce(sum(count), 0) FROM {self.name}")
            return int(cur.fetchone()[0])

    def counts(self) -> Counter:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT word, count FROM {self.name}")
            return Counter(dict(cur.fetchall()))

    def close(self) -> None:
        self.conn.close()


def wait_for_total(
    table: Table, total: int, failed: Any, timeout: float = 900.0
) -> tuple[float | None, float]:
    """Poll until the table holds ``total`` words: (time of the first rows, time done)."""
    first = None
    deadline = time.monotonic() + timeout
    while True:
        n = table.total()
        now = time.time()
        if n and first is None:
            first = now
        if n >= total:
            return first, now
        err = failed()
        if err:
            raise RuntimeError(err)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{table.name}: {n} of {total} words after {timeout:.0f}s")
        time.sleep(0.05)


# -- latency cuts prototyped in the bench (section 4) ---------------------------------------------
#: Spark's async progress tracking: the offset and commit logs are written in the background
#: (every interval) instead of twice per micro-batch on the query thread
ASYNC_PROGRESS = {
    "asyncProgressTrackingEnabled": "true",
    "asyncProgressTrackingCheckpointIntervalMs": "1000",
}


@contextlib.contextmanager
def async_progress(enabled: bool) -> Any:
    """While ``enabled``: every streaming query started here gets ``ASYNC_PROGRESS`` (malhar's
    ``launch`` builds its ``writeStream`` itself, so the bench patches ``start``)."""
    if not enabled:
        yield
        return
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    original = DataStreamWriter.start

    def start(self: Any, *a: Any, **k: Any) -> Any:
        return original(self.options(**ASYNC_PROGRESS), *a, **k)

    DataStreamWriter.start = start  # type: ignore[method-assign]
    try:
        yield
    finally:
        DataStreamWriter.start = original  # type: ignore[method-assign]


# -- per-stage breakdown of a window / batch (section 4) -------------------------------------------
def _ts(p: Any) -> float:
    from datetime import datetime

    return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()


def _observed(p: Any) -> tuple[dict[str, list[dict]], Any]:
    """The STATS reports of a malhar progress, by operator (``malhar/stats.py``)."""
    metrics = (p.observedMetrics or {}).get("malhar")
    if metrics is None:
        return {}, None
    values = metrics.asDict() if hasattr(metrics, "asDict") else dict(metrics)
    out: dict[str, list[dict]] = {}
    for report in values.get("stats") or ():
        if report:
            for op, raw in json.loads(report).items():
                out.setdefault(op, []).append(raw)
    return out, values.get("window")


def _spark_steps(p: Any) -> tuple[dict[str, float], float, float]:
    """Spark's own steps of a micro-batch (``durationMs``), and addBatch's [start, end]."""
    d = p["durationMs"]
    start = _ts(p)
    trig, add, co = d["triggerExecution"], d.get("addBatch", 0), d.get("commitOffsets", 0)
    pre = {
        k: float(d.get(k, 0)) for k in ("latestOffset", "walCommit", "getBatch", "queryPlanning")
    }
    steps = {f"spark: {k}": v for k, v in pre.items()}
    steps["spark: other before addBatch"] = trig - add - co - sum(pre.values())
    add_end = start + (trig - co) / 1000
    return steps, add_end - add / 1000, add_end


def _summary(rows: list[dict[str, float]], starts: list[float], t0: float, t1: float) -> dict:
    keys = list(rows[0]) if rows else []
    return {
        "n": len(rows),
        "rate": len(rows) / (t1 - t0) if t1 > t0 else float("nan"),
        "median": {k: med([r[k] for r in rows if r[k] == r[k]]) for k in keys},
        "p90": {k: pct([r[k] for r in rows if r[k] == r[k]], 0.9) for k in keys},
    }


def malhar_breakdown(progress: list[Any], t0: float, t1: float) -> dict:
    """Where a malhar window's time goes: Spark's steps (``durationMs``), then, inside
    addBatch, the STATS begin/end times of every operator partition (worker wall clock)."""
    progress = sorted(progress, key=_ts)
    rows, starts = [], []
    for i, p in enumerate(progress):
        start = _ts(p)
        if not t0 <= start <= t1:
            continue
        stats, _ = _observed(p)
        if "lines" not in stats or "words" not in stats:
            continue
        steps, add_start, add_end = _spark_steps(p)
        d = p["durationMs"]
        lines = stats["lines"]
        l0_begin = min(x["s"] for x in lines)
        l0_end = max(x["e"] for op in ("lines", "split", "count") for x in stats.get(op, ()))
        w_begin = min(x["s"] for x in stats["words"])
        w_end = max(x["e"] for x in stats["words"])
        if w_begin < l0_end:  # fused: the JDBC output runs in the readers' pass, no stage 1
            l0_end = w_begin = w_end
        nxt = _ts(progress[i + 1]) if i + 1 < len(progress) else float("nan")
        rows.append(
            {
                **steps,
                "stage 0 start: task launch, Python worker, claims, begin_window": (
                    l0_begin - add_start
                )
                * 1000,
                "stage 0: Kafka read (first poll wait incl.) + split + count (fused: + JDBC)": (
                    l0_end - l0_begin
                )
                * 1000,
                "stage 0 end -> stage 1 begin: shuffle, task launch": (w_begin - l0_end) * 1000,
                "stage 1: unifier + PostgreSQL transaction": (w_end - w_begin) * 1000,
                "stage 1 end -> addBatch end: task end, observe, noop": (add_end - w_end) * 1000,
                "spark: commitOffsets": float(d.get("commitOffsets", 0)),
                "= triggerExecution": float(d["triggerExecution"]),
                "idle until the next trigger": (nxt - start) * 1000 - d["triggerExecution"],
            }
        )
        starts.append(start)
    return _summary(rows, starts, t0, t1)


def spark_breakdown(
    progress: list[Any], steps: dict[int, tuple[float, float, float]], t0: float, t1: float
) -> dict:
    """Where a PySpark batch's time goes: Spark's steps, then inside addBatch (foreachBatch)
    the Spark job that collects the counts and the PostgreSQL transaction."""
    progress = sorted(progress, key=_ts)
    rows, starts = [], []
    for i, p in enumerate(progress):
        start = _ts(p)
        bid = p["batchId"]
        if not t0 <= start <= t1 or bid not in steps:
            continue
        own, add_start, add_end = _spark_steps(p)
        d = p["durationMs"]
        entered, collected, done = steps[bid]
        nxt = _ts(progress[i + 1]) if i + 1 < len(progress) else float("nan")
        rows.append(
            {
                **own,
                "addBatch -> foreachBatch entered": (entered - add_start) * 1000,
                "Spark job: Kafka fetch, split, partial count, shuffle, collect": (
                    collected - entered
                )
                * 1000,
                "PostgreSQL transaction": (done - collected) * 1000,
                "foreachBatch end -> addBatch end": (add_end - done) * 1000,
                "spark: commitOffsets": float(d.get("commitOffsets", 0)),
                "= triggerExecution": float(d["triggerExecution"]),
                "idle until the next trigger": (nxt - start) * 1000 - d["triggerExecution"],
            }
        )
        starts.append(start)
    return _summary(rows, starts, t0, t1)


def print_breakdown(name: str, b: dict) -> None:
    print(
        f"    {name}: {b['n']} windows/batches with data in the measured span, "
        f"{b['rate']:.2f}/s; median (p90) ms per stage:"
    )
    for k, v in b["median"].items():
        print(f"      {k:<66} {v:7.0f}  ({b['p90'][k]:.0f})")


# -- the two engines ---------------------------------------------------------------------------------
class Malhar:
    """The flagship, launched with ``malhar.launch`` on the shared session."""

    name = "malhar"

    def __init__(
        self,
        args: argparse.Namespace,
        kafka: Any,
        pg: Any,
        spark: Any,
        *,
        label: str = "malhar",
        poll_timeout_ms: int | None = None,
        async_progress: bool = False,
        plan: str | None = None,
    ) -> None:
        self.args, self.kafka, self.pg, self.spark = args, kafka, pg, spark
        #: latency variants (section 4): the Kafka input's ``poll_timeout_ms``, Spark's async
        #: progress tracking on the query's ``noop`` sink, and the flagship's ``plan`` ("direct":
        #: the JDBC output in every reader's pass, one Spark stage per window; "combine": partial
        #: counts shuffled to one writer, two stages)
        self.name, self.poll_timeout_ms = label, poll_timeout_ms
        self.async_progress, self.plan = async_progress, plan

    def start(
        self, topic: str, table: str, *, logged: bool = False, logs: Path | None = None
    ) -> Any:
        from malhar import DAG, launch
        from samples.wordcount_exactly_once.app import WordCountSettings, populate

        a = self.args
        settings = WordCountSettings(
            bootstrap_servers=self.kafka.bootstrap_servers,
            topic=topic,
            url=self.pg.sqlalchemy_url,
            table=table,
            counters=a.counters,
            plan=self.plan or a.plan,
            input_partitions=a.input_partitions,
            max_records_per_window=max(1, a.batch // a.readers),
            initial_offset="EARLIEST",
            consumer_config=dict(K.FETCH_CONFIG) if a.fetch_tuned else {},
        )
        dag = DAG(f"bench-wc-{uuid.uuid4().hex[:8]}")  # a new meta-row identity per run
        dag.set_attribute("SLOT_CLAIMS", a.slot_claims)
        output = None
        if logged:
            assert logs is not None
            output = K.TimedJdbcOutput()
            output.bench_log = str(logs / "commits.log")
        populate(dag, settings, output=output)
        reader = dag.operators["lines"].operator
        if logged:
            reader.__class__ = K.LoggedKafkaTextInput  # same ports and properties, plus a log
            reader.bench_log = str(logs / "ranges.log")
        if self.poll_timeout_ms is not None:
            reader.poll_timeout_ms = self.poll_timeout_ms
        ckpt = checkpoint_dir("malhar-")
        with async_progress(self.async_progress):
            self.app = launch(dag, spark=self.spark, checkpoint=ckpt, window_ms=a.trigger_ms)
        return self.app

    @property
    def query(self) -> Any:
        return self.app.query

    def breakdown(self, t0: float, t1: float) -> dict[str, Any]:
        """Per-stage medians of the windows that began in ``[t0, t1]`` (section 4)."""
        return malhar_breakdown(self.app.query.recentProgress, t0, t1)

    def failed(self) -> str | None:
        exc = self.app.query.exception()
        return None if exc is None else f"malhar query failed: {exc}"

    def batches(self) -> list[dict]:
        return [p for p in self.app.query.recentProgress if p.numInputRows]

    def stop(self) -> None:
        self.app.stop()

    def commit_times(self, logs: Path) -> dict[int, float]:
        out = {}
        for line in (logs / "commits.log").read_text().split("\n"):
            if line:
                w, t, _ = line.split()
                out[int(w)] = float(t)
        return out

    def windows_of_records(self, logs: Path) -> list[tuple[int, int, int, int]]:
        """``(window, partition, start, end)`` for every range read."""
        out = []
        for line in (logs / "ranges.log").read_text().split("\n"):
            if line:
                d = json.loads(line)
                out += [(d["w"], p, s, e) for _, p, s, e, _ in d["ranges"]]
        return out


class SparkBaseline:
    """The hand-written exactly-once PySpark job (Spark's Kafka source + foreachBatch + psycopg2)."""

    name = "pyspark"

    def __init__(
        self,
        args: argparse.Namespace,
        kafka: Any,
        pg: Any,
        spark: Any,
        *,
        label: str = "pyspark",
        async_progress: bool = False,
    ) -> None:
        self.args, self.kafka, self.pg, self.spark = args, kafka, pg, spark
        self.name, self.async_progress = label, async_progress

    def start(self, topic: str, table: str, **_: Any) -> Any:
        import psycopg2
        from psycopg2.extras import execute_values
        from pyspark.sql import functions as F

        a = self.args
        app = f"bench-spark-{uuid.uuid4().hex[:8]}"
        self.conn = conn = psycopg2.connect(self.pg.dsn)
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS spark_meta (app text PRIMARY KEY, batch_id bigint NOT NULL)"
            )
            cur.execute("INSERT INTO spark_meta VALUES (%s, -1)", (app,))
        conn.commit()
        self.commits: dict[int, float] = {}
        #: batch id -> (foreachBatch entered, counts collected, COMMIT returned)
        self.steps: dict[int, tuple[float, float, float]] = {}
        merge = (
            f"INSERT INTO {table} AS t (word, count) VALUES %s "
            "ON CONFLICT (word) DO UPDATE SET count = t.count + EXCLUDED.count"
        )

        def write_batch(batch_df: Any, batch_id: int) -> None:
            entered = time.time()
            counts = (
                batch_df.select(
                    F.explode(F.split(F.col("value").cast("string"), " ")).alias("word")
                )
                .where(F.col("word") != "")
                .groupBy("word")
                .count()
                .collect()
            )
            collected = time.time()
            with conn.cursor() as cur:
                cur.execute("SELECT batch_id FROM spark_meta WHERE app = %s FOR UPDATE", (app,))
                if cur.fetchone()[0] >= batch_id:  # a replayed batch: already in the table
                    conn.rollback()
                    return
                if counts:
                    execute_values(cur, merge, [(r[0], r[1]) for r in counts], page_size=1000)
                cur.execute("UPDATE spark_meta SET batch_id = %s WHERE app = %s", (batch_id, app))
            conn.commit()
            self.commits[batch_id] = done = time.time()
            self.steps[batch_id] = (entered, collected, done)

        self.ckpt = checkpoint_dir("spark-")
        writer = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(a.batch))
            # the same fetch sizes as malhar's consumer (FETCH_CONFIG), when tuned
            .options(**(SPARK_FETCH if a.fetch_tuned else {}))
            .load()
            .select("value")
            .writeStream.foreachBatch(write_batch)
            .option("checkpointLocation", self.ckpt)
            .trigger(processingTime=f"{a.trigger_ms} milliseconds")
        )
        if self.async_progress:
            writer = writer.options(**ASYNC_PROGRESS)
        self.query = writer.start()
        return self.query

    def breakdown(self, t0: float, t1: float) -> dict[str, Any]:
        """Per-stage medians of the batches that began in ``[t0, t1]`` (section 4)."""
        return spark_breakdown(self.query.recentProgress, self.steps, t0, t1)

    def failed(self) -> str | None:
        exc = self.query.exception()
        return None if exc is None else f"baseline query failed: {exc}"

    def batches(self) -> list[dict]:
        return [p for p in self.query.recentProgress if p.numInputRows]

    def stop(self) -> None:
        self.query.stop()
        self.conn.close()

    def commit_times(self, logs: Path) -> dict[int, float]:
        return dict(self.commits)

    def windows_of_records(self, logs: Path) -> list[tuple[int, int, int, int]]:
        """``(batch, partition, start, end)`` from Spark's offset log."""
        offsets = Path(self.ckpt) / "offsets"
        ends: dict[int, dict[int, int]] = {}
        for f in offsets.iterdir():
            if f.name.isdigit():
                source = json.loads(f.read_text().strip().split("\n")[-1])
                (parts,) = source.values()
                ends[int(f.name)] = {int(p): int(o) for p, o in parts.items()}
        out = []
        prev: dict[int, int] = {}
        for b in sorted(ends):
            for p, e in ends[b].items():
                s = prev.get(p, 0)
                if e > s:
                    out.append((b, p, s, e))
            prev = ends[b]
        return out


class SparkRealTime:
    """PySpark in real-time mode (``trigger(realTime=...)``, Spark 4.1+) or continuous mode
    (``trigger(continuous=...)``): Spark's Kafka source -> ``foreach`` writer
    (``peers_jobs.FencedForeachWriter``: per task, counts merge-added every ~20 ms in one
    transaction with a per-Kafka-partition offset fence, so exact under replays). Neither mode
    takes ``foreachBatch`` or a ``groupBy`` aggregation, so the count is the writer's."""

    def __init__(
        self, args: argparse.Namespace, kafka: Any, pg: Any, spark: Any, *, mode: str
    ) -> None:
        self.args, self.kafka, self.pg, self.spark, self.mode = args, kafka, pg, spark, mode
        self.name = f"pyspark-{mode}"

    def start(
        self, topic: str, table: str, *, logged: bool = False, logs: Path | None = None
    ) -> Any:
        import psycopg2
        from peers_jobs import FencedForeachWriter

        self.logs = logs or Path(tempfile.mkdtemp(prefix="rt-", dir=WORK))
        with contextlib.closing(psycopg2.connect(self.pg.dsn)) as conn, conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS rt_meta (app text, partition int, next_offset bigint "
                "NOT NULL, PRIMARY KEY (app, partition))"
            )
            conn.commit()
        app = f"bench-rt-{uuid.uuid4().hex[:8]}"
        writer = FencedForeachWriter(self.pg.dsn, table, app, str(self.logs / "commits.log"))
        trigger = (
            {"realTime": "5 seconds"} if self.mode == "realtime" else {"continuous": "1 second"}
        )
        self.query = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .options(**SPARK_FETCH)
            .load()
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS line")
            .writeStream.foreach(writer)
            .outputMode("update")  # real-time mode refuses append
            .option("checkpointLocation", checkpoint_dir("rt-"))
            .trigger(**trigger)
            .start()
        )
        return self.query

    def failed(self) -> str | None:
        exc = self.query.exception()
        return None if exc is None else f"{self.name} query failed: {exc}"

    def batches(self) -> list[dict]:
        return [p for p in self.query.recentProgress if p.numInputRows]

    def stop(self) -> None:
        self.query.stop()

    def _commits(self) -> list[dict]:
        path = self.logs / "commits.log"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().split("\n") if x]

    def commit_times(self, logs: Path) -> dict[int, float]:
        commits = self._commits()
        self.n_commits = len(commits)
        return {i: c["t"] for i, c in enumerate(commits)}

    def windows_of_records(self, logs: Path) -> list[tuple[int, int, int, int]]:
        return [(i, p, s, e) for i, c in enumerate(self._commits()) for p, s, e in c["runs"]]


# -- section 1: throughput -----------------------------------------------------------------------------
def throughput_run(engine: Any, topic: str, lines: int, truth: Counter, dsn: str) -> dict:
    total = sum(truth.values())
    table = Table(dsn, f"wc_{ident(engine.name)}_{uuid.uuid4().hex[:6]}")
    load0 = loadavg()
    t0 = time.time()
    engine.start(topic, table.name)
    # a peer (bench/peers.py) runs in processes of its own: its clock starts when its first
    # instance is about to enter its run loop, not at the spawn (Python and library imports)
    t0 = getattr(engine, "started_at", None) or t0
    try:
        first, done = wait_for_total(table, total, engine.failed)
        batches = engine.batches()
    finally:
        engine.stop()
    exact = table.counts() == truth
    table.close()
    elapsed = done - t0
    steady = done - first if first else float("nan")
    durations = [p["durationMs"]["triggerExecution"] for p in batches]
    return {
        "engine": engine.name,
        "elapsed": elapsed,
        "to_first": (first or done) - t0,
        "lines_s": lines / elapsed,
        "words_s": total / elapsed,
        "steady_lines_s": lines / steady if first and steady > 0 else float("nan"),
        "batches": len(batches),
        "batch_ms": med(durations),
        "exact": exact,
        "load": (load0, loadavg()),
    }


def throughput(args: argparse.Namespace, engines: list[Any], kafka: Any, pg: Any) -> list[dict]:
    from samples.wordcount_exactly_once.data import produce

    lines = corpus(args.lines)
    truth = word_counts(lines)
    topic = f"wc-bulk-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, partitions=4)
    t = time.perf_counter()
    produce(kafka.bootstrap_servers, topic, lines)
    t = time.perf_counter() - t
    words = sum(truth.values())
    print(
        f"\n[1] throughput: {args.lines:,} lines ({words:,} words, {len(truth)} distinct) "
        f"preloaded in {t:.1f}s into {topic} (4 partitions)",
        flush=True,
    )
    results = []
    for r in range(args.rounds):
        order = engines if r % 2 == 0 else engines[::-1]
        for engine in order:
            res = throughput_run(engine, topic, args.lines, truth, pg.dsn)
            res["round"] = r
            results.append(res)
            print(
                f"  round {r} {res['engine']:<8} {res['elapsed']:6.1f}s  {res['lines_s']:>9,.0f} lines/s "
                f"{res['words_s']:>10,.0f} words/s  after first commit {res['steady_lines_s']:>9,.0f} "
                f"lines/s  first commit at {res['to_first']:.1f}s  {res['batches']} batches, "
                f"median {res['batch_ms']:.0f} ms  exact={res['exact']}  "
                f"load {res['load'][0]:.2f}->{res['load'][1]:.2f}",
                flush=True,
            )
    return results


# -- section 2: latency ----------------------------------------------------------------------------------
def steady_producer(bootstrap: str, topic: str, rate: int, seconds: float, seed: int) -> None:
    """Produce ``rate`` lines/s for ``seconds`` (runs in its own process); prints the count."""
    from confluent_kafka import Producer

    lines = [s.encode() for s in corpus(20_000, seed=seed)]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all"})
    n = 0
    t0 = time.monotonic()
    while True:
        now = time.monotonic() - t0
        if now >= seconds:
            break
        due = int(rate * now)
        while n < due:
            try:
                p.produce(topic, value=lines[n % len(lines)])
            except BufferError:
                p.poll(0.01)
                continue
            n += 1
        p.poll(0)
        time.sleep(0.005)
    if p.flush(60):
        raise SystemExit("undelivered messages")
    print(json.dumps({"produced": n}), flush=True)


def kafka_timestamps(bootstrap: str, topic: str) -> dict[tuple[int, int], float]:
    """(partition, offset) -> the record's Kafka timestamp (s), read back from the topic."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-ts", "enable.auto.commit": False}
    )
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[tuple[int, int], float] = {}
        while len(out) < sum(ends.values()):
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    out[(m.partition(), m.offset())] = m.timestamp()[1] / 1000
        return out
    finally:
        c.close()


def latency_run(args: argparse.Namespace, engine: Any, kafka: Any, pg: Any) -> dict:
    topic = f"wc-steady-{ident(engine.name)}-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, partitions=4, config={"message.timestamp.type": "LogAppendTime"})
    logs = WORK / f"logs-{topic}"
    logs.mkdir()
    table = Table(pg.dsn, f"wc_lat_{ident(engine.name)}_{uuid.uuid4().hex[:6]}")
    load0 = loadavg()
    engine.start(topic, table.name, logged=True, logs=logs)
    time.sleep(2.0)  # let the query start before the first line
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(
        target=_producer_entry,
        args=(q, kafka.bootstrap_servers, topic, args.rate, args.duration, 7),
        daemon=True,
    )
    t_start = time.time()
    proc.start()
    try:
        produced = q.get(timeout=args.duration + 120)
        proc.join(30)
        sent = corpus(20_000, seed=7)
        truth = word_counts(sent[i % len(sent)] for i in range(produced))
        wait_for_total(table, sum(truth.values()), engine.failed, timeout=300)
        load1 = loadavg()
        time.sleep(1.0)  # commit logs are written right after each COMMIT
    finally:
        engine.stop()
    exact = table.counts() == truth
    table.close()
    stamps = kafka_timestamps(kafka.bootstrap_servers, topic)
    breakdown = None
    if hasattr(engine, "breakdown") and stamps:
        first, last = min(stamps.values()), max(stamps.values())
        breakdown = engine.breakdown(first + args.warmup, last)
    commits = engine.commit_times(logs)
    lat, unmatched, warm = [], 0, 0
    seen = 0
    # the warm-up counts from the first record's append time, not from the producer's spawn
    # (a spawned producer can take seconds to import and start on a loaded machine)
    t_start = min(stamps.values(), default=t_start)
    for w, p, s, e in engine.windows_of_records(logs):
        c = commits.get(w)
        for o in range(s, e):
            seen += 1
            ts = stamps[(p, o)]
            if c is None:
                unmatched += 1
            elif ts < t_start + args.warmup:
                warm += 1
            else:
                lat.append((c - ts) * 1000)
    return {
        "engine": engine.name,
        "produced": produced,
        "records": len(lat),
        "warmup": warm,
        "unmatched": unmatched,
        "covered": seen == produced,
        "p50": pct(lat, 0.50),
        "p99": pct(lat, 0.99),
        "max": max(lat) if lat else float("nan"),
        "mean": statistics.fmean(lat) if lat else float("nan"),
        "batches": getattr(engine, "n_commits", None) or len(commits),
        "exact": exact,
        "load": (load0, load1),
        "breakdown": breakdown,
    }


def _producer_entry(q: Any, *a: Any) -> None:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        steady_producer(*a)
    q.put(json.loads(buf.getvalue().strip().split("\n")[-1])["produced"])


def latency(args: argparse.Namespace, engines: list[Any], kafka: Any, pg: Any) -> list[dict]:
    print(
        f"\n[2] latency: {args.rate:,} lines/s for {args.duration:.0f}s per engine, first "
        f"{args.warmup:.0f}s left out; Kafka LogAppendTime -> after the DB COMMIT",
        flush=True,
    )
    out = []
    for engine in engines:
        r = latency_run(args, engine, kafka, pg)
        out.append(r)
        print(
            f"  {r['engine']:<8} p50 {r['p50']:7.0f} ms  p99 {r['p99']:7.0f} ms  max {r['max']:7.0f} ms"
            f"  mean {r['mean']:6.0f} ms  ({r['records']:,} records, {r['warmup']:,} warm-up, "
            f"{r['unmatched']} unmatched, {r['batches']} commits, all offsets covered="
            f"{r['covered']}, exact={r['exact']})  load {r['load'][0]:.2f}->{r['load'][1]:.2f}",
            flush=True,
        )
        if r.get("breakdown"):
            print_breakdown(r["engine"], r["breakdown"])
    return out


def breakdown(args: argparse.Namespace, kafka: Any, pg: Any, spark: Any) -> list[dict]:
    """Section 4: the latency run of each prototyped cut, one after the other."""
    M, S = Malhar, SparkBaseline
    variants: list[Any] = [
        S(args, kafka, pg, spark),
        M(args, kafka, pg, spark),
        M(args, kafka, pg, spark, label="malhar-combine", plan="combine"),
        M(args, kafka, pg, spark, label="malhar+poll10", poll_timeout_ms=10),
        M(args, kafka, pg, spark, label="malhar+async", async_progress=True),
        S(args, kafka, pg, spark, label="pyspark+async", async_progress=True),
        SparkRealTime(args, kafka, pg, spark, mode="realtime"),
        SparkRealTime(args, kafka, pg, spark, mode="continuous"),
    ]
    variants = [v for v in variants if v.name in args.variants] if args.variants else variants
    print(
        f"\n[4] latency cuts: {args.rate:,} lines/s for {args.duration:.0f}s each, trigger "
        f"{args.trigger_ms} ms; malhar = plan {args.plan}; malhar-combine = the partial counts "
        f"shuffled to one writer (2 stages); poll10 = the Kafka input's poll_timeout_ms 100 -> "
        f"10; async = Spark's asyncProgressTrackingEnabled (offset/commit logs every 1 s)",
        flush=True,
    )
    out = []
    refused: set[str] = set()
    for rnd in range(args.cut_rounds):
        k = rnd % len(variants)
        for engine in variants[k:] + variants[:k]:  # each round starts one later
            if engine.name in refused:
                continue
            try:
                (r,) = latency(args, [engine], kafka, pg)
                r["round"] = rnd
                out.append(r)
            except Exception as exc:  # a variant Spark refuses is a result too
                print(f"  {engine.name}: failed: {str(exc).splitlines()[0][:300]}", flush=True)
                with contextlib.suppress(Exception):
                    engine.stop()
                refused.add(engine.name)
                out.append({"engine": engine.name, "failed": str(exc).splitlines()[0][:200]})
    print("  summary (one invocation, every round; windows/s and trigger: malhar / foreachBatch):")
    for r in sorted(out, key=lambda r: [v.name for v in variants].index(r["engine"])):
        if "failed" in r:
            print(f"    {r['engine']:<26} refused: {r['failed'][:120]}")
            continue
        b = r.get("breakdown") or {}
        trig = (b.get("median") or {}).get("= triggerExecution", float("nan"))
        print(
            f"    {r['engine']:<26} round {r['round']}  p50 {r['p50']:6.0f} ms  p99 {r['p99']:6.0f} ms"
            f"  {b.get('rate', float('nan')):5.2f} windows/s  median trigger {trig:5.0f} ms  "
            f"exact={r['exact']}  load {r['load'][0]:.1f}"
        )
    return out


# -- main ----------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller, one round")
    parser.add_argument(
        "--lines", type=int, default=None, help="throughput corpus (1M; quick 300k)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="throughput rounds (2; quick 1)")
    parser.add_argument("--batch", type=int, default=200_000, help="lines per micro-batch cap")
    parser.add_argument("--trigger-ms", type=int, default=100, help="trigger / window period")
    parser.add_argument(
        "--counters", type=int, default=4, help="malhar UniqueCounter partitions (4, the flagship)"
    )
    parser.add_argument(
        "--input-partitions", type=int, default=2, help="malhar Kafka readers of --plan shuffle"
    )
    parser.add_argument(
        "--fetch-defaults",
        dest="fetch_tuned",
        action="store_false",
        help="both Kafka consumers with their client's fetch defaults (not FETCH_CONFIG)",
    )
    parser.add_argument(
        "--plan",
        choices=("direct", "combine", "shuffle"),
        default="direct",
        help="the flagship's plan: counters and writers fused into the readers (direct, the "
        "default), partial counts shuffled to one writer (combine), or every word shuffled "
        "by KeyCodec (shuffle)",
    )
    parser.add_argument("--rate", type=int, default=2_000, help="latency: lines/s")
    parser.add_argument(
        "--duration", type=float, default=None, help="latency: seconds (30; quick 15)"
    )
    parser.add_argument("--warmup", type=float, default=5.0, help="latency: seconds left out")
    parser.add_argument(
        "--cut-rounds", type=int, default=None, help="section 4 (breakdown) rounds (2; quick 1)"
    )
    parser.add_argument(
        "--variants", default="", help="section 4: only these variants (comma separated)"
    )
    parser.add_argument(
        "--only",
        default="throughput,latency,breakdown,connectors",
        help="sections, comma separated",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master (local[2]); Spark's real-time and continuous modes run one "
        "long-lived task per Kafka partition at once, so they need local[4] for 4 partitions",
    )
    parser.add_argument(
        "--hdfs",
        action="store_true",
        help="both engines checkpoint to a real HDFS (throughput only; started here)",
    )
    parser.add_argument(
        "--no-slot-claims",
        dest="slot_claims",
        action="store_false",
        help="malhar with SLOT_CLAIMS=False: one level-0 task per reader, no claim files",
    )
    args = parser.parse_args(argv)
    args.lines = args.lines or (300_000 if args.quick else 1_000_000)
    args.readers = args.input_partitions if args.plan == "shuffle" else args.counters
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.duration = args.duration or (15.0 if args.quick else 30.0)
    args.cut_rounds = args.cut_rounds or (1 if args.quick else 2)
    args.variants = [v for v in args.variants.split(",") if v]
    only = set(args.only.split(","))
    if args.hdfs and only != {"throughput"}:
        parser.error("--hdfs measures throughput only: add --only throughput")
    global WORK, HDFS_ROOT
    WORK = Path(tempfile.mkdtemp(prefix="malhar-bench-wordcount-"))

    from malhar import build_session
    from malhar.testing.services import acquire
    from malhar.testing.services.maven import jars

    print(
        f"bench/wordcount.py: {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; uptime: {os.popen('uptime').read().strip()}"
    )
    print(
        f"settings: batch {args.batch:,} lines (malhar {args.readers} readers x "
        f"{args.batch // args.readers:,}; Spark maxOffsetsPerTrigger {args.batch:,}), "
        f"trigger {args.trigger_ms} ms, malhar plan {args.plan}, counters {args.counters}, Kafka fetch "
        f"{K.FETCH_CONFIG if args.fetch_tuned else 'client defaults'}, Spark {args.master}, "
        f"malhar slot claims "
        f"{'on' if args.slot_claims else 'off'}"
    )
    t_all = time.monotonic()
    verdicts: list[tuple[str, float, float]] = []
    with contextlib.ExitStack() as services:
        kafka = services.enter_context(acquire("kafka"))
        pg = services.enter_context(acquire("postgres"))
        if args.hdfs:
            hdfs = services.enter_context(acquire("hdfs"))
            os.environ.setdefault("MALHAR_WEBHDFS_URL", hdfs.webhdfs_url)
            HDFS_ROOT = f"{hdfs.url}/bench-wordcount-{uuid.uuid4().hex[:6]}"
            print(f"checkpoints on HDFS: {HDFS_ROOT}")
        spark = build_session(
            args.master,
            app_name="bench-wordcount",
            shuffle_partitions=2,
            jars=jars("spark-kafka"),
            conf={"spark.sql.streaming.numRecentProgressUpdates": "100000"},
        )
        engines = [Malhar(args, kafka, pg, spark), SparkBaseline(args, kafka, pg, spark)]
        # warm-up: one small run of each (JVM JIT, Python workers, jar loading) not measured
        if only & {"throughput", "latency", "breakdown"}:
            warm = corpus(5_000, seed=3)
            topic = f"wc-warm-{uuid.uuid4().hex[:6]}"
            kafka.create_topic(topic, partitions=4)
            from samples.wordcount_exactly_once.data import produce

            produce(kafka.bootstrap_servers, topic, warm)
            for e in engines:
                throughput_run(e, topic, len(warm), word_counts(warm), pg.dsn)
        if "throughput" in only:
            res = throughput(args, engines, kafka, pg)
            m = [r for r in res if r["engine"] == "malhar"]
            s = [r for r in res if r["engine"] == "pyspark"]
            ratios = [a["lines_s"] / b["lines_s"] for a, b in zip(m, s, strict=True)]
            steady = [a["steady_lines_s"] / b["steady_lines_s"] for a, b in zip(m, s, strict=True)]
            print(
                f"  malhar / pyspark: end to end {med(ratios):.2f}x "
                f"({', '.join(f'{x:.2f}' for x in ratios)}), after first commit {med(steady):.2f}x; "
                f"all exact: {all(r['exact'] for r in res)}"
            )
            verdicts.append(("malhar >= 1.0x PySpark throughput (end to end)", med(ratios), 1.0))
        if "latency" in only:
            lat = latency(args, engines, kafka, pg)
            m, s = lat
            print(
                f"  malhar / pyspark: p50 {m['p50'] / s['p50']:.2f}x, p99 {m['p99'] / s['p99']:.2f}x"
            )
            verdicts.append(
                ("malhar p50 below PySpark's (PySpark / malhar)", s["p50"] / m["p50"], 1.0)
            )
            verdicts.append(
                ("malhar p99 below PySpark's (PySpark / malhar)", s["p99"] / m["p99"], 1.0)
            )
            rates = [(r.get("breakdown") or {}).get("rate", float("nan")) for r in (m, s)]
            verdicts.append(("malhar window rate >= PySpark batch rate", rates[0] / rates[1], 1.0))
        if "breakdown" in only:
            breakdown(args, kafka, pg, spark)
        spark.stop()
        if "connectors" in only:
            print("\n[3] raw ceilings and connectors (bench/connectors.py)", flush=True)
            r = K.run_connectors(
                kafka,
                pg,
                records=200_000 if args.quick else 500_000,
                rows=100_000 if args.quick else 200_000,
                rounds=1 if args.quick else 3,
            )
            verdicts += K.print_connectors(r)
    print(f"\ntargets (total {time.monotonic() - t_all:.0f}s, load average {loadavg():.2f}):")
    for name, ratio, goal in verdicts:
        verdict = "" if goal != goal else ("met" if ratio >= goal else "MISSED")
        shown = f"{ratio:6.2f}x" if goal == 1.0 else f"{ratio:7.0%}"
        print(f"  {name:<50} {shown}  {verdict}")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
