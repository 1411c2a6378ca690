"""``Operator.preflight`` of every connector and ``malhar validate --connect``, against the
real Kafka, PostgreSQL and HDFS fixtures: what is there is described, what is missing or
unreachable is a problem naming it, a system that does not answer is a problem within
about the timeout, and nothing is created or changed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from malhar import DAG, OutputPort
from malhar.cli import EXIT_NOT_READY, cli
from malhar.io.fs import CsvFileInput, ParquetFileOutput
from malhar.io.jdbc import JdbcOutputOperator, JdbcPollInputOperator
from malhar.io.kafka import KafkaOutputOperator, KafkaTextInputOperator
from malhar.preflight import check_connections
from malhar.testing.operators import ListInput
from tests.io.conftest import kafka_unique
from tests.io.fs_support import Place, place_fixture  # noqa: F401 - the fixture
from tests.io.jdbc_support import new_table, run_sql, unique_name
from tests.io.test_kafka_unreachable import closed_port

pytestmark = pytest.mark.integration


def _one(operator: Any, timeout: float = 5.0) -> Any:
    """The check of ``operator`` alone in a DAG (checks need no streams)."""
    dag = DAG("preflight-test")
    dag.add_operator("op", operator)
    [check] = check_connections(dag, timeout)
    return check


# -- files (local and HDFS) -------------------------------------------------------------------
def test_file_input_counts_the_files_there_now(place: Place) -> None:
    place.write("in/a.csv", b"x\n1\n")
    place.write("in/b.csv", b"x\n2\n")
    place.write("in/_hidden.csv", b"x\n3\n")
    check = _one(CsvFileInput(place.url("in")))
    assert check.ok and check.found.endswith(": 2 file(s) to read now, 8 bytes"), check
    missing = _one(CsvFileInput(place.url("nothing-yet")))
    assert missing.ok and "no file to read yet" in missing.found, missing
    assert not place.exists("nothing-yet")


def test_file_output_needs_a_directory_or_a_path_that_can_become_one(place: Place) -> None:
    place.write("taken", b"a file")
    ok = _one(ParquetFileOutput(place.url("out"), schema="x bigint"))
    assert ok.ok and ok.found.endswith(": created at the first window"), ok
    assert not place.exists("out")  # nothing was created
    place.fs.mkdirs(place.path("there"))
    there = _one(ParquetFileOutput(place.url("there"), schema="x bigint"))
    assert there.ok and there.found.endswith(": a directory"), there
    for path in ("taken", "taken/below"):
        bad = _one(ParquetFileOutput(place.url(path), schema="x bigint"))
        assert not bad.ok and bad.problem.startswith("operator 'op': the output path"), bad
        assert "is a file" in bad.problem, bad


# -- Kafka ------------------------------------------------------------------------------------
def test_kafka_input_finds_its_topics_or_names_the_missing_one(kafka_client: Any) -> None:
    topic = kafka_client.topic("pf-in", partitions=3)
    found = _one(KafkaTextInputOperator(bootstrap_servers=kafka_client.bootstrap, topics=topic))
    assert found.ok and found.found.endswith(f"topic {topic!r} (3 partition(s))"), found
    missing = kafka_unique("pf-missing")
    bad = _one(
        KafkaTextInputOperator(bootstrap_servers=kafka_client.bootstrap, topics=[topic, missing])
    )
    assert not bad.ok and f"topic {missing!r} does not exist" in bad.problem, bad
    offsets = json.dumps({topic: {"7": 0}})
    wrong = _one(
        KafkaTextInputOperator(
            bootstrap_servers=kafka_client.bootstrap, topics=topic, initial_offset=offsets
        )
    )
    assert not wrong.ok and f"{topic}[7] (no such partition)" in wrong.problem, wrong


def test_kafka_output_finds_its_topic_and_creates_nothing(kafka_client: Any) -> None:
    topic = kafka_client.topic("pf-out", partitions=2)
    found = _one(KafkaOutputOperator(bootstrap_servers=kafka_client.bootstrap, topic=topic))
    assert found.ok and found.found.endswith(": 2 partition(s)"), found
    missing = kafka_unique("pf-new")
    bad = _one(KafkaOutputOperator(bootstrap_servers=kafka_client.bootstrap, topic=missing))
    assert not bad.ok and "does not exist; create it, or set create_topic" in bad.problem
    later = _one(
        KafkaOutputOperator(
            bootstrap_servers=kafka_client.bootstrap, topic=missing, create_topic=True
        )
    )
    assert later.ok and "created at launch" in later.found, later
    assert missing not in kafka_client.service.topics()


def test_a_kafka_cluster_that_does_not_answer_is_a_problem_within_the_timeout() -> None:
    address = f"127.0.0.1:{closed_port()}"
    for operator in (
        KafkaTextInputOperator(bootstrap_servers=address, topics="t"),
        KafkaOutputOperator(bootstrap_servers=address, topic="t"),
    ):
        began = time.monotonic()
        check = _one(operator, timeout=3.0)
        took = time.monotonic() - began
        assert not check.ok and f"Kafka cluster {address} did not answer" in check.problem
        assert "validate --connect-timeout" in check.problem, check.problem
        assert took < 10, took


# -- JDBC -------------------------------------------------------------------------------------
def test_jdbc_output_checks_table_columns_and_key(postgres_service: Any) -> None:
    pg = postgres_service
    table = new_table(pg, "pf_out", "word text PRIMARY KEY, n bigint")
    url = pg.sqlalchemy_url
    found = _one(JdbcOutputOperator(url, table=table, key_columns=["word"]))
    assert found.ok and f"table public.{table}, columns ['word', 'n'], key ['word']" in (
        found.found
    ), found
    assert pg.password not in found.found
    missing = unique_name("pf_none")
    bad = _one(JdbcOutputOperator(url, table=missing, key_columns=["word"]))
    assert not bad.ok and f"table {missing!r} does not exist" in bad.problem, bad
    column = _one(JdbcOutputOperator(url, table=table, columns=["word", "count"]))
    assert not column.ok and "columns ['count'] not in table" in column.problem, column
    tables = run_sql(pg, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'malhar%'")
    assert not [t for (t,) in tables if table in t]  # no meta table made for it


def test_jdbc_output_compares_a_typed_stream_with_its_table(postgres_service: Any) -> None:
    # a misspelled field upstream passed the check; the run then refused every row to an
    # unread error port and exited 0 (walkthrough)
    pg = postgres_service
    table = new_table(pg, "pf_fields", "word text PRIMARY KEY, n bigint")

    def check(ddl: str, **settings: Any) -> Any:
        class Counts(ListInput):
            output = OutputPort(ddl)

        dag = DAG("preflight-fields")
        src = dag.add_operator("counts", Counts([]))
        out = dag.add_operator("db", JdbcOutputOperator(pg.sqlalchemy_url, **settings))
        dag.add_stream("s", src.output, out.input)
        checks = {c.operator: c for c in check_connections(dag, 5.0)}
        assert set(checks) == {"db"}, checks
        return checks["db"]

    upsert = {"table": table, "mode": "upsert", "key_columns": ["word"]}
    assert check("word string, n bigint", **upsert).ok
    assert check("word string", **upsert).ok  # n is left to its default
    bad = check("word string, count bigint", **upsert)
    assert (
        not bad.ok
        and (
            "the input stream's fields ['word', 'count'] include ['count'], which are not columns "
            f"of public.{table} (its columns: ['word', 'n']): every row would be refused"
        )
        in bad.problem
    ), bad
    key = check("wrd string, n bigint", **upsert)
    assert not key.ok and "key_columns ['word'] are not among the input stream's fields" in (
        key.problem
    ), key
    assert "did you mean 'wrd'?" in key.problem
    chosen = check("word string, count bigint", columns=["word"], **upsert)
    assert chosen.ok, chosen  # columns says which fields are written
    lacking = check("wrd string, n bigint", columns=["word", "n"], **upsert)
    assert not lacking.ok and "columns ['word'] are not among the input stream's fields" in (
        lacking.problem
    ), lacking
    binds = check(
        "word string, count bigint",
        statement=f"INSERT INTO {table} (word, n) VALUES (:word, :n)",
    )
    assert (
        not binds.ok
        and "the statement's binds ['n'] are not among the input stream's fields" in (binds.problem)
    ), binds


def test_a_preflight_override_without_inputs_is_still_called() -> None:
    from malhar import Operator

    class Old(Operator):  # written before preflight had the inputs parameter
        def preflight(self, label: str, timeout: float) -> str:
            return f"{label} checked within {timeout}"

    class New(Operator):
        def preflight(self, label: str, timeout: float, **context: Any) -> str:
            return f"{label} got {sorted(context)}"

    assert _one(Old()).found == "operator 'op' checked within 5.0"
    assert _one(New()).found == "operator 'op' got ['inputs']"


def test_jdbc_poll_input_checks_source_and_key(postgres_service: Any) -> None:
    pg = postgres_service
    table = new_table(pg, "pf_in", "id bigint PRIMARY KEY, name text")
    url = pg.sqlalchemy_url
    found = _one(JdbcPollInputOperator(url, table=table, key_column="id"))
    assert found.ok and found.found.endswith("columns ['id', 'name'], key 'id'"), found
    bad = _one(JdbcPollInputOperator(url, table=table, key_column="ident"))
    assert not bad.ok and "key_column 'ident' is not a column" in bad.problem, bad


def test_a_database_that_does_not_answer_is_a_problem_within_the_timeout() -> None:
    port = closed_port()
    url = f"postgresql+psycopg2://u:secret-pw@127.0.0.1:{port}/db"
    for operator in (
        JdbcOutputOperator(url, table="t", key_columns=["k"]),
        JdbcPollInputOperator(url, table="t", key_column="k"),
    ):
        began = time.monotonic()
        check = _one(operator, timeout=2.0)
        assert not check.ok and f"127.0.0.1:{port}/db" in check.problem, check
        assert "Connection refused" in check.problem, check
        assert "secret-pw" not in check.problem
        assert time.monotonic() - began < 10


# -- the command line -------------------------------------------------------------------------
APP = """
from malhar import DAG
from malhar.io.fs import LinesFileInput
from malhar.io.jdbc import JdbcOutputOperator
from malhar.io.kafka import KafkaOutputOperator

