"""A keyed windowed operator's state divided by key (``DividedByKey``): partitions split
or merged between two windows give, together, the panes one partition gives."""

from __future__ import annotations

import datetime as dt
import pickle
import random
from collections import Counter
from typing import Any

import pytest

from malhar.control import ControlSender
from malhar.engine.state_moves import _redistribute
from malhar.errors import StateError
from malhar.operator import OperatorContext
from malhar.partitioning import Partition, routing_table, spread
from malhar.testing import OperatorHarness
from malhar.window import (
    AfterProcessingTime,
    AfterWatermark,
    KeyedWindowedOperator,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    WindowedOperator,
)
from malhar.window.accumulation import Count, ToList
from malhar.window.impl.book import Book
from malhar.window.impl.memory import InMemoryWindowedStorage
from malhar.window.impl.operator import WindowKeyCodec
from malhar.window.impl.spillable import SpillableWindowedStorage
from malhar.window.watermark import WatermarkTracker
from tests.window.helpers import pane, watermark

KEYS = [f"k{i}" for i in range(12)]
UP = ControlSender("events", "src", 0, 1)


def _events(windows: int, seed: int) -> list[list[tuple[str, int]]]:
    rng = random.Random(seed)
    return [
        [(rng.choice(KEYS), rng.randrange(max(0, w - 2) * 10, (w + 1) * 10)) for _ in range(15)]
        for w in range(windows)
    ]


def _harness(op: Any, window: int = -1) -> OperatorHarness:
    ctx = OperatorContext(name="win", attributes={"STREAMING_WINDOW_MS": 1000})
    return OperatorHarness(op, ctx, window=window)


def _panes(*hs: OperatorHarness) -> Counter:
    """Every pane of ``hs``, its list value as a sorted tuple."""
    out: Counter = Counter()
    for h in hs:
        for t in h.sink("output").tuples:
            key, start, end, value, *rest = pane(t)
            out[(key, start, end, tuple(sorted(value)), *rest)] += 1
    return out


def _run(h: OperatorHarness, w: int, events: list[tuple[str, int]]) -> None:
    h.begin_window(w)
    for e in events:
        h.put("input", e)
    watermark(h, max(0, (w - 2) * 10), UP)  # two windows of event time behind
    h.end_window()


CASES = {
    "fixed windows": dict(option=TimeWindows(10)),
    "sessions, retracting": dict(
        option=SessionWindows(4),
        trigger=TriggerOption.at_watermark()
        .with_early_firings_at_every(2)
        .accumulating_and_retracting_fired_panes(),
    ),
    "timers, lateness": dict(
        option=TimeWindows(10),
        trigger=AfterWatermark(early=AfterProcessingTime(dt.timedelta(seconds=2))),
        allowed_lateness=20,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 2)])
def test_divided_partitions_fire_what_one_partition_fires(
    case: str, before: int, after: int
) -> None:
    settings = dict(CASES[case])
    option = settings.pop("option")

    def make() -> KeyedWindowedOperator:
        return KeyedWindowedOperator(ToList(), option, timestamp=lambda kv: kv[1], **settings)

    codec = WindowKeyCodec()
    data = _events(12, seed=before * 10 + after)
    one = _harness(make()).setup()
    for w, events in enumerate(data):
        _run(one, w, events)
    expected = _panes(one)

    def route(events: list[tuple[str, int]], n: int, table: Any) -> list[list]:
        out: list[list] = [[] for _ in range(n)]
        for e in events:
            h = codec.partition(e)
            out[h % n if table is None else table[1][h & table[0]]].append(e)
        return out

    split_at = 5
    parts = [_harness(make()).setup() for _ in range(before)]
    for w in range(split_at):
        for h, mine in zip(parts, route(data[w], before, None), strict=True):
            _run(h, w, mine)
    got = _panes(*parts)
    new = [Partition(make(), keys) for keys in spread(after)]
    table = routing_table([p.keys for p in new])
    _redistribute("win", [h.operator for h in parts], new, codec, None, table)
    parts = [_harness(p.operator, window=split_at - 1).setup() for p in new]
    for w in range(split_at, len(data)):
        for h, mine in zip(parts, route(data[w], after, table), strict=True):
            _run(h, w, mine)
    got += _panes(*parts)
    assert sum(expected.values()) > 20
    assert got == expected


def test_pooled_books_keep_the_operator_wide_parts_and_deal_the_per_key_ones() -> None:
    a, b = Book(1), Book(1)
    a.watermark, b.watermark = 10, 10
    a.ends, b.ends = [(20, 10), (30, 20)], [(20, 10)]
    a.timers = [(5, 1, 0, 10, "x")]
    b.timers = [(5, 1, 0, 10, 7)]  # a tie of (due, seq) with a key of another type
    a.late, b.late = 2, 3
    pool = Book.pooled([a, None, b], KeyedWindowedOperator(Count(), TimeWindows(10)))
    assert pool.ends == [(20, 10), (30, 20)] and pool.late == 5 and pool.seq == 2
    first, second = pool.divided(lambda keys: [0 if k == "x" else 1 for k in keys], 2)
    assert [t[4] for t in first.timers] == ["x"] and [t[4] for t in second.timers] == [7]
    assert first.ends == second.ends == pool.ends and (first.late, second.late) == (5, 0)


