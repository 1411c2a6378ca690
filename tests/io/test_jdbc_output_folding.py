"""The JDBC output's upsert / merge_add folding and missing fields, against real PostgreSQL:
a window's result never depends on ``batch_size`` or on the window's other rows.

Each test failed on the code before these fixes (see the docstrings).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.io.jdbc import JdbcOutputOperator
from malhar.testing.harness import OperatorHarness
from tests.io.jdbc_support import new_table, run_sql, unique_name

pytestmark = pytest.mark.integration


def _harness(op: JdbcOutputOperator) -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="out", application=unique_name("fold")))


def _window(h: OperatorHarness, window: int, rows: list[Any]) -> None:
    h.run_window([("input", r) for r in rows], window=window)


def _errors(h: OperatorHarness) -> list[str]:
    return [e["error"] for e in h.sink("error").tuples]


# -- 1. merge_add with a NULL value does not depend on batch_size -------------------------------
@pytest.mark.parametrize("batch_size", [1, 2, 10])
def test_merge_add_null_does_not_depend_on_batch_size(postgres_service, batch_size: int) -> None:
    """Before: batch_size=10 folded the key with SUM() (NULL skipped) and stored 3;
    batch_size=1 applied t.n + EXCLUDED.n (NULL wins) and stored NULL."""
    pg = postgres_service
    table = new_table(pg, "mnull", "k text PRIMARY KEY, n int")
    op = JdbcOutputOperator(
        pg.sqlalchemy_url, table=table, mode="merge_add", key_columns=["k"], batch_size=batch_size
    )
    h = _harness(op)
    _window(
        h,
        0,
        [
            {"k": "a", "n": 1},
            {"k": "a", "n": None},
            {"k": "a", "n": 2},
            {"k": "b", "n": 1},
            {"k": "b", "n": 2},
        ],
    )
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == [("a", None), ("b", 3)]
    _window(h, 1, [{"k": "b", "n": 4}, {"k": "b", "n": 5}])
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == [("a", None), ("b", 12)]
    assert _errors(h) == []


# -- 2. repeated keys by the database's equality ------------------------------------------------
@pytest.mark.parametrize("mode", ["upsert", "merge_add"])
def test_keys_equal_in_the_database_but_not_in_arrow(postgres_service, mode: str) -> None:
    """Before: "a" / "a " (char(5)) and "1" / "01" (int) differ for Arrow, were not folded,
    and the window failed with "ON CONFLICT DO UPDATE command cannot affect row a second
    time" (21000), on every replay."""
    pg = postgres_service
    chars = new_table(pg, "kchar", "k char(5) PRIMARY KEY, n int")
    ints = new_table(pg, "kint", "k int PRIMARY KEY, n int")
    url = pg.sqlalchemy_url
    hc = _harness(JdbcOutputOperator(url, table=chars, mode=mode, key_columns=["k"]))
    hi = _harness(JdbcOutputOperator(url, table=ints, mode=mode, key_columns=["k"]))
    _window(hc, 0, [{"k": "a", "n": 1}, {"k": "a ", "n": 2}, {"k": "b", "n": 5}])
    _window(hi, 0, [{"k": "1", "n": 1}, {"k": "01", "n": 2}, {"k": "2", "n": 5}])
    first = 2 if mode == "upsert" else 3  # the last row wins / the values add up
    assert sorted(run_sql(pg, f"SELECT rtrim(k), n FROM {chars}")) == [("a", first), ("b", 5)]
    assert sorted(run_sql(pg, f"SELECT k, n FROM {ints}")) == [(1, first), (2, 5)]
    _window(hc, 1, [{"k": "a  ", "n": 10}, {"k": "a", "n": 20}])
    _window(hi, 1, [{"k": "001", "n": 10}, {"k": "1", "n": 20}])
    second = 20 if mode == "upsert" else first + 30
    assert sorted(run_sql(pg, f"SELECT rtrim(k), n FROM {chars}")) == [("a", second), ("b", 5)]
    assert sorted(run_sql(pg, f"SELECT k, n FROM {ints}")) == [(1, second), (2, 5)]
    assert _errors(hc) == _errors(hi) == []


# -- 3. NULL keys are distinct ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["upsert", "merge_add"])
def test_rows_with_a_null_key_are_all_inserted(postgres_service, mode: str) -> None:
    """Before: the fold treated NULL keys as one key: only (None, 2) was stored."""
    pg = postgres_service
    table = new_table(pg, "knull", "k text UNIQUE, n int")
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode=mode, key_columns=["k"])
    h = _harness(op)
    _window(
        h, 0, [{"k": None, "n": 1}, {"k": "a", "n": 1}, {"k": None, "n": 2}, {"k": "a", "n": 2}]
    )
    a = 2 if mode == "upsert" else 3
    expected = [("a", a), (None, 1), (None, 2)]
    key = lambda r: (r[0] is None, r)  # noqa: E731
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}"), key=key) == expected
    # and as an Arrow batch, in a second window
    _window(h, 1, [pa.RecordBatch.from_pylist([{"k": None, "n": 3}, {"k": None, "n": 3}])])
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}"), key=key) == [
        *expected,
        (None, 3),
        (None, 3),
    ]
    assert _errors(h) == []


