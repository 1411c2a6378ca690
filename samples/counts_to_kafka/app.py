"""The flagship DAG plus a Kafka output: each window's counts go to PostgreSQL (``words``,
merge_add) and, as JSON records ``{"word": w, "count": n}`` keyed by the word, to a Kafka
topic in one transaction per window.

::

    lines -> split -> count -> unifier -> words   (JdbcOutputOperator)
                                       \\-> publish (KafkaOutputOperator, exactly once)

A ``read_committed`` consumer of the counts topic sees each window's counts once, whatever
crashes happen: a replayed window that the output already committed is skipped (its window
id is the offset of the output's commit group, written in the same transaction).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from malhar import DAG
from malhar.io.kafka import KafkaOutputOperator
from samples.wordcount_exactly_once.app import WordCountSettings, populate

APPLICATION_NAME = "counts-to-kafka"
WINDOW_HEADER = "malhar.window"


@dataclass
class CountsToKafkaSettings(WordCountSettings):
    """The flagship's settings and the topic the counts are published to."""

    counts_topic: str = "word-counts"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CountsToKafkaSettings:
        base = WordCountSettings.from_config(config)
        return cls(**vars(base), counts_topic=config.get("counts_topic", cls.counts_topic))


def build(dag: DAG, settings: CountsToKafkaSettings) -> DAG:
    """The flagship's operators, and ``publish`` on the counts stream."""
    populate(dag, settings)
    publish = dag.add_operator(
        "publish",
        KafkaOutputOperator(
            bootstrap_servers=settings.bootstrap_servers,
            topic=settings.counts_topic,
            key_column="word",
            value_serializer="json",
            producer_config={"linger.ms": 5},
        ),
    )
    dag.add_stream("counts", None, publish.input)
    return dag


def application(dag: DAG, config: dict[str, Any]) -> None:
    """``malhar run samples.counts_to_kafka.app --config topic=... --config url=...
    --config bootstrap_servers=... --config counts_topic=...``."""
    build(dag, CountsToKafkaSettings.from_config(config))


def published_counts(bootstrap_servers: str, topic: str) -> tuple[Counter, Counter]:
    """The counts topic read back as a ``read_committed`` consumer: the summed count per
    word, and how many records each (window, word) has (1 each when exactly once)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    totals: Counter = Counter()
    records: Counter = Counter()
    try:
        md = consumer.list_topics(topic, timeout=30)
        parts = list(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        left = set(parts)
        while left:
            msg = consumer.poll(10)
            if msg is None:
                raise TimeoutError(f"reading {topic}: no end of partitions {sorted(left)}")
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    left.discard(msg.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            doc = json.loads(msg.value())
            window = dict(msg.headers() or []).get(WINDOW_HEADER)
            totals[doc["word"]] += doc["count"]
            records[(window, doc["word"])] += 1
    finally:
        consumer.close()
    return totals, records
