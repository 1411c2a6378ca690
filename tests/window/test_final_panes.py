"""Final panes: a window that expires (the watermark passes its end plus the allowed
lateness, or the end-of-input watermark ``MAX_TIMESTAMP`` comes) fires what it holds that
is in no pane yet before it is purged, whatever its trigger (Beam fires the pending
elements when a window expires, ``Never()`` included), with ``is_last``; a window with
nothing pending gets no extra pane."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from malhar.control import ControlSender
from malhar.operator import OperatorContext
from malhar.testing import OperatorHarness
from malhar.window import (
    MAX_TIMESTAMP,
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    GlobalWindow,
    KeyedWindowedOperator,
    Never,
    Repeatedly,
    SessionWindows,
    TimeWindows,
    WindowedOperator,
)
from malhar.window.accumulation import Count, ToList
from malhar.window.impl.core import Partial
from malhar.window.impl.spillable import SpillableWindowedStorage
from tests.window.helpers import harness, watermark

MODES = ["DISCARDING", "ACCUMULATING", "ACCUMULATING_AND_RETRACTING"]
Steps = list[tuple[list[Any], int | None]]  # per streaming window: its tuples, its watermark


def full(t: Any) -> tuple[Any, ...]:
    """(key, start, end, value, index, timing, is_first, is_last, is_retraction)."""
    p = t.pane
    return (
        t.key,
        t.window.start,
        t.window.end,
        t.value,
        p.index,
        p.timing.value,
        p.is_first,
        p.is_last,
        p.is_retraction,
    )


def run(make: Any, steps: Steps, h: OperatorHarness | None = None) -> list[tuple[Any, ...]]:
    """``steps`` through one operator: the panes it emits, in order."""
    h = h or harness(make())
    for tuples, mark in steps:
        if mark is not None:
            watermark(h, mark)
        h.run_window([("input", t) for t in tuples])
    return [full(t) for t in h.sink("output").tuples]


def run_partitioned(make: Any, steps: Steps, partitions: int = 2) -> list[tuple[Any, ...]]:
    """``steps`` through ``partitions`` partitions (tuples dealt round robin) whose
    partials the operator's unifier merges and fires: the panes the unifier emits."""
    parts = [harness(make(), partition=p, partitions=partitions) for p in range(partitions)]
    unifier = OperatorHarness(make().get_unifier("output"))
    senders = [ControlSender("win", "win", p, partitions) for p in range(partitions)]
    up = ControlSender("src", "src", 0, 1)
    for w, (tuples, mark) in enumerate(steps):
        before = [len(h.sink("output").controls) for h in parts]
        for p, h in enumerate(parts):
            if mark is not None:
                watermark(h, mark, up)
            h.run_window([("input", t) for i, t in enumerate(tuples) if i % partitions == p])
        unifier.begin_window(w)
        for h in parts:
            for item in h.sink("output").per_window.get(w, []):
                assert isinstance(item, Partial)
                unifier.put("input", item)
        for p, h in enumerate(parts):
            for ctl in h.sink("output").controls[before[p] :]:
                unifier.put_control("input", ctl.payload, ctl.delivery, sender=senders[p])
        unifier.end_window()
    return [full(t) for t in unifier.sink("output").tuples]


def accounted(emitted: list[tuple[Any, ...]], mode: str) -> dict[tuple[Any, ...], int]:
    """Tuples per (key, window) in the panes (Count): summed over the panes (DISCARDING),
    the last pane's (accumulating modes)."""
    out: dict[tuple[Any, ...], int] = {}
    for key, start, end, value, *_, retraction in emitted:
        if retraction:
            continue
        w = (key, start, end)
        out[w] = out.get(w, 0) + value if mode == "DISCARDING" else value
    return out


def keyed_count(trigger: Any, mode: str = "DISCARDING", **settings: Any) -> Any:
    return lambda: KeyedWindowedOperator(
        Count(),
        TimeWindows(10),
        timestamp=lambda kv: kv[1],
        trigger=trigger,
        accumulation_mode=mode,
        **settings,
    )


def count(trigger: Any, mode: str = "DISCARDING", option: Any = None, **settings: Any) -> Any:
    return lambda: WindowedOperator(
        Count(),
        TimeWindows(10) if option is None else option,
        timestamp=lambda t: t,
        trigger=trigger,
        accumulation_mode=mode,
        **settings,
    )


