"""Edges of the Spark data sources: a Kafka partition whose log lost the query's next offset
(a re-created topic, deleted records) fails the query instead of skipping records silently;
the JDBC sink and poll source refuse a literal password and ship only its reference."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from malhar.io.jdbc import JdbcConfigError
from tests.io.jdbc_support import new_table, run_sql, unique_name

pytestmark = pytest.mark.integration


# -- Kafka: lost records ------------------------------------------------------------------------
def _kafka_run(spark: Any, bootstrap: str, topic: str, checkpoint: Path, **options: str) -> Any:
    """Run the query to the end of the topic: (values read, the query's exception or None)."""
    from malhar.io.kafka import KafkaSource

    spark.dataSource.register(KafkaSource)
    got: list[str] = []
    reader = (
        spark.readStream.format("malhar_kafka")
        .option("bootstrap.servers", bootstrap)
        .option("topics", topic)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "text")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda b, _: got.extend(r.value for r in b.collect()))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    error = None
    try:
        query.processAllAvailable()
    except Exception as exc:
        error = exc
    finally:
        query.stop()
    return got, error


def _values(prefix: str, numbers: range) -> list[dict[str, bytes]]:
    return [{"value": f"{prefix}{i}".encode()} for i in numbers]


def _recreate(kafka_service: Any, topic: str) -> None:
    kafka_service.delete_topic(topic)
    time.sleep(1)
    kafka_service.create_topic(topic, partitions=1)


def test_a_recreated_topic_fails_the_query_instead_of_skipping_records(
    spark: Any, kafka_service: Any, kafka_client: Any, tmp_path: Path
) -> None:
    """Before: the checkpointed offset 5 was above the new log's end (3), so nothing was read
    until the new log grew past 5, and then only from 5 on: new0..new4 were lost silently.
    (A new log already longer than the old offset when the query looks cannot be told from
    the old one by its offsets: docs/connectors/kafka.md §12.)"""
    topic = kafka_client.topic("recreated")
    kafka_client.produce(topic, _values("old", range(5)))
    ck = tmp_path / "ck"
    got, error = _kafka_run(spark, kafka_client.bootstrap, topic, ck)
    assert error is None and got == [f"old{i}" for i in range(5)]

    _recreate(kafka_service, topic)
    kafka_client.produce(topic, _values("new", range(3)))
    got, error = _kafka_run(spark, kafka_client.bootstrap, topic, ck)
    assert got == []
    text = str(error)
    assert "DataLossError" in text, text
    assert f"topic {topic!r} partition 0: the query's next offset is 5" in text, text
    assert "log now holds offsets 0 to 3" in text and "deleted and re-created" in text, text
    assert "kafka.auto.offset.reset" in text and "new checkpoint location" in text, text

    # the operators' setting says where to go on, accepting the loss: the new log from 0
    reset = {"kafka.auto.offset.reset": "earliest"}
    got, error = _kafka_run(spark, kafka_client.bootstrap, topic, ck, **reset)
    assert error is None and got == ["new0", "new1", "new2"]
    # ... and on from there, without the setting
    kafka_client.produce(topic, _values("new", range(3, 8)))
    got, error = _kafka_run(spark, kafka_client.bootstrap, topic, ck)
    assert error is None and got == [f"new{i}" for i in range(3, 8)]


def test_records_deleted_under_the_query_fail_it(
    spark: Any, kafka_client: Any, kafka_service: Any, tmp_path: Path
) -> None:
    """Records deleted (retention, DeleteRecords) before the query read them: its start
    offset is below the log's start. Fails on the driver naming the gap; with
    auto.offset.reset=earliest the query goes on from the first record still there."""
    from confluent_kafka import TopicPartition

    topic = kafka_client.topic("deleted")
    kafka_client.produce(topic, _values("a", range(5)))
    ck = tmp_path / "ck"
    got, error = _kafka_run(spark, kafka_client.bootstrap, topic, ck)
    assert error is None and got == [f"a{i}" for i in range(5)]

    kafka_client.produce(topic, _values("a", range(5, 10)))
    deleted = kafka_service.admin().delete_records([TopicPartition(topic, 0, 7)])
    for future in deleted.values():
        future.result(timeout=30)
    got, error = _kafka_run(spark, kafka_client.bootstrap, topic, ck)
    assert got == []
    text = str(error)
    assert f"topic {topic!r} partition 0: the query's next offset is 5" in text, text
    assert "log now holds offsets 7 to 10" in text and "records 5 to 6 were deleted" in text, text

    got, error = _kafka_run(
        spark, kafka_client.bootstrap, topic, ck, **{"kafka.auto.offset.reset": "earliest"}
    )
    assert error is None and got == ["a7", "a8", "a9"]


