"""The value types: window assignment, trigger state machines, accumulations."""

from __future__ import annotations

import datetime as dt
import pickle
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from malhar.window import (
    GLOBAL_WINDOW,
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    GlobalWindow,
    Never,
    OrFinally,
    Repeatedly,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    Window,
    WindowConfigError,
)
from malhar.window.accumulation import (
    Average,
    Cogroup,
    Count,
    Fold,
    FullOuterJoin,
    InnerJoin,
    LeftOuterJoin,
    Max,
    Min,
    Reduce,
    RemoveDuplicates,
    RightOuterJoin,
    SequenceCount,
    Sum,
    ToList,
    TopN,
    TopNByKey,
)
from malhar.window.errors import AccumulationError
from malhar.window.triggers import TriggerContext
from malhar.window.windows import to_millis


# -- windows ---------------------------------------------------------------------------------
@given(
    ts=st.integers(-(10**12), 10**12),
    size=st.integers(1, 10_000),
    k=st.integers(1, 6),
)
def test_time_window_assignment_scalar_and_vectorized_agree(ts: int, size: int, k: int) -> None:
    option = TimeWindows(size * k).slide_by(size)
    windows = option.assign(ts)
    assert len(windows) == k
    assert all(w.start <= ts < w.end and w.end - w.start == size * k for w in windows)
    assert all(w.start % size == 0 for w in windows)
    rows, starts, ends = option.assign_batch(np.array([ts, ts + 1], dtype=np.int64))
    got = sorted(
        Window(int(s), int(e)) for r, s, e in zip(rows, starts, ends, strict=True) if r == 0
    )
    assert got == sorted(windows)


def test_window_options() -> None:
    assert GlobalWindow().assign(123) == [GLOBAL_WINDOW]
    assert TimeWindows(dt.timedelta(minutes=1)).assign(61_000) == [Window(60_000, 120_000)]
    assert TimeWindows(10).assign(-1) == [Window(-10, 0)]
    assert SessionWindows(dt.timedelta(seconds=5)).proto(1000) == Window(1000, 6000)
    assert TimeWindows(10).slide_by(5) == TimeWindows(10, 5) != TimeWindows(10)
    assert to_millis(dt.timedelta(microseconds=2000)) == 2
    # a point in time is not a duration; a sub-millisecond part was floored silently
    for bad_value in (dt.datetime(1970, 1, 1, 0, 0, 1), dt.timedelta(microseconds=1500)):
        with pytest.raises(WindowConfigError, match=r"not a duration|whole number"):
            to_millis(bad_value)
    for bad in (lambda: TimeWindows(0), lambda: SessionWindows(-1), lambda: TimeWindows(10, 20)):
        with pytest.raises(WindowConfigError):
            bad()
    assert pickle.loads(pickle.dumps(Window(1, 2))) == Window(1, 2)


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda: TimeWindows(1.5), "TimeWindows duration: 1.5 "),
        (lambda: TimeWindows(2.5), "TimeWindows duration: 2.5 "),
        (lambda: TimeWindows(10).slide_by(2.5), "slide_by: 2.5 "),
        (lambda: SessionWindows(0.5), "SessionWindows min_gap: 0.5 "),
        (lambda: TimeWindows(float("nan")), "TimeWindows duration: nan "),
    ],
    ids=["1.5", "2.5", "slide", "session", "nan"],
)
def test_a_duration_of_a_fraction_of_a_millisecond_is_refused_not_truncated(make, what) -> None:
    # TimeWindows(1.5).assign(3) was [Window(3, 4)]: windows of 1 ms
    with pytest.raises(WindowConfigError) as caught:
        make()
    said = str(caught.value)
    assert said.startswith(what) and "not a whole number of milliseconds" in said
    assert "an int of milliseconds or a timedelta" in said


def test_a_whole_float_duration_is_its_milliseconds_and_the_message_lists_durations() -> None:
    assert TimeWindows(10.0) == TimeWindows(10) and to_millis(2.0) == 2
    with pytest.raises(WindowConfigError) as caught:
        TimeWindows("10")
    said = str(caught.value)
    assert "milliseconds (int) or a timedelta, got str '10'" in said
    assert "datetime" not in said  # a point in time is no duration


