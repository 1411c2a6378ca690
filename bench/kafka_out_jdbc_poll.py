"""The exactly-once Kafka output and the JDBC poll input against their raw ceilings, in one
invocation (starts Kafka and PostgreSQL through ``malhar.testing``); also a section of
``bench/connectors.py``::

    python bench/kafka_out_jdbc_poll.py            # ~1-2 min
    python bench/kafka_out_jdbc_poll.py --quick    # smaller data, one round

- **Kafka output**: the same Arrow rows (``word``, ``count``; ~40-byte JSON values, keyed)
  written in windows of ``--per-window`` records. Raw: one confluent-kafka transactional
  producer with the operator's librdkafka settings (``PRODUCER_DEFAULTS``), per window ``begin_transaction`` / ``produce`` each pre-encoded record /
  ``send_offsets_to_transaction`` / ``commit_transaction``. Malhar: ``KafkaOutputOperator``
  (exactly_once) through the operator harness: JSON encoding, the window header, the
  partitioner, the committed-window check, the transaction. Target: >= 60% of raw.
- **Committed-window marker**: the fixed cost of a small window (10 records) with the
  window id stored by ``send_offsets_to_transaction`` (the choice), by a marker record
  in a marker topic in the same transaction (the alternative), and with no marker at all;
  and the restart lookup of each (``committed()`` of the group vs reading the marker
  topic's last record as ``read_committed``).
- **JDBC poll input**: a table of ``--rows`` rows (bigint id, text, int, numeric(12,2),
  timestamptz). Raw: a psycopg2 server-side (named) cursor, ``fetchmany(fetch_size)``,
  every chunk made into an Arrow record batch by columns. Malhar: ``JdbcPollInputOperator``
  with a typed output port (Arrow batches), windows of ``max_records_per_window`` rows
  until the table is read (the plan, the key range per window, the WAL). Target: >= 60%.

Prints every figure, the ratios and met / not met, with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from malhar.io.jdbc import JdbcPollInputOperator
from malhar.io.kafka import KafkaOutputOperator
from malhar.io.kafka.output_settings import PRODUCER_DEFAULTS
from malhar.operator import OperatorContext
from malhar.ports import Emitter, OutputPort
from malhar.testing.harness import OperatorHarness

TARGET = 0.60


class Counting(Emitter):
    """An output emitter that only counts."""

    def __init__(self) -> None:
        self.n = 0

    def tuple(self, value: Any) -> None:
        self.n += 1

    def batch(self, batch: pa.RecordBatch) -> None:
        self.n += batch.num_rows

    def control(self, ctl: Any, sender: Any = None) -> None:
        pass


def rows(n: int) -> pa.RecordBatch:
    words = [f"word{i % 5000:05d}" for i in range(n)]
    return pa.record_batch([pa.array(words), pa.array(range(n), pa.int64())], ["word", "count"])


# -- Kafka output -----------------------------------------------------------------------------------
def raw_transactional(
    bootstrap: str,
    topic: str,
    batch: pa.RecordBatch,
    per_window: int,
    *,
    marker: str | None,
    defaults: bool = False,
) -> float:
    """Records/s of a bare transactional producer; ``marker``: "offsets" (window id as the
    group offset), "record" (a marker record in a marker topic) or None."""
    import json

    from confluent_kafka import Producer, TopicPartition

    tid = f"bench-raw-{uuid.uuid4().hex[:8]}"
    # the librdkafka settings the operator uses (PRODUCER_DEFAULTS: linger, batching, and a
    # short retry.backoff.ms, without which every send_offsets_to_transaction right after a
    # commit waits ~100 ms on CONCURRENT_TRANSACTIONS): the same producer, by hand
    config = dict(PRODUCER_DEFAULTS)
    config.update({"bootstrap.servers": bootstrap, "transactional.id": tid})
    if defaults:
        config = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    p = Producer(config)
    p.init_transactions(30)
    from confluent_kafka import Consumer

    meta = Consumer({"bootstrap.servers": bootstrap, "group.id": tid})
    group = meta.consumer_group_metadata()
    table = batch.to_pylist()
    values = [(r["word"].encode(), json.dumps(r).encode()) for r in table]
    t0 = time.perf_counter()
    for w, start in enumerate(range(0, len(values), per_window)):
        p.begin_transaction()
        for k, v in values[start : start + per_window]:
            p.produce(topic, v, k, headers=[("malhar.window", str(w).encode())])
        if marker == "offsets":
            p.send_offsets_to_transaction([TopicPartition(topic, 0, w + 1)], group, 30)
        elif marker == "record":
            p.produce(f"{topic}-marks", str(w).encode(), b"p0", partition=0)
        p.commit_transaction(30)
    elapsed = time.perf_counter() - t0
    meta.close()
    return len(values) / elapsed


def operator_write(bootstrap: str, topic: str, batch: pa.RecordBatch, per_window: int) -> float:
    op = KafkaOutputOperator(bootstrap, topic, key_column="word", producer_config={"linger.ms": 5})
    ctx = OperatorContext(name="out", application=f"bench-{uuid.uuid4().hex[:6]}")
    h = OperatorHarness(op, ctx)
    h.setup()
    parts = [batch.slice(s, per_window) for s in range(0, batch.num_rows, per_window)]
    t0 = time.perf_counter()
    for w, part in enumerate(parts):
        h.begin_window(w)
        h.put("input", part)
        h.end_window()
    elapsed = time.perf_counter() - t0
    h.teardown()
    assert not h.sink("error").tuples, h.sink("error").tuples[:2]
    return batch.num_rows / elapsed


def lookup_cost(bootstrap: str, topic: str) -> tuple[float, float]:
    """Seconds of a restart lookup: the group's committed offset vs the marker topic's last
    record read as read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    t0 = time.perf_counter()
    c.committed([TopicPartition(topic, 0)], timeout=30)
    offsets = time.perf_counter() - t0
    c.close()
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    t0 = time.perf_counter()
    _, high = c.get_watermark_offsets(TopicPartition(f"{topic}-marks", 0), timeout=30)
    c.assign([TopicPartition(f"{topic}-marks", 0, max(0, high - 3))])
    last = None
    while True:
        m = c.poll(10)
        if m is None or m.error():
            break
        last = m.value()
    record = time.perf_counter() - t0
    c.close()
    assert last is not None
    return offsets, record


