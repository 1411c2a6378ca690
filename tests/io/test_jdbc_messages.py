"""What JDBC errors name: the database as the user wrote it, password masked, on the real
PostgreSQL fixture. The URL often reaches the connector as a secret reference (the engine
ships a literal password to the executors as ``${env:MALHAR_SECRET_...}``; the Spark data
sources take the URL as ``${env:NAME}``): messages must still show
``postgresql+psycopg2://user:***@host:port/db``, never the reference, never the password."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, OperatorContext, run
from malhar.engine.failure import ApplicationFailed, reason_of
from malhar.io.jdbc import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcOutputOperator,
    JdbcPollInputOperator,
    register,
)
from malhar.testing.harness import OperatorHarness
from tests.engine.ops import Numbers
from tests.io.conftest import kafka_harness
from tests.io.jdbc_support import jdbc_url_reference, new_table, unique_name
from tests.io.split_source import SplitSource


def _assert_names_the_database(message: str, pg: Any, *secrets: str) -> None:
    """``message`` shows where the database is (user, host:port/db, masked password) and
    neither a secret reference nor a password."""
    assert f"{pg.user}:***@{pg.host}:{pg.port}/{pg.dbname}" in message, message
    assert "${env:" not in message and "${file:" not in message, message
    for secret in (pg.password, *secrets):
        assert secret not in message, message


@pytest.mark.integration
def test_missing_table_through_the_engine_names_the_masked_url(
    spark: Any, postgres_service: Any, tmp_path: Path
) -> None:
    # the reviewer's case: the engine ships the literal password as a reference, and the
    # executor's "does not exist at ..." showed ${env:MALHAR_SECRET_...}
    pg = postgres_service
    missing = unique_name("word_cnts")
    dag = DAG(unique_name("missing"))
    src = dag.add_operator("src", Numbers(per_window=2))
    out = dag.add_operator(
        "out", JdbcOutputOperator(pg.sqlalchemy_url, table=missing, columns=["k", "v"])
    )
    dag.add_stream("items", src.output, out.input)
    with pytest.raises(ApplicationFailed) as info:
        run(dag, windows=1, spark=spark, checkpoint=str(tmp_path / "ck"), window_ms=100)
    reason = info.value.reason
    assert f"table '{missing}' does not exist at " in reason, reason
    _assert_names_the_database(reason, pg)
    _assert_names_the_database(str(info.value), pg)


@pytest.mark.integration
def test_missing_table_in_the_spark_sink_names_the_masked_url(
    spark: Any, postgres_service: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)  # ${env:MALHAR_TEST_PG_URL}
    missing = unique_name("word_cnts")
    spark.dataSource.register(SplitSource)
    register(spark)
    df = (
        spark.readStream.format("malhar_test_split")
        .option("parts", 1)
        .option("batches", 1)
        .option("rows", 2)
        .load()
    )
    query = (
        df.writeStream.format("malhar_jdbc")
        .option("url", url)
        .option("name", unique_name("query"))
        .option("table", missing)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        with pytest.raises(Exception) as info:
            query.processAllAvailable()
    finally:
        query.stop()
    reason = reason_of(info.value)  # the JdbcConfigError's line (Spark's text has the plan too)
    assert f"table '{missing}' does not exist at " in reason, reason
    _assert_names_the_database(reason, pg)


@pytest.mark.integration
def test_connection_and_poll_errors_name_the_masked_url_of_a_reference(
    postgres_service: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    pg = postgres_service
    # a reference that names a URL with a wrong password: "cannot connect to ..."
    wrong = "Wr0ng-" + unique_name("pw")
    monkeypatch.setenv(
        "MALHAR_TEST_PG_WRONG_URL", pg.sqlalchemy_url.replace(f":{pg.password}@", f":{wrong}@")
    )
    table = new_table(pg, "msgs", "k text")
    op = JdbcOutputOperator("${env:MALHAR_TEST_PG_WRONG_URL}", table=table)
    ctx = OperatorContext(name="out", partition=0, partitions=1, application=unique_name("m"))
    with pytest.raises(JdbcConnectionError, match="cannot connect to ") as info:
        OperatorHarness(op, ctx).setup()
    _assert_names_the_database(str(info.value), pg, wrong)

    # the poll input: a missing table ("cannot read table ... at ...")
    monkeypatch.setenv("MALHAR_TEST_PG_URL", pg.sqlalchemy_url)
    missing = unique_name("nope")
    poll = JdbcPollInputOperator("${env:MALHAR_TEST_PG_URL}", table=missing, key_column="id")
    h = kafka_harness(poll, str(tmp_path), name="poll", partition=0, partitions=1)
    with pytest.raises(JdbcConfigError, match=missing) as info:
        h.setup()
    _assert_names_the_database(str(info.value), pg)
