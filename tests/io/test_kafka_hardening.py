"""Issue 12, Kafka connector: poison-pill JSON (point 4), secrets kept out of the plan and
the snapshots (point 8), unknown ``malhar_kafka`` options (point 12). Real broker, real Spark."""

from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from malhar import DAG
from malhar.errors import ConfigError, MalharError
from malhar.io.kafka import KafkaInputOperator, KafkaJsonInputOperator, KafkaSource
from malhar.testing.operators import Collector
from tests.io.conftest import (
    kafka_harness,
    kafka_key,
    kafka_op_args,
    kafka_run_window,
    kafka_unique,
)

pytestmark = pytest.mark.integration

SECRET = "pw-4f1d9c-never-in-clear"
#: far deeper than Python's recursion limit: json.loads raises RecursionError on it
DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 3_000 + b"1" + b"}" * 3_000


# -- point 4: a deeply nested JSON record is a bad record, not a stuck application ---------------
def test_deeply_nested_json_goes_to_the_error_port_and_replays_the_same(
    kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("deep", partitions=1)
    nested_ok = b"[" * 40 + b"1" + b"]" * 40
    values = [b'{"a": 1}', DEEP_ARRAY, b"[1, 2]", DEEP_OBJECT, nested_ok, b'"[[[[ in a string"']
    kafka_client.produce(topic, [{"value": v} for v in values])
    checkpoint = str(tmp_path)
    args = kafka_op_args(kafka_client, topic)
    h = kafka_harness(KafkaJsonInputOperator(**args), checkpoint)
    first = kafka_run_window(h, 0)
    errors = list(h.sink("error").tuples)
    h.teardown()

    assert [r["offset"] for r in first] == [0, 2, 4, 5]
    assert first[0]["value"] == {"a": 1} and first[3]["value"] == "[[[[ in a string"
    depth, inner = 0, first[2]["value"]
    while isinstance(inner, list):
        depth, inner = depth + 1, inner[0]
    assert depth == 40 and inner == 1
    assert [(e["offset"], e["value"]) for e in errors] == [(1, DEEP_ARRAY), (3, DEEP_OBJECT)]
    assert all("nested" in e["error"] for e in errors), errors

    # the window replayed by a fresh instance: the same records, the same errors
    h2 = kafka_harness(KafkaJsonInputOperator(**args), checkpoint)
    assert kafka_run_window(h2, 0) == first
    assert h2.sink("error").tuples == errors
    h2.teardown()


def test_deeply_nested_json_in_the_data_source_is_an_error_row(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("deep-source", partitions=1)
    kafka_client.produce(topic, [{"value": v} for v in (b'{"a": 1}', DEEP_ARRAY, b"[2]")])
    spark.dataSource.register(KafkaSource)
    rows: list[dict[str, Any]] = []
    query = (
        spark.readStream.format("malhar_kafka")
        .option("bootstrap.servers", kafka_client.bootstrap)
        .option("topics", topic)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "json")
        .load()
        .writeStream.foreachBatch(
            lambda df, _: rows.extend(
                r.asDict() for r in df.select("offset", "value", "error").collect()
            )
        )
        .option("checkpointLocation", str(tmp_path / "spark"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows.sort(key=lambda r: r["offset"])
    assert [(r["offset"], r["value"]) for r in rows] == [(0, '{"a": 1}'), (1, None), (2, "[2]")]
    assert rows[0]["error"] is None and rows[2]["error"] is None
    assert "nested" in rows[1]["error"]


# -- point 8: secrets never travel in the plan nor the snapshots ---------------------------------
def test_literal_secrets_are_refused_and_references_stay_references(
    kafka_client: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    topic = kafka_client.topic("secret", partitions=1)
    kafka_client.produce(topic, [{"value": b"x"}])

    # a literal secret would be cloudpickled into the application plan (the `plan` option of
    # the engine's Spark source) and into Spark's task closures: refused, naming the key only
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"):
        with pytest.raises(ConfigError) as info:
            KafkaInputOperator(**kafka_op_args(kafka_client, topic, consumer_config={key: SECRET}))
        message = str(info.value)
        assert key in message and "${env:" in message and "${file:" in message, message
        assert SECRET not in message
    op = KafkaInputOperator(**kafka_op_args(kafka_client, topic))
    with pytest.raises(ConfigError):
        op.consumer_config = {"sasl.username": "app", "sasl.password": SECRET}
    with pytest.raises(ConfigError) as info:  # the text path of `malhar run --config ...`
        op.configure_from_strings({"consumer_config": f'{{"sasl.password": "{SECRET}"}}'})
    assert SECRET not in str(info.value)

    # references: resolved where the consumer is made, stored nowhere
    secret_file = tmp_path / "kafka-password"
    secret_file.write_text(SECRET + "\n")
    monkeypatch.setenv("MALHAR_TEST_KAFKA_SECRET", SECRET)
    config = {
        "sasl.username": "app",
        "sasl.password": f"${{file:{secret_file}}}",
        "ssl.key.password": "${env:MALHAR_TEST_KAFKA_SECRET}",
    }
    op = KafkaInputOperator(**kafka_op_args(kafka_client, topic, consumer_config=config))
    dag = DAG(kafka_unique("secrets"))
    src = dag.add_operator("in", op)
    dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
    dag.validate()
    h = kafka_harness(op, str(tmp_path / "ckpt"))
    h.setup()
    assert op._client.config["sasl.password"] == SECRET  # what librdkafka gets
    assert op._client.config["ssl.key.password"] == SECRET
    assert len(kafka_run_window(h, 0)) == 1
    shipped = cloudpickle.dumps(op)  # how the plan carries the operator
    assert SECRET.encode() not in shipped and b"kafka-password" in shipped
    assert SECRET.encode() not in h.checkpoint()  # what a window snapshot holds
    h.teardown()


def test_data_source_secrets_are_references_only(kafka_client: Any, tmp_path: Path) -> None:
    topic = kafka_client.topic("secret-source", partitions=1)
    base = {"bootstrap.servers": kafka_client.bootstrap, "topics": topic}
    with pytest.raises(ConfigError) as info:
        KafkaSource({**base, "kafka.sasl.password": SECRET}).schema()
    assert "sasl.password" in str(info.value) and SECRET not in str(info.value)

    secret_file = tmp_path / "pw"
    secret_file.write_text(SECRET)
    source = KafkaSource({**base, "kafka.sasl.password": f"${{file:{secret_file}}}"})
    reader = source.streamReader(source.schema())
    reader.initialOffset()  # the driver's consumer resolves the reference ...
    assert reader.client.config["sasl.password"] == SECRET
    shipped = cloudpickle.dumps(reader)  # ... the reader Spark ships to its tasks does not hold it
    assert SECRET.encode() not in shipped
    reader.stop()


# -- point 12: a mistyped option of the data source fails, naming the option it resembles --------
def test_unknown_data_source_option_fails_with_a_suggestion(
    spark: Any, kafka_client: Any, tmp_path: Path
) -> None:
    topic = kafka_client.topic("options", partitions=1)
    sent = kafka_client.produce_numbers(topic, 1, 3)
    spark.dataSource.register(KafkaSource)

    def stream(**options: str) -> Any:
        reader = spark.readStream.format("malhar_kafka")
        for key, value in {
            "bootstrap.servers": kafka_client.bootstrap,
            "topics": topic,
            **options,
        }.items():
            reader = reader.option(key, value)
        return reader

    # `startingOffset` used to be ignored silently: the query read from the latest offset
    with pytest.raises(Exception) as info:
        stream(startingOffset="earliest").load()
    message = str(info.value)
    assert "startingOffset" in message and "did you mean 'startingOffsets'" in message, message
    with pytest.raises(Exception, match="did you mean 'maxRecordsPerBatch'"):
        stream(maxRecordPerBatch="5").load()
    with pytest.raises(Exception, match="valueFormat"):
        stream(valueFormat="xml").load()
    # the data source's own error, also without Spark in between
    with pytest.raises(ConfigError, match="did you mean 'groupId'") as direct:
        KafkaSource({"bootstrap.servers": "b:9092", "topics": topic, "groupid_": "x"}).schema()
    assert isinstance(direct.value, MalharError)

    # option names are case-insensitive; the right spelling reads from the earliest offset
    rows: list[dict[str, Any]] = []
    query = (
        stream(STARTINGOFFSETS="earliest", valueformat="text")
        .load()
        .writeStream.foreachBatch(lambda df, _: rows.extend(r.asDict() for r in df.collect()))
        .option("checkpointLocation", str(tmp_path / "spark"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in rows) == sorted(
        kafka_key(r) for r in sent
    )
    assert all(isinstance(r["timestamp"], dt.datetime) for r in rows)
    assert pickle.loads(pickle.dumps(rows)) == rows
