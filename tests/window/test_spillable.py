"""The spillable storage on managed state: the same panes as in memory, replays after a
restore, purges, and state larger than its memory budget."""

from __future__ import annotations

import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar.operator import OperatorContext
from malhar.testing import OperatorHarness
from malhar.window import (
    MAX_TIMESTAMP,
    AfterCount,
    AfterWatermark,
    GlobalWindow,
    KeyedWindowedOperator,
    SessionWindows,
    TimeWindows,
    Watermark,
)
from malhar.window.accumulation import Count, ToList
from malhar.window.impl.spillable import SpillableWindowedStorage
from tests.window.helpers import panes


def context(root: str, name: str = "win") -> OperatorContext:
    return OperatorContext(name=name, checkpoint=root, attributes={"STREAMING_WINDOW_MS": 100})


def make(storage=None, sessions: bool = False) -> KeyedWindowedOperator:
    return KeyedWindowedOperator(
        ToList(sort=True),
        SessionWindows(5) if sessions else TimeWindows(10).slide_by(5),
        timestamp=lambda kv: kv[1],
        value=lambda kv: kv[1],
        trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
        accumulation_mode="ACCUMULATING_AND_RETRACTING",
        allowed_lateness=8,
        storage=storage,
    )


def drive(h: OperatorHarness, windows: list[list[tuple[str, int]]], marks: list[int]) -> None:
    for w, (events, mark) in enumerate(zip(windows, marks, strict=True)):
        h.begin_window(w)
        for e in events:
            h.put("input", e)
        h.put_control("input", Watermark(mark))
        h.end_window()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=st.lists(
        st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 60)), max_size=8),
        min_size=1,
        max_size=6,
    ),
    sessions=st.booleans(),
)
def test_spillable_storage_emits_what_the_in_memory_one_emits(windows, sessions) -> None:
    marks = [10 * (i + 1) for i in range(len(windows))]  # late tuples and purges included
    memory = OperatorHarness(make(sessions=sessions))
    drive(memory, windows, marks)
    with tempfile.TemporaryDirectory() as root:
        spilled = OperatorHarness(make(SpillableWindowedStorage(8 << 20), sessions), context(root))
        drive(spilled, windows, marks)
        assert panes(spilled) == panes(memory)
        assert spilled.sink("late").tuples == memory.sink("late").tuples
        assert len(spilled.operator._store) == len(memory.operator._store)
        spilled.teardown()


def test_the_global_window_fires_at_the_final_watermark_as_in_memory() -> None:
    def run(storage=None) -> list:
        op = KeyedWindowedOperator(
            Count(), GlobalWindow(), timestamp=lambda kv: kv[1], storage=storage
        )
        with tempfile.TemporaryDirectory() as root:
            h = OperatorHarness(op, context(root))
            h.run_window([("input", ("a", 1)), ("input", ("b", 2)), ("input", ("a", 3))])
            h.put_control("input", Watermark(MAX_TIMESTAMP))  # its end + 1 is beyond 64 bits
            h.run_window()
            h.teardown()
            return panes(h)

    assert run(SpillableWindowedStorage(8 << 20)) == run() != []


def test_a_restored_operator_replays_from_the_managed_state() -> None:
    windows = [[("a", 1), ("b", 2)], [("a", 3), ("a", 12)], [("b", 14), ("c", 9)], []]
    marks = [0, 5, 10, 40]
    with tempfile.TemporaryDirectory() as root:
        first = OperatorHarness(make(SpillableWindowedStorage(8 << 20)), context(root))
        drive(first, windows[:2], marks[:2])
        saved = first.checkpoint()  # the operator and the managed state after window 1
        first.begin_window(2)  # a crash in the middle of window 2: its changes never checkpoint
        first.put("input", ("z", 11))
        del first
        replay = OperatorHarness.restored(
            make(SpillableWindowedStorage(8 << 20)), saved, context(root)
        )
        for w in (2, 3):
            replay.begin_window(w)
            for e in windows[w]:
                replay.put("input", e)
            replay.put_control("input", Watermark(marks[w]))
            replay.end_window()
        memory = OperatorHarness(make())
        drive(memory, windows, marks)
        assert panes(replay) == [p for w in (2, 3) for p in panes(memory, w)]
        assert all(p[0] != "z" for p in panes(replay))
        assert len(replay.operator._store) == 0  # everything purged at the watermark 40
        replay.teardown()


@pytest.mark.slow
def test_state_larger_than_the_memory_budget_spills_and_stays_exact() -> None:
    keys = 40_000
    names = pa.array([f"user-{i:06d}-{'x' * 40}" for i in range(keys)])
    with tempfile.TemporaryDirectory() as root:
        op = KeyedWindowedOperator(
            Count(), TimeWindows(100), key="k", timestamp="t",
            storage=SpillableWindowedStorage(budget_bytes=8 << 20),
        )  # fmt: skip
        h = OperatorHarness(op, context(root))
        for w in range(3):  # 3 windows x 40k keys: 120k cells, ~25 MB in memory, 8 MiB budget
            batch = pa.RecordBatch.from_pydict({"k": names, "t": pa.array([w * 100] * keys)})
            h.run_window([("input", batch), ("input", batch)])
        state = h.managed.stores["win"]
        assert state.stats["spills"] > 0 and len(op._store) == 3 * keys
        h.put_control("input", Watermark(300))
        h.run_window()
        got = h.sink("output").tuples
        assert len(got) == 3 * keys and {t.value for t in got} == {2}
        assert len(op._store) == 0
        h.teardown()
