"""TopN / TopNByKey with nulls, ties and NaN; ToList order with sliding windows on the batch
path; RemoveDuplicates / SequenceCount with NaN: on the tuple and the Arrow-batch path, and
through merges (the partitioned unifier, sessions)."""

from __future__ import annotations

import itertools
import math
import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from malhar.testing import OperatorHarness
from malhar.window import KeyedWindowedOperator, TimeWindows, Watermark, WindowedOperator
from malhar.window.accumulation import (
    RemoveDuplicates,
    SequenceCount,
    ToList,
    TopN,
    TopNByKey,
)

PATHS = ("tuples", "batch")


def run_keyed(acc: Any, values: list, path: str, option: Any = None, batches: int = 1) -> dict:
    """``{window start: value}`` of the final panes of key "a" over ``values`` (times 1..)."""
    op = KeyedWindowedOperator(acc, option or TimeWindows(100), key="k", timestamp="t", value="v")
    h = OperatorHarness(op)
    rows = [{"k": "a", "t": i + 1, "v": v} for i, v in enumerate(values)]
    if path == "tuples":
        h.run_window([("input", r) for r in rows])
    else:
        size = max(1, math.ceil(len(rows) / batches))
        chunks = [rows[i : i + size] for i in range(0, len(rows), size)]
        schema = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", _arrow_type(values))])
        h.run_window([("input", pa.RecordBatch.from_pylist(c, schema=schema)) for c in chunks])
    h.put_control("input", Watermark(10_000))
    h.run_window()
    assert h.sink("error").tuples == []
    return {t.window.start: t.value for t in h.sink("output").tuples}


def _arrow_type(values: list) -> pa.DataType:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, float) for v in present):
        return pa.float64()
    if present and all(isinstance(v, int) for v in present):
        return pa.int64()
    return pa.array(values).type


def only(result: dict) -> Any:
    assert len(result) == 1, result
    return next(iter(result.values()))


def accumulate_all(acc: Any, values: list) -> Any:
    state = acc.default_accumulated_value()
    for v in values:
        state = acc.accumulate(state, v)
    return state


def split_merged(acc: Any, values: list, cut: int) -> Any:
    """The state of two partial accumulations (``values[:cut]``, ``values[cut:]``) merged."""
    return acc.merge(accumulate_all(acc, values[:cut]), accumulate_all(acc, values[cut:]))


# -- 1. TopN / TopNByKey skip None ----------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
def test_topn_skips_none_values(path: str) -> None:
    assert only(run_keyed(TopN(2), [5, None, 7], path)) == [7, 5]
    assert only(run_keyed(TopN(3), [None, 1.5, None], path)) == [1.5]
    assert only(run_keyed(TopN(2), [None, None], path)) == []


def test_topn_skips_none_in_merge_and_batch_state() -> None:
    acc = TopN(2)
    assert acc.output(acc.merge([7, None], [None, 5])) == [7, 5]
    batch = acc.accumulate_batch([], pa.array([None, 3, None, 4, 1]))
    assert acc.output(batch) == [4, 3]


def test_topn_skips_a_none_key() -> None:
    acc = TopN(2, key=lambda r: r["s"])
    rows = [{"id": 1, "s": 3}, {"id": 2, "s": None}, {"id": 3, "s": 9}, None]
    op = WindowedOperator(acc, TimeWindows(10), timestamp=lambda r: 1)
    h = OperatorHarness(op)
    h.run_window([("input", r) for r in rows])
    h.put_control("input", Watermark(10))
    h.run_window()
    assert [t.value for t in h.sink("output").tuples] == [[{"id": 3, "s": 9}, {"id": 1, "s": 3}]]
    assert acc.output(acc.merge([{"id": 2, "s": None}], [{"id": 1, "s": 3}])) == [{"id": 1, "s": 3}]


def test_topnbykey_skips_none_values() -> None:
    op = WindowedOperator(TopNByKey(2), TimeWindows(10), timestamp=lambda t: 1)
    h = OperatorHarness(op)
    h.run_window([("input", p) for p in [("a", 5), ("a", None), ("b", None), ("c", 1)]])
    h.put_control("input", Watermark(10))
    h.run_window()
    assert [t.value for t in h.sink("output").tuples] == [[("a", 5), ("c", 1)]]
    acc = TopNByKey(3)
    merged = acc.merge(accumulate_all(acc, [("a", None)]), accumulate_all(acc, [("a", 2)]))
    assert acc.output(merged) == [("a", 2)]


