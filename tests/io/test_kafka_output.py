"""The Kafka output against a real broker: exactly-once windows (transactions, the committed
window in the commit group, replays skipped, zombies fenced, a lost commit reply), the window
header, keys, partitioners, serializers (hooks included), headers, compression, bad records
on the error port, a missing topic, at-least-once and the scan recovery, the Spark sink.

The helpers at the top (reading a topic back as a ``read_committed`` consumer) are used by
the other Kafka output tests too."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from malhar.errors import ConfigError
from malhar.io.base.committer import WindowCommitter
from malhar.io.base.output import RetryPolicy, WindowKey
from malhar.io.kafka import (
    KafkaAuthorizationError,
    KafkaOutputOperator,
    KafkaOutputSettings,
    KafkaSinkSettings,
    KafkaSource,
    OutputTopicNotFoundError,
)
from malhar.io.kafka.encoding import murmur2_partition
from malhar.io.kafka.producer import KafkaOutputStore
from malhar.io.kafka.serializers import FunctionSerializer, confluent_serializer
from malhar.operator import OperatorContext
from malhar.testing.harness import OperatorHarness
from malhar.testing.services.process import wait_until
from tests.io.conftest import KAFKA_CLIENT_LOG, kafka_unique

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-never-shown"


# -- helpers (shared with the other Kafka output tests) ----------------------------------------
@dataclass(frozen=True)
class Rec:
    """A record as read back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    @property
    def window(self) -> int:
        return int(dict(self.headers)["malhar.window"])

    def json(self) -> Any:
        return None if self.value is None else json.loads(self.value)


def read_topic(
    bootstrap: str, topic: str, *, committed: bool = True, timeout: float = 60.0
) -> list[Rec]:
    """Every record of ``topic`` up to each partition's end (for ``read_committed``: the last
    stable offset), in partition and offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "logger": KAFKA_CLIENT_LOG,
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        parts = sorted(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(done) < len(parts):
            assert time.monotonic() < deadline, f"{topic}: partitions {done} ended, not all"
            for m in consumer.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    done.add(m.partition())
                    continue
                headers = tuple(m.headers() or ())
                out.append(Rec(m.partition(), m.offset(), m.key(), m.value(), headers))
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def committed_window(bootstrap: str, group: str, topic: str) -> int | None:
    """The window an exactly-once output partition committed (its group's offset - 1)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "logger": KAFKA_CLIENT_LOG}
    )
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return None if tp.offset < 0 else tp.offset - 1
    finally:
        consumer.close()


def harness(op: Any, app: str, partition: int = 0, name: str = "out") -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name=name, application=app, partition=partition))


def quick(**extra: Any) -> dict[str, Any]:
    """Fast retries for tests (a retry still happens, just sooner)."""
    return {"retry_backoff": 0.05, "max_backoff": 0.2, **extra}


def protobuf_struct() -> FunctionSerializer:
    """A serializer hook (``tests.io.test_kafka_output:protobuf_struct``): each row as a
    ``google.protobuf.Struct``."""
    from google.protobuf import struct_pb2

    def encode(row: dict[str, Any]) -> bytes:
        message = struct_pb2.Struct()
        message.update(row)
        return message.SerializeToString()

    return FunctionSerializer(encode, rows=True, name="protobuf Struct")


def string_confluent() -> FunctionSerializer:
    """confluent-kafka's own StringSerializer through the adapter (the shape of its Avro and
    Protobuf schema-registry serializers: ``serializer(value, ctx)``)."""
    from confluent_kafka.serialization import StringSerializer

    return confluent_serializer(StringSerializer("utf_8"), "any", rows=False)


