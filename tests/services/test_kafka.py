"""The real Kafka broker (KRaft, from the official jars) that malhar starts for tests."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from malhar.testing.services import acquire
from malhar.testing.services import kafka as kafka_module
from malhar.testing.services.errors import ServiceError
from malhar.testing.services.kafka import KafkaService
from malhar.testing.services.process import free_port, port_in_use, wait_until

pytestmark = pytest.mark.integration


def records_for(topic: str, counts: dict[int, int]) -> dict[int, list[tuple[bytes, bytes]]]:
    return {
        p: [(f"{topic}/k{p}-{i}".encode(), f"value {p}-{i}".encode()) for i in range(n)]
        for p, n in counts.items()
    }


def by_partition(messages: list[Any]) -> dict[int, list[tuple[int, bytes, bytes]]]:
    grouped: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
    for msg in messages:
        grouped[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
    return dict(grouped)


def expected_from(
    records: dict[int, list[tuple[bytes, bytes]]], start: dict[int, int] | None = None
) -> dict[int, list[tuple[int, bytes, bytes]]]:
    start = start or {}
    return {
        p: [(i, k, v) for i, (k, v) in enumerate(pairs) if i >= start.get(p, 0)]
        for p, pairs in records.items()
        if len(pairs) > start.get(p, 0)
    }


# -- the broker itself ----------------------------------------------------------------------
def test_broker_answers_a_metadata_request(kafka_service: KafkaService) -> None:
    assert kafka_service.ping()
    bootstrap = kafka_service.bootstrap_servers
    assert bootstrap == f"127.0.0.1:{kafka_service.port}"
    assert kafka_service.connection() == {"bootstrap_servers": bootstrap}
    assert kafka_service.env_value() == bootstrap

    metadata = kafka_service.admin().list_topics(timeout=10)
    assert set(metadata.brokers) == {1}
    assert f"{metadata.brokers[1].host}:{metadata.brokers[1].port}" == bootstrap

    (log,) = kafka_service.log_paths
    text = log.read_text()
    assert "Formatting dynamic metadata voter directory" in text
    assert "Kafka version: 4." in text
    assert "Kafka Server started" in text

    state = kafka_service.state()
    assert state["name"] == "kafka" and state["env_value"] == bootstrap
    assert len(state["pids"]) == 1 and state["logs"] == [str(log)]


def test_topic_helpers_create_configure_and_delete(kafka_service: KafkaService) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    name = f"helpers-{time.monotonic_ns()}"
    kafka_service.create_topic(name, partitions=2, config={"retention.ms": "3600000"})
    assert name in kafka_service.topics()
    topic = kafka_service.admin().list_topics(topic=name, timeout=10).topics[name]
    assert sorted(topic.partitions) == [0, 1]
    assert all(p.leader == 1 for p in topic.partitions.values())

    resource = ConfigResource(ResourceType.TOPIC, name)
    configs = kafka_service.admin().describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "3600000"

    with pytest.raises(ServiceError, match="already exists"):
        kafka_service.create_topic(name, partitions=2)
    kafka_service.create_topic(name, partitions=2, exist_ok=True)
    with pytest.raises(ServiceError, match="exists with 2 partitions, not 3"):
        kafka_service.create_topic(name, partitions=3, exist_ok=True)

    kafka_service.delete_topic(name)
    assert name not in kafka_service.topics()


# -- data round trips --------------------------------------------------------------------
def test_produce_to_explicit_partitions_and_read_back_exactly(
    kafka_service: KafkaService, kafka_clients: Any, new_topic: Any
) -> None:
    topic = new_topic(partitions=3)
    records = records_for(topic, {0: 3, 1: 5, 2: 1})

    offsets = kafka_clients.produce(topic, records)
    assert offsets == {0: [0, 1, 2], 1: [0, 1, 2, 3, 4], 2: [0]}

    consumer = kafka_clients.consumer()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    messages = kafka_clients.consume(consumer, 9)
    assert {m.topic() for m in messages} == {topic}
    assert by_partition(messages) == expected_from(records)
    for p, pairs in records.items():
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        assert (low, high) == (0, len(pairs))


def test_assign_at_an_offset_and_seek_back_rereads(kafka_clients: Any, new_topic: Any) -> None:
    topic = new_topic(partitions=3)
    records = records_for(topic, {0: 2, 1: 6})
    kafka_clients.produce(topic, records)

    consumer = kafka_clients.consumer()
    consumer.assign([TopicPartition(topic, 1, 4)])
    assert by_partition(kafka_clients.consume(consumer, 2)) == {
        1: expected_from(records, {1: 4})[1]
    }
    assert consumer.position([TopicPartition(topic, 1)])[0].offset == 6

    consumer.seek(TopicPartition(topic, 1, 1))
    assert by_partition(kafka_clients.consume(consumer, 5)) == {
        1: expected_from(records, {1: 1})[1]
    }

    # a second partition added to the assignment, from its first offset
    consumer.incremental_assign([TopicPartition(topic, 0, 0)])
    assert by_partition(kafka_clients.consume(consumer, 2)) == {0: expected_from(records)[0]}


def test_committed_offsets_are_read_back_by_another_consumer(
    kafka_clients: Any, new_topic: Any
) -> None:
    topic = new_topic(partitions=3)
    records = records_for(topic, {0: 4, 1: 4, 2: 4})
    kafka_clients.produce(topic, records)
    group = f"commit-{time.monotonic_ns()}"

    first = kafka_clients.consumer(group)
    first.assign([TopicPartition(topic, p, 0) for p in range(3)])
    kafka_clients.consume(first, 12)
    to_commit = {0: 1, 1: 4, 2: 3}
    result = first.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in to_commit.items()], asynchronous=False
    )
    assert all(tp.error is None for tp in result)
    first.close()

    second = kafka_clients.consumer(group)
    committed = second.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    assert {tp.partition: tp.offset for tp in committed} == to_commit

    # resuming from the committed offsets reads exactly what was not committed
    second.assign(committed)
    assert by_partition(kafka_clients.consume(second, 4)) == expected_from(records, to_commit)


# -- errors are errors -------------------------------------------------------------------
def test_producing_to_a_missing_topic_fails(kafka_clients: Any) -> None:
    producer = kafka_clients.producer(
        **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10000}
    )
    errors: list[Any] = []
    producer.produce(
        "no-such-topic", b"v", b"k", partition=0, on_delivery=lambda e, m: errors.append(e)
    )
    assert producer.flush(30) == 0
    assert [e.code() for e in errors] == [KafkaError.UNKNOWN_TOPIC_OR_PART]


def test_consuming_a_missing_topic_reports_an_error(kafka_clients: Any) -> None:
    subscriber = kafka_clients.consumer(**{"topic.metadata.propagation.max.ms": 1000})
    subscriber.subscribe(["no-such-topic"])
    seen: list[Any] = []

    def subscriber_error() -> bool:
        msg = subscriber.poll(0.5)
        if msg is not None:
            seen.append(msg)
        return bool(seen)

    wait_until(subscriber_error, timeout=30, what="an error for a missing subscribed topic")
    assert seen[0].error() is not None
    assert seen[0].error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # with an explicit assignment librdkafka reports it through error_cb
    errors: list[Any] = []
    assigned = kafka_clients.consumer(
        **{"topic.metadata.propagation.max.ms": 1000, "error_cb": errors.append}
    )
    assigned.assign([TopicPartition("no-such-topic", 0, 0)])

    def assigned_error() -> bool:
        msg = assigned.poll(0.5)
        assert msg is None, f"unexpected message from a missing topic: {msg}"
        return bool(errors)

    wait_until(assigned_error, timeout=30, what="error_cb for a missing assigned topic")
    assert errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException):
        assigned.get_watermark_offsets(TopicPartition("no-such-topic", 0), timeout=5)


# -- setup problems ------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["port", "controller_port"])
def test_an_explicit_port_in_use_is_refused_before_launch(which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = KafkaService(**{which: port})
        with pytest.raises(ServiceError, match=rf"{which} {port} .*already in use"):
            service.start(timeout=30)
    assert service.processes == [] and service.home is None


def test_a_broker_that_dies_while_starting_fails_at_once_with_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = KafkaService()
    # an unformatted storage folder: kafka.Kafka exits right after the JVM starts
    monkeypatch.setattr(service, "_format_storage", lambda: None)
    began = time.monotonic()
    try:
        with pytest.raises(ServiceError) as caught:
            service.start(timeout=120)
        elapsed = time.monotonic() - began
        message = str(caught.value)
        assert "process exited with code" in message
        assert "kafka.Kafka" in message  # the command
        assert f"log: {service.home}/kafka.log" in message
        assert "meta.properties" in message  # the broker's own complaint, from the log tail
        assert elapsed < 60, f"took {elapsed:.0f}s: the death was not noticed at once"
        assert service.processes == []
    finally:
        service.stop()  # whatever happened: no JVM and no folder left behind


def test_a_failing_storage_format_raises_with_command_and_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what random_cluster_id() avoids: an id that the tool's parser takes for an option
    monkeypatch.setattr(kafka_module, "random_cluster_id", lambda: "-not-a-cluster-id")
    service = KafkaService()
    try:
        with pytest.raises(ServiceError, match="formatting the storage failed") as caught:
            service.start(timeout=60)
        message = str(caught.value)
        assert "kafka.tools.StorageTool format -t -not-a-cluster-id" in message
        assert "kafka.log" in message
        assert service.processes == []
    finally:
        service.stop()  # whatever happened: no JVM and no folder left behind


def test_external_broker_from_the_environment(
    kafka_service: KafkaService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KafkaService.env_var, kafka_service.bootstrap_servers)
    external = acquire("kafka")
    assert isinstance(external, KafkaService) and external.external
    assert external.ping()
    assert external.connection() == kafka_service.connection()
    with pytest.raises(ServiceError, match="only a locally started broker"):
        external.restart()
    external.stop()  # leaves the broker alone
    assert kafka_service.ping()

    nobody = free_port()
    monkeypatch.setenv(KafkaService.env_var, f"127.0.0.1:{nobody}")
    assert not KafkaService.from_env(f"127.0.0.1:{nobody}").ping(timeout=1)
    with pytest.raises(ServiceError, match="does not answer"):
        acquire("kafka")


def test_java_string_hash_matches_java() -> None:
    # values of String.hashCode() computed by a JVM
    assert kafka_module._java_string_hash("") == 0
    assert kafka_module._java_string_hash("hello") == 99162322
    assert kafka_module._java_string_hash("polygenelubricants") == -(2**31)
    assert kafka_module._java_string_hash("\u00e9t\u00e9 \U0001f600") == -1803469019
    assert kafka_module.offsets_partition_of("polygenelubricants", 7) == 0  # Utils.abs(MIN) = 0


def _read_to(reader: Any, topic: str, partition: int, high: int, timeout: float = 30.0) -> list:
    """The records of an assigned partition up to ``high``. Not ``high`` records: the offsets
    topic also holds transaction markers (the Kafka output's ``send_offsets_to_transaction``
    on the same broker), which are never delivered; the position steps over them."""
    tp = TopicPartition(topic, partition)
    messages: list = []
    deadline = time.monotonic() + timeout
    while high > 0 and reader.position([tp])[0].offset < high:
        assert time.monotonic() < deadline, f"{topic}[{partition}] not read to {high}"
        message = reader.poll(0.2)
        if message is not None and message.error() is None:
            messages.append(message)
    return messages


def test_readiness_probe_groups_reach_every_group_coordinator(
    kafka_service: KafkaService, kafka_clients: Any, new_topic: Any
) -> None:
    """The restart readiness check asks each offsets partition's coordinator once:
    each probe group's commit must land in the ``__consumer_offsets`` partition
    we computed for it."""
    topic = new_topic(partitions=1)
    kafka_clients.produce(topic, {0: [(b"k", b"v")]})
    offsets = kafka_module.OFFSETS_TOPIC
    groups = [*kafka_module.probe_groups(4), "hello", "polygenelubricants"]
    for group in groups:
        committer = kafka_clients.consumer(group)
        committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        committer.close()
    partitions = kafka_service.admin().list_topics(offsets, timeout=10).topics[offsets].partitions
    assert len(partitions) == 4

    reader = kafka_clients.consumer()
    keys_in: dict[int, bytes] = {}
    for p in range(4):
        _, high = reader.get_watermark_offsets(TopicPartition(offsets, p), timeout=10)
        reader.assign([TopicPartition(offsets, p, 0)])
        keys_in[p] = b"|".join(m.key() or b"" for m in _read_to(reader, offsets, p, high))
    for group in groups:
        home = kafka_module.offsets_partition_of(group, 4)
        assert group.encode() in keys_in[home], (group, home)
        assert all(group.encode() not in keys_in[p] for p in range(4) if p != home)
    assert sorted(
        kafka_module.offsets_partition_of(g, 4) for g in kafka_module.probe_groups(4)
    ) == [0, 1, 2, 3]


# -- restarts (same broker, same data) ---------------------------------------------------
@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
def test_restart_keeps_data_and_committed_offsets(
    kafka_service: KafkaService, kafka_clients: Any, new_topic: Any, graceful: bool
) -> None:
    topic = new_topic(partitions=3)
    records = records_for(topic, {0: 2, 1: 3, 2: 4})
    kafka_clients.produce(topic, records)
    group = f"restart-{time.monotonic_ns()}"
    committer = kafka_clients.consumer(group)
    to_commit = [TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 1)]
    committer.commit(offsets=to_commit, asynchronous=False)
    committer.close()
    kafka_clients.close()

    bootstrap, home, (pid,) = (
        kafka_service.bootstrap_servers,
        kafka_service.home,
        [p.pid for p in kafka_service.processes],
    )
    kafka_service.stop_broker(graceful=graceful)
    assert not kafka_service.ping(timeout=1)
    assert not port_in_use(kafka_service.port)
    kafka_service.start_broker()

    assert kafka_service.bootstrap_servers == bootstrap and kafka_service.home == home
    assert [p.pid for p in kafka_service.processes] != [pid]
    assert kafka_service.ping()
    assert topic in kafka_service.topics()

    reader = kafka_clients.consumer(group)
    committed = reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    assert {tp.partition: tp.offset for tp in committed} == {0: 2, 1: 1, 2: -1001}
    reader.assign([TopicPartition(topic, p, 0) for p in range(3)])
    assert by_partition(kafka_clients.consume(reader, 9)) == expected_from(records)

    # the partitions accept writes again, continuing their offsets
    more = {2: [(b"after", b"restart")]}
    assert kafka_clients.produce(topic, more) == {2: [4]}
    assert by_partition(kafka_clients.consume(reader, 1)) == {2: [(4, b"after", b"restart")]}


def test_restart_returns_the_same_ready_broker(kafka_service: KafkaService) -> None:
    bootstrap = kafka_service.bootstrap_servers
    assert kafka_service.restart() is kafka_service
    assert kafka_service.bootstrap_servers == bootstrap
    assert kafka_service.ping()