# -- 2. TopN: ties and NaN do not depend on arrival order ------------------------------------------
def test_topn_ties_by_key_do_not_depend_on_arrival_order() -> None:
    rows = [{"id": i, "t": 1, "score": 5} for i in (1, 2, 3)] + [{"id": 4, "t": 1, "score": 2}]
    seen = set()
    for perm in itertools.permutations(rows):
        op = WindowedOperator(TopN(2, key=lambda r: r["score"]), TimeWindows(10), timestamp="t")
        h = OperatorHarness(op)
        h.run_window([("input", r) for r in perm])
        h.put_control("input", Watermark(10))
        h.run_window()
        seen.add(tuple(r["id"] for r in h.sink("output").tuples[0].value))
    assert seen == {(1, 2)}  # equal scores: in value order


@pytest.mark.parametrize("path", PATHS)
def test_topn_nan_and_ties_same_in_any_order(path: str) -> None:
    nan = float("nan")
    values = [1.0, nan, 2.0, 3.0, -0.0, 0.0]
    results = set()
    for perm in itertools.permutations(values):
        got = only(run_keyed(TopN(2), list(perm), path))
        assert math.isnan(got[0]) and got[1] == 3.0  # NaN above every number, as Max
        results.add(repr(only(run_keyed(TopN(5), list(perm), path))))
    assert results == {"[nan, 3.0, 2.0, 1.0, -0.0]"}  # 0.0 and -0.0 tie: by repr


def test_topn_merge_equals_one_accumulation() -> None:
    nan = float("nan")
    values = [3, 1.0, 3.0, nan, 2, 3, nan, 1]
    acc = TopN(4)
    want = repr(acc.output(accumulate_all(acc, values)))
    for perm in itertools.islice(itertools.permutations(values), 0, 40_000, 97):
        perm = list(perm)
        assert repr(acc.output(accumulate_all(acc, perm))) == want
        for cut in range(len(perm) + 1):
            assert repr(acc.output(split_merged(acc, perm, cut))) == want
        floats = [float(v) for v in perm]  # an Arrow column holds one type
        batch = acc.accumulate_batch(accumulate_all(acc, floats[:3]), pa.array(floats[3:]))
        assert repr(acc.output(batch)) == "[nan, nan, 3.0, 3.0]"
    assert want == "[nan, nan, 3.0, 3]"  # 3 and 3.0 tie: by type name ("float" < "int")


def test_topn_tuple_and_batch_paths_agree_with_ties() -> None:
    values = [2.0, 5.0, float("nan"), 5.0, None, 1.0, float("nan")]
    for perm in (values, values[::-1], values[3:] + values[:3]):
        a = run_keyed(TopN(3), perm, "tuples")
        b = run_keyed(TopN(3), perm, "batch", batches=2)
        assert repr(a) == repr(b) == "{0: [nan, nan, 5.0]}"


def test_topnbykey_nan_value_ranks_highest_in_any_order() -> None:
    nan = float("nan")
    pairs = [("a", 1.0), ("a", nan), ("b", 3.0), ("c", 3.0), ("a", 2.0)]
    outs = set()
    for perm in itertools.permutations(pairs):
        acc = TopNByKey(3)
        outs.add(repr(acc.output(accumulate_all(acc, list(perm)))))
    assert outs == {"[('a', nan), ('b', 3.0), ('c', 3.0)]"}


# -- 3. ToList keeps arrival order with sliding windows on the batch path -----------------------
@pytest.mark.parametrize("path", PATHS)
def test_tolist_sliding_keeps_arrival_order(path: str) -> None:
    option = TimeWindows(10).slide_by(5)
    op = KeyedWindowedOperator(ToList(), option, key="k", timestamp="t", value="v")
    h = OperatorHarness(op)
    rows = [{"k": "a", "t": t, "v": v} for t, v in [(16, "first"), (21, "second"), (17, "third")]]
    if path == "tuples":
        h.run_window([("input", r) for r in rows])
    else:
        h.run_window([("input", pa.RecordBatch.from_pylist(rows))])
    h.put_control("input", Watermark(100))
    h.run_window()
    got = {t.window.start: t.value for t in h.sink("output").tuples}
    assert got == {10: ["first", "third"], 15: ["first", "second", "third"], 20: ["second"]}