# -- settings ------------------------------------------------------------------------------------
def test_settings_have_one_owner_options_and_secret_references() -> None:
    op = KafkaOutputOperator("b:9092", "t", key_column="k", producer_config={"linger.ms": 20})
    assert isinstance(op, KafkaOutputSettings)
    assert op.settings().producer_config == {"linger.ms": 20}
    with pytest.raises(ConfigError, match="did you mean 'key_column'"):
        KafkaOutputOperator("b:9092", "t", key_colum="k")
    with pytest.raises(ConfigError, match="must be a secret reference") as caught:
        KafkaOutputOperator("b:9092", "t", producer_config={"sasl.password": SECRET})
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError, match=r"transactional\.id"):
        KafkaOutputOperator("b:9092", "t", producer_config={"transactional.id": "x"})
    with pytest.raises(ConfigError, match="not one of"):
        KafkaOutputOperator("b:9092", "t", value_serializer="avro")
    bad = KafkaOutputSettings().configure(bootstrap_servers="b", topic="t", partitioner="column")
    assert bad.settings_problems() == ["partitioner 'column' needs partition_column"]

    sink = KafkaSinkSettings().from_options(
        {
            "BOOTSTRAP_SERVERS": "b:9092",
            "topic": "t",
            "name": "q",
            "kafka.sasl.password": "${env:PW}",
            "kafka.compression.type": "lz4",
            "checkpointLocation": "/x",
        }
    )
    assert sink.producer_config == {"sasl.password": "${env:PW}", "compression.type": "lz4"}
    assert sink.transactional_id(sink.key(1)) == "malhar.q.sink.1"
    assert sink.commit_group(sink.key(1)) == "malhar-out.q.sink.1"
    with pytest.raises(ConfigError, match="did you mean 'topic'"):
        KafkaSinkSettings().from_options({"bootstrap_servers": "b", "topik": "t", "name": "q"})
    with pytest.raises(ConfigError, match="must be a secret reference"):
        KafkaSinkSettings().from_options(
            {"bootstrap_servers": "b", "topic": "t", "name": "q", "kafka.sasl.password": "pw"}
        )
    os.environ["MALHAR_TEST_KAFKA_PW"] = SECRET
    shown = repr(
        KafkaOutputSettings().configure(
            bootstrap_servers="b",
            topic="t",
            producer_config={"sasl.password": "${env:MALHAR_TEST_KAFKA_PW}"},
        )
    )
    assert SECRET not in shown


# -- exactly once ---------------------------------------------------------------------------------
def test_exactly_once_windows_replays_keys_and_window_header(kafka_client: Any) -> None:
    topic = kafka_client.topic("eo", partitions=3)
    app = kafka_unique("eo")
    make = lambda: KafkaOutputOperator(kafka_client.bootstrap, topic, key_column="word", **quick())  # noqa: E731
    h = harness(make(), app)
    h.run_window([("input", {"word": "apex", "n": 1}), ("input", {"word": "spark", "n": 2})], 0)
    batch = pa.RecordBatch.from_pylist([{"word": f"w{i}", "n": i} for i in range(50)])
    h.run_window([("input", batch)], 1)
    h.run_window([], 2)  # an empty window touches nothing
    h.teardown()

    # the partition is rebuilt after a failure: window 1 is replayed (skipped), 3 is new
    again = harness(make(), app)
    again.run_window([("input", batch)], 1)
    again.run_window([("input", {"word": "once", "n": 3})], 3)
    again.teardown()

    records = read_topic(kafka_client.bootstrap, topic)
    assert Counter(r.window for r in records) == {0: 2, 1: 50, 3: 1}
    assert sorted(r.json()["word"] for r in records if r.window == 1) == sorted(
        f"w{i}" for i in range(50)
    )
    for r in records:
        assert r.key == r.json()["word"].encode()
        assert r.headers == (("malhar.window", str(r.window).encode()),)
        # librdkafka's murmur2_random partitioner: where Java clients put the key
        assert r.partition == murmur2_partition(r.key, 3)
    group = (
        KafkaOutputSettings()
        .configure(bootstrap_servers="b", topic=topic)
        .commit_group(WindowKey(app, "out", 0))
    )
    assert committed_window(kafka_client.bootstrap, group, topic) == 3


