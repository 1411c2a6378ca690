"""Edge cases of the JDBC poll input against a real PostgreSQL: keys that do not survive the
trip through Python (``real``, infinite timestamps, NaN), ``%`` in user SQL, ``uuid[]``
columns, a connection lost in the middle of a window, a value the driver cannot convert."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from typing import Any

import pytest

from malhar.io.jdbc import JdbcError, JdbcPollInputOperator
from malhar.testing.services.process import wait_until
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.jdbc_support import run_sql, unique_name

pytestmark = pytest.mark.integration


def _harness(op: Any, checkpoint: Path) -> Any:
    return kafka_harness(op, str(checkpoint), name="poll", partition=0, partitions=1)


def _windows(h: Any, windows: range) -> list[list[int]]:
    return [sorted(r["id"] for r in kafka_run_window(h, w)) for w in windows]


def _op(pg: Any, table: str, key: str, **more: Any) -> JdbcPollInputOperator:
    return JdbcPollInputOperator(
        pg.sqlalchemy_url, table=table, key_column=key, poll_interval_ms=0, **more
    )


# -- B: keys that do not survive the trip through Python -------------------------------------
def test_a_real_key_is_read_once_and_replayed_exactly(
    postgres_service: Any, tmp_path: Path
) -> None:
    # the position 0.2 (real) came back as the float8 0.20000000298..., bound as float8 it
    # compared below the real 0.2: row 2 was read again in every window
    pg = postgres_service
    table = unique_name("realkey")
    run_sql(pg, f"CREATE TABLE {table} (id int, k real)")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, 0.1), (2, 0.2)")
    op = _op(pg, table, "k")
    h = _harness(op, tmp_path)
    h.setup()
    before = pickle.dumps(op)
    assert _windows(h, range(3)) == [[1, 2], [], []]
    h.teardown()
    again = _harness(pickle.loads(before), tmp_path)  # window 0 replayed from its record
    assert _windows(again, range(2)) == [[1, 2], []]
    again.teardown()


def test_a_char_key_cast_keeps_its_length(postgres_service: Any, tmp_path: Path) -> None:
    # the bounds are cast to the key's type: char(3) must not become char(1) ("character")
    pg = postgres_service
    table = unique_name("charkey")
    run_sql(pg, f"CREATE TABLE {table} (id int, k char(3))")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, 'aab'), (2, 'aac')")
    h = _harness(_op(pg, table, "k", max_records_per_window=1), tmp_path)
    h.setup()
    assert _windows(h, range(3)) == [[1], [2], []]
    h.teardown()


def test_infinite_timestamp_keys_are_left_out_and_reported_not_read_every_window(
    postgres_service: Any, tmp_path: Path, caplog: Any
) -> None:
    # psycopg2 gives 'infinity' as datetime.max, which is below 'infinity': the row was
    # read again every window
    pg = postgres_service
    table = unique_name("infts")
    run_sql(pg, f"CREATE TABLE {table} (id int, ts timestamp)")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, '2024-01-01'), (2, 'infinity'), (0, '-infinity')")
    op = _op(pg, table, "ts")
    h = _harness(op, tmp_path)
    with caplog.at_level("WARNING", logger="malhar.io.jdbc.poll"):
        h.setup()
    assert _windows(h, range(3)) == [[1], [], []]
    run_sql(pg, f"INSERT INTO {table} VALUES (3, '2024-02-01')")
    assert _windows(h, range(3, 5)) == [[3], []]
    h.teardown()
    warned = [r.getMessage() for r in caplog.records if "infinite" in r.getMessage()]
    assert len(warned) == 1 and "2 row(s)" in warned[0] and "NaN or infinite ts" in warned[0]
    assert op.metrics() == {"non_finite_key_rows": 2.0}


# -- C: a NaN key -------------------------------------------------------------------------------
@pytest.mark.parametrize("sql_type", ["numeric", "double precision", "real"])
def test_a_nan_key_does_not_stop_polling(
    postgres_service: Any, tmp_path: Path, sql_type: str, caplog: Any
) -> None:
    # NaN sorts above every number: once it was the position, key > NaN matched nothing
    # again and the input stopped reading new rows without a word
    pg = postgres_service
    table = unique_name("nankey")
    run_sql(pg, f"CREATE TABLE {table} (id int, k {sql_type})")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, 1), (2, 2), (9, 'NaN')")
    op = _op(pg, table, "k")
    h = _harness(op, tmp_path)
    with caplog.at_level("WARNING", logger="malhar.io.jdbc.poll"):
        h.setup()
    assert _windows(h, range(2)) == [[1, 2], []]
    run_sql(pg, f"INSERT INTO {table} VALUES (3, 3)")
    assert _windows(h, range(2, 4)) == [[3], []]
    h.teardown()
    assert any("have a NaN or infinite k" in r.getMessage() for r in caplog.records)
    assert op.metrics() == {"non_finite_key_rows": 1.0}


# -- A: % in user SQL ---------------------------------------------------------------------------
def test_percent_in_where_and_query(
    postgres_service: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from malhar.io.jdbc.poll_source import JdbcPollSourceSettings, JdbcPollStreamReader

    pg = postgres_service
    table = unique_name("pct")
    run_sql(pg, f"CREATE TABLE {table} (id int, item text)")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, 'paid-1'), (2, 'open'), (3, 'paid 100%')")
    sources = [
        {"table": table, "where": "item LIKE 'paid%'"},
        {"query": f"SELECT * FROM {table} WHERE item LIKE 'paid%' AND item <> '%'"},
    ]
    for n, source in enumerate(sources):
        h = _harness(
            JdbcPollInputOperator(pg.sqlalchemy_url, key_column="id", **source), tmp_path / f"op{n}"
        )
        h.setup()
        assert _windows(h, range(2)) == [[1, 3], []], source
        h.teardown()
        # the Spark source reads through the same statements
        settings = JdbcPollSourceSettings()
        # (a reference: the data source refuses a literal password)
        monkeypatch.setenv("MALHAR_TEST_PG_URL", pg.sqlalchemy_url)
        settings.from_options({"url": "${env:MALHAR_TEST_PG_URL}", "key_column": "id", **source})
        reader = JdbcPollStreamReader(settings)
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        (part,) = reader.partitions(start, end)
        ids = [i for b in reader.read(part) for i in b.column("id").to_pylist()]
        reader.stop()
        assert ids == [1, 3], source


# -- D: uuid[] ----------------------------------------------------------------------------------
def test_uuid_arrays_are_lists_of_text(postgres_service: Any, tmp_path: Path) -> None:
    pg = postgres_service
    table = unique_name("uuids")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    run_sql(pg, f"CREATE TABLE {table} (id int, u uuid[], m uuid[][])")
    run_sql(
        pg,
        f"INSERT INTO {table} VALUES (1, ARRAY[%s, NULL]::uuid[], NULL), (2, '{{}}', NULL), "
        "(3, NULL, ARRAY[[%s::uuid]])",
        (a, b),
    )
    h = _harness(_op(pg, table, "id"), tmp_path)
    h.setup()
    rows = kafka_run_window(h, 0)
    h.teardown()
    assert [(r["id"], r["u"]) for r in rows] == [(1, [a, None]), (2, [])]
    (err,) = h.sink("error").tuples  # a multi-dimensional array is still an error row
    assert err["key"] == "3" and "'m'" in err["error"], err


# -- F: the connection lost in the middle of a window --------------------------------------------
def test_a_connection_lost_mid_window_is_retried_with_the_same_rows(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = unique_name("killed")
    run_sql(pg, f"CREATE TABLE {table} (id int, k int)")
    keys = [1, 1, 1, 2, 3, 3, 4, 5, 5, 5, 6, 7]  # ties across fetch boundaries
    run_sql(
        pg, f"INSERT INTO {table} SELECT g, (%s::int[])[g] FROM generate_series(1, 12) g", (keys,)
    )

    def run(kill: bool, checkpoint: Path) -> list[list[int]]:
        op = _op(pg, table, "k", fetch_size=2, max_records_per_window=7, retry_backoff=0.05)
        h = _harness(op, checkpoint)
        h.setup()
        out = []
        for w in range(3):
            h.begin_window(w)
            h.emit_tuples()
            if kill and w == 0:
                pid = op._conn.get_backend_pid()
                run_sql(pg, "SELECT pg_terminate_backend(%s)", (pid,))
                wait_until(
                    lambda pid=pid: (
                        not run_sql(pg, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
                    ),
                    timeout=10,
                    what=f"backend {pid} gone",
                )
            while True:
                before = h.operator.output.count
                h.emit_tuples()
                if h.operator.output.count == before:
                    break
            h.end_window()
            out.append(sorted(r["id"] for r in h.sink("output").per_window.get(w, [])))
        h.teardown()
        return out

    clean = run(False, tmp_path / "clean")
    assert sorted(i for w in clean for i in w) == list(range(1, 13))
    assert run(True, tmp_path / "killed") == clean


# -- E: a value the driver cannot convert -------------------------------------------------------
def test_a_value_the_driver_cannot_convert_goes_to_the_error_port(
    postgres_service: Any, tmp_path: Path
) -> None:
    # psycopg2 raised for the whole fetch: the window failed, and every replay of it
    pg = postgres_service
    table = unique_name("bigdate")
    run_sql(pg, f"CREATE TABLE {table} (id int, d date, ds date[], t timestamp)")
    run_sql(
        pg,
        f"INSERT INTO {table} VALUES (1, '2024-01-01', NULL, NULL), "
        "(2, '2024-01-02', '{2024-01-01}', '2024-01-01 10:00'), (3, '10000-01-01', NULL, NULL), "
        "(4, '2024-01-04', '{2024-01-01,0044-03-15 BC}', NULL), "
        "(5, '2024-01-05', NULL, '0001-01-01 00:00 BC'), (6, '2024-01-06', NULL, NULL)",
    )
    op = _op(pg, table, "id", fetch_size=2)
    h = _harness(op, tmp_path)
    h.setup()
    before = pickle.dumps(op)
    assert _windows(h, range(2)) == [[1, 2, 6], []]
    errors = {e["key"]: e["error"] for e in h.sink("error").tuples}
    h.teardown()
    assert sorted(errors) == ["3", "4", "5"], errors
    assert "'d'" in errors["3"] and "10000-01-01" in errors["3"], errors["3"]
    assert "'ds'" in errors["4"] and "BC" in errors["4"], errors["4"]
    assert "'t'" in errors["5"] and "BC" in errors["5"], errors["5"]
    again = _harness(pickle.loads(before), tmp_path)  # the replay: the same rows and errors
    assert _windows(again, range(1)) == [[1, 2, 6]]
    assert {e["key"]: e["error"] for e in again.sink("error").tuples} == errors
    again.teardown()


def test_a_key_the_driver_cannot_convert_fails_clearly(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = unique_name("bigkey")
    run_sql(pg, f"CREATE TABLE {table} (id int, d date)")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, '2024-01-01'), (2, '10000-01-01')")
    h = _harness(_op(pg, table, "d"), tmp_path)
    h.setup()
    with pytest.raises(JdbcError) as info:
        kafka_run_window(h, 0)
    h.teardown()
    text = str(info.value)
    assert table in text and "d = '10000-01-01'" in text and "where=" in text, text
