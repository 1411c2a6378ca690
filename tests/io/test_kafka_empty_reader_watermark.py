"""A Kafka input reader that owns no Kafka partition (more readers than partitions), with
``event_time``: it declares itself idle (``WatermarkIdle``) at the end of every window, so
the windowed operator downstream leaves it out of its minimum at once (no
``idle_timeout_windows`` needed), and it holds the watermark again, without moving it back,
once the topic grows a partition for it.

It does not send a watermark that leaves the minimum alone (``MAX_TIMESTAMP``): the
operator downstream keeps the largest watermark of each sender, so that one would stay for
good and the partition the reader gains later would never hold the watermark back (its
records late):
``test_an_empty_reader_is_idle_and_holds_the_watermark_once_it_reads_a_partition`` checks
that.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from malhar.control import ControlSender, DeliveryType
from malhar.io.kafka import KafkaTextInputOperator
from malhar.testing import OperatorHarness
from malhar.window import KeyedWindowedOperator, TimeWindows, Timing, Watermark, WatermarkIdle
from malhar.window.accumulation import Count
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.conftest import kafka_op_args as args

pytestmark = pytest.mark.integration


def at(partition: int, ms: int) -> dict[str, Any]:
    return {"partition": partition, "value": b"x", "timestamp_ms": ms}


def test_a_reader_with_no_kafka_partition_declares_itself_idle_every_window(
    kafka_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka_client.topic("evnone", partitions=1)
    kafka_client.produce(topic, [at(0, 1_000)])
    op = KafkaTextInputOperator(**args(kafka_client, topic), event_time="timestamp")
    h = kafka_harness(op, str(tmp_path), partition=1, partitions=2)  # partition 0 is reader 0's
    with caplog.at_level(logging.INFO, logger="malhar.io.kafka"):
        for w in range(3):
            assert kafka_run_window(h, w) == []
    h.teardown()
    assert [c.payload for c in h.sink("output").controls] == [WatermarkIdle()] * 3
    said = [r.getMessage() for r in caplog.records if "declares itself idle" in r.getMessage()]
    assert len(said) == 1 and "reads none of the 1 Kafka partitions" in said[0], said

    # a reader that reads a partition, and one without event_time, say nothing of it
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="malhar.io.kafka"):
        for index, event_time in ((0, "timestamp"), (1, None)):
            other = KafkaTextInputOperator(**args(kafka_client, topic), event_time=event_time)
            hh = kafka_harness(other, str(tmp_path / f"o{index}"), partition=index, partitions=2)
            hh.setup()
            hh.teardown()
    assert not [r for r in caplog.records if "declares itself idle" in r.getMessage()]


def test_an_empty_reader_is_idle_and_holds_the_watermark_once_it_reads_a_partition(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("evgrow", partitions=1)
    readers = [
        KafkaTextInputOperator(
            **args(kafka_client, topic),
            event_time="timestamp",
            partition_discovery_ms=1,  # every window looks for new partitions
            max_window_ms=30_000,  # a window waits for the new partition's first fetch
        )
        for _ in range(2)
    ]
    ups = [
        kafka_harness(op, str(tmp_path / "in"), partition=i, partitions=2)
        for i, op in enumerate(readers)
    ]
    counter = KeyedWindowedOperator(
        Count(),
        TimeWindows(1_000),
        key=lambda r: r["value"],
        timestamp=lambda r: r["timestamp"],
    )  # no idle_timeout_windows: the empty reader's declaration lets it go
    down = OperatorHarness(counter)
    senders = [ControlSender("events", "kin", i, 2) for i in range(2)]
    seen = [0, 0]  # control tuples of each reader already passed on

    def window(w: int, records: list[dict[str, Any]]) -> int | None:
        """Window ``w`` of both readers, then of the windowed operator they feed (as the
        engine delivers them: tuples, then the END_WINDOW watermarks with their sender)."""
        if records:
            kafka_client.produce(topic, records)
        down.begin_window(w)
        for i, up in enumerate(ups):
            for row in kafka_run_window(up, w):
                down.put("input", row)
            controls = up.sink("output").controls
            for ctl in controls[seen[i] :]:
                down.put_control("input", ctl.payload, DeliveryType.END_WINDOW, senders[i])
            seen[i] = len(controls)
        down.end_window()
        return counter.watermark

    # reader 0 reads partition 0 and advances every window; reader 1 reads nothing: idle
    assert window(0, [at(0, 1_500)]) == 1_500
    assert window(1, [at(0, 2_500)]) == 2_500
    assert window(2, [at(0, 3_500)]) == 3_500
    assert [c.payload for c in ups[1].sink("output").controls] == [WatermarkIdle()] * 3

    kafka_client.service.add_partitions(topic, 2)  # partition 1 goes to reader 1
    kafka_client.close()  # a new producer: the old one's metadata has 1 partition
    # reader 1 reads partition 1 (from its start) and holds the watermark again: min, not 4500
    assert window(3, [at(0, 4_500), at(1, 3_700)]) == 3_700
    assert window(4, [at(0, 5_500), at(1, 3_900)]) == 3_900
    assert window(5, [at(0, 6_500), at(1, 3_200)]) == 3_900  # behind: no regression
    assert window(6, [at(0, 7_500), at(1, 6_000)]) == 6_000
    for up in ups:
        up.teardown()
    down.teardown()

    assert [c.payload for c in ups[1].sink("output").controls][3:] == [
        Watermark(3_700),
        Watermark(3_900),
        Watermark(3_900),  # 3200 arrived: behind, its watermark sent again, not moved back
        Watermark(6_000),
    ]
    # the records of partition 1 ahead of the watermark were on time: none late, and the
    # window [3000, 4000) fired ON_TIME with 3500 (partition 0), 3700 and 3900 (partition 1)
    assert counter.late_count == 1  # 3200 only, sent after the watermark passed 3900
    on_time = {
        (t.window.start, t.value)
        for t in down.sink("output").tuples
        if t.pane.timing == Timing.ON_TIME
    }
    assert (3_000, 3) in on_time, sorted(on_time)
