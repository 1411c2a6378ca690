"""A running Kafka input changes its reader count (issue 18 §4): its read positions move to
the new readers at a window boundary, asked for by count or by the topics gaining
partitions (``partitions_per_reader``); every record is read exactly once."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, launch
from malhar.engine import generations
from malhar.engine.repartition import partitioner_of
from malhar.errors import ConfigError
from malhar.io.kafka import KafkaInputOperator
from malhar.io.kafka.assignment import mapping
from malhar.io.kafka.readers import deal, readers_for
from malhar.partitioning import Partition, PartitioningContext, StatelessPartitioner
from malhar.stats import OperatorStats, WindowStats
from malhar.testing.line_input import LineFileInput
from malhar.testing.operators import Collector, collected
from tests.drivers import kill_when_paused, start_driver
from tests.io.conftest import kafka_op_args, kafka_unique
from tests.io.test_kafka_input import by_key, rows_of, run_until

TPS = [("a", p) for p in range(5)] + [("b", p) for p in range(2)]


def _reader(**props: Any) -> KafkaInputOperator:
    return KafkaInputOperator(bootstrap_servers="localhost:1", topics=["a", "b"], **props)


def _old_readers(count: int) -> list[KafkaInputOperator]:
    """``count`` readers after a few windows: positions, group commits, event-time marks."""
    readers = []
    for index, mine in mapping(TPS, count).items():
        r = _reader()
        r._next = {tp: 100 + 10 * tp[1] for tp in mine}
        r._group_committed = {tp: 90 for tp in mine}
        r._partitions = count
        r._released, r._unreleased = 6 + index, [7 + index]
        for tp in mine:
            r._event_marks.observe(tp, 1_000 + tp[1], 3)
        r._event_marks.sent = 900 + index
        readers.append(r)
    return readers


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 7)])
def test_deal_moves_every_position_to_its_new_reader(before: int, after: int) -> None:
    old = _old_readers(before)
    new = deal(old, after)
    owners = mapping(TPS, after)
    assert len(new) == after
    for index, reader in enumerate(new):
        assert sorted(reader._next) == owners[index]  # the reader that will read it
        assert reader._released_position == reader._next  # up to W is durable downstream
        assert reader._group_committed == dict.fromkeys(owners[index], 90)
        assert reader._partitions == after
        assert reader._unreleased == [] and reader._released == 7 + before - 1
        assert sorted(reader._event_marks.highest) == sorted(f"{t}/{p}" for t, p in owners[index])
        assert reader._event_marks.sent == 900  # the slowest old reader's
    pooled = {tp: o for r in new for tp, o in r._next.items()}
    assert pooled == {tp: o for r in old for tp, o in r._next.items()}  # none lost or doubled


def test_the_input_is_its_own_partitioner_by_count_or_by_its_topics() -> None:
    op = _reader(partitions_per_reader=2)
    existing = [Partition(r) for r in _old_readers(2)]
    ctx = PartitioningContext("kin", requested=3)
    assert len(op.define_partitions(existing, ctx)) == 3
    assert op.define_partitions(existing, PartitioningContext("kin", requested=2)) == existing

    def stats(kafka_partitions: int, partitions: int) -> OperatorStats:
        w = WindowStats(window=1, partition=0, metrics={"kafka_partitions": kafka_partitions})
        return OperatorStats("kin", partitions, [w])

    assert not op.process_stats(stats(4, 2)).repartition_required  # 4 at 2 per reader
    response = op.process_stats(stats(7, 2))  # the topics gained 3 partitions
    assert response.repartition_required and "4 readers" in response.reason
    new = op.define_partitions(existing, PartitioningContext("kin", stats(7, 2)))
    assert len(new) == readers_for(7, 2) == 4
    assert not op.process_stats(stats(7, 4)).repartition_required  # the new count: done
    assert not _reader().process_stats(stats(7, 2)).repartition_required  # fixed count
    with pytest.raises(ConfigError, match="ask for a reader count"):
        _reader().define_partitions(existing, PartitioningContext("kin"))


def test_inputs_that_cannot_move_their_positions_keep_their_count(tmp_path: Path) -> None:
    dag = DAG("inputs")
    dag.add_operator("lines", LineFileInput([str(tmp_path / "x.txt")]))
    dag.add_operator("kin", _reader())
    with pytest.raises(ConfigError, match="cannot move its read positions"):
        partitioner_of(dag, "lines", 2)
    with pytest.raises(ConfigError, match="cannot move its read positions"):
        partitioner_of(dag, "kin", StatelessPartitioner(2))  # fresh copies would re-read
    assert partitioner_of(dag, "kin", 3) is dag.operators["kin"].operator


def _app(kafka_client: Any, topic: str, readers: int, **props: Any) -> DAG:
    dag = DAG(kafka_unique("kin-rp"))
    src = dag.add_operator(
        "src",
        KafkaInputOperator(**kafka_op_args(kafka_client, topic, **props)),
        PARTITIONS=readers,
    )
    dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
    return dag


def _got(checkpoint: str) -> list[dict[str, Any]]:
    return rows_of(collected(checkpoint, "out"))


@pytest.mark.integration
@pytest.mark.slow
def test_a_running_kafka_input_goes_from_one_to_three_to_two_readers_exactly(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("rp", partitions=4)
    sent = kafka_client.produce_numbers(topic, 4, 40)
    checkpoint = str(tmp_path)
    app = launch(_app(kafka_client, topic, 1), spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        run_until(app, lambda: len(_got(checkpoint)) >= 40, "the first records")
        assert app.repartition({"src": 3}).operators["src"].partitions == 3
        sent += kafka_client.produce_numbers(topic, 4, 40, start=40)
        run_until(app, lambda: len(_got(checkpoint)) >= 80, "records read by 3 readers")
        assert app.repartition({"src": 2}).operators["src"].partitions == 2
        sent += kafka_client.produce_numbers(topic, 4, 40, start=80)
        run_until(app, lambda: len(_got(checkpoint)) >= 120, "records read by 2 readers")
    finally:
        app.stop()
    assert by_key(_got(checkpoint)) == by_key(sent)  # each record once


@pytest.mark.integration
@pytest.mark.slow
def test_readers_follow_the_topic_one_to_one_as_it_gains_partitions(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("rp-grow", partitions=1)
    sent = kafka_client.produce_numbers(topic, 1, 10)
    dag = _app(kafka_client, topic, 1, partitions_per_reader=1, partition_discovery_ms=200)
    checkpoint = str(tmp_path)
    app = launch(dag, spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        run_until(app, lambda: len(_got(checkpoint)) >= 10, "the first records")
        kafka_client.service.add_partitions(topic, 3)
        kafka_client.close()  # a producer that knows the new partitions
        sent += kafka_client.produce_numbers(topic, 3, 30, start=10)
        run_until(
            app,
            lambda: any(g.operators["src"].partitions == 3 for g in app.repartitions),
            "three readers for three Kafka partitions",
        )
        sent += kafka_client.produce_numbers(topic, 3, 30, start=40)
        run_until(app, lambda: len(_got(checkpoint)) >= 70, "every record")
    finally:
        app.stop()
    assert by_key(_got(checkpoint)) == by_key(sent)


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_a_sigkill_during_a_kafka_input_repartitioning_reads_every_record_once(
    kafka_client: Any, tmp_path: Path
) -> None:
    """Killed before and after the commit point of a 2 -> 3 reader repartitioning, records
    arriving meanwhile: the next start finds one partitioning, and every record arrives once."""
    topic = kafka_client.topic("rp-crash", partitions=4)
    group = kafka_unique("g")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    sent = kafka_client.produce_numbers(topic, 4, 40)

    def start(total: int, *pause: str) -> subprocess.Popen:
        args = [str(checkpoint), kafka_client.bootstrap, topic, group, str(total), *pause]
        return start_driver("tests.io.kafka_repartition_app", *args, log=tmp_path / "driver.log")

    for pause in ("snapshots", "committed"):
        kill_when_paused(start(0, pause), checkpoint, pause)
        parts = {op: g.partitions for op, g in generations.load(str(checkpoint)).operators.items()}
        assert parts == ({} if pause == "snapshots" else {"src": 3})  # never a mix
        sent += kafka_client.produce_numbers(topic, 4, 20, start=len(sent))
    proc = start(len(sent))
    assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    assert by_key(_got(str(checkpoint))) == by_key(sent)
