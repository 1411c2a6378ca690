"""Shared helpers for the real-service tests (Kafka clients on the session broker)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: librdkafka's own log lines (connection refused while a broker restarts, ...)
#: go to Python logging instead of the test's stderr.
CLIENT_LOG = logging.getLogger("tests.kafka.client")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class KafkaClients:
    """Producers and consumers on one broker; consumers are closed at teardown."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._consumers: list[Any] = []

    def producer(self, **config: Any) -> Any:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOG, **config})

    def consumer(self, group: str | None = None, **config: Any) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group or unique("group"),
                "enable.auto.commit": False,
                "auto.offset.reset": "error",  # an explicit offset is always given
                "logger": CLIENT_LOG,
                **config,
            }
        )
        self._consumers.append(consumer)
        return consumer

    def produce(
        self, topic: str, records: dict[int, list[tuple[bytes, bytes]]], timeout: float = 30.0
    ) -> dict[int, list[int]]:
        """Produce ``records`` (partition -> [(key, value)]) in order; the offsets they got."""
        producer = self.producer(**{"enable.idempotence": True})
        offsets: dict[int, list[int]] = {p: [] for p in records}
        errors: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets[msg.partition()].append(msg.offset())

        for partition, pairs in records.items():
            for key, value in pairs:
                producer.produce(topic, value, key, partition=partition, on_delivery=delivered)
        left = producer.flush(timeout)
        assert left == 0, f"{left} message(s) not delivered within {timeout}s"
        assert not errors, f"delivery failed: {errors}"
        return offsets

    @staticmethod
    def consume(consumer: Any, count: int, timeout: float = 30.0) -> list[Any]:
        """Exactly ``count`` messages (fails on a consumer error or when they do not come)."""
        messages: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(messages) < count:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"got {len(messages)} of {count} messages within {timeout}s"
            msg = consumer.poll(min(remaining, 1.0))
            if msg is None:
                continue
            assert msg.error() is None, f"consumer error: {msg.error()}"
            messages.append(msg)
        return messages

    def close(self) -> None:
        for consumer in self._consumers:
            try:
                consumer.close()
            except RuntimeError:  # a test closed it already
                pass
        self._consumers.clear()


@pytest.fixture
def kafka_clients(kafka_service: Any) -> Iterator[KafkaClients]:
    clients = KafkaClients(kafka_service.bootstrap_servers)
    yield clients
    clients.close()


@pytest.fixture
def new_topic(kafka_service: Any) -> Iterator[Callable[..., str]]:
    """``new_topic(partitions=3)`` creates a uniquely named topic, deleted after the test."""
    created: list[str] = []

    def create(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique("topic")
        kafka_service.create_topic(name, partitions=partitions, config=config)
        created.append(name)
        return name

    yield create
    for name in created:
        if kafka_service.ping():
            kafka_service.delete_topic(name)
