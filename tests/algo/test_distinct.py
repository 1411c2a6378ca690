"""Distinct values and value filters: semantics, batches, typed outputs, bad input."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from malhar import PropertyError
from malhar.algo import Distinct, FilterKeys, FilterValues, InvertIndex, Sampler, UniqueValueCount
from malhar.testing.harness import OperatorHarness, deliveries


def test_distinct_values_of_a_field_once_per_window() -> None:
    h = OperatorHarness(Distinct(field="w"))
    h.run_window(
        [
            ("data", {"w": "a"}),
            ("data", pa.RecordBatch.from_pydict({"w": ["b", "a"]})),
            ("data", {"x": 1}),
        ]
    )
    h.run_window([("data", {"w": "a"})])
    assert h.sink("distinct").per_window == {0: ["a", "b"], 1: ["a"]}
    assert h.sink("error").tuples == [{"tuple": {"x": 1}, "reason": "no field 'w'"}]


def test_unique_value_count_per_key() -> None:
    h = OperatorHarness(UniqueValueCount())
    h.run_window(
        [("data", ("u1", "p")), ("data", ("u1", "q")), ("data", ("u1", "p")), ("data", ("u2", "p"))]
    )
    assert h.sink("count").tuples == [{"key": "u1", "count": 2}, {"key": "u2", "count": 1}]


def test_filter_values_on_tuples_and_a_typed_batch() -> None:
    h = OperatorHarness(FilterValues(values=["a"], field="k", schema="k string, n bigint"))
    batch = pa.RecordBatch.from_pydict({"k": ["a", "b", None], "n": [1, 2, 3]})
    h.run_window([("data", batch), ("data", {"k": "a", "n": 9}), ("data", {"n": 1})])
    assert h.sink("filter").tuples == [{"k": "a", "n": 1}, {"k": "a", "n": 9}]
    assert type(h.operator).filter.schema is not None  # the configured schema typed the port
    assert h.sink("error").tuples[0]["reason"] == "no field 'k'"


def test_typed_variant_pickles_and_keeps_its_schema() -> None:
    op = FilterValues(values=[1], schema="v bigint")
    copy = pickle.loads(pickle.dumps(op))
    assert type(copy) is type(op) and type(copy).filter.schema.simpleString() == "struct<v:bigint>"
    assert copy.values == [1]
    with pytest.raises(PropertyError, match="schema"):
        FilterValues(schema="not a ddl !!")


def test_filter_keys_and_inverse() -> None:
    h = OperatorHarness(FilterKeys(keys=["a"], inverse=True))
    h.run_window([("data", {"a": 1, "b": 2}), ("data", {"a": 3}), ("data", "x")])
    assert h.sink("filter").tuples == [{"b": 2}]
    assert h.sink("error").tuples == [{"tuple": "x", "reason": "expected a dict, got str"}]


def test_invert_index_and_its_unifier() -> None:
    h = OperatorHarness(InvertIndex())
    h.run_window([("data", ("d2", ["x"])), ("data", ("d1", "x")), ("data", (1,))])
    assert h.sink("index").tuples == [{"value": "x", "keys": ["d1", "d2"]}]
    assert len(h.sink("error").tuples) == 1
    u = OperatorHarness(InvertIndex().get_unifier("index"))
    u.run_window(
        [("input", {"value": "x", "keys": ["d3"]}), ("input", {"value": "x", "keys": ["d1"]})]
    )
    assert u.sink("output").tuples == [{"value": "x", "keys": ["d1", "d3"]}]


def test_sampler_is_deterministic_and_keeps_keys_together() -> None:
    rows = [{"user": f"u{i % 50}", "i": i} for i in range(2000)]
    a = OperatorHarness(Sampler(rate=0.2, field="user"))
    a.run_window([("data", r) for r in rows])
    b = OperatorHarness(Sampler(rate=0.2, field="user"))
    b.run_window([("data", pa.RecordBatch.from_pylist(rows))])
    kept = a.sink("sample").tuples
    assert kept == b.sink("sample").tuples and 0 < len(kept) < len(rows)
    users = {r["user"] for r in kept}
    assert all(r["user"] in users for r in rows if r["user"] in users)  # all or nothing per user
    assert len([r for r in rows if r["user"] in users]) == len(kept)
    other = OperatorHarness(Sampler(rate=0.2, field="user", seed=1))
    other.run_window([("data", r) for r in rows])
    assert other.sink("sample").tuples != kept


@pytest.mark.parametrize(
    ("make", "port"),
    [
        (lambda: Distinct(field="k"), "distinct"),
        (lambda: Distinct(), "distinct"),
        (lambda: UniqueValueCount(key="k", value="v"), "count"),
        (lambda: InvertIndex(key="k", value="n"), "index"),
    ],
)
def test_list_columns_give_a_batch_the_results_of_its_tuples(make, port) -> None:
    # Arrow cannot group list columns: the batch path raised where the tuples' worked
    rows = [
        {"k": [1, 2], "v": [3], "n": 1},
        {"k": [1, 2], "v": [3], "n": 1},
        {"k": [5], "v": [4], "n": 2},
    ]
    got = []
    for inputs in deliveries("data", rows):
        h = OperatorHarness(make())
        h.run_window(inputs)
        assert h.sink("error").tuples == []
        got.append(h.sink(port).tuples)
    assert got[0] == got[1] == got[2]
    assert len(got[0]) == 2


def test_filter_values_finds_negative_zero_in_a_batch_as_in_tuples() -> None:
    rows = [{"v": -0.0}, {"v": 0.0}, {"v": 1.0}]
    got = []
    for inputs in deliveries("data", rows):
        h = OperatorHarness(FilterValues(values=[0.0], field="v"))
        h.run_window(inputs)
        got.append([str(r["v"]) for r in h.sink("filter").tuples])
    assert got == [["-0.0", "0.0"]] * 3


def test_a_one_column_list_batch_is_distinct_as_its_tuples() -> None:
    # the fallback read the one column without its field: bare values, each an error
    rows = [{"tags": ["a"]}, {"tags": ["a"]}, {"tags": ["b"]}]
    for inputs in deliveries("data", rows):
        h = OperatorHarness(Distinct(field="tags"))
        h.run_window(inputs)
        assert (h.sink("distinct").tuples, h.sink("error").tuples) == ([["a"], ["b"]], [])