def test_a_replayed_committed_window_reemits_its_rejected_rows(
    kafka_client: Any, tmp_path: Path
) -> None:
    # the transaction holds only the topic's records: a window replayed after its commit
    # (the driver died before the window was complete) re-emitted no error-port rows
    topic = kafka_client.topic("rej")
    app = kafka_unique("rej")
    ctx = lambda: OperatorContext(name="out", application=app, checkpoint=str(tmp_path))  # noqa: E731
    make = lambda: KafkaOutputOperator(kafka_client.bootstrap, topic, key_column="k", **quick())  # noqa: E731
    window = [("input", {"k": "ok", "v": 1.0}), ("input", {"k": "nan", "v": float("nan")})]
    h = OperatorHarness(make(), ctx())
    h.run_window(window, 0)
    first = h.sink("error").tuples
    h.teardown()
    assert [e["k"] for e in first] == ["nan"]

    again = OperatorHarness(make(), ctx())  # rebuilt from the checkpoint before window 0
    again.run_window(window, 0)
    assert [(e["k"], e["error"]) for e in again.sink("error").tuples] == [
        (e["k"], e["error"]) for e in first
    ]
    again.committed(0)  # complete in the application: no replay can ask any more
    assert not list((tmp_path / "malhar" / "rejected" / "out" / "0").glob("*.json"))
    again.teardown()
    assert [r.key for r in read_topic(kafka_client.bootstrap, topic)] == [b"ok"]


def _store(client: Any, topic: str, app: str, **extra: Any) -> KafkaOutputStore:
    settings = KafkaOutputSettings().configure(
        bootstrap_servers=client.bootstrap, topic=topic, key_column="k", **extra
    )
    return KafkaOutputStore(settings, WindowKey(app, "out", 0))


def _rows(n: int, prefix: str = "r") -> pa.Table:
    return pa.table({"k": [f"{prefix}{i}" for i in range(n)], "n": list(range(n))})


def test_open_transaction_of_a_dead_writer_is_invisible_then_aborted(kafka_client: Any) -> None:
    topic = kafka_client.topic("dead")
    app = kafka_unique("dead")
    dead = _store(kafka_client, topic, app)
    dead.open()
    txn = dead.begin(0)
    dead.write(txn, _rows(20, "dead"))
    txn.producer.flush(30)  # the records are in the log, in an open transaction
    assert len(read_topic(kafka_client.bootstrap, topic, committed=False)) == 20
    assert read_topic(kafka_client.bootstrap, topic) == []  # read_committed: nothing

    # its replacement fences it: the open transaction is aborted, window 0 written once
    committer = WindowCommitter(_store(kafka_client, topic, app), retry=RetryPolicy(3, 0.05))
    assert committer.open() == -1
    result = committer.commit_window(0, _rows(20, "new"))
    assert result.written == 20 and not result.skipped
    committer.close()
    records = read_topic(kafka_client.bootstrap, topic)
    assert sorted(r.key for r in records) == sorted(f"new{i}".encode() for i in range(20))
    assert len(read_topic(kafka_client.bootstrap, topic, committed=False)) == 40  # + aborted
    dead.close()


def test_zombie_writer_is_fenced_and_finds_its_window_committed(kafka_client: Any) -> None:
    topic = kafka_client.topic("zombie")
    app = kafka_unique("zombie")
    retry = RetryPolicy(4, 0.05, 0.1)
    zombie = WindowCommitter(_store(kafka_client, topic, app), retry=retry)
    zombie.open()
    assert zombie.commit_window(2, _rows(1, "early")).written == 1
    live = WindowCommitter(_store(kafka_client, topic, app), retry=retry)  # fences the zombie
    assert live.open() == 2
    assert live.commit_window(3, _rows(5, "live")).written == 5
    # the zombie, unaware, writes window 3 too: fenced, it makes a new producer (fencing the
    # live one in turn), reads the committed window again and skips
    result = zombie.commit_window(3, _rows(5, "zombie"))
    assert result.skipped and result.attempts == 2
    # ... and the live writer, fenced now, recovers the same way for its next window
    assert live.commit_window(4, _rows(2, "next")).written == 2
    zombie.close()
    live.close()
    records = read_topic(kafka_client.bootstrap, topic)
    assert sorted(r.key for r in records) == sorted(
        [b"early0"] + [f"live{i}".encode() for i in range(5)] + [b"next0", b"next1"]
    )