# -- triggers --------------------------------------------------------------------------------
def run(trigger, steps):
    """Feed (elements, watermark, now) steps; return the steps at which it fired and whether
    it finished."""
    state, fired, done = trigger.init(), [], False
    for i, (n, wm, now) in enumerate(steps):
        ctx = TriggerContext(Window(0, 100), wm, now)
        if n:
            state = trigger.on_elements(state, n, ctx)
        if trigger.should_fire(state, ctx):
            state, done = trigger.on_fire(state, ctx)
            fired.append(i)
            if done:
                break
    return fired, done


def test_after_count_and_repeatedly() -> None:
    assert run(AfterCount(3), [(1, None, 0), (1, None, 0), (1, None, 0)]) == ([2], True)
    assert run(Repeatedly(AfterCount(2)), [(1, 0, 0)] * 5) == ([1, 3], False)
    assert run(Always(), [(1, 0, 0), (0, 0, 0), (2, 0, 0)]) == ([0, 2], False)
    with pytest.raises(WindowConfigError):
        AfterCount(0)


def test_after_processing_time_counts_from_the_first_element() -> None:
    steps = [(0, None, 0), (1, None, 100), (1, None, 200), (0, None, 350), (0, None, 400)]
    assert run(AfterProcessingTime(300), steps) == ([4], True)
    assert AfterProcessingTime(dt.timedelta(seconds=1)).delay == 1000


def test_after_watermark_early_on_time_late() -> None:
    t = AfterWatermark(early=AfterCount(2), late=AfterCount(1))
    steps = [(1, 0, 0), (1, 0, 0), (1, 50, 0), (0, 100, 0), (0, 100, 0), (1, 100, 0)]
    assert run(t, steps) == ([1, 3, 5], False)
    assert run(AfterWatermark(), [(1, 0, 0), (0, 99, 0), (0, 100, 0)]) == ([2], True)
    assert not AfterWatermark().reacts_before_end()
    assert AfterWatermark(early=AfterCount(1)).reacts_before_end()


def test_after_any_all_each_or_finally_never() -> None:
    assert run(AfterAny(AfterCount(3), AfterWatermark()), [(1, 0, 0), (0, 100, 0)]) == ([1], True)
    steps = [(1, 0, 0), (1, 0, 0), (0, 100, 0)]
    assert run(AfterAll(AfterCount(2), AfterWatermark()), steps) == ([2], True)
    each = AfterEach(AfterCount(1), AfterCount(2))
    assert run(each, [(1, 0, 0), (1, 0, 0), (1, 0, 0)]) == ([0, 2], True)
    until = OrFinally(Repeatedly(AfterCount(1)), AfterCount(3))
    assert run(until, [(1, 0, 0), (1, 0, 0), (1, 0, 0), (1, 0, 0)]) == ([0, 1, 2], True)
    assert run(Never(), [(5, 100, 10**9)]) == ([], False)
    assert run(DefaultTrigger(), [(1, 0, 0), (0, 100, 0), (1, 100, 0)]) == ([1, 2], False)
    assert Repeatedly(AfterCount(1)).or_finally(Never()) == OrFinally(
        Repeatedly(AfterCount(1)), Never()
    )


def test_trigger_merges_for_sessions() -> None:
    ctx = TriggerContext(Window(0, 100), 10, 0)
    assert AfterCount(5).on_merge([2, 2], ctx) == 4
    assert AfterProcessingTime(10).on_merge([None, 30, 20], ctx) == 20
    t = AfterWatermark(early=AfterCount(3))
    merged = t.on_merge([(False, 1, None), (False, 2, None)], ctx)
    assert t.should_fire(merged, ctx)
    assert AfterEach(AfterCount(1), AfterCount(2)).on_merge([(0, 0), (1, 1)], ctx) == (1, 1)


def test_trigger_option_compiles_to_beam_triggers() -> None:
    opt = TriggerOption.at_watermark()
    assert opt.to_trigger() == AfterWatermark()
    opt = TriggerOption.at_watermark().with_early_firings_at_every(dt.timedelta(seconds=1))
    opt.with_early_firings_at_every(100).with_late_firings_at_every(1)
    assert opt.to_trigger() == AfterWatermark(
        early=AfterAny(AfterProcessingTime(1000), AfterCount(100)), late=AfterCount(1)
    )
    assert TriggerOption().with_early_firings_at_every(5).to_trigger() == Repeatedly(AfterCount(5))
    with pytest.raises(WindowConfigError):
        TriggerOption().to_trigger()
    with pytest.raises(WindowConfigError, match="tuple count"):
        TriggerOption.at_watermark().with_early_firings_at_every(1.5)  # type: ignore[arg-type]


