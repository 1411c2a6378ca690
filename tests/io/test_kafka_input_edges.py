"""Edge cases of the Kafka input found in review: a changed topic list under a checkpoint,
bad event times, event-time settings that cannot work, offsets for unknown partitions,
JSON that is not RFC 8259 JSON, and the watermark of a replayed window.

The tests marked ``integration`` need the session's Kafka broker (``tests/io/conftest.py``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from malhar.io.kafka import KafkaInputOperator, KafkaJsonInputOperator, KafkaTextInputOperator
from malhar.io.kafka.deserializers import JsonDeserializer, parse_json
from malhar.io.kafka.errors import KafkaConfigError
from malhar.io.kafka.settings import KafkaSettings
from tests.io.conftest import kafka_harness, kafka_key, kafka_run_window
from tests.io.conftest import kafka_op_args as args

integration = pytest.mark.integration


def _marks(h: Any) -> list[int]:
    return [c.payload.timestamp for c in h.sink("output").controls]


def _errors(h: Any) -> list[dict[str, Any]]:
    return [row for rows in h.sink("error").per_window.values() for row in rows]


# -- 1. a topic added under a checkpoint ---------------------------------------------------------
def _first_run(kafka_client: Any, topic: str, checkpoint: str, group: str) -> list[bytes]:
    """Two readers read ``topic`` for two windows; their snapshots."""
    snaps = []
    for i in range(2):
        op = KafkaInputOperator(**{**args(kafka_client, topic), "group_id": group})
        h = kafka_harness(op, checkpoint, partition=i, partitions=2)
        kafka_run_window(h, 0)
        kafka_run_window(h, 1)
        snaps.append(pickle.dumps(op))
        h.teardown()
    return snaps


@integration
def test_a_topic_sorting_first_added_on_restart_is_refused(
    kafka_client: Any, tmp_path: Path
) -> None:
    existing = kafka_client.topic("zzb", partitions=2)
    added = kafka_client.topic("aaa", partitions=2)
    kafka_client.produce_numbers(existing, 2, 10)
    snaps = _first_run(kafka_client, existing, str(tmp_path), kafka_client.topic("g"))
    for i in range(2):
        op = pickle.loads(snaps[i])
        op.topics = f"{added},{existing}"
        h = kafka_harness(op, str(tmp_path), partition=i, partitions=2)
        with pytest.raises(KafkaConfigError) as err:
            h.setup()  # before: the partitions moved readers and were read again from 0
        text = str(err.value)
        assert existing in text and added in text and "sorts after" in text
        assert "APPLICATION_OR_EARLIEST" in text


@integration
def test_a_topic_sorting_last_added_on_restart_moves_nothing(
    kafka_client: Any, tmp_path: Path
) -> None:
    existing = kafka_client.topic("aab", partitions=2)
    added = kafka_client.topic("zzz", partitions=2)
    sent = kafka_client.produce_numbers(existing, 2, 10)
    kafka_client.produce_numbers(added, 2, 4)
    snaps = _first_run(kafka_client, existing, str(tmp_path), kafka_client.topic("g"))
    again = []
    for i in range(2):
        op = pickle.loads(snaps[i])
        op.topics = [existing, added]
        h = kafka_harness(op, str(tmp_path), partition=i, partitions=2)
        again += kafka_run_window(h, 2) + kafka_run_window(h, 3)
        h.teardown()
    assert len(sent) == 10
    assert [r for r in again if r["topic"] == existing] == []  # nothing read twice
    assert sorted(kafka_key(r)[:2] for r in again) == sorted(
        [(added, 0), (added, 0), (added, 1), (added, 1)]
    )


# -- 3. a bad event time goes to the error port -------------------------------------------------
@integration
def test_records_without_a_valid_event_time_go_to_the_error_port(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("ev", partitions=1)
    values = [b'{"ts": 5}', b'"just a string"', b'{"ts": "2024-01-01"}', b"[1]", b'{"ts": 9}']
    kafka_client.produce(topic, [{"partition": 0, "value": v} for v in values])
    a = args(kafka_client, topic)
    runs = []
    for _ in range(2):  # the first run, then a replay of window 0 from the window log
        h = kafka_harness(KafkaJsonInputOperator(**a, event_time="value.ts"), str(tmp_path))
        rows = kafka_run_window(h, 0)
        runs.append(([r["offset"] for r in rows], _errors(h), _marks(h)))
        h.teardown()
    assert runs[0] == runs[1]
    offsets, errors, marks = runs[0]
    assert offsets == [0, 4]
    assert [(e["topic"], e["partition"], e["offset"]) for e in errors] == [
        (topic, 0, 1),
        (topic, 0, 2),
        (topic, 0, 3),
    ]
    assert "str" in errors[0]["error"] and "not a JSON object" in errors[0]["error"]
    assert "'2024-01-01' is not an event time" in errors[1]["error"]
    assert errors[1]["value"] == values[2]
    assert marks == [9]


def _value_as_millis(row: dict[str, Any]) -> int:
    return int(row["value"])


@integration
def test_a_callable_event_time_failing_on_a_record_sends_it_to_the_error_port(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("evc", partitions=1)
    kafka_client.produce(topic, [{"partition": 0, "value": v} for v in (b"5", b"x", b"7")])
    op = KafkaTextInputOperator(**args(kafka_client, topic), event_time=_value_as_millis)
    h = kafka_harness(op, str(tmp_path))
    rows = kafka_run_window(h, 0)
    h.teardown()
    assert [r["value"] for r in rows] == ["5", "7"]
    assert [(e["offset"], e["value"]) for e in _errors(h)] == [(1, b"x")]
    assert _marks(h) == [7]


# -- 4. event-time settings that cannot work are refused at setup -------------------------------
@pytest.mark.parametrize(
    ("cls", "spec", "expected"),
    [
        (KafkaJsonInputOperator, "ts", "'value.ts'"),
        (KafkaJsonInputOperator, "key.ts", "not a column"),
        (KafkaJsonInputOperator, "topic", "string"),
        (KafkaInputOperator, "value", "binary"),
        (KafkaTextInputOperator, "value", "string"),
        (KafkaTextInputOperator, "value.ts", "not a column"),
    ],
)
def test_event_time_settings_that_cannot_work_are_refused_at_setup(
    cls: Any, spec: str, expected: str, tmp_path: Path
) -> None:
    op = cls(bootstrap_servers="localhost:1", topics="t", event_time=spec, retry_attempts=1)
    h = kafka_harness(op, str(tmp_path))
    with pytest.raises(KafkaConfigError) as err:
        h.setup()  # before: a KeyError or TypeError in every window
    text = str(err.value)
    assert f"event_time={spec!r}" in text and expected in text and "timestamp" in text


# -- 5. offsets for partitions that are not configured ------------------------------------------
def test_initial_offsets_naming_unknown_partitions_are_refused() -> None:
    settings = KafkaSettings().configure(
        initial_offset=json.dumps({"ordrs": {"0": 8}, "orders": {"2": 1}})
    )
    with pytest.raises(KafkaConfigError) as err:
        settings.check_start_offsets([("orders", 0), ("orders", 1)], "here")
    text = str(err.value)
    assert "ordrs[0] (no such configured topic)" in text
    assert "orders[2] (no such partition)" in text
    assert "'orders' (partitions 0-1)" in text
    fine = KafkaSettings().configure(initial_offset=json.dumps({"orders": {"1": 3}}))
    fine.check_start_offsets([("orders", 0), ("orders", 1)], "here")


@integration
def test_the_operator_refuses_initial_offsets_for_an_unknown_topic(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("io", partitions=1)
    offsets = json.dumps({topic + "x": {"0": 8}})
    op = KafkaInputOperator(**{**args(kafka_client, topic), "initial_offset": offsets})
    h = kafka_harness(op, str(tmp_path))
    with pytest.raises(KafkaConfigError, match="no such configured topic"):
        h.setup()  # before: ignored, the partition read from its earliest offset


@integration
def test_the_data_source_refuses_starting_offsets_for_an_unknown_topic(kafka_client: Any) -> None:
    from malhar.io.kafka.settings import KafkaSourceSettings
    from malhar.io.kafka.spark_source import KafkaStreamReader

    topic = kafka_client.topic("sso", partitions=1)
    settings = KafkaSourceSettings.from_options(
        {
            "bootstrap.servers": kafka_client.bootstrap,
            "topics": topic,
            "startingOffsets": json.dumps({topic.upper(): {"0": 8}}),
        }
    )
    reader = KafkaStreamReader(settings)
    try:
        with pytest.raises(KafkaConfigError, match=r"startingOffsets.*no such configured topic"):
            reader.initialOffset()
    finally:
        reader.stop()


# -- 7. JSON is RFC 8259 JSON in UTF-8 ----------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('{"a": 1}'.encode("utf-16"), "not valid UTF-8"),
        ('{"a": 1}'.encode("utf-16-le"), "not valid JSON"),
        (b'"\xed\xa0\x80"', "not valid UTF-8"),  # a lone surrogate
        (b"NaN", "NaN is not a JSON value"),
        (b'{"x": [Infinity]}', "Infinity is not a JSON value"),
        (b'{"x": -Infinity}', "-Infinity is not a JSON value"),
        (b"[1e999]", "out of the range"),
    ],
)
def test_json_that_is_not_utf8_or_has_non_finite_numbers_is_an_error(
    value: bytes, reason: str
) -> None:
    doc, error = parse_json(value)
    assert doc is None and error is not None and reason in error
    column, errors = JsonDeserializer().decode([b'{"ok": 1.5e3}', value])
    assert column[0] == {"ok": 1500.0} and list(errors) == [1]


# -- 2. a replayed window sends the watermark it sent ------------------------------------------
@integration
def test_a_replayed_window_sends_its_watermark_after_the_topic_gained_partitions(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("evg", partitions=1)
    op = KafkaTextInputOperator(**args(kafka_client, topic), event_time="timestamp")
    h = kafka_harness(op, str(tmp_path))
    h.setup()
    snapshot = pickle.dumps(op)  # the state before window 0
    kafka_client.produce(topic, [{"partition": 0, "value": b"x", "timestamp_ms": 1_000}])
    kafka_run_window(h, 0)
    h.teardown()
    assert _marks(h) == [1_000]
    kafka_client.service.add_partitions(topic, 2)
    again = kafka_harness(pickle.loads(snapshot), str(tmp_path))
    rows = kafka_run_window(again, 0)  # a replay of window 0: now two partitions
    again.teardown()
    assert len(rows) == 1
    assert _marks(again) == [1_000]  # before: none (the new partition held it back)
    assert again.operator._event_marks.sent == 1_000
