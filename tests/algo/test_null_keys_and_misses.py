"""Dedup's ``null_keys`` (match / error / unique) and LookupJoin's misses (counted in
``metrics()``, ``miss_policy="error"``), one tuple at a time and in Arrow batches."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.algo import BoundedDedup, LookupJoin, TimeBasedDedup
from malhar.errors import ConfigError
from malhar.properties import PropertyError
from malhar.testing.harness import OperatorHarness

SCHEMA = pa.schema([("id", pa.int64()), ("t", pa.int64()), ("n", pa.int64())])


def _harness(op: Any, tmp_path: Path) -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="op", checkpoint=str(tmp_path)))


def _feed(rows: list[dict], as_batch: bool, port: str = "input") -> list[tuple[str, Any]]:
    if as_batch:
        return [(port, pa.RecordBatch.from_pylist(rows, schema=SCHEMA))]
    return [(port, r) for r in rows]


def _ns(h: OperatorHarness, port: str) -> list[int]:
    return [r["n"] for r in h.sink(port).tuples]


# two different orders without an id, between orders with one
ROWS = [
    {"id": 1, "t": 100_000, "n": 0},
    {"id": None, "t": 100_000, "n": 1},
    {"id": None, "t": 100_000, "n": 2},
    {"id": 1, "t": 100_000, "n": 3},
    {"id": 2, "t": 100_000, "n": 4},
]

DEDUPS = {
    "time": lambda **kw: TimeBasedDedup(key="id", time="t", **kw),
    "bounded": lambda **kw: BoundedDedup(key="id", **kw),
}


# -- dedup: null_keys ----------------------------------------------------------------------
@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize("kind", sorted(DEDUPS))
def test_dedup_null_keys_match_is_the_default_and_spark_s(
    tmp_path: Path, kind: str, as_batch: bool
) -> None:
    op = DEDUPS[kind]()
    assert op.null_keys == "match"
    h = _harness(op, tmp_path)
    h.run_window(_feed(ROWS, as_batch))
    # as Spark's dropDuplicates: None is one key, the second order without an id collapses
    assert _ns(h, "unique") == [0, 1, 4]
    assert _ns(h, "duplicate") == [2, 3]
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize("kind", sorted(DEDUPS))
def test_dedup_null_keys_error_sends_them_to_error(
    tmp_path: Path, kind: str, as_batch: bool
) -> None:
    h = _harness(DEDUPS[kind](null_keys="error"), tmp_path)
    h.run_window(_feed(ROWS, as_batch))
    assert _ns(h, "unique") == [0, 4]
    assert _ns(h, "duplicate") == [3]
    errors = h.sink("error").tuples
    assert [e["tuple"]["n"] for e in errors] == [1, 2]
    assert {e["reason"] for e in errors} == {"the key field 'id' is null (null_keys='error')"}
    assert h.operator.metrics()["errors"] == 2.0
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize("kind", sorted(DEDUPS))
def test_dedup_null_keys_unique_passes_them_and_remembers_none(
    tmp_path: Path, kind: str, as_batch: bool
) -> None:
    h = _harness(DEDUPS[kind](null_keys="unique"), tmp_path)
    h.run_window(_feed(ROWS, as_batch))
    h.run_window(_feed(ROWS[1:2], as_batch))  # a later window: still nothing remembered
    assert _ns(h, "unique") == [0, 1, 2, 4, 1]
    assert _ns(h, "duplicate") == [3]
    assert h.sink("error").tuples == []
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_time_based_null_keys_unique_still_expire(tmp_path: Path, as_batch: bool) -> None:
    h = _harness(
        TimeBasedDedup(key="id", time="t", expire_after=60_000, null_keys="unique"), tmp_path
    )
    h.run_window(_feed([{"id": 1, "t": 200_000, "n": 0}], as_batch))
    h.run_window(
        _feed([{"id": None, "t": 20_000, "n": 1}, {"id": None, "t": 190_000, "n": 2}], as_batch)
    )
    assert _ns(h, "unique") == [0, 2]
    assert _ns(h, "expired") == [1]
    h.teardown()


def test_dedup_a_tuple_key_with_a_null_part_is_null(tmp_path: Path) -> None:
    h = _harness(BoundedDedup(key="k", null_keys="error"), tmp_path)
    h.run_window([("input", {"k": ("a", None)}), ("input", {"k": ("a", 1)})])
    assert h.sink("unique").tuples == [{"k": ("a", 1)}]
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "the key field 'k' has a null part: ('a', None) (null_keys='error')"
    ]
    h.teardown()
    # the whole tuple as the key
    h = _harness(TimeBasedDedup(key=None, time=1, null_keys="error"), tmp_path / "whole")
    h.run_window([("input", (None, 5)), ("input", ("x", 5))])
    assert h.sink("unique").tuples == [("x", 5)]
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "the key has a null part: (None, 5) (null_keys='error')"
    ]
    h.teardown()


def test_dedup_null_keys_refuses_other_values() -> None:
    with pytest.raises(PropertyError, match=r"null_keys: .distinct. is not one of"):
        BoundedDedup(key="id", null_keys="distinct")


def test_time_based_batch_with_null_keys_set_apart_stays_vectorized(tmp_path: Path) -> None:
    h = _harness(TimeBasedDedup(key="id", time="t", null_keys="error"), tmp_path)

    def per_key(*_: Any) -> Any:
        raise AssertionError("the non-null int keys went one at a time")

    h.operator._classify_rows = per_key  # only the key sets' numpy path may decide
    h.run_window(_feed(ROWS, as_batch=True))
    assert _ns(h, "unique") == [0, 4]
    assert _ns(h, "duplicate") == [3]
    assert len(h.sink("error").tuples) == 2
    h.teardown()


@pytest.mark.parametrize("mode", ["match", "error", "unique"])
@pytest.mark.parametrize("kind", sorted(DEDUPS))
def test_dedup_null_keys_batches_decide_as_tuples(tmp_path: Path, kind: str, mode: str) -> None:
    rng = random.Random(f"{kind}{mode}")
    windows = [
        [
            {"id": rng.choice([None, 1, 2, 3, 4]), "t": rng.randrange(0, 300_000), "n": i}
            for i in range(30)
        ]
        for _ in range(4)
    ]
    got = {}
    for as_batch in (False, True):
        h = _harness(
            DEDUPS[kind](
                null_keys=mode, **({"expire_after": 100_000} if kind == "time" else {"max_keys": 3})
            ),
            tmp_path / str(as_batch),
        )
        for w in windows:
            h.run_window(_feed(w, as_batch))
        got[as_batch] = {
            p: sorted(_ns(h, p) if p != "error" else [e["tuple"]["n"] for e in h.sink(p).tuples])
            for p in h.sinks
        }
        h.teardown()
    assert got[True] == got[False]
    if mode == "error":
        assert got[True]["error"]


# -- LookupJoin: misses --------------------------------------------------------------------
TABLE = [{"id": "p1", "name": "tea"}]
STREAM = [{"sku": "p1", "n": 1}, {"sku": "p9", "n": 2}, {"sku": None, "n": 3}]
STREAM_SCHEMA = pa.schema([("sku", pa.string()), ("n", pa.int64())])
JOINED = "sku string, n bigint, id string, name string"


def _stream(as_batch: bool) -> list[tuple[str, Any]]:
    if as_batch:
        return [("stream", pa.RecordBatch.from_pylist(STREAM, schema=STREAM_SCHEMA))]
    return [("stream", t) for t in STREAM]


@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize("how", ["inner", "left"])
def test_lookup_join_counts_misses(tmp_path: Path, how: str, as_batch: bool) -> None:
    h = _harness(LookupJoin("sku", right_key="id", join_type=how, schema=JOINED), tmp_path)
    h.run_window([("table", TABLE[0])])
    assert h.operator.metrics() == {"errors": 0.0, "misses": 0.0, "table_null_keys": 0.0}
    # p9 has no row, None matches nothing
    h.run_window(_stream(as_batch))
    assert h.operator.metrics()["misses"] == 2.0
    assert [r["n"] for r in h.sink("output").tuples] == ([1] if how == "inner" else [1, 2, 3])
    assert h.sink("error").tuples == []  # the default drops (inner) or emits (left)
    h.run_window([("stream", STREAM[0])])
    assert h.operator.metrics()["misses"] == 0.0  # per window
    h.teardown()


def test_lookup_join_counts_a_row_of_the_same_window_as_a_miss(tmp_path: Path) -> None:
    h = _harness(LookupJoin("sku", right_key="id"), tmp_path)
    h.run_window([("table", TABLE[0]), ("stream", STREAM[0])])  # the row is not in force yet
    assert h.sink("output").tuples == []
    assert h.operator.metrics()["misses"] == 1.0
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_lookup_join_counts_table_rows_with_a_null_key(tmp_path: Path, as_batch: bool) -> None:
    h = _harness(LookupJoin("sku", right_key="id"), tmp_path)
    rows = [{"id": None, "name": "no id"}, {"id": "p1", "name": "tea"}, {"name": "no field"}]
    feed = (
        [("table", pa.RecordBatch.from_pylist(rows[:2]))]
        if as_batch
        else [("table", r) for r in rows[:2]]
    )
    h.run_window([*feed, ("table", rows[2])])
    metrics = h.operator.metrics()
    assert metrics["table_null_keys"] == 1.0
    assert metrics["errors"] == 1.0  # without the field at all: to error, as before
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_lookup_join_miss_policy_error(tmp_path: Path, as_batch: bool) -> None:
    h = _harness(LookupJoin("sku", right_key="id", miss_policy="error", schema=JOINED), tmp_path)
    h.run_window([("table", TABLE[0])])
    h.run_window(_stream(as_batch))
    assert h.sink("output").tuples == [{"sku": "p1", "n": 1, "id": "p1", "name": "tea"}]
    errors = h.sink("error").tuples
    assert [e["tuple"] for e in errors] == STREAM[1:]
    assert errors[0]["reason"] == "no row for {'sku': 'p9'}"  # Enricher's reason
    assert errors[1]["reason"].startswith("no row for {'sku': None} (a null key matches nothing")
    assert h.operator.metrics() == {"errors": 2.0, "misses": 2.0, "table_null_keys": 0.0}
    h.teardown()


def test_lookup_join_miss_policy_error_untyped_batch(tmp_path: Path) -> None:
    h = _harness(LookupJoin("sku", right_key="id", miss_policy="error"), tmp_path)
    h.run_window([("table", TABLE[0])])
    h.run_window(_stream(as_batch=True))
    assert [e["tuple"]["n"] for e in h.sink("error").tuples] == [2, 3]
    h.teardown()


def test_lookup_join_miss_policy_drop_is_the_inner_default(tmp_path: Path) -> None:
    h = _harness(LookupJoin("sku", right_key="id", miss_policy="drop"), tmp_path)
    h.run_window([("table", TABLE[0])])
    h.run_window(_stream(as_batch=False))
    assert [r["n"] for r in h.sink("output").tuples] == [1]
    assert h.sink("error").tuples == []
    assert h.operator.metrics()["misses"] == 2.0
    h.teardown()


def test_lookup_join_miss_policy_is_for_inner_joins(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="miss_policy='error' is for join_type='inner'"):
        _harness(LookupJoin("sku", join_type="left", miss_policy="error"), tmp_path).setup()
    with pytest.raises(PropertyError, match="miss_policy"):
        LookupJoin("sku", miss_policy="null")
