"""Ranking operators: TopN family, frequent keys, merge sort; batches and bad input."""

from __future__ import annotations

import itertools

import pyarrow as pa

from malhar.algo import BottomN, LeastFrequentKey, MergeSort, MostFrequentKey, TopN, TopNUnique
from malhar.testing.harness import OperatorHarness, deliveries

SALES = [
    {"shop": "x", "item": "tea", "n": 4},
    {"shop": "y", "item": "jam", "n": 9},
    {"shop": "x", "item": "oat", "n": 7},
    {"shop": "x", "item": "rye", "n": 1},
    {"shop": "y", "item": "egg", "n": 2},
]


def test_top_n_per_key_with_ranks_from_tuples_and_batches() -> None:
    expected = [
        {"shop": "x", "item": "oat", "n": 7, "rank": 1},
        {"shop": "x", "item": "tea", "n": 4, "rank": 2},
        {"shop": "y", "item": "jam", "n": 9, "rank": 1},
        {"shop": "y", "item": "egg", "n": 2, "rank": 2},
    ]
    for inputs in (SALES, [pa.RecordBatch.from_pylist(SALES)]):
        h = OperatorHarness(TopN(n=2, order_by="n", key="shop"))
        h.run_window([("data", t) for t in inputs])
        assert sorted(h.sink("top").tuples, key=lambda r: (r["shop"], r["rank"])) == expected


def test_application_window_id_and_reset() -> None:
    h = OperatorHarness(BottomN(n=1, order_by="n", window_field="window"))
    h.run_window([("data", t) for t in SALES], window=6)
    h.run_window([("data", {"n": 3})], window=7)
    assert h.sink("top").per_window == {
        6: [{"shop": "x", "item": "rye", "n": 1, "rank": 1, "window": 6}],
        7: [{"n": 3, "rank": 1, "window": 7}],
    }


def test_ties_break_by_content_not_arrival() -> None:
    a, b = {"id": "a", "n": 1}, {"id": "b", "n": 1}
    for order in ([a, b], [b, a]):
        h = OperatorHarness(TopN(n=1, order_by="n"))
        h.run_window([("data", t) for t in order])
        assert h.sink("top").tuples == [{"id": "b", "n": 1, "rank": 1}]


def test_unique_counts_equal_tuples_once() -> None:
    h = OperatorHarness(TopNUnique(n=2))
    h.run_window([("data", 5), ("data", 5), ("data", 3), ("data", 1)])
    assert h.sink("top").tuples == [{"value": 5, "rank": 1}, {"value": 3, "rank": 2}]


def test_bad_tuples_of_top_n() -> None:
    h = OperatorHarness(TopN(n=2, order_by="n"))
    h.run_window([("data", {"x": 1}), ("data", {"n": None}), ("data", 3)])
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "no field 'n'",
        "ranking value of field 'n' is None",
        "no field 'n'",
    ]


def test_most_and_least_frequent_with_ties_and_unifier() -> None:
    h = OperatorHarness(MostFrequentKey())
    h.run_window([("data", v) for v in "abcab"])
    assert h.sink("most").tuples == [{"key": "a", "count": 2}]
    assert h.sink("list").tuples == [[{"key": "a", "count": 2}, {"key": "b", "count": 2}]]
    least = OperatorHarness(LeastFrequentKey(key="k"))
    least.run_window(
        [("data", pa.RecordBatch.from_pydict({"k": ["a", "b", "a"]})), ("data", {"z": 1})]
    )
    assert least.sink("most").tuples == [{"key": "b", "count": 1}]
    assert least.sink("error").tuples == [{"tuple": {"z": 1}, "reason": "no field 'k'"}]
    u = OperatorHarness(MostFrequentKey().get_unifier("list"))
    u.run_window(
        [
            ("input", [{"key": "q", "count": 3}]),
            ("input", [{"key": "p", "count": 3}, {"key": "r", "count": 1}]),
        ]
    )
    assert u.sink("output").tuples == [[{"key": "p", "count": 3}, {"key": "q", "count": 3}]]


def test_merge_sort_unifier_merges_sorted_runs() -> None:
    parts = []
    for run in ([5, 1, 9], [4, 8, 2]):
        h = OperatorHarness(MergeSort())
        h.run_window([("data", v) for v in run])
        parts.extend(h.sink("sort").tuples)
    u = OperatorHarness(MergeSort().get_unifier("sort"))
    u.run_window([("input", v) for v in parts])
    assert u.sink("output").tuples == [1, 2, 4, 5, 8, 9]