def test_sliding_assign_batch_is_row_ordered_and_matches_assign() -> None:
    ts = np.array([16, 21, -3, 17, 0, 9], dtype=np.int64)
    for option in (TimeWindows(10).slide_by(5), TimeWindows(12).slide_by(3), TimeWindows(7)):
        rows, starts, ends = option.assign_batch(ts)
        assert (np.diff(rows) >= 0).all()
        pairs = list(zip(rows.tolist(), starts.tolist(), ends.tolist(), strict=True))
        want = [(i, w.start, w.end) for i, t in enumerate(ts.tolist()) for w in option.assign(t)]
        assert pairs == want


# -- 4. RemoveDuplicates / SequenceCount: NaN is one value ----------------------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("batches", [1, 3])
def test_remove_duplicates_one_nan(path: str, batches: int) -> None:
    nan1, nan2 = float("nan"), float("nan")
    got = only(run_keyed(RemoveDuplicates(), [nan1, 2.0, nan2, 1.0, nan1], path, batches=batches))
    assert repr(got) == "[1.0, 2.0, nan]"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("batches", [1, 3])
def test_sequence_count_one_nan(path: str, batches: int) -> None:
    nan1, nan2 = float("nan"), float("nan")
    got = only(run_keyed(SequenceCount(), [nan1, 2.0, nan2, 1.0, nan1], path, batches=batches))
    assert repr(got) == "{1.0: 1, 2.0: 1, nan: 3}"


def test_nan_is_one_value_across_merges_and_restored_states() -> None:
    values = [float("nan"), 1.0, float("nan")]
    dedup, counts = RemoveDuplicates(), SequenceCount()
    for cut in range(len(values) + 1):
        assert repr(dedup.output(split_merged(dedup, values, cut))) == "[1.0, nan]"
        assert repr(counts.output(split_merged(counts, values, cut))) == "{1.0: 1, nan: 2}"
    # a checkpointed state's NaN is a copy: still one value with the NaN that come later
    restored = pickle.loads(pickle.dumps(accumulate_all(dedup, values)))
    more = dedup.accumulate_batch(restored, pa.array([float("nan"), 0.5]))
    assert repr(dedup.output(dedup.accumulate(more, float("nan")))) == "[0.5, 1.0, nan]"
    restored_c = pickle.loads(pickle.dumps(accumulate_all(counts, values)))
    more_c = counts.accumulate_batch(restored_c, pa.array([float("nan"), 0.5]))
    assert repr(counts.output(more_c)) == "{0.5: 1, 1.0: 1, nan: 3}"


def test_sorted_tolist_puts_nan_last_in_any_order() -> None:
    nan = float("nan")
    outs = {
        repr(ToList(sort=True).output(list(p))) for p in itertools.permutations([2.0, nan, 1.0])
    }
    assert outs == {"[1.0, 2.0, nan]"}


def test_topn_state_saved_before_the_total_order_is_ranked_again() -> None:
    # the old heapq order could list NaN last: every later value then looked no better
    # than the last one and was skipped (review)
    top = TopN(2)
    acc = [5.0, math.nan]
    for v in (10.0, 20.0, 7.0):
        acc = top.accumulate(acc, v)
    assert acc[1] == 20.0 and math.isnan(acc[0])


def test_topn_one_value_at_a_time_and_batches_agree_with_a_full_ranking() -> None:
    # the value path inserts in place and the batch path keeps candidates only: both
    # must give what ranking every value gives, ties (0.0, -0.0, 2, 2.0) and NaN included
    rng = np.random.default_rng(5)
    pool = [0.0, -0.0, 1.0, 2.0, math.nan, 3.5, 2]
    for _ in range(300):
        n = int(rng.integers(1, 6))
        values = [pool[i] for i in rng.integers(0, len(pool), int(rng.integers(0, 40)))]
        top = TopN(n)
        expected = [repr(v) for v in top._top(values)]
        acc: list = []
        for v in values:
            acc = top.accumulate(acc, v)
        assert [repr(v) for v in acc] == expected, values
        floats = [float(v) for v in values] * 3
        batch = top.accumulate_batch([], pa.array(floats, pa.float64()))
        assert [repr(v) for v in batch] == [repr(v) for v in top._top(floats)], floats


def test_topnbykey_nan_keys_of_a_restored_state_are_one_key() -> None:
    # a state restored from a checkpoint holds copies of NaN: each was a key of its own
    state = pickle.loads(pickle.dumps({float("nan"): 3, "a": 2}))
    state[float("nan")] = 5  # another NaN object
    out = TopNByKey(3).output(state)
    assert len(out) == 2 and math.isnan(out[0][0]) and out[0][1] == 5 and out[1] == ("a", 2)
