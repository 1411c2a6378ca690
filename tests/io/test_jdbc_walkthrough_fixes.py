"""Fixes from a user walkthrough of the JDBC connectors, against the real PostgreSQL fixture:
the output's error port gives a rejected row as it was emitted (not as text made for the
database), the poll input names a numeric value its Arrow type cannot hold in the user's
words, and the re-run mismatch names a new checkpoint under an old name as a cause."""

from __future__ import annotations

import json
import types
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from malhar import OperatorContext
from malhar.io.base.committer import WindowCommitter
from malhar.io.base.output import CommitMark, WindowContentMismatchError, WindowKey
from malhar.io.jdbc import JdbcOutputOperator, JdbcPollInputOperator
from malhar.testing.harness import OperatorHarness
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.jdbc_support import jdbc_url_reference, new_table, run_sql, unique_name

pytestmark = pytest.mark.integration

BIG = 2**70  # no int64 holds it: the window's column went to the database as text


def _harness(op: JdbcOutputOperator, app: str) -> OperatorHarness:
    ctx = OperatorContext(name="out", partition=0, partitions=1, application=app)
    return OperatorHarness(op, ctx)


def _without_error(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "error"} for r in rows]


# -- 1. the error port holds the row as it was emitted -------------------------------------------
def test_rows_the_database_rejects_keep_their_emitted_values(postgres_service: Any) -> None:
    pg = postgres_service
    table = new_table(pg, "mis", "k text PRIMARY KEY, n bigint, d numeric(6,2)")
    rows = [
        {"k": "t1", "n": "notanumber"},
        {"k": "t2", "n": BIG},
        {"k": None, "n": 1},
        {"k": "ok", "n": 1},
        {"k": "t6", "n": True},
        {"k": "t4", "d": 123456789.5},
    ]
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode="upsert", key_columns=["k"])
    h = _harness(op, unique_name("mis"))
    h.run_window([("input", r) for r in rows], window=0)
    errors = h.sink("error").tuples
    h.teardown()
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("ok", 1)]
    assert _without_error(errors) == [r for r in rows if r["k"] != "ok"]
    by_key = {e["k"]: e for e in errors}
    assert by_key[None]["n"] == 1 and type(by_key[None]["n"]) is int  # was '1'
    assert by_key["t6"]["n"] is True  # was 'true'
    assert by_key["t2"]["n"] == BIG and type(by_key["t2"]["n"]) is int  # was its text
    assert all(e["error"] for e in errors)


def test_positional_tuples_are_rejected_by_column_with_their_values(
    postgres_service: Any,
) -> None:
    pg = postgres_service
    table = new_table(pg, "pos", "k text NOT NULL, n bigint")
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table)
    h = _harness(op, unique_name("pos"))
    h.run_window([("input", ("a", 1)), ("input", ("b", BIG)), ("input", (None, 2))], window=0)
    errors = h.sink("error").tuples
    h.teardown()
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("a", 1)]
    assert _without_error(errors) == [{"k": "b", "n": BIG}, {"k": None, "n": 2}]
    assert type(errors[0]["n"]) is int and type(errors[1]["n"]) is int


def test_recorded_rejects_replay_their_json_values(postgres_service: Any) -> None:
    pg = postgres_service
    table = new_table(pg, "rej", "k text PRIMARY KEY, n bigint")
    rejected_table = unique_name("rej_rows")
    app = unique_name("rej")
    rows = [{"k": "a", "n": 1}, {"k": "b", "n": True}, {"k": "c", "n": BIG}, {"k": None, "n": 3}]

    def op() -> JdbcOutputOperator:
        return JdbcOutputOperator(
            pg.sqlalchemy_url,
            table=table,
            mode="upsert",
            key_columns=["k"],
            error_table=rejected_table,
        )

    first = _harness(op(), app)
    first.run_window([("input", r) for r in rows], window=0)
    live = first.sink("error").tuples
    first.teardown()
    assert _without_error(live) == rows[1:]
    stored = run_sql(pg, f"SELECT row_json FROM {rejected_table} ORDER BY row_index")
    assert [json.loads(j) for (j,) in stored] == rows[1:]  # JSON values, not their text

    # a replay of the committed window re-emits them (read back from JSON)
    again = _harness(op(), app)
    again.run_window([("input", r) for r in rows], window=0)
    replayed = again.sink("error").tuples
    again.teardown()
    assert replayed == live
    assert replayed[0]["n"] is True and type(replayed[1]["n"]) is int