# -- JDBC poll ---------------------------------------------------------------------------------------
class TypedPoll(JdbcPollInputOperator):
    output = OutputPort("id bigint, item string, qty int, amount decimal(12,2), at timestamp")


def make_table(pg: Any, n: int) -> str:
    table = f"bench_poll_{uuid.uuid4().hex[:8]}"
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, item text, qty int, "
            "amount numeric(12,2), at timestamptz)"
        )
        cur.execute(
            f"INSERT INTO {table} SELECT g, 'item-' || g, g %% 100, g / 7.0, "
            "now() - g * interval '1 second' FROM generate_series(1, %s) g",
            (n,),
        )
    conn.commit()
    conn.close()
    return table


def raw_read(pg: Any, table: str, fetch: int) -> float:
    conn = pg.connect()
    n = 0
    t0 = time.perf_counter()
    with conn.cursor(name="bench") as cur:
        cur.itersize = fetch
        cur.execute(f"SELECT id, item, qty, amount, at FROM {table} ORDER BY id")
        while True:
            chunk = cur.fetchmany(fetch)
            if not chunk:
                break
            cols = list(zip(*chunk, strict=True))
            b = pa.record_batch(
                [
                    pa.array(cols[0], pa.int64()),
                    pa.array(cols[1], pa.string()),
                    pa.array(cols[2], pa.int32()),
                    pa.array(cols[3], pa.decimal128(12, 2)),
                    pa.array(cols[4], pa.timestamp("us", "UTC")),
                ],
                ["id", "item", "qty", "amount", "at"],
            )
            n += b.num_rows
    elapsed = time.perf_counter() - t0
    conn.close()
    return n / elapsed


def operator_read(pg: Any, table: str, fetch: int, expected: int) -> float:
    op = TypedPoll(
        pg.sqlalchemy_url,
        table=table,
        key_column="id",
        fetch_size=fetch,
        max_records_per_window=50_000,
        poll_interval_ms=0,
    )
    sink, errors = Counting(), Counting()
    with tempfile.TemporaryDirectory(prefix="bench-poll-") as ckpt:
        op.setup(OperatorContext(name="poll", checkpoint=ckpt, application="bench"))
        op.output.emitter, op.error.emitter = sink, errors
        try:
            w = 0
            t0 = time.perf_counter()
            while sink.n < expected:
                op.begin_window(w)
                start = sink.n
                while True:
                    before = sink.n
                    op.emit_tuples()
                    if sink.n == before:
                        break
                op.end_window()
                w += 1
                if sink.n == start:
                    raise RuntimeError(f"window {w - 1} read nothing ({errors.n} error rows)")
            elapsed = time.perf_counter() - t0
        finally:
            op.teardown()
    assert errors.n == 0
    return sink.n / elapsed