class _LearnsFencingFirst(KafkaOutputStore):
    """Before its window's records, sends one probe record and waits for its report: a
    fenced producer learns of the fencing then, so ``produce`` itself fails (``_FATAL``)."""

    probed = False

    def write(self, txn: Any, rows: pa.Table) -> list[dict[str, Any]]:
        if not self.probed:
            self.probed = True
            txn.producer.produce(self.settings.topic, b"probe", b"probe")
            with pytest.raises(KafkaException, match="fenced"):
                txn.producer.flush(30)  # in a real run the fencing arrives in the background
        return super().write(txn, rows)


def test_a_zombie_failing_at_produce_time_is_replaced_too(kafka_client: Any) -> None:
    topic = kafka_client.topic("zombie-produce")
    app = kafka_unique("zombie-produce")
    settings = KafkaOutputSettings().configure(
        bootstrap_servers=kafka_client.bootstrap, topic=topic, key_column="k"
    )
    zombie_store = _LearnsFencingFirst(settings, WindowKey(app, "out", 0))
    zombie_store.probed = True  # its first window goes as usual
    zombie = WindowCommitter(zombie_store, retry=RetryPolicy(4, 0.05, 0.1))
    zombie.open()
    assert zombie.commit_window(2, _rows(1, "early")).written == 1
    live = WindowCommitter(_store(kafka_client, topic, app), retry=RetryPolicy(4, 0.05, 0.1))
    assert live.open() == 2
    assert live.commit_window(3, _rows(5, "live")).written == 5
    zombie_store.probed = False
    result = zombie.commit_window(3, _rows(5, "zombie"))
    assert result.skipped and result.attempts == 2
    zombie.close()
    live.close()
    records = read_topic(kafka_client.bootstrap, topic)
    assert sorted(r.key for r in records) == sorted(
        [b"early0"] + [f"live{i}".encode() for i in range(5)]
    )


class _LosesCommitReply(KafkaOutputStore):
    """Commits for real, then reports a timeout (the reply was lost), once."""

    lost = False

    def commit(self, txn: Any) -> None:
        super().commit(txn)
        if not self.lost:
            self.lost = True
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "reply lost", retriable=True))


def test_a_lost_commit_reply_is_found_committed_not_written_twice(kafka_client: Any) -> None:
    topic = kafka_client.topic("lost")
    settings = KafkaOutputSettings().configure(
        bootstrap_servers=kafka_client.bootstrap, topic=topic
    )
    store = _LosesCommitReply(settings, WindowKey(kafka_unique("lost"), "out", 0))
    committer = WindowCommitter(store, retry=RetryPolicy(3, 0.05))
    committer.open()
    result = committer.commit_window(7, _rows(10))
    assert result.skipped and result.attempts == 2  # the retry found window 7 committed
    assert committer.commit_window(8, _rows(1, "x")).written == 1
    committer.close()
    records = read_topic(kafka_client.bootstrap, topic)
    assert Counter(r.window for r in records) == {7: 10, 8: 1}


