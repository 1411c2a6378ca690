"""Connector micro-benchmarks: malhar's Kafka input and JDBC output against their raw ceilings.

    python bench/connectors.py                # ~1 min: starts Kafka and PostgreSQL
    python bench/connectors.py --quick        # one round, smaller data
    python bench/connectors.py --records 500000 --rows 200000
    python bench/connectors.py --kafka-only   # the Kafka input part alone (no PostgreSQL)
    python bench/connectors.py --jdbc-only    # the JDBC output part alone (no Kafka broker)

Measured in the same invocation, on the same data (method: docs/performance-wordcount.md §5):

- **Kafka**: one confluent-kafka ``Consumer`` assigned every partition of a preloaded topic,
  ``consume(10000, 1.0)`` until the end, messages discarded (the raw ceiling), against
  ``KafkaTextInputOperator`` driven window by window in this process (its own
  ``consume``, Arrow batch building, UTF-8 check, offset WAL save per window) into an
  emitter that only counts. Target: operator >= 60% of raw.
- **PostgreSQL**: a raw psycopg2 ``COPY ... FROM STDIN`` of a prebuilt CSV of
  ``(word text, count bigint)`` rows into an empty table with a primary key, against
  ``JdbcOutputOperator`` in ``insert`` mode writing the same rows as one Arrow batch in one
  window (Arrow -> CSV, savepoint, ``COPY``, meta row, ``COMMIT``). Target: >= 60%.
  Also ``merge_add`` against a hand-written ``COPY`` into a temporary table + ``INSERT ...
  ON CONFLICT DO UPDATE SET count = t.count + EXCLUDED.count`` (half the keys already in the
  table), and the fixed cost of a small window (the flagship's ~34 rows) against a
  hand-written transaction doing the same (meta row locked and updated, ``execute_values``
  merge, ``COMMIT``).
- **Kafka output and JDBC poll input** (``bench/kafka_out_jdbc_poll.py``, on the same
  services): ``KafkaOutputOperator`` (exactly once) against a raw confluent-kafka
  transactional producer, and ``JdbcPollInputOperator`` against a raw psycopg2 server-side
  cursor read into Arrow. Targets: >= 60% each.

This module also holds the bench-only operators that ``bench/wordcount.py`` ships to
Spark's Python workers by reference (``bench/`` is on their ``PYTHONPATH``):
:class:`LoggedKafkaTextInput` and :class:`TimedJdbcOutput` record, per window, the Kafka
offset ranges read and the time the window's transaction committed; :class:`CountingSink`
counts what reaches it.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from malhar import Operator, Property  # noqa: E402
from malhar.io.jdbc import JdbcOutputOperator  # noqa: E402
from malhar.io.kafka import KafkaTextInputOperator  # noqa: E402
from malhar.operator import OperatorContext  # noqa: E402
from malhar.ports import Emitter, InputPort  # noqa: E402


# -- bench-only operators (run inside Spark's Python workers) -----------------------------------
def _append(path: str, line: str) -> None:
    # one small O_APPEND write per window: atomic between worker processes
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class LoggedKafkaTextInput(KafkaTextInputOperator):
    """``KafkaTextInputOperator`` that appends, per new window with records, the offset ranges
    it read to ``bench_log`` (JSON lines ``{"w": window, "ranges": [[topic, partition, start,
    end_exclusive, n], ...]}``: its window record)."""

    bench_log = Property(str, default="", doc="JSON-lines file of the ranges read per window")

    def end_window(self) -> None:
        record = None if self.replaying else self.window_record()
        window = self.window_id
        super().end_window()
        if record and record["ranges"] and self.bench_log:
            _append(self.bench_log, json.dumps({"w": window, "ranges": record["ranges"]}) + "\n")


class TimedJdbcOutput(JdbcOutputOperator):
    """``JdbcOutputOperator`` that appends ``"<window> <unix time after COMMIT> <rows>"`` to
    ``bench_log`` for every window it wrote (the time is taken right after the window's
    transaction returned, i.e. after the database acknowledged the ``COMMIT``)."""

    bench_log = Property(str, default="", doc="file the commit times are appended to")

    def end_window(self) -> None:
        rows, window, skip = len(self._buffer), self._window, self._skip
        super().end_window()
        if rows and not skip and self.bench_log:
            _append(self.bench_log, f"{window} {time.time():.6f} {rows}\n")


class CountingSink(Operator):
    """Counts the tuples it receives; appends ``"<unix time> <count>"`` per non-empty window
    to ``bench_log``. Keeps no state (nothing to snapshot)."""

    input = InputPort()
    bench_log = Property(str, default="", doc="file the counts are appended to")

    def begin_window(self, window_id: int) -> None:
        self._n = 0

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self._n += batch.num_rows

    def process(self, value: Any) -> None:
        self._n += 1

    def end_window(self) -> None:
        if self._n and self.bench_log:
            _append(self.bench_log, f"{time.time():.6f} {self._n}\n")


# -- helpers --------------------------------------------------------------------------------------
def loadavg() -> float:
    return os.getloadavg()[0]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Counting(Emitter):
    """An output port emitter that only counts (the cheapest possible downstream)."""

    def __init__(self) -> None:
        self.n = 0

    def tuple(self, value: Any) -> None:
        self.n += 1

    def batch(self, batch: pa.RecordBatch) -> None:
        self.n += batch.num_rows

    def control(self, ctl: Any) -> None:
        pass


# -- Kafka ---------------------------------------------------------------------------------------
#: librdkafka fetch settings that let a window fill up to its cap on a backlog
#: (docs/performance-wordcount.md §4): larger fetches and a deeper prefetch queue than the
#: defaults (1 MB per partition, 50 MB per fetch, 100k queued messages per partition).
FETCH_CONFIG: dict[str, Any] = {
    "max.partition.fetch.bytes": 50 * 1024 * 1024,
    "fetch.max.bytes": 100 * 1024 * 1024,
    "queued.min.messages": 1_000_000,
}


def preload(bootstrap: str, topic: str, records: int, *, value_bytes: int = 60) -> None:
    """``records`` text values of about ``value_bytes`` bytes (the flagship's line length)."""
    from samples.wordcount_exactly_once.data import corpus, produce

    lines = corpus(min(records, 50_000), seed=5)
    produce(bootstrap, topic, (lines[i % len(lines)] for i in range(records)))


def raw_consume(
    bootstrap: str, topic: str, expected: int, config: dict[str, Any] | None = None
) -> float:
    """Records/s of a bare confluent-kafka consume loop over every partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **(config or {}),
        }
    )
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        n = 0
        gc.disable()  # as the operator does while it consumes
        t0 = time.perf_counter()
        while n < expected:
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    n += 1
        elapsed = time.perf_counter() - t0
    finally:
        gc.enable()
        c.close()
    return n / elapsed


def operator_consume(
    bootstrap: str,
    topic: str,
    expected: int,
    per_window: int,
    consumer_config: dict[str, Any] | None = None,
) -> float:
    """Records/s of ``KafkaTextInputOperator`` run window by window in this process: the
    engine's loop (``emit_tuples`` until it emits nothing or the window is full), the offset
    WAL saved at every ``end_window``, ``committed`` one window late. Setup is not timed."""
    op = KafkaTextInputOperator(
        bootstrap_servers=bootstrap,
        topics=topic,
        initial_offset="EARLIEST",
        max_records_per_window=per_window,
        commit_offsets=False,
        consumer_config=consumer_config,
    )
    sink = Counting()
    op.output.emitter = sink
    op.error.emitter = Counting()
    with tempfile.TemporaryDirectory(prefix="bench-kafka-op-") as ckpt:
        op.setup(OperatorContext(name="lines", checkpoint=ckpt, application="bench"))
        try:
            w = 0
            t0 = time.perf_counter()
            while sink.n < expected:
                op.begin_window(w)
                start = sink.n
                while True:
                    before = sink.n
                    op.emit_tuples()
                    if sink.n == before or sink.n - start >= per_window:
                        break
                op.end_window()
                if w:
                    op.committed(w - 1)
                w += 1
            elapsed = time.perf_counter() - t0
        finally:
            op.teardown()
    return sink.n / elapsed


# -- PostgreSQL ----------------------------------------------------------------------------------
def word_rows(n: int, offset: int = 0) -> pa.RecordBatch:
    words = [f"w{i:09d}" for i in range(offset, offset + n)]
    return pa.record_batch(
        [pa.array(words, pa.string()), pa.array(range(1, n + 1), pa.int64())],
        names=["word", "count"],
    )


def _reset(conn: Any, table: str, prefill: pa.RecordBatch | None = None) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (word text PRIMARY KEY, count bigint NOT NULL)")
        if prefill is not None:
            cur.copy_expert(
                f"COPY {table} (word, count) FROM STDIN WITH (FORMAT csv)", _csv(prefill)
            )
    conn.commit()


def _csv(batch: pa.RecordBatch) -> io.StringIO:
    words = batch.column(0).to_pylist()
    counts = batch.column(1).to_pylist()
    return io.StringIO("".join(f"{w},{c}\n" for w, c in zip(words, counts, strict=True)))


def raw_copy(conn: Any, table: str, rows: pa.RecordBatch, *, merge: bool) -> float:
    """Seconds for one transaction: COPY a prebuilt CSV (insert), or COPY into a temporary
    table + one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` (merge-add)."""
    data = _csv(rows)
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        if merge:
            cur.execute("CREATE TEMP TABLE stage (word text, count bigint) ON COMMIT DROP")
            cur.copy_expert("COPY stage (word, count) FROM STDIN WITH (FORMAT csv)", data)
            cur.execute(
                f"INSERT INTO {table} AS t (word, count) SELECT word, count FROM stage "
                "ON CONFLICT (word) DO UPDATE SET count = t.count + EXCLUDED.count"
            )
        else:
            cur.copy_expert(f"COPY {table} (word, count) FROM STDIN WITH (FORMAT csv)", data)
    conn.commit()
    return time.perf_counter() - t0


def operator_write(url: str, table: str, rows: pa.RecordBatch, *, mode: str, window: int) -> float:
    """Seconds for one window of ``JdbcOutputOperator``: ``begin_window``, the batch,
    ``end_window`` (the whole window transaction). Setup is not timed."""
    op = JdbcOutputOperator(
        url, table, mode=mode, key_columns=["word"] if mode != "insert" else None
    )
    op.error.emitter = Counting()
    op.setup(OperatorContext(name=f"out-{mode}", application=f"bench-{uuid.uuid4().hex[:6]}"))
    try:
        t0 = time.perf_counter()
        op.begin_window(window)
        op.process_batch(rows)
        op.end_window()
        return time.perf_counter() - t0
    finally:
        op.teardown()


def small_windows(url: str, conn: Any, windows: int, keys: int = 34) -> tuple[float, float]:
    """Mean ms per window of ``keys`` merge-added rows: (operator, hand-written psycopg2)."""
    from psycopg2.extras import execute_values

    rows = word_rows(keys)
    pyrows = list(zip(rows.column(0).to_pylist(), rows.column(1).to_pylist(), strict=True))
    _reset(conn, "bench_small_op")
    _reset(conn, "bench_small_raw")
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE IF NOT EXISTS bench_meta (app text PRIMARY KEY, batch_id bigint NOT NULL)"
        )
        cur.execute("DELETE FROM bench_meta WHERE app = 'small'")
        cur.execute("INSERT INTO bench_meta VALUES ('small', -1)")
    conn.commit()

    op = JdbcOutputOperator(url, "bench_small_op", mode="merge_add", key_columns=["word"])
    op.error.emitter = Counting()
    op.setup(OperatorContext(name="small", application=f"bench-{uuid.uuid4().hex[:6]}"))
    try:
        t0 = time.perf_counter()
        for w in range(windows):
            op.begin_window(w)
            op.process_batch(rows)
            op.end_window()
        t_op = (time.perf_counter() - t0) / windows
    finally:
        op.teardown()

    t0 = time.perf_counter()
    for w in range(windows):
        with conn.cursor() as cur:
            cur.execute("SELECT batch_id FROM bench_meta WHERE app = 'small' FOR UPDATE")
            if cur.fetchone()[0] >= w:
                conn.rollback()
                continue
            execute_values(
                cur,
                "INSERT INTO bench_small_raw AS t (word, count) VALUES %s "
                "ON CONFLICT (word) DO UPDATE SET count = t.count + EXCLUDED.count",
                pyrows,
            )
            cur.execute("UPDATE bench_meta SET batch_id = %s WHERE app = 'small'", (w,))
        conn.commit()
    t_raw = (time.perf_counter() - t0) / windows
    return t_op * 1000, t_raw * 1000


# -- the whole connector section --------------------------------------------------------------------
def run_connectors(
    kafka: Any,
    pg: Any,
    *,
    records: int,
    rows: int,
    rounds: int,
    per_window: int = 100_000,
    topic: str | None = None,
    small: int = 200,
) -> dict[str, Any]:
    """Measure everything above; ``topic`` (already holding ``records`` records) is reused if
    given; ``pg=None`` measures the Kafka part only. Returns the figures (medians over
    ``rounds``, raw and operator interleaved)."""
    out: dict[str, Any] = {"load": [loadavg()]}
    if kafka is None:  # --jdbc-only
        out.update(kafka_raw=[], kafka_op=[], kafka_raw_tuned=[], kafka_op_tuned=[])
    else:
        if topic is None:
            topic = f"bench-conn-{uuid.uuid4().hex[:6]}"
            kafka.create_topic(topic, partitions=4)
            preload(kafka.bootstrap_servers, topic, records)
        raw, oper, raw_tuned, tuned = [], [], [], []
        bs = kafka.bootstrap_servers
        for _ in range(rounds):
            raw.append(raw_consume(bs, topic, records))
            oper.append(operator_consume(bs, topic, records, per_window))
            raw_tuned.append(raw_consume(bs, topic, records, FETCH_CONFIG))
            tuned.append(operator_consume(bs, topic, records, per_window, FETCH_CONFIG))
        out["kafka_raw"], out["kafka_op"] = raw, oper
        out["kafka_raw_tuned"], out["kafka_op_tuned"] = raw_tuned, tuned
        out["load"].append(loadavg())
    out["records"], out["rows"] = records, rows
    if pg is None:
        return out

    import psycopg2

    conn = psycopg2.connect(pg.dsn)
    try:
        batch = word_rows(rows)
        half = word_rows(rows // 2, offset=rows // 4)  # half the keys already present
        res: dict[str, list[float]] = {k: [] for k in ("copy", "op_insert", "merge", "op_merge")}
        for r in range(rounds):
            _reset(conn, "bench_copy")
            res["copy"].append(rows / raw_copy(conn, "bench_copy", batch, merge=False))
            _reset(conn, "bench_copy")
            res["op_insert"].append(
                rows
                / operator_write(pg.sqlalchemy_url, "bench_copy", batch, mode="insert", window=r)
            )
            _reset(conn, "bench_copy", prefill=half)
            res["merge"].append(rows / raw_copy(conn, "bench_copy", batch, merge=True))
            _reset(conn, "bench_copy", prefill=half)
            res["op_merge"].append(
                rows
                / operator_write(pg.sqlalchemy_url, "bench_copy", batch, mode="merge_add", window=r)
            )
        out.update(res)
        out["small_op_ms"], out["small_raw_ms"] = small_windows(pg.sqlalchemy_url, conn, small)
    finally:
        conn.close()
    out["load"].append(loadavg())
    return out


def print_connectors(r: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Print the section; return ``(target, ratio, goal)`` rows."""
    kafka = bool(r["kafka_raw"])
    jdbc = "copy" in r
    rng = lambda xs: f"{min(xs):,.0f}-{max(xs):,.0f}"  # noqa: E731
    print(f"\nConnectors ({r['records']:,} Kafka records, {r['rows']:,} (word, count) rows)")
    print(f"  {'path':<62} {'median/s':>10}  {'range':>17}  {'vs raw':>7}")
    lines: list[tuple[str, list[float], float | None]] = []
    verdicts: list[tuple[str, float, float]] = []
    if kafka:
        kr, ko = median(r["kafka_raw"]), median(r["kafka_op"])
        krt, kt = median(r["kafka_raw_tuned"]), median(r["kafka_op_tuned"])
        lines += [
            ("raw confluent-kafka consume (1 consumer, 4 partitions)", r["kafka_raw"], None),
            ("KafkaTextInputOperator, windows in-process", r["kafka_op"], kr),
            ("raw consume, larger fetches (FETCH_CONFIG)", r["kafka_raw_tuned"], None),
            ("KafkaTextInputOperator, FETCH_CONFIG", r["kafka_op_tuned"], krt),
        ]
        verdicts += [
            ("Kafka input >= 60% of raw consume (defaults)", ko / kr, 0.60),
            ("Kafka input >= 60% of raw consume (FETCH_CONFIG)", kt / krt, 0.60),
        ]
    if jdbc:
        ci, oi = median(r["copy"]), median(r["op_insert"])
        cm, om = median(r["merge"]), median(r["op_merge"])
        lines += [
            ("raw COPY of a prebuilt CSV (insert)", r["copy"], None),
            ("JdbcOutputOperator insert, one Arrow batch", r["op_insert"], ci),
            ("raw COPY into temp + INSERT ON CONFLICT add (50% exist)", r["merge"], None),
            ("JdbcOutputOperator merge_add, one Arrow batch", r["op_merge"], cm),
        ]
        verdicts += [
            ("JDBC output (insert) >= 60% of raw COPY", oi / ci, 0.60),
            ("JDBC merge_add / raw COPY+merge (report)", om / cm, float("nan")),
        ]
    for name, xs, base in lines:
        ratio = f"{median(xs) / base:6.0%}" if base else "      -"
        print(f"  {name:<62} {median(xs):>10,.0f}  {rng(xs):>17}  {ratio:>7}")
    if jdbc:
        print(
            f"  small window (34 rows merge_add): operator {r['small_op_ms']:.2f} ms, "
            f"hand-written psycopg2 {r['small_raw_ms']:.2f} ms per window"
        )
    print("  load average (1 min): " + ", ".join(f"{x:.2f}" for x in r["load"]))
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, smaller data")
    parser.add_argument("--records", type=int, default=None, help="Kafka records (500k)")
    parser.add_argument("--rows", type=int, default=None, help="rows per COPY (200k)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (3; quick: 1)")
    parser.add_argument(
        "--kafka-only", action="store_true", help="the Kafka input part only (no PostgreSQL)"
    )
    parser.add_argument(
        "--jdbc-only", action="store_true", help="only the JDBC output (no Kafka broker)"
    )
    args = parser.parse_args(argv)
    records = args.records or (200_000 if args.quick else 500_000)
    rows = args.rows or (100_000 if args.quick else 200_000)
    rounds = args.rounds or (1 if args.quick else 3)

    from malhar.testing.services import acquire

    print(f"uptime: {os.popen('uptime').read().strip()}")
    if args.kafka_only:
        with acquire("kafka") as kafka:
            r = run_connectors(kafka, None, records=records, rows=rows, rounds=rounds)
    elif args.jdbc_only:
        with acquire("postgres") as pg:
            r = run_connectors(None, pg, records=0, rows=rows, rounds=rounds)
    else:
        import kafka_out_jdbc_poll

        with acquire("kafka") as kafka, acquire("postgres") as pg:
            r = run_connectors(kafka, pg, records=records, rows=rows, rounds=rounds)
            verdicts = print_connectors(r)
            # the Kafka output and the JDBC poll input, on the same services
            verdicts += kafka_out_jdbc_poll.run_section(kafka, pg, quick=args.quick)
    if args.kafka_only or args.jdbc_only:
        verdicts = print_connectors(r)
    print()
    for name, ratio, goal in verdicts:
        verdict = "" if goal != goal else ("met" if ratio >= goal else "MISSED")
        print(f"  {name:<48} {ratio:6.0%}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
