"""The Kafka Spark sink when a partly committed micro-batch runs again split otherwise.

A driver that dies while the tasks of batch ``N`` commit leaves some partitions' Kafka
transactions of ``N`` committed (visible) and ``N`` missing from Spark's commit log; the
restarted query runs ``N`` again, and its source may split it into other partitions. A
partition that committed ``N`` and does not run again then holds rows another partition
of the re-run holds too: the sink must stage the re-run's rows and refuse the batch rather
than write them twice, and the batch must run again, exactly, once it gets its earlier
partitions (the driver then writes the staged rows in their partitions' transactions).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar.io.kafka import KafkaSource
from malhar.io.kafka.output_settings import STAGING_FOLDER
from tests.io.conftest import kafka_unique
from tests.io.split_source import EXACT, file_matches, kafka_committed, split_query
from tests.io.test_kafka_output import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class _Query:
    """Runs of the split source into the Kafka sink, on one topic, name and checkpoint."""

    def __init__(self, spark: Any, kafka_client: Any, tmp_path: Path) -> None:
        self.bootstrap = kafka_client.bootstrap
        self.topic = kafka_client.topic("rerun")
        self.name = kafka_unique("rerun")
        self.ckpt = tmp_path / "ckpt"
        spark.dataSource.register(KafkaSource)

        def sink(writer: Any) -> Any:
            return (
                writer.format("malhar_kafka")
                .option("bootstrap_servers", self.bootstrap)
                .option("topic", self.topic)
                .option("name", self.name)
            )

        self.run = split_query(spark, sink, self.ckpt)

    def committed(self, partition: int, batch: int) -> str:
        """The condition: ``partition`` committed ``batch`` (its group's offset)."""
        group = f"malhar-out.{self.name}.sink.{partition}"
        return kafka_committed(self.bootstrap, group, self.topic, batch + 1)

    def staging(self, partition: int) -> Path:
        return self.ckpt / STAGING_FOLDER / self.name / "sink" / str(partition)

    def ids(self) -> Counter:
        """How often each id is in the topic (read_committed)."""
        return Counter(r.json()["id"] for r in read_topic(self.bootstrap, self.topic))

    def part_commit_batch_1(self, committed: int) -> Counter:
        """Batch 1 dies after partition ``committed`` committed it and before the other did;
        batch 0 is committed. Returns the topic's ids then."""
        other = 1 - committed
        failed = self.run(parts=2, batches=2, fail=f"1:{other}:{self.committed(committed, 1)}")
        assert failed is not None and "injected" in str(failed), failed
        ids = self.ids()
        batch_1 = {100 + i for i in range(6) if i % 2 == committed}
        assert ids == Counter([*range(6), *batch_1]), ids
        return ids


def test_a_partly_committed_batch_split_otherwise_is_refused_then_runs_exactly(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    q = _Query(spark, kafka_client, tmp_path)
    before = q.part_commit_batch_1(committed=1)

    # the restarted source splits batch 1 into one partition: ids 101, 103, 105 would be
    # written twice (partition 1 committed them, and partition 0 now has all six)
    failed = q.run(parts=1, batches=3)
    assert failed is not None and "did not re-run with the same rows" in str(failed), failed
    assert "WindowContentMismatchError" in str(failed)
    assert q.ids() == before  # nothing written
    assert list(q.staging(0).glob("staged-*.arrow"))  # partition 0 staged, not written

    # with its earlier partitions the batch runs again: partition 1 verified, partition 0
    # staged and written by the driver in its transaction
    assert q.run(parts=2, batches=3) is None
    assert q.ids() == Counter(EXACT)
    assert not list(q.staging(0).glob("staged-*.arrow"))  # applied, then dropped


def test_a_partly_committed_batch_whose_rows_moved_is_refused_then_runs_exactly(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    q = _Query(spark, kafka_client, tmp_path)
    before = q.part_commit_batch_1(committed=0)

    # the re-run swaps the rows of the two partitions: partition 0 committed other rows; it
    # reads (and fails) once partition 1 has staged its rows of the partly committed batch
    staged = file_matches(q.staging(1), f"staged-{1:020d}-*")
    failed = q.run(parts=2, batches=3, shift=1, wait=f"1:0:{staged}")
    assert failed is not None and "WindowContentMismatchError" in str(failed), failed
    assert q.ids() == before

    assert q.run(parts=2, batches=3) is None
    assert q.ids() == Counter(EXACT)


def test_committed_partitions_waits_out_a_transaction_still_open(kafka_client: Any) -> None:
    """A task lists the commit groups while another task of the same batch is between
    sending its offsets and committing: the broker answers UNSTABLE_OFFSET_COMMIT, which is
    asked again (and, past the timeout, retried by the committer), never a failure."""
    import pyarrow as pa
    from confluent_kafka import KafkaError, KafkaException

    from malhar.io.base.output import CommitMark, WindowKey
    from malhar.io.kafka.commit_groups import admin_client, committed_partitions
    from malhar.io.kafka.output_settings import KafkaSinkSettings
    from malhar.io.kafka.producer import KafkaOutputStore
    from malhar.io.kafka.producer_errors import is_transient

    topic = kafka_client.topic("unstable")
    name = kafka_unique("unstable")
    settings = KafkaSinkSettings().from_options(
        {"bootstrap_servers": kafka_client.bootstrap, "topic": topic, "name": name}
    )
    store = KafkaOutputStore(settings, settings.key(0))
    store.open()
    try:
        txn = store.begin(0)
        store.write(txn, pa.table({"id": [1]}))
        store.store_committed(txn, CommitMark(0, "d", "run-a"))  # offsets in the open txn
        admin = admin_client(settings.admin_settings())
        prefix = settings.commit_groups_of(WindowKey(name, "sink", 0))
        with pytest.raises(KafkaException) as raised:
            committed_partitions(admin, prefix, topic, 0, timeout=0.5)
        assert raised.value.args[0].code() == KafkaError.UNSTABLE_OFFSET_COMMIT
        assert is_transient(raised.value)  # the committer retries it
        store.commit(txn)
        found = committed_partitions(admin, prefix, topic, 0, timeout=10)
        assert {p: m.run for p, m in found.items()} == {0: "run-a"}
        assert committed_partitions(admin, prefix, topic, 1, timeout=10) == {}
    finally:
        store.close()
