"""The sample's data: a generated corpus, the Kafka topic, the ``words`` table, the ground truth.

The ground truth is computed straight from the messages in the topic (not from
what the application saw), so it also covers lines produced while the
application was down.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import sqlalchemy as sa

from samples.wordcount_exactly_once.app import TABLE_DDL

log = logging.getLogger("samples.wordcount")

VOCABULARY = [
    "apex",
    "malhar",
    "spark",
    "stream",
    "window",
    "operator",
    "partition",
    "unifier",
    "kafka",
    "postgres",
    "hdfs",
    "exactly",
    "once",
    "checkpoint",
    "replay",
    "commit",
    "offset",
    "tuple",
    "port",
    "schema",
    "arrow",
    "shuffle",
    "state",
    "counter",
    "unique",
    "merge",
    "transaction",
    "recovery",
    "idempotent",
    "latency",
    "throughput",
    "broker",
    "topic",
    "record",
]


def corpus(lines: int, *, seed: int = 11, words_per_line: tuple[int, int] = (3, 12)) -> list[str]:
    """``lines`` text lines of Zipf-like word frequencies (deterministic for a seed)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(VOCABULARY))]
    lo, hi = words_per_line
    return [" ".join(rng.choices(VOCABULARY, weights, k=rng.randint(lo, hi))) for _ in range(lines)]


def word_counts(lines: Iterable[str]) -> Counter:
    """What the application must produce for ``lines``."""
    return Counter(word for line in lines for word in line.split())


def chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    """``items`` in ``n`` nearly equal consecutive pieces."""
    size, extra = divmod(len(items), n)
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        yield items[start:end]
        start = end


# -- Kafka -----------------------------------------------------------------------------------
def produce(bootstrap_servers: str, topic: str, values: Iterable[str | bytes]) -> int:
    """Produce ``values`` (round robin over the topic's partitions); wait for every delivery."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "logger": log, "acks": "all"}
    )
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    # explicit partitions: the client's sticky partitioner fills one partition per batch,
    # which left partitions 169k-334k records apart for a 1M-line corpus on 4 partitions
    meta = producer.list_topics(topic, timeout=30).topics[topic]
    if meta.error is not None or not meta.partitions:
        raise RuntimeError(f"cannot produce to topic {topic!r}: {meta.error or 'no partitions'}")
    partitions = len(meta.partitions)
    n = 0
    for value in values:
        data = value.encode() if isinstance(value, str) else value
        while True:
            try:
                producer.produce(topic, value=data, partition=n % partitions, on_delivery=report)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
        n += 1
    left = producer.flush(60)
    if left or failed:
        raise RuntimeError(f"{left} messages undelivered to {topic}; errors: {failed[:3]}")
    return n


def topic_messages(bootstrap_servers: str, topic: str, timeout: float = 60.0) -> list[bytes]:
    """Every message value in ``topic`` now (partitions read from the start to their end)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "malhar-sample-ground-truth",
            "enable.auto.commit": False,
            "logger": log,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        parts = sorted(meta.topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout)[1] for p in parts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        values: list[bytes] = []
        positions = dict.fromkeys(parts, 0)
        while any(positions[p] < ends[p] for p in parts):
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                p = msg.partition()
                if msg.offset() < ends[p]:
                    values.append(msg.value())
                positions[p] = max(positions[p], msg.offset() + 1)
        return values
    finally:
        consumer.close()


def topic_truth(bootstrap_servers: str, topic: str) -> Counter:
    """The ground truth: word counts of every UTF-8 line in ``topic``."""
    lines = []
    for value in topic_messages(bootstrap_servers, topic):
        try:
            lines.append(value.decode("utf-8"))
        except (UnicodeDecodeError, AttributeError):
            continue  # the application routes these to its error port
    return word_counts(lines)


# -- PostgreSQL ------------------------------------------------------------------------------
def create_table(url: str, table: str = "words", *, drop: bool = False) -> None:
    """Create the sample's ``table`` (``word text PRIMARY KEY, count bigint``)."""
    engine = sa.create_engine(url)
    try:
        quoted = engine.dialect.identifier_preparer.quote(table)
        with engine.begin() as conn:
            if drop:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {quoted}"))
            conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {quoted} ({TABLE_DDL})"))
    finally:
        engine.dispose()


def table_counts(url: str, table: str = "words") -> Counter:
    """The ``table`` as a Counter of word -> count."""
    engine = sa.create_engine(url)
    try:
        quoted = engine.dialect.identifier_preparer.quote(table)
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT word, count FROM {quoted}")).all()
        return Counter({word: count for word, count in rows})
    finally:
        engine.dispose()


def exactness(got: Counter, truth: Counter) -> tuple[bool, str]:
    """Whether ``got`` equals ``truth``, and a one-line account of any difference."""
    if got == truth:
        return True, f"EXACT ({sum(got.values())} words, {len(got)} distinct)"
    missing = {w: truth[w] - got[w] for w in truth if got[w] < truth[w]}
    extra = {w: got[w] - truth[w] for w in got if got[w] > truth[w]}
    return False, (
        f"MISMATCH: {sum(got.values())} counted, {sum(truth.values())} in the topic; "
        f"under-counted {dict(list(missing.items())[:5])}, over-counted {dict(list(extra.items())[:5])}"
    )
