"""Kafka-specific fixtures for the connector tests (all named kafka_*)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from malhar.operator import InputOperator, OperatorContext
from malhar.ports import ports_of
from malhar.testing.harness import OperatorHarness

KAFKA_CLIENT_LOG = logging.getLogger("tests.io.kafka.client")
KAFKA_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def kafka_unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class KafkaTestClient:
    """Topics, producing with delivery reports, and group offsets on the session broker."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.bootstrap = service.bootstrap_servers
        self._producer: Any = None

    def topic(self, prefix: str = "t", partitions: int = 1) -> str:
        name = kafka_unique(prefix)
        self.service.create_topic(name, partitions=partitions)
        return name

    def producer(self) -> Any:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer(
                {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "logger": KAFKA_CLIENT_LOG}
            )
        return self._producer

    def produce(self, topic: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Produce ``records`` (partition, key, value, headers); return them as the operator
        emits them (offset and timestamp from the delivery reports), in production order."""
        producer = self.producer()
        delivered: list[Any] = [None] * len(records)
        failures: list[Any] = []

        def report(i: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is not None:
                    failures.append(err)
                else:
                    delivered[i] = (msg.offset(), msg.timestamp())

            return cb

        for i, r in enumerate(records):
            producer.produce(
                topic,
                value=r.get("value"),
                key=r.get("key"),
                partition=r.get("partition", 0),
                headers=r.get("headers"),
                timestamp=r.get("timestamp_ms", 0),  # 0: now
                on_delivery=report(i),
            )
            producer.poll(0)
        assert producer.flush(30) == 0, "records not delivered within 30s"
        assert not failures, failures
        out = []
        for r, (offset, (kind, ms)) in zip(records, delivered, strict=True):
            headers = r.get("headers")
            out.append(
                {
                    "topic": topic,
                    "partition": r.get("partition", 0),
                    "offset": offset,
                    "timestamp": KAFKA_EPOCH + dt.timedelta(milliseconds=ms) if kind else None,
                    "timestamp_type": kind,
                    "key": r.get("key"),
                    "value": r.get("value"),
                    "headers": None
                    if headers is None
                    else [{"key": k, "value": v} for k, v in headers],
                }
            )
        return out

    def produce_numbers(
        self, topic: str, partitions: int, count: int, start: int = 0, prefix: str = "m"
    ) -> list[dict[str, Any]]:
        """``count`` records spread round robin over ``partitions``, each with a header."""
        records = [
            {
                "partition": i % partitions,
                "key": f"k{i}".encode(),
                "value": f"{prefix}{i}".encode(),
                "headers": [("n", str(i).encode()), ("h", None)],
            }
            for i in range(start, start + count)
        ]
        return self.produce(topic, records)

    def committed(self, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed offsets, read by a separate consumer."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": group, "logger": KAFKA_CLIENT_LOG}
        )
        try:
            found = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
            return {(tp.topic, tp.partition): tp.offset for tp in found}
        finally:
            consumer.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None


@pytest.fixture
def kafka_client(kafka_service: Any) -> Iterator[KafkaTestClient]:
    client = KafkaTestClient(kafka_service)
    yield client
    client.close()


def kafka_op_args(client: Any, topics: Any, **extra: Any) -> dict[str, Any]:
    """Kafka input settings of the tests: the session broker, from the earliest offset, a
    group of its own, short idle windows; ``extra`` overrides."""
    return {
        "bootstrap_servers": client.bootstrap,
        "topics": topics,
        "initial_offset": "EARLIEST",
        "group_id": kafka_unique("g"),
        "poll_timeout_ms": 200,
        **extra,
    }


def kafka_harness(op: InputOperator, checkpoint: str, **context: Any) -> OperatorHarness:
    """A harness with a real operator context (window data manager under ``checkpoint``)."""
    ctx = OperatorContext(name=context.pop("name", "kin"), checkpoint=checkpoint, **context)
    return OperatorHarness(op, ctx)


def kafka_run_window(h: OperatorHarness, window: int) -> list[Any]:
    """One window as the engine runs it: emit_tuples until a call emits nothing."""
    h.begin_window(window)
    outputs = [getattr(h.operator, p) for p in ports_of(type(h.operator))[1]]
    while True:
        before = sum(b.count for b in outputs)
        h.emit_tuples()
        if sum(b.count for b in outputs) == before:
            break
    h.end_window()
    return list(h.sink("output").per_window.get(window, []))


def kafka_key(row: dict[str, Any]) -> tuple[str, int, int]:
    return (row["topic"], row["partition"], row["offset"])