# -- 4. a missing field does not depend on the other rows ---------------------------------------
@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_a_missing_field_takes_the_default_whatever_the_neighbours(
    postgres_service, mode: str
) -> None:
    """Before: alone, {"id": 1} took the DEFAULT 'new'; next to a row with "status" it got
    NULL and was rejected by NOT NULL."""
    pg = postgres_service
    table = new_table(pg, "dflt", "id int PRIMARY KEY, status text NOT NULL DEFAULT 'new'")
    keys = None if mode == "insert" else ["id"]
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode=mode, key_columns=keys)
    h = _harness(op)
    _window(h, 0, [{"id": 1}])
    _window(h, 1, [{"id": 2}, {"id": 3, "status": "done"}])
    # an Arrow batch without the column, next to dicts with it
    h.begin_window(2)
    h.put("input", {"id": 4, "status": "done"})
    h.put("input", pa.RecordBatch.from_pylist([{"id": 5}]))
    h.end_window()
    assert _errors(h) == []
    assert sorted(run_sql(pg, f"SELECT id, status FROM {table}")) == [
        (1, "new"),
        (2, "new"),
        (3, "done"),
        (4, "done"),
        (5, "new"),
    ]


def test_upsert_updates_only_the_fields_a_row_has(postgres_service) -> None:
    """Before: the row without "note" got note=NULL because its neighbour had one, and
    overwrote 'keep me'."""
    pg = postgres_service
    table = new_table(pg, "ufields", "k text PRIMARY KEY, n int, note text")
    run_sql(pg, f"INSERT INTO {table} VALUES ('a', 5, 'keep me'), ('c', 1, 'c note')")
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode="upsert", key_columns=["k"])
    h = _harness(op)
    _window(h, 0, [{"k": "a", "n": 6}, {"k": "b", "n": 1, "note": "y"}])
    assert sorted(run_sql(pg, f"SELECT k, n, note FROM {table}")) == [
        ("a", 6, "keep me"),
        ("b", 1, "y"),
        ("c", 1, "c note"),
    ]
    # rows of one key with different fields apply in arrival order
    _window(
        h,
        1,
        [
            {"k": "c", "n": 2},
            {"k": "c", "n": 3, "note": "new c"},
            {"k": "c", "n": 4},
            {"k": "a", "note": None},
        ],
    )
    assert sorted(run_sql(pg, f"SELECT k, n, note FROM {table}")) == [
        ("a", 6, None),
        ("b", 1, "y"),
        ("c", 4, "new c"),
    ]
    assert _errors(h) == []


def test_merge_add_adds_only_the_fields_a_row_has(postgres_service) -> None:
    """Before: {"k": "a", "x": 1} next to a row with "y" added NULL to y (y became NULL)."""
    pg = postgres_service
    table = new_table(pg, "mfields", "k text PRIMARY KEY, x int DEFAULT 0, y int DEFAULT 0")
    run_sql(pg, f"INSERT INTO {table} VALUES ('a', 10, 10)")
    op = JdbcOutputOperator(
        pg.sqlalchemy_url, table=table, mode="merge_add", key_columns=["k"], batch_size=2
    )
    h = _harness(op)
    _window(h, 0, [{"k": "a", "x": 1}, {"k": "b", "y": 2}, {"k": "a", "y": 3}, {"k": "a", "x": 4}])
    assert sorted(run_sql(pg, f"SELECT k, x, y FROM {table}")) == [("a", 15, 13), ("b", 0, 2)]
    assert _errors(h) == []


def test_a_rejected_row_keeps_only_its_own_fields(postgres_service) -> None:
    """A row the database rejects is reported with the fields it had (not NULLs for its
    neighbours' fields)."""
    pg = postgres_service
    table = new_table(pg, "rfields", "id int PRIMARY KEY, status text NOT NULL DEFAULT 'new'")
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table)
    h = _harness(op)
    _window(h, 0, [{"id": 1}, {"id": 2, "status": None}, {"id": 3, "status": "x"}])
    assert sorted(run_sql(pg, f"SELECT id, status FROM {table}")) == [(1, "new"), (3, "x")]
    errors = h.sink("error").tuples
    assert [(e["id"], e["status"]) for e in errors] == [(2, None)]
    assert 'null value in column "status"' in errors[0]["error"]


def test_null_keys_of_a_nulls_not_distinct_constraint_are_folded(postgres_service) -> None:
    """With ``UNIQUE NULLS NOT DISTINCT`` (PostgreSQL 15+) NULL keys conflict: they are folded
    like any key (not inserted twice, which would fail the statement)."""
    pg = postgres_service
    if run_sql(pg, "SHOW server_version_num")[0][0] < "150000":
        pytest.skip("NULLS NOT DISTINCT needs PostgreSQL 15")
    table = new_table(pg, "knnd", "k text UNIQUE NULLS NOT DISTINCT, n int")
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode="merge_add", key_columns=["k"])
    h = _harness(op)
    _window(h, 0, [{"k": None, "n": 1}, {"k": "a", "n": 1}, {"k": None, "n": 2}])
    _window(h, 1, [{"k": None, "n": 4}])
    key = lambda r: (r[0] is None, r)  # noqa: E731
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}"), key=key) == [("a", 1), (None, 7)]
    assert _errors(h) == []
