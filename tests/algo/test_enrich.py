"""Enricher: file and JDBC sources, refresh, miss policies; batch and tuple paths agree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from malhar import PropertyError
from malhar.algo import Enricher, FileLookup, JdbcLookup
from malhar.errors import ConfigError
from malhar.testing.harness import OperatorHarness

ORDERS = [{"product": 1, "qty": 2}, {"product": 7, "qty": 1}, {"product": 2, "qty": 5}]
PRODUCTS = [{"id": 1, "name": "tea", "price": 2.5}, {"id": 2, "name": "jam", "price": 4.0}]


def _write(path: Path, fmt: str, rows: list[dict]) -> None:
    if fmt == "csv":
        path.write_text(
            "id,name,price\n" + "".join(f"{r['id']},{r['name']},{r['price']}\n" for r in rows)
        )
    elif fmt == "json":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)


def _both(make, rows):
    one = OperatorHarness(make())
    one.run_window([("input", r) for r in rows])
    many = OperatorHarness(make())
    many.run_window([("input", pa.RecordBatch.from_pylist(rows))])
    assert one.sink("output").tuples == many.sink("output").tuples
    assert one.sink("error").tuples == many.sink("error").tuples
    return one


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("policy", ["null", "pass", "drop", "error"])
def test_file_sources_and_miss_policies(tmp_path: Path, fmt: str, policy: str) -> None:
    path = tmp_path / f"products.{fmt}"
    _write(path, fmt, PRODUCTS)
    h = _both(
        lambda: Enricher(
            FileLookup(str(path)),
            lookup_fields=["product"],
            store_fields=["id"],
            include_fields=["name"],
            miss_policy=policy,
        ),
        ORDERS,
    )
    hits = [{"product": 1, "qty": 2, "name": "tea"}, {"product": 2, "qty": 5, "name": "jam"}]
    miss = {
        "null": [{"product": 7, "qty": 1, "name": None}],
        "pass": [{"product": 7, "qty": 1}],
    }.get(policy, [])
    out = h.sink("output").tuples
    assert sorted(out, key=lambda r: r["product"]) == sorted(
        hits + miss, key=lambda r: r["product"]
    )
    errors = h.sink("error").tuples
    assert errors == (
        [{"tuple": {"product": 7, "qty": 1}, "reason": "no row for {'product': 7}"}]
        if policy == "error"
        else []
    )


def test_a_changed_file_is_reloaded_after_refresh(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    _write(path, "csv", PRODUCTS)
    h = OperatorHarness(Enricher(FileLookup(str(path)), lookup_fields=["id"], refresh_ms=1000))
    h.setup()
    now = [0.0]
    h.operator.clock = lambda: now[0]
    h.run_window([("input", {"id": 1})])
    _write(path, "csv", [{"id": 1, "name": "green tea", "price": 3.0}])
    os.utime(path, ns=(1, 1))  # a different mtime, whatever the clock's resolution
    h.run_window([("input", {"id": 1})])  # within refresh_ms: the old table
    now[0] = 1.5
    h.run_window([("input", {"id": 1}), ("input", {"x": 1}), ("input", "text")])
    assert [r["name"] for r in h.sink("output").tuples] == ["tea", "tea", "green tea"]
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "no field 'id'",
        "expected a dict tuple, got str",
    ]


def _sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price REAL)"
        )
        conn.exec_driver_sql("INSERT INTO products VALUES (1, 'tea', 2.5), (2, 'jam', 4.0)")
    engine.dispose()
    return url


def test_jdbc_lookup_caches_hits_and_misses_until_they_expire(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)

    def make():
        return Enricher(
            JdbcLookup(url, "products"),
            lookup_fields=["product"],
            store_fields=["id"],
            refresh_ms=10_000,
        )

    h = _both(make, ORDERS)
    assert h.sink("output").tuples == [
        {"product": 1, "qty": 2, "name": "tea", "price": 2.5},
        {"product": 7, "qty": 1, "name": None, "price": None},
        {"product": 2, "qty": 5, "name": "jam", "price": 4.0},
    ]
    op = OperatorHarness(make())
    op.setup()
    now = [0.0]
    op.operator.clock = lambda: now[0]
    op.run_window([("input", pa.RecordBatch.from_pylist(ORDERS))])
    op.run_window([("input", r) for r in ORDERS])
    assert op.operator.lookups == 1  # the second window was served by the cache
    with sa.create_engine(url).begin() as conn:
        conn.exec_driver_sql("UPDATE products SET name = 'oolong' WHERE id = 1")
    now[0] = 11.0
    op.run_window([("input", ORDERS[0])])
    assert op.sink("output").per_window[2] == [
        {"product": 1, "qty": 2, "name": "oolong", "price": 2.5}
    ]
    assert op.operator.lookups == 2
    op.teardown()


@pytest.mark.integration
def test_jdbc_lookup_against_postgresql(postgres_service) -> None:
    url = postgres_service.sqlalchemy_url
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS enrich_products")
        conn.exec_driver_sql(
            "CREATE TABLE enrich_products (shop text, id int, name text, PRIMARY KEY (shop, id))"
        )
        conn.exec_driver_sql("INSERT INTO enrich_products VALUES ('x', 1, 'tea'), ('y', 1, 'rye')")
    engine.dispose()
    h = _both(
        lambda: Enricher(
            JdbcLookup(url, "enrich_products"),
            lookup_fields=["shop", "sku"],
            store_fields=["shop", "id"],
            miss_policy="drop",
        ),
        [{"shop": "y", "sku": 1}, {"shop": "x", "sku": 2}, {"shop": "x", "sku": 1}],
    )
    assert h.sink("output").tuples == [
        {"shop": "y", "sku": 1, "name": "rye"},
        {"shop": "x", "sku": 1, "name": "tea"},
    ]
    h.teardown()


def test_bad_configuration() -> None:
    with pytest.raises(PropertyError, match="miss_policy"):
        Enricher(FileLookup("x.csv"), lookup_fields=["a"], miss_policy="ignore")
    with pytest.raises(PropertyError, match="source"):
        Enricher("x.csv", lookup_fields=["a"])


def test_a_batch_finds_what_its_tuples_find_with_null_keys_and_keys_of_another_type(
    tmp_path: Path,
) -> None:
    # the hash join matched no null key (a "drop" lost the row), and casting the store's
    # keys to the batch's type made "2" find 2, which a tuple's lookup does not
    path = tmp_path / "p.parquet"
    _write(path, "parquet", [{"a": 1, "b": None, "name": "x"}, {"a": 1, "b": 2, "name": "y"}])
    h = _both(
        lambda: Enricher(FileLookup(str(path)), lookup_fields=["a", "b"], miss_policy="drop"),
        [{"a": 1, "b": None, "qty": 1}, {"a": 1, "b": 2, "qty": 2}],
    )
    assert [r["name"] for r in h.sink("output").tuples] == ["x", "y"]
    products = tmp_path / "products.parquet"
    _write(products, "parquet", PRODUCTS)
    h = _both(
        lambda: Enricher(
            FileLookup(str(products)),
            lookup_fields=["product"],
            store_fields=["id"],
            miss_policy="error",
        ),
        [{"product": "2", "qty": 1}, {"product": "1", "qty": 3}],
    )
    assert h.sink("output").tuples == [] and len(h.sink("error").tuples) == 2


def _source(kind: str, tmp_path: Path) -> FileLookup | JdbcLookup:
    if kind == "jdbc":
        return JdbcLookup(_sqlite(tmp_path), "products")
    path = tmp_path / "products.csv"
    _write(path, "csv", PRODUCTS)
    return FileLookup(str(path))


@pytest.mark.parametrize("kind", ["file", "jdbc"])
@pytest.mark.parametrize("policy", ["null", "error"])
@pytest.mark.parametrize("as_batch", [False, True])
def test_a_lookup_value_that_cannot_be_a_key_goes_to_the_error_port(
    tmp_path: Path, kind: str, policy: str, as_batch: bool
) -> None:
    # a list or a dict in a lookup field raised TypeError (unhashable) in the lookup: the
    # whole window failed, on every replay
    bad = [{"product": [1], "qty": 3}, {"product": {"id": 2}, "qty": 4}]
    good = {"product": 2, "qty": 1}
    source = _source(kind, tmp_path)
    h = OperatorHarness(
        Enricher(
            source,
            lookup_fields=["product"],
            store_fields=["id"],
            include_fields=["name"],
            miss_policy=policy,
        )
    )
    if as_batch:  # one batch of a list column, one of a struct column (Arrow groups neither)
        feed = [("input", pa.RecordBatch.from_pylist([t])) for t in bad]
    else:
        feed = [("input", t) for t in bad]
    h.run_window([*feed, ("input", good)])
    assert h.sink("output").tuples == [{"product": 2, "qty": 1, "name": "jam"}]
    errors = h.sink("error").tuples
    assert [e["tuple"] for e in errors] == bad
    assert [e["reason"] for e in errors] == [
        f"the lookup field 'product' is a {kind_of} ({value}), which cannot be looked up: "
        "use a string, a number or a tuple of them (convert the value, or pick another "
        "lookup field)"
        for kind_of, value in (("list", "[1]"), ("dict", "{'id': 2}"))
    ]
    assert h.operator.metrics()["errors"] == 2
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_jdbc_miss_fields_are_the_table_s_columns_on_every_worker(
    tmp_path: Path, as_batch: bool
) -> None:
    # with include_fields unset, the None fields of a miss came from the last row found
    # (runtime, not checkpointed): a replay on a fresh worker emitted {'product': 9} where
    # the first run had emitted {'product': 9, 'name': None, 'price': None}
    url = _sqlite(tmp_path)

    def make() -> Enricher:
        return Enricher(
            JdbcLookup(url, "products"),
            lookup_fields=["product"],
            store_fields=["id"],
            miss_policy="null",
        )

    def feed(rows: list[dict]) -> list:
        return [("input", pa.RecordBatch.from_pylist(rows))] if as_batch else rows_in(rows)

    def rows_in(rows: list[dict]) -> list:
        return [("input", r) for r in rows]

    miss = [{"product": 9, "qty": 1}]
    warm = OperatorHarness(make())
    warm.run_window(feed([{"product": 1, "qty": 2}]), window=0)
    warm.run_window(feed(miss), window=1)
    cold = OperatorHarness(make())  # the worker that replays window 1 after a crash
    cold.run_window(feed(miss), window=1)
    want = [{"product": 9, "qty": 1, "name": None, "price": None}]
    assert warm.sink("output").per_window[1] == cold.sink("output").per_window[1] == want
    with sa.create_engine(url).begin() as conn:
        conn.exec_driver_sql("DELETE FROM products")
    empty = OperatorHarness(make())  # no row found ever: still the table's columns
    empty.run_window(feed(miss), window=1)
    assert empty.sink("output").per_window[1] == want
    for h in (warm, cold, empty):
        h.teardown()


def test_jdbc_lookup_without_the_store_column_is_a_config_error(tmp_path: Path) -> None:
    h = OperatorHarness(Enricher(JdbcLookup(_sqlite(tmp_path), "products"), lookup_fields=["sku"]))
    with pytest.raises(ConfigError, match="lookup table 'products' has no column 'sku'"):
        h.run_window([("input", {"sku": 1})])