# -- records: serializers, partitioners, headers, compression ------------------------------------
def test_serializers_partitioners_headers_and_compression(kafka_client: Any) -> None:
    bs = kafka_client.bootstrap
    app = kafka_unique("rec")
    rows = [{"word": f"w{i}", "n": i, "p": i % 4, "region": f"r{i % 3}"} for i in range(12)]
    batch = pa.RecordBatch.from_pylist(rows)

    def write(topic: str, name: str, **props: Any) -> list[Rec]:
        h = harness(KafkaOutputOperator(bs, topic, **quick(**props)), app, name=name)
        h.run_window([("input", batch)], 0)
        h.teardown()
        assert h.sink("error").tuples == []
        return read_topic(bs, topic)

    t = kafka_client.topic("explicit", partitions=4)
    got = write(
        t,
        "explicit",
        partitioner="explicit",
        partition_column="p",
        value_column="n",
        value_serializer="string",
        producer_config={"compression.type": "lz4"},
    )
    assert sorted((r.partition, r.value) for r in got) == sorted(
        (i % 4, str(i).encode()) for i in range(12)
    )
    assert all(r.key is None for r in got)

    t = kafka_client.topic("column", partitions=4)
    got = write(
        t,
        "column",
        partitioner="column",
        partition_column="region",
        producer_config={"compression.type": "zstd", "linger.ms": 50},
    )
    for r in got:  # rows of a region together, where a key of that text would go
        assert r.partition == murmur2_partition(r.json()["region"].encode(), 4)
        assert r.json() == rows[r.json()["n"]]  # the whole row, JSON

    t = kafka_client.topic("proto")
    got = write(
        t,
        "proto",
        key_column="n",
        key_serializer="json",
        value_serializer="tests.io.test_kafka_output:protobuf_struct",
        headers={"source": "malhar-test"},
    )
    from google.protobuf import struct_pb2

    for r in got:
        message = struct_pb2.Struct()
        message.ParseFromString(r.value)
        n = int(message["n"])
        assert r.key == str(n).encode()
        assert message["word"] == f"w{n}"
        assert dict(r.headers) == {"malhar.window": b"0", "source": b"malhar-test"}

    t = kafka_client.topic("confluent")
    got = write(
        t,
        "confluent",
        value_column="word",
        value_serializer="tests.io.test_kafka_output:string_confluent",
    )
    assert sorted(r.value for r in got) == sorted(f"w{i}".encode() for i in range(12))

    # per-row headers and bytes values from tuples
    t = kafka_client.topic("hdr")
    h = harness(
        KafkaOutputOperator(bs, t, value_serializer="bytes", headers_column="h"), app, name="hdr"
    )
    h.run_window(
        [
            ("input", {"value": b"\x00raw", "h": [("trace", b"t1"), ("n", "2")]}),
            ("input", b"plain bytes"),
            ("input", {"value": b"v", "h": {"only": None}}),
        ],
        0,
    )
    h.teardown()
    assert h.sink("error").tuples == []
    got = {r.value: r.headers for r in read_topic(bs, t)}
    assert got == {
        b"\x00raw": (("malhar.window", b"0"), ("trace", b"t1"), ("n", b"2")),
        b"plain bytes": (("malhar.window", b"0"),),
        b"v": (("malhar.window", b"0"), ("only", None)),
    }