def test_batches_after_the_first_skip_rows_below_the_threshold_exactly() -> None:
    # later batches are pre-filtered against each group's n-th value; the result must
    # equal the per-tuple path, ties, NaN (ranked above every number) and nulls included
    nan = float("nan")
    batches = [
        [{"k": "a", "v": 5.0}, {"k": "a", "v": 3.0}, {"k": "b", "v": 1.0}],
        [{"k": "a", "v": 3.0}, {"k": "a", "v": 2.0}, {"k": "a", "v": nan}],
        [{"k": "b", "v": 0.5}, {"k": None, "v": 9.0}, {"k": "b", "v": 4.0}],
    ]
    for cls in (TopN, BottomN, TopNUnique):
        per_tuple = OperatorHarness(cls(n=2, order_by="v", key="k"))
        per_tuple.run_window([("data", t) for b in batches for t in b])
        batched = OperatorHarness(cls(n=2, order_by="v", key="k"))
        batched.run_window([("data", pa.RecordBatch.from_pylist(b)) for b in batches])
        assert repr(batched.sink("top").tuples) == repr(per_tuple.sink("top").tuples), cls


def test_top_unique_of_rows_with_a_list_column_in_a_batch_as_in_tuples() -> None:
    # Arrow cannot group list columns: the batch path raised where the tuples' worked
    rows = [{"k": [1, 2], "n": 1}, {"k": [1, 2], "n": 1}, {"k": [5], "n": 2}]
    got = []
    for inputs in deliveries("data", rows):
        h = OperatorHarness(TopNUnique(n=2, order_by="n"))
        h.run_window(inputs)
        got.append(h.sink("top").tuples)
    assert (
        got[0]
        == got[1]
        == got[2]
        == [{"k": [5], "n": 2, "rank": 1}, {"k": [1, 2], "n": 1, "rank": 2}]
    )


def test_nan_ranks_above_every_number_from_tuples_and_batches() -> None:
    # Arrow sorts NaN last whichever the direction: a batch's NaN row never ranked
    values = [float("nan"), 1.0, 2.0, None]
    for cls, want in [(TopN, "[nan, 2.0]"), (BottomN, "[1.0, 2.0]")]:
        got = set()
        for order in itertools.permutations(values):
            rows = [{"v": v, "i": i} for i, v in enumerate(order)]
            for inputs in deliveries("data", rows):
                h = OperatorHarness(cls(n=2, order_by="v"))
                h.run_window(inputs)
                got.add(str([r["v"] for r in h.sink("top").tuples]))
        assert got == {want}, cls.__name__


def _outputs(make, rows, port):
    got = []
    for inputs in deliveries("data", rows):
        h = OperatorHarness(make())
        h.run_window(inputs)
        got.append((h.sink(port).tuples, h.sink("error").tuples))
    return got


def test_one_column_batches_are_sorted_as_their_tuples() -> None:
    # a one-column batch read without its field gave bare values: every row an error
    got = _outputs(lambda: MergeSort(order_by="t"), [{"t": 3}, {"t": 1}, {"t": 2}], "sort")
    assert got == [([{"t": 1}, {"t": 2}, {"t": 3}], [])] * 3


def test_list_columns_rank_in_a_batch_as_in_tuples() -> None:
    rows = [{"v": [1], "id": 1}, {"v": [2], "id": 2}]
    got = _outputs(lambda: TopN(n=1, order_by="v"), rows, "top")
    assert got == [([{"v": [2], "id": 2, "rank": 1}], [])] * 3
    got = _outputs(lambda: TopN(n=1, order_by="v"), [{"v": [1]}, {"v": [2]}], "top")
    assert got == [([{"v": [2], "rank": 1}], [])] * 3


def test_nan_keys_are_one_group() -> None:
    rows = [{"k": float("nan"), "v": v} for v in (1, 3, 2)]
    got = _outputs(lambda: TopN(n=1, order_by="v", key="k"), rows, "top")
    assert [[(r["v"], r["rank"]) for r in out] for out, _ in got] == [[(3, 1)]] * 3
    h = OperatorHarness(TopN(n=1, order_by="v", key="k"))
    h.setup().begin_window(1)  # restored inside the window: the held NaN group is a copy
    h.put("data", rows[0])
    again = OperatorHarness.restored(TopN(n=1, order_by="v", key="k"), h.checkpoint())
    again.setup().begin_window(1)
    again.put("data", rows[1])
    again.end_window()
    assert [r["v"] for r in again.sink("top").tuples] == [3]