# -- JDBC: passwords by reference only -----------------------------------------------------------
PW_ENV = "MALHAR_TEST_EDGES_PG_PASSWORD"


@pytest.fixture
def pg_password(spark: Any, postgres_service: Any, monkeypatch: Any) -> str:
    """The test database's password in the environment of the driver and of Spark's Python
    workers (``SparkContext.environment``: the JVM started before this test set it)."""
    monkeypatch.setenv(PW_ENV, postgres_service.password)
    monkeypatch.setitem(spark.sparkContext.environment, PW_ENV, postgres_service.password)
    return "${env:" + PW_ENV + "}"


def _bare_url(pg: Any) -> str:
    bare = pg.sqlalchemy_url.replace(f":{pg.password}@", "@", 1)
    assert pg.password not in bare
    return bare


def test_the_jdbc_data_sources_refuse_a_literal_password(postgres_service: Any) -> None:
    """Before: accepted, and pickled in clear into the writer / reader Spark ships."""
    from malhar.io.jdbc import JdbcPollSource, JdbcSink

    pg = postgres_service
    bare = _bare_url(pg)
    sink = {"name": "q", "table": "t"}
    poll = {"table": "t", "key_column": "id"}
    for options in (
        {"url": pg.sqlalchemy_url},
        {"url": bare, "password": pg.password},
        {"url": pg.sqlalchemy_url, "password": "${env:X}"},
    ):
        for make in (
            lambda o: JdbcSink({**sink, **o}).streamWriter(None, False),
            lambda o: JdbcPollSource({**poll, **o}).streamReader(None),
        ):
            with pytest.raises(JdbcConfigError) as err:
                make(options)
            text = str(err.value)
            assert "must be a secret reference" in text and "${env:NAME}" in text, text
            assert "${file:/path}" in text and pg.password not in text, text


def test_the_jdbc_sink_ships_the_password_by_reference(
    spark: Any, postgres_service: Any, pg_password: str, tmp_path: Path
) -> None:
    from malhar.io.jdbc import JdbcSink, register

    pg = postgres_service
    table = new_table(pg, "edgesink", "id bigint NOT NULL")
    name = unique_name("edgesink")
    options = {"url": _bare_url(pg), "password": pg_password, "table": table, "name": name}
    writer = JdbcSink(options).streamWriter(None, False)
    assert pg.password.encode() not in pickle.dumps(writer)
    register(spark)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .selectExpr("value AS id")
        .writeStream.format("malhar_jdbc")
        .options(**options)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while not run_sql(pg, f"SELECT id FROM {table} LIMIT 1"):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "no rows written"
            time.sleep(0.5)
    finally:
        query.stop()


def test_the_jdbc_poll_source_ships_the_password_by_reference(
    spark: Any, postgres_service: Any, pg_password: str, tmp_path: Path
) -> None:
    from malhar.io.jdbc import JdbcPollSource

    pg = postgres_service
    table = new_table(pg, "edgepoll", "id bigint NOT NULL")
    run_sql(pg, f"INSERT INTO {table} SELECT g FROM generate_series(1, 30) g")
    options = {"url": _bare_url(pg), "password": pg_password, "table": table, "key_column": "id"}
    reader = JdbcPollSource(options).streamReader(None)
    assert pg.password.encode() not in pickle.dumps(reader)
    spark.dataSource.register(JdbcPollSource)
    got: list[int] = []
    query = (
        spark.readStream.format("malhar_jdbc_poll")
        .options(**options)
        .option("max_rows_per_batch", 10)
        .option("num_partitions", 2)
        .load()
        .writeStream.foreachBatch(lambda b, _: got.extend(r.id for r in b.collect()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(got) == list(range(1, 31))
