"""Property tests: with a perfect watermark, the ON_TIME panes equal a batch reference
computed by grouping the input, whatever the arrival order, the streaming window size,
the number of upstream and operator partitions, the trigger and the accumulation mode."""

from __future__ import annotations

import zlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar.control import ControlSender, DeliveryType
from malhar.testing import OperatorHarness
from malhar.window import (
    MAX_TIMESTAMP,
    AfterCount,
    AfterWatermark,
    DefaultTrigger,
    KeyedWindowedOperator,
    SessionWindows,
    TimeWindows,
    Watermark,
    Window,
    WindowedOperator,
)
from malhar.window.accumulation import Count
from tests.window.helpers import final_on_time, harness, reference_counts

TRIGGERS = [
    (DefaultTrigger(), "DISCARDING"),
    (AfterWatermark(early=AfterCount(2)), "ACCUMULATING"),
    (AfterWatermark(early=AfterCount(3), late=AfterCount(1)), "ACCUMULATING_AND_RETRACTING"),
]


def simulate(
    make: Any,
    arrivals: list[tuple[str, int]],
    chunk: int,
    sources: int,
    partitions: int,
    keyed: bool,
) -> tuple[list[Any], int]:
    """Run ``arrivals`` through ``partitions`` operator partitions in streaming windows of
    ``chunk`` tuples. Tuple i comes from source partition i % sources, and every source
    sends, at the end of each window, the perfect watermark: the smallest event time it
    has yet to send (nothing before its first tuple). Returns the panes (from the operators, or from the unifier when the
    partitions are combined) and how many tuples went to the late ports."""
    ops = [harness(make(), partition=p, partitions=partitions) for p in range(partitions)]
    combined = partitions > 1 and make().combines()
    unifier = OperatorHarness(make().get_unifier("output")) if combined else None
    chunks = [arrivals[i : i + chunk] for i in range(0, len(arrivals), chunk)] or [[]]
    sent = 0
    for w, part in enumerate(chunks):
        for h in ops:
            h.begin_window(w)
        for key, ts in part:
            dest = zlib.crc32(key.encode()) % partitions if keyed else sent % partitions
            ops[dest].put("input", (key, ts))
            sent += 1
        for s in range(sources):
            todo = [ts for i, (_, ts) in enumerate(arrivals) if i >= sent and i % sources == s]
            if todo and not any(i % sources == s for i in range(sent)):
                continue  # a source is silent until its first tuple: it holds the watermark back
            mark = Watermark(min(todo) if todo else MAX_TIMESTAMP)
            for h in ops:
                h.put_control(
                    "input", mark, DeliveryType.END_WINDOW, ControlSender("src", "src", s, sources)
                )
        before = [len(h.sink("output").controls) for h in ops]
        for h in ops:
            h.end_window()
        if unifier is not None:
            unifier.begin_window(w)
            for h in ops:
                for item in h.sink("output").per_window.get(w, []):
                    unifier.put("input", item)
            for p, h in enumerate(ops):
                for ctl in h.sink("output").controls[before[p] :]:
                    unifier.put_control(
                        "input", ctl.payload, ctl.delivery, ControlSender("s", "win", p, partitions)
                    )
            unifier.end_window()
    emitted = (
        (unifier or ops[0]).sink("output").tuples
        if combined
        else [t for h in ops for t in h.sink("output").tuples]
    )
    return emitted, sum(len(h.sink("late").tuples) for h in ops)


events_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 199)), min_size=0, max_size=60
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=events_strategy,
    order=st.randoms(use_true_random=False),
    chunk=st.integers(1, 25),
    sources=st.integers(1, 3),
    partitions=st.integers(1, 4),
    sizes=st.sampled_from([(10, 10), (20, 5), (50, 25), (7, 7)]),
    trigger=st.sampled_from(range(len(TRIGGERS))),
)
def test_keyed_on_time_panes_equal_the_batch_reference(
    events, order, chunk, sources, partitions, sizes, trigger
) -> None:
    size, slide = sizes
    arrivals = list(events)
    order.shuffle(arrivals)
    trig, mode = TRIGGERS[trigger]

    def make() -> KeyedWindowedOperator:
        return KeyedWindowedOperator(
            Count(),
            TimeWindows(size).slide_by(slide),
            timestamp=lambda kv: kv[1],
            trigger=trig,
            accumulation_mode=mode,
        )

    emitted, late = simulate(make, arrivals, chunk, sources, partitions, keyed=True)
    assert late == 0  # a perfect watermark: nothing is late
    assert final_on_time(emitted) == reference_counts(events, size, slide)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=events_strategy,
    order=st.randoms(use_true_random=False),
    chunk=st.integers(1, 25),
    sources=st.integers(1, 3),
    partitions=st.integers(1, 4),
    sizes=st.sampled_from([(10, 10), (20, 5), (30, 10)]),
    trigger=st.sampled_from(range(len(TRIGGERS))),
)
def test_non_keyed_partitions_merged_by_the_unifier_equal_the_batch_reference(
    events, order, chunk, sources, partitions, sizes, trigger
) -> None:
    size, slide = sizes
    arrivals = list(events)
    order.shuffle(arrivals)
    trig, mode = TRIGGERS[trigger]

    def make() -> WindowedOperator:
        return WindowedOperator(
            Count(),
            TimeWindows(size).slide_by(slide),
            timestamp=lambda kv: kv[1],
            trigger=trig,
            accumulation_mode=mode,
        )

    emitted, late = simulate(make, arrivals, chunk, sources, partitions, keyed=False)
    assert late == 0
    # non-keyed: every tuple counts in its windows whatever its key
    assert final_on_time(emitted) == reference_counts([(None, ts) for _, ts in events], size, slide)


def reference_sessions(events: list[tuple[Any, int]], gap: int) -> dict[tuple[Any, Window], int]:
    """Batch reference: per key, sort the event times and cut where two are ``gap`` apart."""
    out: dict[tuple[Any, Window], int] = {}
    for key in {k for k, _ in events}:
        times = sorted(ts for k, ts in events if k == key)
        first = prev = times[0]
        n = 0
        for ts in times:
            if ts - prev >= gap:
                out[(key, Window(first, prev + gap))] = n
                first, n = ts, 0
            prev, n = ts, n + 1
        out[(key, Window(first, prev + gap))] = n
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=events_strategy,
    order=st.randoms(use_true_random=False),
    chunk=st.integers(1, 25),
    sources=st.integers(1, 3),
    partitions=st.integers(1, 3),
    gap=st.integers(1, 30),
    keyed=st.booleans(),
    trigger=st.sampled_from(range(len(TRIGGERS))),
)
def test_session_on_time_panes_equal_the_batch_reference(
    events, order, chunk, sources, partitions, gap, keyed, trigger
) -> None:
    arrivals = list(events)
    order.shuffle(arrivals)
    trig, mode = TRIGGERS[trigger]
    kind = KeyedWindowedOperator if keyed else WindowedOperator

    def make() -> WindowedOperator:
        return kind(
            Count(),
            SessionWindows(gap),
            timestamp=lambda kv: kv[1],
            trigger=trig,
            accumulation_mode=mode,
        )

    emitted, late = simulate(make, arrivals, chunk, sources, partitions, keyed=keyed)
    assert late == 0
    expected = reference_sessions(events if keyed else [(None, ts) for _, ts in events], gap)
    assert final_on_time(emitted) == expected