# -- a count trigger: the tuples after its last pane go out when the window is purged -------
COUNT_STEPS: Steps = [([1, 2, 3, 4, 5], None), ([6, 7], None), ([], 1000), ([], None)]
COUNT_PANES = {
    "DISCARDING": [
        (0, 10, 5, 0, "EARLY", True, False, False),
        (0, 10, 2, 1, "ON_TIME", False, True, False),
    ],
    "ACCUMULATING": [
        (0, 10, 5, 0, "EARLY", True, False, False),
        (0, 10, 7, 1, "ON_TIME", False, True, False),
    ],
    "ACCUMULATING_AND_RETRACTING": [
        (0, 10, 5, 0, "EARLY", True, False, False),
        (0, 10, -5, 0, "EARLY", True, False, True),
        (0, 10, 7, 1, "ON_TIME", False, True, False),
    ],
}


@pytest.mark.parametrize("mode", MODES)
def test_a_count_trigger_fires_the_rest_when_the_window_is_purged(mode: str) -> None:
    make = keyed_count(Repeatedly(AfterCount(3)), mode)
    steps = [([("a", t) for t in ts], mark) for ts, mark in COUNT_STEPS]
    h = harness(make())
    emitted = run(make, steps, h)
    assert emitted == [("a", *p) for p in COUNT_PANES[mode]]
    assert accounted(emitted, mode) == {("a", 0, 10): 7}  # every accepted tuple, once
    assert (h.operator.late_count, h.operator.dropped_count, len(h.operator._store)) == (0, 0, 0)


@pytest.mark.parametrize("mode", MODES)
def test_non_keyed_a_count_trigger_fires_the_rest_when_the_window_is_purged(mode: str) -> None:
    make = count(Repeatedly(AfterCount(3)), mode)
    emitted = run(make, COUNT_STEPS)
    assert emitted == [(None, *p) for p in COUNT_PANES[mode]]
    assert accounted(emitted, mode) == {(None, 0, 10): 7}


@pytest.mark.parametrize("mode", MODES)
def test_partitions_and_their_unifier_fire_the_final_pane_as_one_operator(mode: str) -> None:
    make = count(Repeatedly(AfterCount(3)), mode)
    single = run(make, COUNT_STEPS)
    assert run_partitioned(make, COUNT_STEPS) == single
    assert single == [(None, *p) for p in COUNT_PANES[mode]]