# -- bad input ------------------------------------------------------------------------------------
def test_bad_records_go_to_the_error_port_with_their_reason(kafka_client: Any) -> None:
    bs = kafka_client.bootstrap
    app = kafka_unique("bad")
    t = kafka_client.topic("bad", partitions=2)
    h = harness(
        KafkaOutputOperator(
            bs,
            t,
            key_column="k",
            partitioner="explicit",
            partition_column="p",
            producer_config={"message.max.bytes": 10_000},
            **quick(),
        ),
        app,
    )
    h.run_window(
        [
            ("input", {"k": "ok", "p": 0, "v": "fine"}),
            ("input", {"k": "big", "p": 1, "v": "x" * 20_000}),
            ("input", {"k": "nowhere", "p": 7, "v": "x"}),
            ("input", {"k": "mixed", "p": 0, "v": 1}),  # v: a number after text, written as is
            ("input", 3.5),
            ("input", {"k": "ok2", "p": 1, "v": "fine"}),
            ("input", {"k": "lone", "p": 1, "v": "\ud800"}),  # no UTF-8: failed the window
        ],
        0,
    )
    h.run_window(
        [
            ("input", {"k": "nan", "p": 1, "v": float("nan")}),
            ("input", {"k": "f", "p": 1, "v": 0.5}),
        ],
        1,
    )
    h.run_window([("input", {"k": "raw", "p": 0, "v": b"\x00\x01"})], 2)
    h.teardown()
    errors = {e.get("k", e.get("value")): e["error"] for e in h.sink("error").tuples}
    assert set(errors) == {"big", "nan", "raw", "nowhere", 3.5, "lone"}, errors
    assert "surrogates not allowed" in errors["lone"]
    assert "too large" in errors["big"] and "message.max.bytes=10000" in errors["big"]
    assert "JSON" in errors["nan"]
    assert "bytes value cannot be encoded as JSON" in errors["raw"]
    assert "is not a partition of topic" in errors["nowhere"] and "(0..1)" in errors["nowhere"]
    assert "expected a dict" in errors[3.5]
    written = {r.key: r.json() for r in read_topic(bs, t)}
    assert sorted(written) == [b"f", b"mixed", b"ok", b"ok2"]
    # each row as itself (the explicit partition column is not part of the value)
    assert written[b"mixed"] == {"k": "mixed", "v": 1}
    assert written[b"ok"] == {"k": "ok", "v": "fine"}


def test_records_the_topic_refuses_are_found_and_the_window_still_commits(
    kafka_client: Any,
) -> None:
    bs = kafka_client.bootstrap
    t = kafka_unique("small")
    kafka_client.service.create_topic(t, config={"max.message.bytes": "2000"})
    app = kafka_unique("small")
    # the topic's own limit is read at launch: records over it are refused before sending
    h = harness(
        KafkaOutputOperator(bs, t, value_column="v", value_serializer="string", **quick()), app
    )
    h.run_window([("input", {"v": "a" * 3000}), ("input", {"v": "fits"})], 0)
    h.teardown()
    (err,) = h.sink("error").tuples
    assert "topic max.message.bytes=2000" in err["error"]
    # with the pre-check out of the way (max_record_bytes), the broker refuses the record
    # inside the transaction: the window is tried again, reporting each record's delivery,
    # and committed without it
    h = harness(
        KafkaOutputOperator(
            bs,
            t,
            value_column="v",
            value_serializer="string",
            max_record_bytes=10_000_000,
            producer_config={"message.max.bytes": 1_000_000, "batch.size": 500},
            # the poisoned first attempt's commit waits this long for the queued record
            request_timeout_ms=8_000,
            **quick(),
        ),
        app,
        name="out2",
    )
    h.run_window([("input", {"v": "b" * 3000}), ("input", {"v": "fits too"})], 0)
    h.teardown()
    (err,) = h.sink("error").tuples
    assert err["v"] == "b" * 3000 and "MSG_SIZE_TOO_LARGE" in err["error"], err["error"]
    assert sorted(r.value for r in read_topic(bs, t)) == [b"fits", b"fits too"]


def test_missing_topic_fails_at_launch_or_is_created(kafka_client: Any) -> None:
    bs = kafka_client.bootstrap
    t = kafka_unique("missing")
    h = harness(KafkaOutputOperator(bs, t, **quick()), kafka_unique("m"))
    with pytest.raises(OutputTopicNotFoundError, match=f"topic '{t}'.*create_topic=True"):
        h.setup()
    h = harness(
        KafkaOutputOperator(
            bs, t, create_topic=True, topic_partitions=3, topic_config={"retention.ms": "600000"}
        ),
        kafka_unique("m"),
    )
    h.run_window([("input", {"a": 1})], 0)
    h.teardown()
    assert [r.json() for r in read_topic(bs, t)] == [{"a": 1}]
    md = kafka_client.service.admin().list_topics(t, timeout=10)
    assert len(md.topics[t].partitions) == 3


