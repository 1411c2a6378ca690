"""Ranking operators: TopN family, frequent keys, merge sort; batches and bad input."""

from __future__ import annotations

import collections
import itertools

import pyarrow as pa
import pytest

from malhar import DAG
from malhar.algo import BottomN, LeastFrequentKey, MergeSort, MostFrequentKey, TopN, TopNUnique
from malhar.errors import ConfigError
from malhar.testing.harness import OperatorHarness, deliveries
from malhar.validation import ValidationError
from tests.algo.partitions import as_multiset, run_partitioned

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


# -- the fields TopN writes (rank_name, window_field) are never read nor overwritten --------
def test_ranking_or_grouping_by_the_rank_or_window_field_is_refused_when_configured() -> None:
    # order_by="rank" ranked by the positions TopN wrote over the data, and its unifier
    # dropped the field before ranking: KeyError with several partitions
    cases = [
        (
            dict(order_by="rank"),
            "TopN: order_by 'rank' is also rank_name, the field TopN writes the rank into: "
            "set rank_name to another name (e.g. rank_name='position')",
        ),
        (
            dict(order_by="n", key="w", window_field="w"),
            "TopN: key 'w' is also window_field, the field TopN writes the application window "
            "id into: set window_field to another name (e.g. window_field='window_id')",
        ),
        (
            dict(rank_name="w", window_field="w"),
            "TopN: rank_name and window_field are both 'w': the window id would overwrite the "
            "rank; give window_field another name",
        ),
    ]
    for props, message in cases:
        with pytest.raises(ConfigError) as exc:
            TopN(n=2, **props)
        assert str(exc.value) == message
    assert TopN(n=2, order_by="rank", rank_name="position").rank_name == "position"
    with pytest.raises(ConfigError, match="BottomN: order_by 'rank' is also rank_name"):
        BottomN().configure(order_by="rank")
    # properties set one by one (application files): DAG.validate and setup refuse them
    op = TopN(n=2)
    op.__dict__["order_by"] = "rank"
    dag = DAG("top")
    dag.add_operator("top", op)
    with pytest.raises(ValidationError) as invalid:
        dag.validate()
    assert f"operator 'top': {cases[0][1]}" in invalid.value.problems
    with pytest.raises(ConfigError, match="is also rank_name"):
        OperatorHarness(op).setup()


def test_a_tuple_holding_the_rank_or_window_field_goes_to_error_from_tuples_and_batches() -> None:
    # its own rank was replaced by a position 1..n: the data was lost silently
    rows = [{"page": "a", "score": 10, "rank": 9}, {"page": "b", "score": 50}]
    reason = (
        "the tuple already has a field 'rank', which TopN writes the rank into (rank_name); "
        "it is not overwritten: set rank_name to a name the tuples do not use"
    )
    got = _outputs(lambda: TopN(n=2, order_by="score"), rows, "top")
    assert got[0] == (
        [{"page": "b", "score": 50, "rank": 1}],
        [{"tuple": rows[0], "reason": reason}],
    )
    # a batch holding the column: every row (one check per batch)
    batch = pa.RecordBatch.from_pylist([{"page": "a", "score": 10, "rank": 9}] * 2)
    h = OperatorHarness(TopN(n=2, order_by="score"))
    h.run_window([("data", batch)])
    assert h.sink("top").tuples == []
    assert h.sink("error").tuples == [{"tuple": rows[0], "reason": reason}] * 2
    windowed = [{"n": 1, "w": 5}, {"n": 2}]
    h = OperatorHarness(TopN(n=2, order_by="n", window_field="w"))
    h.run_window([("data", t) for t in windowed], window=4)
    assert h.sink("top").tuples == [{"n": 2, "rank": 1, "w": 4}]
    assert h.sink("error").tuples == [
        {
            "tuple": windowed[0],
            "reason": "the tuple already has a field 'w', which TopN writes the application "
            "window id into (window_field); it is not overwritten: set window_field to a name "
            "the tuples do not use",
        }
    ]
    h = OperatorHarness(TopN(n=2, rank_name="value"))
    h.run_window([("data", 3)])
    assert h.sink("error").tuples == [
        {
            "tuple": 3,
            "reason": "a tuple that is not a record is output as {'value': tuple}, and TopN "
            "writes the rank into 'value' (rank_name): set rank_name to another name",
        }
    ]


def test_one_and_several_partitions_agree_on_tuples_holding_the_rank_field() -> None:
    rows = [{"page": p, "score": s} for p, s in [("a", 10), ("b", 50), ("f", 60), ("g", 5)]]
    rows += [{"page": "x", "score": 99, "rank": 1}, {"page": "y", "score": 7, "rank": 2}]
    windows = [[("data", r) for r in rows], [("data", pa.RecordBatch.from_pylist(rows[:4]))]]
    results = []
    for parts in (1, 3):
        out = run_partitioned(lambda: TopN(n=2, order_by="score"), windows, parts, seed=parts)
        results.append({port: {w: as_multiset(t) for w, t in o.items()} for port, o in out.items()})
    assert results[0] == results[1]
    assert [r["page"] for r in results[0]["top"][0]] == ["b", "f"]
    assert sorted(e["tuple"]["page"] for e in results[0]["error"][0]) == ["x", "y"]


def test_one_column_rows_keep_their_field_name_in_a_batch_as_in_tuples() -> None:
    # a one-column batch came out as {"value": v}, its tuples as {"v": v}; a "rank"
    # column was ranked from a batch and refused from tuples
    got = _outputs(lambda: TopN(n=2), [{"v": 5}, {"v": 7}], "top")
    assert got == [([{"v": 7, "rank": 1}, {"v": 5, "rank": 2}], [])] * 3
    got = _outputs(lambda: TopN(n=2), [{"rank": 5}], "top")
    assert [(top, [e["tuple"] for e in errors]) for top, errors in got] == [([], [{"rank": 5}])] * 3


def test_one_and_several_partitions_agree_on_records_that_are_not_dicts() -> None:
    # the unifier read a named field of a namedtuple (output as {"value": tuple}) from the
    # wrapping dict, and a key "value" from the bare value: KeyError with several partitions
    page = collections.namedtuple("page", "name score")
    cases = [
        (lambda: TopN(n=2, order_by="score"), [page("a", 1), page("b", 3), page("c", 2)]),
        (lambda: TopN(n=1, key="value"), [{"value": 5}, {"value": 5}, {"value": 7}]),
    ]
    for make, tuples in cases:
        windows = [[("data", t) for t in tuples]]
        one, three = (run_partitioned(make, windows, parts)["top"][0] for parts in (1, 3))
        assert sorted(map(repr, one)) == sorted(map(repr, three)), one