# -- 2. a numeric value its Arrow type cannot hold ----------------------------------------------
def _numeric_table(pg: Any) -> str:
    table = new_table(pg, "pollbig", '"Key" bigint, big numeric')
    run_sql(pg, f"INSERT INTO {table} VALUES (1, 1), (2, 1e30), (3, 2.5)")
    return table


def _says_it_in_the_users_words(message: str) -> None:
    assert "column 'big': 1000000000000000000000000000000 has 31 digits before" in message
    assert "an unbounded numeric maps to decimal128(38, 18) by default" in message
    assert "holds at most 20" in message
    assert 'column_types={"big": "string"}' in message
    assert '"decimal(P,S)" with P-S >= 31' in message and "cast the column in the query" in message
    assert "precision inferred" not in message and "Decimal(" not in message


def test_the_poll_operator_sends_a_numeric_too_big_to_the_error_port(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _numeric_table(pg)
    op = JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="Key", poll_interval_ms=0)
    h = kafka_harness(op, str(tmp_path), name="poll", partition=0, partitions=1)
    h.setup()
    rows = kafka_run_window(h, 0)
    h.teardown()
    assert [(r["Key"], r["big"]) for r in rows] == [(1, Decimal(1)), (3, Decimal("2.5"))]
    (error,) = h.sink("error").tuples
    assert error["key"] == "2"
    _says_it_in_the_users_words(error["error"])


def test_the_poll_source_fails_the_query_naming_the_value_and_the_fix(
    spark: Any, postgres_service: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from malhar.io.jdbc import JdbcPollSource

    pg = postgres_service
    table = _numeric_table(pg)
    url = jdbc_url_reference(spark, pg, monkeypatch)
    spark.dataSource.register(JdbcPollSource)

    def run(tag: str, **options: str) -> list[Any]:
        got: list[Any] = []
        reader = spark.readStream.format("malhar_jdbc_poll").option("url", url)
        for k, v in {"table": table, "key_column": "Key", **options}.items():
            reader = reader.option(k, v)
        query = (
            reader.load()
            .writeStream.foreachBatch(lambda b, _: got.extend(tuple(r) for r in b.collect()))
            .option("checkpointLocation", str(tmp_path / tag))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return got

    with pytest.raises(Exception) as info:
        run("default")
    message = str(info.value)
    assert "JdbcError" in message and "the row with Key = 2" in message, message
    assert "a data source has no error port, so the query fails" in message, message
    _says_it_in_the_users_words(message)

    # the fix the message gives reads every row
    got = run("as_text", column_types='{"big": "string"}')
    assert sorted(got) == [(1, "1"), (2, "1000000000000000000000000000000"), (3, "2.5")]


# -- 3. a re-run mismatch names a new checkpoint under an old name --------------------------------
def test_the_rerun_mismatch_names_a_new_checkpoint_under_an_old_name() -> None:
    store = types.SimpleNamespace(
        key=WindowKey("app", "out", 0), describe=lambda: "postgresql table t"
    )
    committer = WindowCommitter(store)  # type: ignore[arg-type]
    with pytest.raises(WindowContentMismatchError) as info:
        committer.verify(0, "2:bbbb", CommitMark(0, "2:aaaa"))
    message = str(info.value)
    assert "nondeterministic step" in message
    assert "restarted with a new checkpoint under a name that already has committed" in message
    assert "ids started again from 0" in message
    assert "keep the checkpoint, or give the application or query a new name" in message