# -- the other delivery modes --------------------------------------------------------------------
def test_at_least_once_writes_a_replayed_window_again(kafka_client: Any) -> None:
    t = kafka_client.topic("alo")
    app = kafka_unique("alo")
    make = lambda: KafkaOutputOperator(kafka_client.bootstrap, t, delivery="at_least_once")  # noqa: E731
    h = harness(make(), app)
    h.run_window([("input", {"n": 1})], 0)
    h.run_window([("input", {"n": 2})], 1)
    h.teardown()
    again = harness(make(), app)  # restored after window 0: window 1 replays
    again.run_window([("input", {"n": 2})], 1)
    again.teardown()
    got = read_topic(kafka_client.bootstrap, t, committed=False)
    assert [(r.window, r.json()["n"]) for r in got] == [(0, 1), (1, 2), (1, 2)]


def test_scan_recovery_writes_only_the_records_that_are_missing(
    kafka_client: Any, tmp_path: Path
) -> None:
    bs = kafka_client.bootstrap
    t = kafka_client.topic("scan", partitions=2)
    app = kafka_unique("scan")
    make = lambda: KafkaOutputOperator(bs, t, delivery="scan", key_column="k", **quick())  # noqa: E731
    window = lambda w, n: [("input", {"k": f"w{w}-{i}", "w": w}) for i in range(n)]  # noqa: E731
    h = harness(make(), app)
    h.run_window(window(0, 6), 0)
    saved = h.checkpoint()  # the state after window 0 (with the topic's ends)
    h.run_window(window(1, 6), 1)
    h.teardown()
    # window 2 was being written when the process died: 3 of its 8 records got out
    store = h.operator._store
    store.open()
    txn = store.begin(2)
    store.write(txn, pa.Table.from_pylist([r for _, r in window(2, 8)][:3]))
    store.close()
    # another writer of the topic (another partition) must not confuse the scan
    other = harness(make(), app, partition=1)
    other.run_window(window(2, 2), 2)
    other.teardown()

    # the restart: restored from window 0's state; windows 1 and 2 are replayed
    ctx = OperatorContext(name="out", application=app)
    again = OperatorHarness.restored(make(), saved, ctx)
    again.run_window(window(1, 6), 1)  # all there: nothing written
    again.run_window(window(2, 8), 2)  # 3 there: the other 5 written
    again.run_window(window(3, 1), 3)
    again.teardown()
    got = read_topic(bs, t, committed=False)
    mine = [r for r in got if dict(r.headers)["malhar.writer"] == f"{app}/out/0".encode()]
    assert Counter(r.key for r in mine) == Counter(
        f"w{w}-{i}".encode() for w, n in ((0, 6), (1, 6), (2, 8), (3, 1)) for i in range(n)
    )
    assert all(v == 1 for v in Counter(r.key for r in mine).values())


class _FlushTimesOut(KafkaOutputStore):
    """The first flush "times out" once every record is in the topic but before the
    producer has served a delivery report: the records were in flight when it gave up."""

    timed_out = False

    def _flush(self, txn: Any) -> None:
        if not self.timed_out:
            self.timed_out = True
            s = self.settings
            wait_until(
                lambda: len(read_topic(s.bootstrap_servers, s.topic, committed=False)) >= 50,
                timeout=60,
                what="the window's records in the topic",
            )
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        super()._flush(txn)


def test_scan_retry_after_a_flush_timeout_does_not_write_in_flight_records_again(
    kafka_client: Any,
) -> None:
    topic = kafka_client.topic("inflight")
    settings = KafkaOutputSettings().configure(
        bootstrap_servers=kafka_client.bootstrap, topic=topic, key_column="k", delivery="scan"
    )
    store = _FlushTimesOut(settings, WindowKey(kafka_unique("inflight"), "out", 0))
    committer = WindowCommitter(store, retry=RetryPolicy(3, 0.05))
    committer.open()
    result = committer.commit_window(0, _rows(50))
    assert store.timed_out and result.attempts == 2
    committer.close()
    records = read_topic(kafka_client.bootstrap, topic, committed=False)
    assert Counter(r.key for r in records) == Counter(f"r{i}".encode() for i in range(50))