# -- accumulations -----------------------------------------------------------------------------
ALL = [
    (Count(), [1, 2, 3], 3),
    (Sum(), [1, 2, 3], 6),
    (Min(), [4, 2, 3], 2),
    (Max(), [4, 2, 9], 9),
    (Average(), [1, 2, 6], 3.0),
    (TopN(2), [5, 1, 9, 7], [9, 7]),
    (TopNByKey(2), [("a", 1), ("b", 5), ("a", 7), ("c", 2)], [("a", 7), ("b", 5)]),
    (RemoveDuplicates(), [3, 1, 3, 2], [1, 2, 3]),
    (SequenceCount(), ["b", "a", "b"], {"a": 1, "b": 2}),
    (ToList(sort=True), [3, 1, 2], [1, 2, 3]),
    (Fold(0, lambda acc, v: acc + v * v, merge=lambda a, b: a + b), [1, 2, 3], 14),
    (Reduce(lambda a, b: a * b), [2, 3, 4], 24),
]


@pytest.mark.parametrize(("acc", "values", "expected"), ALL, ids=[type(a[0]).__name__ for a in ALL])
def test_standard_accumulations_accumulate_merge_and_batch(acc, values, expected) -> None:
    one = acc.default_accumulated_value()
    for v in values:
        one = acc.accumulate(one, v)
    assert acc.output(one) == expected
    # split in two partial states and merged: the same (what unifiers and sessions do)
    left, right = acc.default_accumulated_value(), acc.default_accumulated_value()
    for i, v in enumerate(values):
        if i % 2:
            left = acc.accumulate(left, v)
        else:
            right = acc.accumulate(right, v)
    assert acc.output(acc.merge(left, right)) == expected
    if not isinstance(values[0], tuple):
        batched = acc.accumulate_batch(acc.default_accumulated_value(), pa.array(values))
        assert acc.output(batched) == expected
    # the state survives a checkpoint
    assert acc.output(pickle.loads(pickle.dumps(one))) == expected


@pytest.mark.parametrize("acc", [Count(), Sum(), Min(), Max(), Average()])
def test_arrow_aggregations_give_the_same_partial_states(acc) -> None:
    values = pa.array([4, 1, 7, None, 2])
    table = pa.table({"g": [0, 0, 0, 0, 0], "v": values})
    aggs = [([], "count_all") if f == "count_all" else ("v", f) for f in acc.arrow_aggregations]
    row = table.group_by("g").aggregate(aggs).to_pylist()[0]
    results = [row["count_all" if f == "count_all" else f"v_{f}"] for f in acc.arrow_aggregations]
    partial = acc.from_aggregates(*results)
    expected = acc.default_accumulated_value()
    for v in values.to_pylist():
        expected = (
            acc.accumulate(expected, v) if (v is not None or isinstance(acc, Count)) else expected
        )
    assert acc.output(partial) == acc.output(expected)


def test_retractions_and_merge_errors() -> None:
    assert Count().retraction(3) == -3 and Sum().retraction(2.5) == -2.5
    assert ToList().retraction([1]) == [1]  # non-numeric: the value itself, flagged by the pane
    with pytest.raises(AccumulationError, match="merge="):
        Fold(0, lambda a, v: a + v).merge(1, 2)
    assert Reduce(max).output(Reduce(max).default_accumulated_value()) is None
    assert Average().output((0, 0)) is None


def test_merge_accumulations_join_two_sides() -> None:
    def both(acc, left, right):
        state = acc.default_accumulated_value()
        for v in left:
            state = acc.accumulate(state, v)
        for v in right:
            state = acc.accumulate2(state, v)
        return acc.output(state)

    assert both(InnerJoin(), ["o1", "o2"], ["p"]) == [("o1", "p"), ("o2", "p")]
    assert both(InnerJoin(), ["o1"], []) == []
    assert both(LeftOuterJoin(), ["o1"], []) == [("o1", None)]
    assert both(RightOuterJoin(), [], ["p"]) == [(None, "p")]
    assert both(FullOuterJoin(), ["o"], []) == [("o", None)]
    assert both(Cogroup(), ["b", "a"], ["x"]) == (["a", "b"], ["x"])
    merged = InnerJoin().merge((["a"], []), ([], ["x"]))
    assert InnerJoin().output(merged) == [("a", "x")]
    assert Counter(both(FullOuterJoin(), ["o"], ["p", "q"])) == Counter([("o", "p"), ("o", "q")])