# -- main ---------------------------------------------------------------------------------------------
def verdict(ratio: float) -> str:
    return "met" if ratio >= TARGET else "NOT met"


def run_section(
    kafka: Any,
    pg: Any,
    *,
    quick: bool = False,
    records: int | None = None,
    per_window: int = 10_000,
    n_rows: int | None = None,
    fetch: int = 10_000,
) -> list[tuple[str, float, float]]:
    """Run and print the section on running services; return ``(target, ratio, goal)`` rows
    (``bench/connectors.py`` adds them to its own)."""
    records = records or (30_000 if quick else 100_000)
    n_rows = n_rows or (50_000 if quick else 200_000)
    rounds = 1 if quick else 3
    bs = kafka.bootstrap_servers
    topic = f"bench-out-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    kafka.create_topic(f"{topic}-marks", partitions=1)
    batch = rows(records)
    # warm-up, not timed: the transaction coordinator and the topic are ready for both
    raw_transactional(bs, topic, rows(100), 10, marker="offsets")
    raw, ours = [], []
    for _ in range(rounds):
        raw.append(raw_transactional(bs, topic, batch, per_window, marker="offsets"))
        ours.append(operator_write(bs, topic, batch, per_window))
    small = {m: [] for m in ("offsets", "record", None, "offsets-librdkafka-defaults")}
    few = rows(10 * 50)
    for _ in range(rounds):
        for m in small:
            plain = m == "offsets-librdkafka-defaults"
            small[m].append(
                raw_transactional(
                    bs, topic, few, 10, marker="offsets" if plain else m, defaults=plain
                )
            )
    look = [lookup_cost(bs, topic) for _ in range(rounds)]
    table = make_table(pg, n_rows)
    raw_read(pg, table, fetch)  # warm-up, not timed: hint bits set, pages cached
    raw_r, ours_r = [], []
    for _ in range(rounds):
        raw_r.append(raw_read(pg, table, fetch))
        ours_r.append(operator_read(pg, table, fetch, n_rows))

    med = statistics.median
    load = os.getloadavg()[0]
    print(
        f"\nKafka output and JDBC poll input (load average {load:.1f}, {rounds} round(s), medians)"
    )
    r_out = med(ours) / med(raw)
    print(
        f"Kafka output, {records} records in windows of {per_window}: "
        f"raw transactional producer {med(raw):,.0f} rec/s, KafkaOutputOperator "
        f"{med(ours):,.0f} rec/s: {r_out:.0%} of raw (target {TARGET:.0%}: {verdict(r_out)})"
    )
    per = {m: 10 / med(v) * 1000 for m, v in small.items()}  # ms per 10-record window
    print(
        "committed-window marker, 50 windows of 10 records: ms per window: "
        f"send_offsets_to_transaction {per['offsets']:.1f}, marker record {per['record']:.1f}, "
        f"none {per[None]:.1f}; send_offsets with librdkafka's default retry.backoff.ms "
        f"{per['offsets-librdkafka-defaults']:.1f}"
    )
    print(
        "restart lookup: group committed() "
        f"{med([a for a, _ in look]) * 1000:.1f} ms, last marker record (read_committed) "
        f"{med([b for _, b in look]) * 1000:.1f} ms"
    )
    r_in = med(ours_r) / med(raw_r)
    print(
        f"JDBC poll input, {n_rows} rows, fetch {fetch}: raw psycopg2 server-side cursor "
        f"-> Arrow {med(raw_r):,.0f} rows/s, JdbcPollInputOperator {med(ours_r):,.0f} rows/s: "
        f"{r_in:.0%} of raw (target {TARGET:.0%}: {verdict(r_in)})"
    )
    return [
        ("Kafka output >= 60% of raw transactional producer", r_out, TARGET),
        ("JDBC poll input >= 60% of raw server-side cursor", r_in, TARGET),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=None, help="Kafka records (100k)")
    parser.add_argument("--per-window", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=None, help="table rows (200k)")
    parser.add_argument("--fetch", type=int, default=10_000)
    args = parser.parse_args(argv)
    from malhar.testing.services import acquire

    with acquire("kafka") as kafka, acquire("postgres") as pg:
        run_section(
            kafka,
            pg,
            quick=args.quick,
            records=args.records,
            per_window=args.per_window,
            n_rows=args.rows,
            fetch=args.fetch,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