application = DAG("preflight-cli")
src = application.add_operator("files", LinesFileInput(path={inputs!r}))
db = application.add_operator("db", JdbcOutputOperator({url!r}, table={table!r}))
kafka = application.add_operator(
    "kafka", KafkaOutputOperator(bootstrap_servers={bootstrap!r}, topic={topic!r}))
application.add_stream("lines", src.output, db.input, kafka.input)
"""


def test_validate_connect_lists_what_it_found_and_exits_3_when_not_ready(
    kafka_client: Any, postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = new_table(pg, "pf_cli", "line text")
    topic = kafka_client.topic("pf-cli")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("hello\n")
    app = tmp_path / "app.py"
    settings = {
        "inputs": str(tmp_path / "in"),
        "url": pg.sqlalchemy_url,
        "table": table,
        "bootstrap": kafka_client.bootstrap,
        "topic": topic,
    }
    app.write_text(APP.format(**settings))
    ok = CliRunner().invoke(cli, ["validate", str(app), "--connect"], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    assert "connections (checked from this machine; nothing changed):" in ok.output
    assert "  files: " in ok.output and "1 file(s) to read now" in ok.output
    assert "  db: " in ok.output and f"table public.{table}, columns ['line']" in ok.output
    assert f"  kafka: topic {topic!r}" in ok.output
    assert pg.password not in ok.output

    app = tmp_path / "app_not_ready.py"
    app.write_text(APP.format(**{**settings, "table": "no_such_table", "topic": "no-such"}))
    bad = CliRunner().invoke(cli, ["validate", str(app), "--connect"], catch_exceptions=False)
    assert bad.exit_code == EXIT_NOT_READY == 3, bad.output
    assert "  db: FAILED" in bad.output and "  kafka: FAILED" in bad.output
    assert "table 'no_such_table' does not exist" in bad.output
    assert "topic 'no-such' on Kafka cluster" in bad.output
    assert pg.password not in bad.output
    plain = CliRunner().invoke(cli, ["validate", str(app)], catch_exceptions=False)
    assert plain.exit_code == 0 and "connections" not in plain.output


# -- review: nothing created, the timeout holds, settings first ---------------------------------
def test_a_sqlite_database_that_is_not_there_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nowhere.db'}"
    for operator in (
        JdbcOutputOperator(url, table="t", key_columns=["k"]),
        JdbcPollInputOperator(url, table="t", key_column="k"),
    ):
        check = _one(operator)
        assert not check.ok and "the SQLite database" in check.problem, check
        assert check.problem.startswith("operator 'op': "), check
    assert not (tmp_path / "nowhere.db").exists()


def test_an_hdfs_that_does_not_answer_is_a_problem_within_the_timeout() -> None:
    address = f"webhdfs://127.0.0.1:{closed_port()}"
    for operator in (
        CsvFileInput(f"{address}/in"),
        ParquetFileOutput(f"{address}/out", schema="x bigint"),
    ):
        began = time.monotonic()
        check = _one(operator, timeout=2.0)
        assert not check.ok and "did not answer after 1 attempts" in check.problem, check
        assert time.monotonic() - began < 5


def test_a_kafka_input_without_topics_says_so() -> None:
    check = _one(KafkaTextInputOperator(bootstrap_servers="127.0.0.1:1"))
    assert (
        not check.ok
        and check.problem == "operator 'op': property 'topics' must be set (it is required)"
    )