def test_keyed_partitions_combined_by_the_unifier_fire_the_final_pane() -> None:
    make = keyed_count(Repeatedly(AfterCount(3)), combine_partitions=True)
    steps: Steps = [
        ([("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5)], None),
        ([("a", 6), ("b", 7)], None),
        ([], 1000),
    ]
    single = run(make, steps)
    assert run_partitioned(make, steps) == single
    assert single == [
        ("a", 0, 10, 3, 0, "EARLY", True, False, False),
        ("b", 0, 10, 3, 0, "EARLY", True, False, False),
        ("a", 0, 10, 1, 1, "ON_TIME", False, True, False),  # the final pane
    ]


def test_the_final_pane_comes_in_the_order_of_its_boundary() -> None:
    # windows, then keys: the final panes of [0, 10) before the ON_TIME ones of [10, 20)
    make = keyed_count(Repeatedly(AfterCount(3)), allowed_lateness=10)
    steps: Steps = [
        ([("b", 1), ("b", 2), ("b", 3), ("a", 4)], None),
        ([("b", 4)], None),
        ([("a", 11), ("a", 12), ("a", 13)], 20),
    ]
    assert run(make, steps) == [
        ("b", 0, 10, 3, 0, "EARLY", True, False, False),
        ("a", 0, 10, 1, 0, "ON_TIME", True, True, False),  # purged (20 - 10): final
        ("b", 0, 10, 1, 1, "ON_TIME", False, True, False),
        ("a", 10, 20, 3, 0, "ON_TIME", True, False, False),  # its count; not yet purged
    ]


# -- a late tuple accepted, purged before its (processing-time) late pane ------------------
@pytest.mark.parametrize("mode", MODES)
def test_a_late_tuple_is_fired_when_its_window_is_purged_before_its_late_pane(mode: str) -> None:
    make = keyed_count(AfterWatermark(late=AfterProcessingTime(10_000)), mode, allowed_lateness=5)
    steps: Steps = [
        ([("a", 3)], None),
        ([], 10),  # ON_TIME [0, 10) = 1
        ([("a", 8)], None),  # accepted: 8 >= 10 - 5
        ([], 100),  # horizon 95: [0, 10) purged, its timer not due
        *([([], None)] * 20),  # the timer's time passes
    ]
    h = harness(make())
    emitted = run(make, steps, h)
    late = {
        "DISCARDING": [("a", 0, 10, 1, 1, "LATE", False, True, False)],
        "ACCUMULATING": [("a", 0, 10, 2, 1, "LATE", False, True, False)],
        "ACCUMULATING_AND_RETRACTING": [
            ("a", 0, 10, -1, 0, "ON_TIME", True, False, True),
            ("a", 0, 10, 2, 1, "LATE", False, True, False),
        ],
    }[mode]
    assert emitted == [("a", 0, 10, 1, 0, "ON_TIME", True, False, False), *late]
    assert accounted(emitted, mode) == {("a", 0, 10): 2}
    assert (h.operator.late_count, h.operator.dropped_count) == (0, 0)


def test_firing_only_updated_panes_fires_the_final_pane_too() -> None:
    def make(only: bool) -> Any:
        return keyed_count(Repeatedly(AfterCount(3)), "ACCUMULATING", fire_only_updated_panes=only)

    steps: Steps = [([("a", 1), ("a", 2), ("a", 3)], None), ([("a", 4)], 1000)]
    assert run(make(True), steps) == [
        ("a", 0, 10, 3, 0, "EARLY", True, False, False),
        ("a", 0, 10, 4, 1, "ON_TIME", False, True, False),
    ]


# -- the global window: the end-of-input watermark fires what it holds ------------------------
@pytest.mark.parametrize("mode", MODES)
def test_the_global_window_fires_its_pending_tuples_at_the_end_of_input(mode: str) -> None:
    def make() -> Any:
        return WindowedOperator(
            Count(),
            GlobalWindow(),
            timestamp=lambda t: t,
            trigger=Repeatedly(AfterCount(3)),
            accumulation_mode=mode,
        )

    steps: Steps = [([0, 1, 2, 3, 4], None), ([5, 6], None), ([], MAX_TIMESTAMP), ([], None)]
    h = harness(make())
    emitted = run(make, steps, h)
    lo, hi = -(2**63), MAX_TIMESTAMP
    final = {
        "DISCARDING": [(None, lo, hi, 2, 1, "ON_TIME", False, True, False)],
        "ACCUMULATING": [(None, lo, hi, 7, 1, "ON_TIME", False, True, False)],
        "ACCUMULATING_AND_RETRACTING": [
            (None, lo, hi, -5, 0, "EARLY", True, False, True),
            (None, lo, hi, 7, 1, "ON_TIME", False, True, False),
        ],
    }[mode]
    assert emitted == [(None, lo, hi, 5, 0, "EARLY", True, False, False), *final]
    assert accounted(emitted, mode) == {(None, lo, hi): 7}
    assert len(h.operator._store) == 0  # expired
    assert run_partitioned(make, steps) == emitted


@pytest.mark.parametrize("keyed", [False, True])
def test_never_fires_once_at_the_end_of_input(keyed: bool) -> None:
    def make() -> Any:
        if keyed:
            return KeyedWindowedOperator(
                Count(), GlobalWindow(), timestamp=lambda kv: kv[1], trigger=Never()
            )
        return WindowedOperator(Count(), GlobalWindow(), timestamp=lambda t: t, trigger=Never())

    tuples = [("a", 1), ("b", 2), ("a", 3)] if keyed else [1, 2, 3, 4, 5]
    emitted = run(make, [(tuples, None), ([], MAX_TIMESTAMP), ([], None)])
    lo, hi = -(2**63), MAX_TIMESTAMP
    if keyed:
        assert emitted == [
            ("a", lo, hi, 2, 0, "ON_TIME", True, True, False),
            ("b", lo, hi, 1, 0, "ON_TIME", True, True, False),
        ]
    else:
        assert emitted == [(None, lo, hi, 5, 0, "ON_TIME", True, True, False)]


def test_windows_kept_forever_fire_at_the_end_of_input() -> None:
    # allowed_lateness=None: never purged, until the input ends
    make = keyed_count(Repeatedly(AfterCount(2)), allowed_lateness=None)
    steps: Steps = [
        ([("a", 1), ("a", 2), ("a", 3), ("b", 15)], None),
        ([], 50),
        ([], MAX_TIMESTAMP),
        ([("a", 4)], None),  # after the end of the input: late
    ]
    h = harness(make())
    assert run(make, steps, h) == [
        ("a", 0, 10, 3, 0, "EARLY", True, False, False),
        ("b", 10, 20, 1, 0, "ON_TIME", True, True, False),
    ]
    assert (h.operator.late_count, len(h.operator._store)) == (1, 0)


# -- sessions --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_a_session_fires_its_pending_tuples_when_purged(mode: str) -> None:
    def make() -> Any:
        return KeyedWindowedOperator(
            ToList(sort=True),
            SessionWindows(10),
            timestamp=lambda kv: kv[1],
            value=lambda kv: kv[1],
            trigger=Repeatedly(AfterCount(3)),
            accumulation_mode=mode,
        )

    steps: Steps = [
        ([("a", 1), ("a", 3), ("a", 5), ("b", 40)], None),  # [1, 15): a pane of 3
        ([("a", 22)], None),  # [22, 32)
        ([("a", 14)], None),  # bridges both: [1, 32), 2 tuples since the pane
        ([], 1000),
    ]
    emitted = run(make, steps)
    first = ("a", 1, 15, [1, 3, 5], 0, "EARLY", True, False, False)
    merged = [14, 22] if mode == "DISCARDING" else [1, 3, 5, 14, 22]
    assert emitted == [
        first,
        *([(*first[:-1], True)] if mode == "ACCUMULATING_AND_RETRACTING" else []),
        ("a", 1, 32, merged, 0, "ON_TIME", True, True, False),
        ("b", 40, 50, [40], 0, "ON_TIME", True, True, False),
    ]


def test_partitioned_sessions_fire_the_final_pane_as_one_operator() -> None:
    def make() -> Any:
        return WindowedOperator(
            ToList(sort=True),
            SessionWindows(10),
            timestamp=lambda t: t,
            value=lambda t: t,
            trigger=Repeatedly(AfterCount(3)),
        )

    steps: Steps = [([1, 3, 5, 40], None), ([44], None), ([7], None), ([], 1000)]
    single = run(make, steps)
    assert run_partitioned(make, steps) == single
    assert single == [
        (None, 1, 15, [1, 3, 5], 0, "EARLY", True, False, False),
        (None, 1, 17, [7], 0, "ON_TIME", True, True, False),
        (None, 40, 54, [40, 44], 0, "ON_TIME", True, True, False),
    ]


# -- storage --------------------------------------------------------------------------------
def test_the_spillable_storage_fires_the_final_panes_as_in_memory() -> None:
    def make(storage: Any = None) -> Any:
        return KeyedWindowedOperator(
            Count(),
            TimeWindows(10),
            timestamp=lambda kv: kv[1],
            trigger=Repeatedly(AfterCount(3)),
            accumulation_mode="ACCUMULATING_AND_RETRACTING",
            allowed_lateness=5,
            storage=storage,
        )

    steps: Steps = [
        ([("a", 1), ("a", 2), ("a", 3), ("b", 4), ("a", 12)], None),
        ([("a", 5)], 10),
        ([], 100),
    ]
    memory = run(make, steps)
    with tempfile.TemporaryDirectory() as root:
        ctx = OperatorContext(name="win", checkpoint=root, attributes={"STREAMING_WINDOW_MS": 100})
        h = OperatorHarness(make(SpillableWindowedStorage(8 << 20)), ctx)
        assert run(make, steps, h) == memory
        assert len(h.operator._store) == 0
        h.teardown()
    assert memory == [
        ("a", 0, 10, 3, 0, "EARLY", True, False, False),
        ("a", 0, 10, -3, 0, "EARLY", True, False, True),
        ("a", 0, 10, 4, 1, "ON_TIME", False, True, False),  # no ON_TIME pane before
        ("b", 0, 10, 1, 0, "ON_TIME", True, True, False),
        ("a", 10, 20, 1, 0, "ON_TIME", True, True, False),
    ]


# -- nothing pending: no extra pane ----------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_a_window_with_nothing_pending_gets_no_final_pane(mode: str) -> None:
    make = keyed_count(Repeatedly(AfterCount(3)), mode)
    steps: Steps = [([("a", 1), ("a", 2), ("a", 3)], None), ([], 1000), ([], MAX_TIMESTAMP)]
    assert run(make, steps) == [("a", 0, 10, 3, 0, "EARLY", True, False, False)]


def test_a_cell_checkpointed_before_the_unsent_field_fires_its_later_tuples() -> None:
    # an ACCUMULATING cell restored from an older checkpoint has the storage's fields only
    make = keyed_count(Repeatedly(AfterCount(3)), "ACCUMULATING")
    h = harness(make())
    h.run_window([("input", ("a", t)) for t in (1, 2, 3)])  # a pane of 3
    store = h.operator._store
    for cells in store.cells.values():
        for cell in cells.values():
            del cell[9:]
    h.run_window([("input", ("a", 4))])
    watermark(h, 1000)
    h.run_window()
    assert [full(t) for t in h.sink("output").tuples] == [
        ("a", 0, 10, 3, 0, "EARLY", True, False, False),
        ("a", 0, 10, 4, 1, "ON_TIME", False, True, False),
    ]


def test_a_cell_checkpointed_before_the_unsent_field_that_never_fired_fires() -> None:
    # its tuples were in no pane for sure: purged without one, they were lost (review)
    make = keyed_count(Repeatedly(AfterCount(3)), "ACCUMULATING")
    h = harness(make())
    h.run_window([("input", ("a", t)) for t in (1, 2)])  # no pane: the count is not reached
    for cells in h.operator._store.cells.values():
        for cell in cells.values():
            del cell[9:]
    watermark(h, 1000)
    h.run_window()
    assert [full(t) for t in h.sink("output").tuples] == [
        ("a", 0, 10, 2, 0, "ON_TIME", True, True, False),
    ]