def test_pooled_trackers_take_each_senders_furthest_watermark() -> None:
    t1, t2 = WatermarkTracker(), WatermarkTracker()
    t1.update(10, UP, 3)
    t2.update(12, UP, 4)
    t1.idle(ControlSender("events", "src", 1, 2), 4)
    pool = WatermarkTracker.pooled([t1, t2])
    assert pool.latest[("events", 0)] == (12, 4) and not pool.idle_senders


def test_a_key_held_by_two_partitions_is_refused() -> None:
    ops = [KeyedWindowedOperator(Count(), TimeWindows(10)) for _ in range(2)]
    for op in ops:
        _run(_harness(op).setup(), 0, [("a", 1)])
    with pytest.raises(StateError, match=r"key 'a' .* held by two partitions"):
        InMemoryWindowedStorage.pooled([op._store for op in ops], ops[0])


def test_a_non_keyed_operators_cells_are_not_divided() -> None:
    h = _harness(WindowedOperator(Count(), TimeWindows(10), timestamp=lambda t: t)).setup()
    h.run_window([("input", 3)])
    pool = InMemoryWindowedStorage.pooled([h.operator._store], h.operator)
    with pytest.raises(StateError, match=r"not keyed .* holds its cells on its one partition"):
        pool.divided(lambda keys: [0] * len(keys), 2)
    assert len(pool.divided(lambda keys: [0] * len(keys), 1)[0]) == 1


def test_a_spillable_storage_is_divided_by_key_unless_the_unifier_fires() -> None:
    spill = SpillableWindowedStorage
    keyed = KeyedWindowedOperator(Count(), TimeWindows(10), storage=spill())
    assert keyed.cannot_repartition() is None
    assert keyed.managed_state_keys()["cells"](b"\x00" * 16 + b"key") == b"key"
    assert keyed.managed_state_keys()["windows"](b"\x00" * 16) is None  # counted again
    combined = WindowedOperator(Count(), TimeWindows(10), timestamp=lambda t: t, storage=spill())
    assert "SpillableWindowedStorage" in (combined.cannot_repartition() or "")
    assert KeyedWindowedOperator(Count(), TimeWindows(10)).cannot_repartition() is None
    old = [spill(8 << 20), spill(16 << 20)]
    parts = spill.pooled(old, keyed).divided(lambda k: [], 3)
    assert [p.budget_bytes for p in parts] == [64 << 20] * 3  # the configured budget
    assert all(pickle.loads(pickle.dumps(p))._recount for p in parts)
    # configured in memory now, its checkpoint spilled: the old partitions' budget ...
    in_memory = KeyedWindowedOperator(Count(), TimeWindows(10))
    assert spill.pooled(old, in_memory).budget_bytes == 16 << 20
    # ... and a combined one's cells (no stream key) refused all the same (review)
    plain = WindowedOperator(Count(), TimeWindows(10), timestamp=lambda t: t)
    with pytest.raises(StateError, match="no stream key"):
        spill.pooled(old, plain)


def test_the_key_codec_hashes_state_keys_as_their_tuples() -> None:
    codec = WindowKeyCodec()
    assert codec.hash_keys(["a", ("b", 1)], None).tolist() == [
        codec.partition(("a", 0)),
        codec.partition((("b", 1), 0)),
    ]


def _one_partition(op: Any, *events: tuple[str, int]) -> OperatorHarness:
    h = _harness(op).setup()
    _run(h, 0, list(events))
    return h


def test_a_combined_keyed_operators_cells_are_not_divided_from_one_partition() -> None:
    # on more partitions a combined operator's cells are its unifier's: divided by key
    # they sat in partitions in partial mode, never fired (review finding)
    def make() -> KeyedWindowedOperator:
        return KeyedWindowedOperator(
            Count(), TimeWindows(100), timestamp=lambda kv: kv[1], combine_partitions=True
        )

    h = _one_partition(make(), ("a", 1), ("b", 2))
    new = [Partition(make(), keys) for keys in spread(2)]
    table = routing_table([p.keys for p in new])
    with pytest.raises(StateError, match="combines its partitions"):
        _redistribute("win", [h.operator], new, WindowKeyCodec(), None, table)


