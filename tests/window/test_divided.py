"""A keyed windowed operator's state divided by key (``DividedByKey``): partitions split
or merged between two windows give, together, the panes one partition gives."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from typing import Any

import pytest

from malhar.control import ControlSender
from malhar.engine.repartition import _redistribute
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
    pool = Book.pooled([a, None, b])
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
        InMemoryWindowedStorage.pooled([op._store for op in ops])


def test_a_non_keyed_operators_cells_are_not_divided() -> None:
    h = _harness(WindowedOperator(Count(), TimeWindows(10), timestamp=lambda t: t)).setup()
    h.run_window([("input", 3)])
    pool = InMemoryWindowedStorage.pooled([h.operator._store])
    with pytest.raises(StateError, match="not keyed holds its cells on its one partition"):
        pool.divided(lambda keys: [0] * len(keys), 2)
    assert len(pool.divided(lambda keys: [0] * len(keys), 1)[0]) == 1


def test_a_spillable_storage_says_it_cannot_be_repartitioned() -> None:
    op = KeyedWindowedOperator(Count(), TimeWindows(10), storage=SpillableWindowedStorage())
    assert "SpillableWindowedStorage" in (op.cannot_repartition() or "")
    assert KeyedWindowedOperator(Count(), TimeWindows(10)).cannot_repartition() is None


def test_the_key_codec_hashes_state_keys_as_their_tuples() -> None:
    codec = WindowKeyCodec()
    assert codec.hash_keys(["a", ("b", 1)], None).tolist() == [
        codec.partition(("a", 0)),
        codec.partition((("b", 1), 0)),
    ]
