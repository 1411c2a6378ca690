"""The Kafka input's event-time watermarks (issue 14 §4): per Kafka partition, bounded
out-of-orderness, held back by a silent partition until it is idle, the same on replay; and
through the engine into a keyed windowed operator whose ON_TIME panes they fire."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, run
from malhar.io.kafka import KafkaConfigError, KafkaJsonInputOperator, KafkaTextInputOperator
from malhar.window import KeyedWindowedOperator, TimeWindows, Watermark
from malhar.window.accumulation import Count
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.conftest import kafka_op_args as args
from tests.window.ops import PaneRecorder, on_time, recorded

pytestmark = pytest.mark.integration


def at(partition: int, ms: int, value: str = "x") -> dict[str, Any]:
    return {"partition": partition, "value": value.encode(), "timestamp_ms": ms}


def marks(h: Any) -> list[int]:
    return [c.payload.timestamp for c in h.sink("output").controls]


def test_watermark_per_kafka_partition_held_back_then_idle_and_replayed(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("evt", partitions=2)
    op = KafkaTextInputOperator(
        **args(kafka_client, topic),
        event_time="timestamp",
        max_out_of_orderness_ms=100,
        watermark_idle_windows=3,
    )
    h = kafka_harness(op, str(tmp_path))
    kafka_client.produce(topic, [at(0, 2_000), at(0, 1_000)])
    kafka_run_window(h, 0)
    assert marks(h) == []  # partition 1 has sent nothing: it holds the watermark back
    snapshot = pickle.dumps(op)

    kafka_client.produce(topic, [at(1, 1_500)])
    kafka_run_window(h, 1)
    assert marks(h) == [1_400]  # min(2000, 1500) - 100
    kafka_client.produce(topic, [at(0, 5_000)])
    kafka_run_window(h, 2)
    # partition 1 still counts: no advance, the watermark sent again (a reader held back
    # by a quiet partition is heard from every window, never taken for an idle one)
    assert marks(h) == [1_400, 1_400]
    kafka_run_window(h, 3)
    kafka_run_window(h, 4)  # partition 1 silent since window 1: idle from window 4
    assert marks(h) == [1_400, 1_400, 1_400, 4_900]
    kafka_client.produce(topic, [at(1, 3_000)])  # it speaks again, behind: no regression
    kafka_run_window(h, 5)
    assert marks(h) == [1_400, 1_400, 1_400, 4_900, 4_900]
    h.teardown()

    again = kafka_harness(pickle.loads(snapshot), str(tmp_path))
    for w in range(1, 6):
        kafka_run_window(again, w)
    again.teardown()
    assert marks(again) == marks(h)  # a replay sends the same watermarks


def test_json_field_and_bad_event_time_settings(kafka_client: Any, tmp_path: Path) -> None:
    topic = kafka_client.topic("evj", partitions=1)
    docs = [{"ts": 700, "u": "a"}, {"ts": 900, "u": "b"}]
    kafka_client.produce(topic, [{"partition": 0, "value": json.dumps(d).encode()} for d in docs])
    op = KafkaJsonInputOperator(**args(kafka_client, topic), event_time="value.ts")
    h = kafka_harness(op, str(tmp_path / "json"))
    kafka_run_window(h, 0)
    h.teardown()
    assert h.sink("output").controls[-1].payload == Watermark(900)

    bad = KafkaTextInputOperator(**args(kafka_client, topic), event_time="ts")
    with pytest.raises(KafkaConfigError, match="event_time='ts' is not a column"):
        kafka_harness(bad, str(tmp_path / "bad")).setup()
    with pytest.raises(Exception, match="event_time"):
        KafkaTextInputOperator(event_time=42)


@pytest.mark.slow
def test_kafka_watermarks_fire_on_time_panes_through_the_engine(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("clicks", partitions=2)
    events = [(p, u, ts) for p in (0, 1) for u, ts in [("a", 10), ("b", 999), ("a", 1_500)]]
    events += [(0, "a", 1_200), (1, "b", 300)]  # out of order within a partition
    closing = [(p, "z", 100_000) for p in (0, 1)]  # moves both partitions past the windows
    kafka_client.produce(
        topic,
        [
            {"partition": p, "value": json.dumps({"user": u, "ts": ts}).encode()}
            for p, u, ts in events + closing
        ],
    )
    dag = DAG("kafka-event-time")
    src = dag.add_operator(
        "src",
        KafkaJsonInputOperator(**args(kafka_client, topic), event_time="value.ts"),
        PARTITIONS=2,
    )
    counter = KeyedWindowedOperator(
        Count(),
        TimeWindows(1_000),
        key=lambda r: r["value"]["user"],
        timestamp=lambda r: r["value"]["ts"],
    )
    counts = dag.add_operator("counts", counter, PARTITIONS=2)
    counts.input.set_attribute("STREAM_CODEC", counter.key_codec())
    dag.add_stream("clicks", src.output, counts.input)
    dag.add_stream("panes", counts.output, dag.add_operator("out", PaneRecorder()).input)
    checkpoint = str(tmp_path / "ckpt")
    run(dag, windows=4, spark=spark, checkpoint=checkpoint, window_ms=100)

    expected = Counter((u, ts // 1_000 * 1_000) for _, u, ts in events)
    # the closing records' window [100000, 101000) is not complete: no ON_TIME pane
    assert on_time(recorded(checkpoint, "out")) == dict(expected)