def test_per_key_bookkeeping_without_cells_needs_no_codec() -> None:
    # a non-keyed operator with a timer left and no cells asked a codec it has not got
    op = WindowedOperator(
        Count(),
        TimeWindows(10),
        timestamp=lambda t: t,
        trigger=AfterWatermark(early=AfterProcessingTime(dt.timedelta(seconds=5))),
        allowed_lateness=0,
    )
    h = _harness(op).setup()
    h.run_window([("input", 3)])
    watermark(h, 100, UP)
    h.run_window()
    assert len(h.operator._store) == 0 and h.operator._book.timers
    new = [Partition(op.clone(), keys) for keys in spread(2)]
    _redistribute("w", [h.operator], new, None, None, routing_table([p.keys for p in new]))
    assert [len(p.operator._book.timers) for p in new] == [1, 0]


def test_partitions_that_never_ran_are_divided_into_fresh_ones() -> None:
    make = lambda: KeyedWindowedOperator(Count(), TimeWindows(10))  # noqa: E731
    new = [Partition(make(), keys) for keys in spread(3)]
    table = routing_table([p.keys for p in new])
    _redistribute("w", [make(), make()], new, WindowKeyCodec(), None, table)
    assert [p.operator._store for p in new] == [None, None, None]


def _combined_plan(totals: int, out: int) -> Any:
    import zlib

    from malhar import DAG
    from malhar.codec import StreamCodec
    from malhar.engine.plan import build_plan
    from malhar.testing.operators import Collector, ListInput

    class ByWindow(StreamCodec):
        def partition(self, value: Any) -> int:
            return zlib.crc32(repr(value.window.start).encode())

    dag = DAG("combined")
    src = dag.add_operator("src", ListInput(windows=[[1]]), PARTITIONS=2)
    op = WindowedOperator(Count(), TimeWindows(100), timestamp=lambda t: t, allowed_lateness=0)
    tot = dag.add_operator("totals", op, PARTITIONS=totals)
    sink = dag.add_operator("out", Collector(), PARTITIONS=out)
    dag.add_stream("s", src.output, tot.input)
    dag.add_stream("t", tot.output, sink.input)
    if out > 1:
        sink.input.set_attribute("STREAM_CODEC", ByWindow())
    return build_plan(dag)


def _unifier_holding(plan: Any, *, fired: bool) -> tuple[Any, dict]:
    from malhar.engine.unifier_states import route_key
    from malhar.state import window_snapshot
    from malhar.window.impl.core import Partial
    from malhar.window.windows import Window

    route = next(r for r in plan.routes if r.unifier is not None)
    u = _harness(route.unifier.clone()).setup()
    u.run_window([("input", Partial(Window(0, 100), None, 3, 3))], window=0)
    if fired:
        u.begin_window(1)
        for s in range(2):
            watermark(u, 500, ControlSender("t", "totals", s, 2))
        u.end_window()
        assert [t.value for t in u.sink("output").tuples] == [3]
    return plan.groups[plan.group_of["out"]], {route_key(route): window_snapshot(u.operator)}


def test_a_unifiers_cells_are_not_copied_to_more_copies() -> None:
    # the one copy's cells went to both new copies: every pane fired twice (review finding)
    from malhar.engine.unifier_states import UnifierStates

    old = _combined_plan(2, 1)
    group, saved = _unifier_holding(old, fired=False)
    states = UnifierStates()
    states.add(old, group, 0, saved)
    new = _combined_plan(2, 2)
    with pytest.raises(StateError, match="cannot be divided among another number of copies"):
        states.for_partition(new, new.groups[new.group_of["out"]], 0)


def test_a_unifier_that_fired_everything_may_go() -> None:
    # a windowed unifier always "held state" (its bookkeeping): going to one partition
    # was refused for good (review finding); with cells it is refused
    from malhar.engine.unifier_states import UnifierStates

    old = _combined_plan(2, 1)
    for fired in (True, False):
        group, saved = _unifier_holding(old, fired=fired)
        states = UnifierStates()
        states.add(old, group, 0, saved)
        if fired:
            states.check_kept(_combined_plan(1, 1))
        else:
            with pytest.raises(StateError, match="holds state that the new partitioning has no"):
                states.check_kept(_combined_plan(1, 1))


def test_a_fused_streams_sender_is_kept_only_by_its_own_partition() -> None:
    # over a fused edge partition p hears only partition p upstream (partitions=1); the
    # pooled senders of the old partitions would hold a new partition's minimum for good
    pool = WatermarkTracker()
    for p in range(2):
        pool.update(100 + p, ControlSender("fused", "lead", p, 1), 3)
        pool.update(50 + p, ControlSender("shuffled", "src", p, 2), 3)
    part = pool.for_partition(2)
    assert part.latest == {("shuffled", 0): (50, 3), ("shuffled", 1): (51, 3)}
    part.update(120, ControlSender("fused", "lead", 2, 1), 4)
    assert part.combined(4, None) == 50
    assert pool.for_partition(1).latest[("fused", 1)] == (101, 3)