# -- the Spark sink ----------------------------------------------------------------------------------
def test_spark_sink_exactly_once_reruns_and_error_topic(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    bs = kafka_client.bootstrap
    t = kafka_client.topic("sink", partitions=2)
    errors_topic = kafka_client.topic("sink-err")
    name = kafka_unique("sink")
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    spark.dataSource.register(KafkaSource)

    def batch_file(i: int, rows: list[dict[str, Any]]) -> None:
        tmp = source_dir / f".b{i}.json"
        tmp.write_text("\n".join(json.dumps(r) for r in rows))
        tmp.rename(source_dir / f"b{i}.json")

    def start() -> Any:
        df = spark.readStream.schema("k string, n double").json(str(source_dir))
        return (
            df.writeStream.format("malhar_kafka")
            .option("bootstrap_servers", bs)
            .option("topic", t)
            .option("name", name)
            .option("key_column", "k")
            .option("error_topic", errors_topic)
            .option("kafka.linger.ms", "2")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )

    batch_file(0, [{"k": f"a{i}", "n": i} for i in range(10)])
    query = start()
    try:
        query.processAllAvailable()
        batch_file(1, [{"k": f"b{i}", "n": i} for i in range(5)] + [{"k": "bad", "n": "NaN"}])
        query.processAllAvailable()
    finally:
        query.stop()
    # Spark re-runs a batch whose commit it did not record: the sink finds it committed
    last = max(int(p.name) for p in (tmp_path / "ckpt" / "commits").iterdir() if p.name.isdigit())
    for f in (tmp_path / "ckpt" / "commits").glob(f"*{last}*"):  # the file and its .crc
        f.unlink()
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    got = read_topic(bs, t)
    keys = Counter(r.key for r in got)
    assert keys == Counter(
        [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(5)]
    )
    assert {r.window for r in got} == {0, 1}
    (bad,) = read_topic(bs, errors_topic)
    assert bad.json()["k"] == "bad" and "JSON" in bad.json()["error"]


def test_an_unauthorized_producer_fails_naming_the_topic_and_the_acls(
    kafka_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the broker's SASL listener, as a user denied WRITE on the topic by an ACL."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    service = kafka_client.service
    topic = kafka_client.topic("denied")
    deny = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        f"User:{service.sasl_user}",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    for done in service.admin().create_acls([deny]).values():
        done.result()
    sasl = service.sasl_client_config()
    monkeypatch.setenv("MALHAR_TEST_SASL_PASSWORD", sasl.pop("sasl.password"))
    bootstrap = sasl.pop("bootstrap.servers")
    config = {**sasl, "sasl.password": "${env:MALHAR_TEST_SASL_PASSWORD}"}
    for delivery in ("exactly_once", "at_least_once"):
        op = KafkaOutputOperator(
            bootstrap, topic, delivery=delivery, producer_config=config, **quick()
        )
        h = harness(op, kafka_unique("auth"))
        with pytest.raises(KafkaAuthorizationError) as info:
            h.setup()
            h.run_window([("input", {"a": 1})], 0)
        h.teardown()
        text = str(info.value)
        assert f"WRITE on topic '{topic}'" in text and "check the ACLs" in text, text
        assert service.sasl_password not in text
    # the same user writes where no ACL denies it: the failure was the ACL's
    other = kafka_client.topic("allowed")
    h = harness(KafkaOutputOperator(bootstrap, other, producer_config=config), kafka_unique("ok"))
    h.run_window([("input", {"a": 1})], 0)
    h.teardown()
    assert [r.json() for r in read_topic(kafka_client.bootstrap, other)] == [{"a": 1}]
