"""The windowed operators, one semantic per test, driven by the operator harness."""

from __future__ import annotations

import datetime as dt
import itertools
import re

import pyarrow as pa
import pytest

from malhar import MalharError
from malhar.control import ControlSender, DeliveryType
from malhar.testing import OperatorHarness
from malhar.testing.harness import deliveries
from malhar.window import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    GlobalWindow,
    KeyedWindowedOperator,
    Repeatedly,
    SessionWindows,
    TimeWindows,
    TriggerOption,
    Watermark,
    WatermarkIdle,
    WindowConfigError,
    WindowedMergeOperator,
    WindowedOperator,
    WindowedTuple,
    WindowError,
)
from malhar.window.accumulation import Cogroup, Count, Sum, ToList, TopN
from tests.window.helpers import fired, harness, pane, panes, watermark, watermarks

A_R = "ACCUMULATING_AND_RETRACTING"


def keyed(acc=None, option=None, **props) -> KeyedWindowedOperator:
    """Keyed by the pair's key; the event time is the pair's value."""
    return KeyedWindowedOperator(
        acc or Count(), option or TimeWindows(10), timestamp=lambda kv: kv[1], **props
    )


def put(h: OperatorHarness, *pairs: tuple[str, int], window: int | None = None) -> None:
    h.run_window([("input", p) for p in pairs], window=window)


# -- watermarks ------------------------------------------------------------------------------
def test_watermark_is_processed_at_the_streaming_window_boundary_only() -> None:
    h = harness(keyed())
    h.begin_window(0)
    h.put("input", ("a", 1))
    assert h.put_control("input", Watermark(10)) is True  # consumed, not forwarded as is
    h.put("input", ("a", 2))  # after the watermark, same streaming window: still counted
    assert panes(h) == []  # nothing fires before the boundary
    h.end_window()
    assert panes(h) == [("a", 0, 10, 2, 0, "ON_TIME", False)]
    assert watermarks(h) == [10]  # the operator's own watermark goes downstream


def test_watermark_is_the_minimum_over_upstream_partitions_and_a_silent_one_holds_it_back() -> None:
    h = harness(keyed())
    p0, p1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    put(h, ("a", 1), ("a", 15))
    watermark(h, 30, p0)
    put(h)
    assert panes(h) == [] and watermarks(h) == []  # partition 1 has sent nothing
    watermark(h, 12, p1)
    put(h)
    assert panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]  # min(30, 12) = 12
    watermark(h, 40, p1)
    put(h)
    assert [p[1] for p in panes(h)] == [0, 10] and watermarks(h) == [12, 30]


def test_an_upstream_repartitioned_in_or_out_does_not_freeze_the_watermark() -> None:
    h = harness(keyed())
    p0, p1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    put(h, ("a", 1), ("a", 15), ("a", 25))
    watermark(h, 30, p0)
    watermark(h, 12, p1)
    put(h)
    assert watermarks(h) == [12]
    # 2 -> 1 partition: partition 1 of 2 is gone, its last watermark must not count
    only = ControlSender("s", "up", 0, 1)
    watermark(h, 30, only)
    put(h)
    assert watermarks(h)[-1] == 30 and [p[1] for p in panes(h)] == [0, 10, 20]
    # 1 -> 2: both new partitions hold the minimum until each has sent one
    q0, q1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    watermark(h, 50, q0)
    put(h)
    assert watermarks(h)[-1] == 30  # the operator's watermark stays meanwhile
    watermark(h, 45, q1)
    put(h)
    assert watermarks(h)[-1] == 45


def test_idle_partition_is_let_go_after_the_timeout_and_the_watermark_never_goes_back() -> None:
    h = harness(keyed(idle_timeout_windows=3))
    p0, p1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    put(h, ("a", 1))
    for _ in range(2):
        watermark(h, 20, p0)
        put(h)
    assert watermarks(h) == []  # partition 1 silent for 2 windows: still held back
    watermark(h, 20, p0)
    put(h)  # window 3: silent since window 0 -> idle
    assert watermarks(h) == [20] and panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]
    watermark(h, 5, p1)  # the idle partition speaks again, far behind
    watermark(h, 20, p0)
    put(h)
    assert watermarks(h) == [20, 20]  # the operator's watermark does not regress


def run_until_idle_timeout(h: OperatorHarness, late: bool, senders: int) -> list[int]:
    """Partition 0 of ``senders`` sends Watermark(50) with a tuple (``late``: one window
    after it), the others nothing; the watermarks the operator sends, window by window."""
    p0 = ControlSender("e", "src", 0, senders)
    if not late:
        watermark(h, 50, p0)
    put(h, ("a", 1))
    if late:
        watermark(h, 50, p0)
    seen = []
    for _ in range(8):
        put(h)
        seen.append(h.operator.watermark)
    return seen


@pytest.mark.parametrize("senders", [2, 3])
def test_a_watermark_sent_in_the_first_window_counts_once_the_silent_partitions_are_idle(
    senders: int,
) -> None:
    """The silent partitions time out in the very window in which the one that spoke in the
    first window goes quiet: its watermark, held back until then, counts in that window."""
    h = harness(keyed(idle_timeout_windows=2))
    seen = run_until_idle_timeout(h, late=False, senders=senders)
    assert seen[0] is None and seen[1] == 50  # window 2: the silent ones let go
    assert panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]
    assert sent(h)[0] == 50 and set(sent(h)[1:]) == {"idle"}  # then every sender is idle


def test_a_watermark_sent_a_window_after_the_tuple_counts_once_the_silent_partition_is_idle() -> (
    None
):
    h = harness(keyed(idle_timeout_windows=2))
    seen = run_until_idle_timeout(h, late=True, senders=2)
    assert seen[0] is None and seen[1] == 50  # window 2: partition 1 let go, 0 still active
    assert panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]
    assert sent(h)[0] == 50 and set(sent(h)[1:]) == {"idle"}


def idle(h: OperatorHarness, sender: ControlSender | None = None, port: str = "input") -> None:
    h.put_control(port, WatermarkIdle(), DeliveryType.END_WINDOW, sender=sender)


def sent(h: OperatorHarness) -> list[int | str]:
    """The control tuples the operator sent: watermarks' timestamps, "idle" for WatermarkIdle."""
    return [
        "idle" if isinstance(c.payload, WatermarkIdle) else c.payload.timestamp
        for c in h.sink("output").controls
    ]


def test_a_partition_declared_idle_is_left_out_at_once_and_counts_again_with_its_watermark() -> (
    None
):
    h = harness(keyed())  # no idle_timeout_windows: only the declaration lets it go
    p0, p1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    put(h, ("a", 1), ("a", 15))
    watermark(h, 20, p0)
    idle(h, p1)
    put(h)
    assert sent(h) == [20] and [p[1] for p in panes(h)] == [0, 10]
    watermark(h, 30, p0)
    watermark(h, 12, p1)  # active again, behind: it holds the minimum, nothing goes back
    put(h)
    assert sent(h) == [20, 20]
    watermark(h, 30, p0)
    watermark(h, 25, p1)
    put(h)
    assert sent(h) == [20, 20, 25]
    # a new partitioning of the upstream forgets the old one's idle declarations
    q0, q1 = (ControlSender("s", "up", p, 3) for p in (0, 1))
    watermark(h, 40, q0)
    idle(h, q1)
    put(h)
    assert sent(h)[-1] == 25  # partition 2 of 3 has sent nothing: held back


def test_an_operator_whose_every_input_is_idle_says_so_downstream() -> None:
    h = harness(keyed())
    p0, p1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    put(h, ("a", 1))
    idle(h, p0)
    idle(h, p1)
    put(h)
    assert sent(h) == ["idle"] and panes(h) == []
    watermark(h, 10, p0)
    idle(h, p1)
    put(h)
    assert sent(h) == ["idle", 10] and panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]
    idle(h, p0)  # idle again after a watermark: the operator too, its watermark stays
    put(h)
    assert sent(h) == ["idle", 10, "idle"] and h.operator.watermark == 10


def test_an_idle_input_of_a_merge_operator_does_not_hold_the_other_back() -> None:
    op = WindowedMergeOperator(Cogroup(), TimeWindows(10), timestamp="t", timestamp2="t")
    h = harness(op)
    h.run_window([("input", {"t": 4})])
    watermark(h, 10, port="input")
    h.run_window()
    assert sent(h) == []  # input2 has sent nothing: held back
    watermark(h, 10, port="input")
    idle(h, port="input2")
    h.run_window()
    assert sent(h) == [10] and [p[3] for p in panes(h)] == [([{"t": 4}], [])]


@pytest.mark.parametrize("idle_first", [True, False])
def test_a_sender_forwarding_an_active_and_an_idle_upstream_counts_as_active(
    idle_first: bool,
) -> None:
    """An operator that is not control-aware forwards its upstreams' control payloads as its
    own: a Watermark and a WatermarkIdle in one window, in either order (a shuffle's)."""
    h = harness(keyed())
    merged = ControlSender("s", "map", 0, 1)
    put(h, ("a", 1), ("a", 11), ("a", 21))
    for w in (10, 20, 30):
        if idle_first:
            idle(h, merged)
        watermark(h, w, merged)
        if not idle_first:
            idle(h, merged)
        put(h)
    assert sent(h) == [10, 20, 30] and [p[1] for p in panes(h)] == [0, 10, 20]


def test_an_input_idle_by_silence_does_not_hold_a_merge_operators_other_input_back() -> None:
    op = WindowedMergeOperator(
        Cogroup(), TimeWindows(10), timestamp="t", timestamp2="t", idle_timeout_windows=2
    )
    h = harness(op)
    watermark(h, 5, port="input2")  # then input2 goes quiet (a WatermarkGenerator upstream)
    for w in (10, 20, 30):
        watermark(h, w, port="input")
        h.run_window()
    assert sent(h) == [5, 5, 30]  # input2 silent for 2 windows in the third: left out


def test_senders_checkpointed_under_a_forwarding_operators_name_are_forgotten() -> None:
    """Trackers pickled before copies kept their first sender hold keys of the forwarding
    operator's stream, which no copy names any more: forgotten on restore, not kept as a
    minimum for good."""
    import pickle

    from malhar.control import PerSenderMinimum
    from malhar.window.watermark import WatermarkTracker

    old = WatermarkTracker()
    old.update(1_000, ControlSender("kept", "mid", 0, 1), window=3)
    del old.__dict__["format"], old.__dict__["idle_senders"]  # as before the change
    restored = pickle.loads(pickle.dumps(old))
    assert restored.latest == {} and restored.expected == {} and restored.idle_senders == set()
    restored.update(2_900, ControlSender("events", "src", 0, 1), window=4)
    assert restored.combined(window=4, idle_windows=None) == 2_900
    current = pickle.loads(pickle.dumps(restored))  # written since: kept as it is
    assert current.latest == restored.latest and current.expected == {"events": 1}

    minimum = PerSenderMinimum()
    minimum.update(5, ControlSender("kept", "mid", 0, 1))
    del minimum.__dict__["format"]
    again = pickle.loads(pickle.dumps(minimum))
    assert again.minimum() is None
    assert again.update(50, ControlSender("events", "src", 0, 1)) == 50
    assert pickle.loads(pickle.dumps(again)).minimum() == 50


def test_fixed_watermark_follows_the_streaming_windows_implicit_time(caplog) -> None:
    # processing time = window id x 1000; watermark = that minus 2500
    h = harness(keyed(fixed_watermark=dt.timedelta(milliseconds=2500)), period=1000)
    put(h, ("a", 100), window=0)
    # event times from the data are rarely in that clock: said at setup
    assert "fixed_watermark follows the windows' implicit time" in caplog.text
    put(h, window=2)
    assert watermarks(h) == [-2500, -500]
    put(h, window=3)
    assert panes(h) == [("a", 100 - 100 % 10, 110, 1, 0, "ON_TIME", False)]
    assert watermarks(h)[-1] == 500


def test_ingestion_time_without_a_timestamp_extractor(caplog) -> None:
    op = KeyedWindowedOperator(Count(), TimeWindows(2000), fixed_watermark=0)
    h = harness(op, period=1000)
    put(h, ("a", None), ("b", None), window=0)  # processing time 0
    assert "fixed_watermark" not in caplog.text
    put(h, ("a", None), window=1)  # 1000
    put(h, ("a", None), window=2)  # 2000: the watermark 2000 closes [0, 2000)
    assert sorted(panes(h)) == [
        ("a", 0, 2000, 2, 0, "ON_TIME", False),
        ("b", 0, 2000, 1, 0, "ON_TIME", False),
    ]


# -- lateness --------------------------------------------------------------------------------
def test_tuples_beyond_the_allowed_lateness_go_to_the_late_port_and_are_counted() -> None:
    op = keyed(allowed_lateness=5, trigger=AfterWatermark(late=AfterCount(1)))
    h = harness(op)
    put(h, ("a", 3))
    watermark(h, 12)
    put(h)  # [0, 10) fires on time; horizon 7: kept, not purged
    put(h, ("a", 8), ("a", 6), ("b", 9))  # 8, 9 within lateness; 6 < 7 too late
    assert h.sink("late").tuples == [("a", 6)]
    assert op.late_count == 1
    assert panes(h, 2) == [("a", 0, 10, 1, 1, "LATE", False), ("b", 0, 10, 1, 0, "LATE", False)]


def test_windows_past_the_horizon_are_purged_with_their_state() -> None:
    op = keyed(allowed_lateness=10)
    h = harness(op)
    put(h, ("a", 1), ("b", 2), ("a", 15))
    assert len(op._store) == 3
    watermark(h, 19)
    put(h)
    assert len(op._store) == 3  # [0, 10) fired on time, kept until 10 + 10 <= watermark
    watermark(h, 20)
    put(h)
    assert len(op._store) == 1  # [0, 10) purged with both keys
    put(h, ("c", 9))  # below the horizon 10 now
    assert h.sink("late").tuples == [("c", 9)]


def test_late_port_counts_in_the_engine_metrics_and_batches_send_rows() -> None:
    op = KeyedWindowedOperator(Count(), TimeWindows(10), key="k", timestamp="t")
    h = harness(op)
    watermark(h, 20)
    put(h)
    batch = pa.RecordBatch.from_pylist([{"k": "a", "t": 5}, {"k": "a", "t": 25}])
    h.run_window([("input", batch)])
    assert h.sink("late").tuples == [{"k": "a", "t": 5}]
    assert op.late.count == 1  # the error port's per-window count the engine reports
    assert type(op).late.error


# -- triggers ----------------------------------------------------------------------------------
def test_default_trigger_fires_on_time_then_late_panes_for_late_tuples() -> None:
    h = harness(keyed(allowed_lateness=100))
    put(h, ("a", 1))
    watermark(h, 10)
    put(h)
    put(h, ("a", 2))
    put(h)  # no new tuples: no pane
    put(h, ("a", 3), ("a", 4))
    assert panes(h) == [
        ("a", 0, 10, 1, 0, "ON_TIME", False),
        ("a", 0, 10, 1, 1, "LATE", False),  # DISCARDING: what arrived since the last pane
        ("a", 0, 10, 2, 2, "LATE", False),
    ]


def test_after_watermark_without_late_firings_drops_later_tuples_of_the_window() -> None:
    op = keyed(trigger=AfterWatermark(), allowed_lateness=100)
    h = harness(op)
    put(h, ("a", 1))
    watermark(h, 10)
    put(h)
    put(h, ("a", 2), ("b", 3))  # a's trigger finished; b's window is born late: fires once
    assert panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False), ("b", 0, 10, 1, 0, "LATE", False)]
    assert op.dropped_count == 1
    assert h.sink("output").tuples[0].pane.is_last


def test_early_firings_every_n_tuples_fire_at_the_boundary() -> None:
    opt = TriggerOption.at_watermark().with_early_firings_at_every(2).accumulating_fired_panes()
    h = harness(keyed(trigger=opt))
    put(h, ("a", 1))
    put(h, ("a", 2), ("a", 3), ("a", 4))  # 4 tuples: one early pane at this boundary
    put(h, ("a", 5))
    watermark(h, 10)
    put(h)
    assert panes(h) == [
        ("a", 0, 10, 4, 0, "EARLY", False),
        ("a", 0, 10, 5, 1, "ON_TIME", False),
    ]


def test_processing_time_firings_follow_window_ids_so_replays_fire_identically() -> None:
    trigger = AfterWatermark(early=AfterProcessingTime(dt.timedelta(seconds=2)))
    op = keyed(trigger=trigger, accumulation_mode="ACCUMULATING")
    h = harness(op, period=500)
    put(h, ("a", 1), window=10)  # processing time 5000: early pane due at 7000
    put(h, ("a", 2), window=11)
    put(h, window=13)  # 6500
    assert panes(h) == []
    saved = h.checkpoint()
    put(h, window=14)  # 7000
    assert panes(h, 14) == [("a", 0, 10, 2, 0, "EARLY", False)]
    replay = OperatorHarness.restored(
        keyed(trigger=trigger, accumulation_mode="ACCUMULATING"), saved, h.context
    )
    put(replay, window=14)
    assert panes(replay) == panes(h, 14)


def test_composite_triggers_repeatedly_after_each_or_finally() -> None:
    # two single-tuple panes, then every 3 tuples, and done at the watermark
    trigger = Repeatedly(AfterCount(3)).or_finally(AfterWatermark())
    first = AfterCount(1)
    from malhar.window import AfterEach

    op = keyed(trigger=AfterEach(first, first, trigger), allowed_lateness=100)
    h = harness(op)
    for ts in range(1, 9):
        put(h, ("a", ts))
    watermark(h, 10)
    put(h)
    put(h, ("a", 9))
    assert [p[3] for p in panes(h)] == [1, 1, 3, 3]  # 1, 1, then 3 + 3 of the 6 remaining
    # the final pane at the watermark holds nothing new (DISCARDING): none; then closed
    assert op.dropped_count == 1


def test_global_window_with_a_count_trigger() -> None:
    op = WindowedOperator(Sum(), GlobalWindow(), trigger=Repeatedly(AfterCount(3)))
    h = harness(op)
    h.run_window([("input", v) for v in (1, 2)])
    h.run_window([("input", v) for v in (3, 4, 5)])
    h.run_window([("input", 6)])
    assert [t.value for t in h.sink("output").tuples] == [15]
    assert repr(h.sink("output").tuples[0].window) == "GLOBAL_WINDOW"


# -- accumulation modes ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("DISCARDING", [(2, 0, False), (1, 1, False)]),
        ("ACCUMULATING", [(2, 0, False), (3, 1, False)]),
        (A_R, [(2, 0, False), (-2, 0, True), (3, 1, False)]),
    ],
)
def test_accumulation_modes(mode: str, expected: list) -> None:
    h = harness(keyed(trigger=AfterWatermark(early=AfterCount(1)), accumulation_mode=mode))
    put(h, ("a", 1), ("a", 2))
    put(h, ("a", 3))
    assert [(p[3], p[4], p[6]) for p in panes(h)] == expected


def test_fire_only_updated_panes_skips_unchanged_values() -> None:
    opt = (
        TriggerOption.at_watermark()
        .with_early_firings_at_every(1)
        .accumulating_and_retracting_fired_panes()
        .firing_only_updated_panes()
    )
    op = KeyedWindowedOperator(
        ToList(sort=True),
        TimeWindows(10),
        timestamp=lambda kv: kv[1][0],
        trigger=opt,
        value=lambda kv: kv[1][1],
    )
    h = harness(op)
    put(h, ("a", (1, "x")))
    watermark(h, 10)
    put(h)  # ON_TIME pane equals the early one: skipped, no retraction either
    assert [(p[3], p[5], p[6]) for p in panes(h)] == [(["x"], "EARLY", False)]
    with pytest.raises(WindowConfigError, match="not DISCARDING"):
        harness(keyed(fire_only_updated_panes=True)).setup()


def test_retraction_precedes_every_changed_pane_and_downstream_sums_stay_right() -> None:
    h = harness(
        keyed(
            Sum(),
            trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
            accumulation_mode=A_R,
            allowed_lateness=50,
            value=lambda kv: 1,
        )
    )
    put(h, ("a", 1))
    put(h, ("a", 2), ("a", 3))
    watermark(h, 10)
    put(h)
    put(h, ("a", 4))
    emitted = h.sink("output").tuples
    assert sum(t.value for t in emitted) == 4  # retractions are negated: a sum downstream is exact
    timings = [(t.pane.index, t.pane.timing.value, t.pane.is_retraction) for t in emitted]
    assert timings == [
        (0, "EARLY", False),
        (0, "EARLY", True),
        (1, "EARLY", False),
        (1, "EARLY", True),
        (2, "ON_TIME", False),
        (2, "ON_TIME", True),
        (3, "LATE", False),
    ]


# -- sessions ----------------------------------------------------------------------------------
def sessions(**props) -> KeyedWindowedOperator:
    return keyed(
        Count(),
        SessionWindows(10),
        trigger=AfterWatermark(early=AfterCount(1)),
        accumulation_mode=A_R,
        allowed_lateness=1000,
        **props,
    )


def test_session_proto_window_that_fits_changes_only_the_state() -> None:
    op = sessions()
    h = harness(op)
    put(h, ("a", 0), ("a", 8))  # one session [0, 18)
    put(h, ("a", 5))  # [5, 15) fits into [0, 18)
    assert panes(h) == [
        ("a", 0, 18, 2, 0, "EARLY", False),
        ("a", 0, 18, -2, 0, "EARLY", True),
        ("a", 0, 18, 3, 1, "EARLY", False),
    ]
    assert len(op._store) == 1


def test_session_proto_window_that_extends_one_session_retracts_it() -> None:
    h = harness(sessions())
    put(h, ("a", 0))
    put(h, ("a", 7))  # [7, 17) overlaps [0, 10): the session becomes [0, 17)
    assert panes(h, 1) == [("a", 0, 10, -1, 0, "EARLY", True), ("a", 0, 17, 2, 0, "EARLY", False)]


def test_session_proto_window_that_bridges_two_sessions_merges_them_and_retracts_both() -> None:
    op = sessions()
    h = harness(op)
    put(h, ("a", 0), ("a", 20), ("b", 5))  # a: [0, 10) and [20, 30); b: [5, 15)
    put(h, ("a", 12))  # [12, 22) bridges [0, 10)? no: overlaps [20, 30) only -> extends
    put(h, ("a", 5))  # [5, 15) overlaps [0, 10) and [12, 30): one session [0, 30)
    assert panes(h, 2) == [
        ("a", 0, 10, -1, 0, "EARLY", True),
        ("a", 12, 30, -2, 0, "EARLY", True),
        ("a", 0, 30, 4, 0, "EARLY", False),
    ]
    assert sorted((w.start, w.end) for w in op._store.windows()) == [(0, 30), (5, 15)]  # b apart


def test_merge_retractions_come_in_window_order_whatever_the_tuples_order() -> None:
    def last(*pairs: tuple[str, int]) -> list:
        h = harness(sessions())
        put(h, ("a", 0), ("a", 100))  # sessions [0, 10) and [100, 110): early panes
        put(h, *pairs)  # both extended: both retracted
        return panes(h, 1)

    assert last(("a", 5), ("a", 105)) == last(("a", 105), ("a", 5))
    assert [p[1:4] for p in last(("a", 105), ("a", 5))][:2] == [(0, 10, -1), (100, 110, -1)]


def test_sessions_fire_on_time_when_the_watermark_passes_their_end() -> None:
    h = harness(keyed(Count(), SessionWindows(10)))
    put(h, ("a", 0), ("a", 5), ("b", 1))
    watermark(h, 15)
    put(h)
    assert sorted(panes(h)) == [
        ("a", 0, 15, 2, 0, "ON_TIME", False),
        ("b", 1, 11, 1, 0, "ON_TIME", False),
    ]


def test_a_finished_session_takes_no_tuple_that_would_extend_it_and_counts_it() -> None:
    op = keyed(Count(), SessionWindows(10), trigger=AfterWatermark(), allowed_lateness=100)
    h = harness(op)
    put(h, ("a", 0))
    watermark(h, 20)
    put(h)  # ON_TIME pane of [0, 10): its trigger finished
    put(h, ("a", 5), ("a", 9))  # [5, 15) and [9, 19) would extend it: they vanished
    watermark(h, 500)
    put(h)
    assert panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]
    assert op.dropped_count == 2 and len(op._store) == 0


def test_non_keyed_sessions_merge_across_the_whole_stream() -> None:
    op = WindowedOperator(Count(), SessionWindows(5), timestamp=lambda t: t)
    h = harness(op)
    h.run_window([("input", t) for t in (0, 3, 20, 6, 30)])
    watermark(h, 100)
    h.run_window()
    assert [(p[1], p[2], p[3]) for p in panes(h)] == [(0, 11, 3), (20, 25, 1), (30, 35, 1)]


# -- window propagation and merging --------------------------------------------------------------
def test_window_propagation_keeps_the_upstream_windows() -> None:
    from malhar.window.accumulation import TopNByKey

    counts = harness(keyed(allowed_lateness=0))
    put(counts, ("a", 1), ("b", 2), ("a", 3), ("c", 12))
    watermark(counts, 20)
    put(counts)
    top = harness(WindowedOperator(TopNByKey(1)))  # no window option: propagation
    top.run_window([("input", t) for t in counts.sink("output").tuples])
    for c in counts.sink("output").controls:
        top.put_control("input", c.payload, c.delivery)
    top.run_window()
    assert [(p[1], p[3]) for p in panes(top)] == [(0, [("a", 2)]), (10, [("c", 1)])]


def test_propagation_refuses_retractions_and_unwindowed_tuples() -> None:
    h = harness(WindowedOperator(Count()))
    h.begin_window(0)
    with pytest.raises(WindowError, match="window propagation"):
        h.put("input", 3)
    retraction = WindowedTuple(TimeWindows(10).assign(0)[0], 1, pane=pane_info(retraction=True))
    with pytest.raises(WindowError, match="retraction"):
        h.put("input", retraction)
    row = {"key": "a", "window_start": 0, "window_end": 10, "value": -1, "is_retraction": True}
    with pytest.raises(WindowError, match="retraction"):  # output_format="row" upstream
        h.put("input", row)
    assert isinstance(WindowError("x"), MalharError)


def pane_info(retraction: bool):
    from malhar.window import PaneInfo, Timing

    return PaneInfo(0, Timing.EARLY, True, False, retraction)


def test_rows_output_format_for_table_sinks() -> None:
    op = KeyedWindowedOperator(
        Count(), TimeWindows(10), key="user", timestamp="ts", output_format="row", value_name="n"
    )
    h = harness(op)
    h.run_window([("input", {"user": "ann", "ts": 4})])
    watermark(h, 10)
    h.run_window()
    assert h.sink("output").tuples == [
        {
            "user": "ann",
            "window_start": 0,
            "window_end": 10,
            "n": 1,
            "pane_index": 0,
            "timing": "ON_TIME",
            "is_first": True,
            "is_last": True,
            "is_retraction": False,
        }
    ]


# -- configuration errors --------------------------------------------------------------------
def test_configuration_errors_name_the_problem() -> None:
    with pytest.raises(WindowConfigError, match="set an accumulation"):
        harness(KeyedWindowedOperator(window_option=TimeWindows(10))).setup()
    with pytest.raises(WindowConfigError, match="divide"):
        TimeWindows(10).slide_by(3)
    with pytest.raises(MalharError, match="expected a Trigger"):
        KeyedWindowedOperator(Count(), trigger=3)
    # a string is a trigger's name (as in a JSON application): an unknown one says which exist
    with pytest.raises(MalharError, match=r"unknown trigger 'often'.* \(known: AfterAll, "):
        KeyedWindowedOperator(Count(), trigger="often")
    with pytest.raises(MalharError, match="accumulation mode 'SOMETIMES'"):
        keyed(accumulation_mode="SOMETIMES")
    with pytest.raises(MalharError, match=r"non-negative .* \(or None\), got -1$"):
        keyed(allowed_lateness=-1)
    h = harness(KeyedWindowedOperator(Count(), TimeWindows(10), timestamp="t"))
    h.begin_window(0)
    h.put("input", {"t": 1, "user": "a"})
    assert "set key=" in reasons(h)[0]


def test_watermark_control_tuples_pass_other_control_tuples_on() -> None:
    h = harness(keyed())
    h.begin_window(0)
    assert not h.put_control("input", ("flush", 1), DeliveryType.IMMEDIATE)
    assert h.sink("output").controls[-1].payload == ("flush", 1)
    h.end_window()


def test_emitted_tuples_carry_window_key_value_and_pane_info() -> None:
    h = harness(keyed())
    put(h, ("k", 3))
    watermark(h, 10)
    put(h)
    (t,) = h.sink("output").tuples
    assert (t.key, t.value, t.timestamp) == ("k", 1, 9)
    assert (t.pane.index, t.pane.is_first, t.pane.is_last, t.pane.is_retraction) == (
        0,
        True,
        True,
        False,
    )
    assert pane(t)[5] == "ON_TIME"


def test_a_fused_upstream_partition_counts_as_the_one_sender_whatever_its_number() -> None:
    # partition 1 of a fused chain: the engine says "partition 1 of 1 upstream partitions"
    h = harness(keyed())
    put(h, ("a", 1))
    watermark(h, 10, ControlSender("events", "src", 1, 1))
    put(h)
    assert panes(h) == [("a", 0, 10, 1, 0, "ON_TIME", False)]


def reasons(h: OperatorHarness) -> list[str]:
    return [e["reason"] for e in h.sink("error").tuples]


@pytest.mark.parametrize("t", [None, float("nan")])
def test_a_tuple_without_a_time_goes_to_the_error_port_as_a_batchs_row_does(t) -> None:
    # a null time became the ingestion time; a NaN raised a bare ValueError; then one such
    # tuple failed the window, and every replay of it
    rows = [{"k": "a", "t": 5}, {"k": "a", "t": t}]
    for inputs in deliveries("input", rows) if t is None else [[("input", r) for r in rows]]:
        h = harness(KeyedWindowedOperator(Count(), TimeWindows(10), key="k", timestamp="t"))
        h.run_window(inputs)
        assert [e["tuple"] for e in h.sink("error").tuples] == [rows[1]]
        assert "timestamp" in reasons(h)[0]
        h.put_control("input", Watermark(10))
        h.run_window()
        assert [(p.key, p.value) for p in h.sink("output").tuples] == [("a", 1)]


def test_a_batchs_integer_sum_does_not_wrap_where_its_tuples_do_not() -> None:
    # Arrow sums int64 in 64 bits and wraps; the tuples' Python ints do not
    rows = [{"k": "a", "v": 2**62, "t": 1}, {"k": "a", "v": 2**62, "t": 2}]
    got = []
    for inputs in deliveries("input", rows):
        op = KeyedWindowedOperator(Sum(), TimeWindows(10), key="k", value="v", timestamp="t")
        got.append([p[3] for p in fired(op, inputs, 20)])
    assert got == [[2**63]] * 3


def test_a_batch_of_microsecond_timestamps_is_windowed_as_its_tuples() -> None:
    # Spark's timestamps are microseconds: a cast to milliseconds refused a sub-millisecond
    # part ("would lose data") and failed the batch; a tuple's datetime is floored
    base = dt.datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=dt.UTC)  # -0.5 ms
    # -0.5 ms, 0.5 ms and 9.4995 ms: floored to -1, 0 and 9
    rows = [{"k": "a", "t": base + dt.timedelta(microseconds=us)} for us in (0, 1_000, 9_999)]
    schema = pa.schema([("k", pa.string()), ("t", pa.timestamp("us", tz="UTC"))])
    got = []
    for inputs in deliveries("input", rows, schema=schema):
        op = KeyedWindowedOperator(Count(), TimeWindows(5), key="k", timestamp="t")
        got.append(sorted((p[1], p[3]) for p in fired(op, inputs, 100)))
    assert got[0] == got[1] == got[2] == [(-5, 1), (0, 1), (5, 1)]


def test_nan_is_above_every_number_in_window_min_and_max_from_tuples_and_batches() -> None:
    # Python's min and max depended on the order of arrival; Arrow's skip NaN
    from malhar.window.accumulation import Max, Min

    for acc, want in [(Min, "[1.0]"), (Max, "[nan]")]:
        got = set()
        for order in itertools.permutations([float("nan"), 1.0, 2.0]):
            rows = [{"k": "a", "v": v, "t": 1} for v in order]
            for inputs in deliveries("input", rows):
                op = KeyedWindowedOperator(
                    acc(), TimeWindows(10), key="k", value="v", timestamp="t"
                )
                got.add(str([p[3] for p in fired(op, inputs, 20)]))
        assert got == {want}, acc.__name__


@pytest.mark.parametrize(
    ("props", "row", "field"),
    [
        ({"key": "k", "timestamp": "t"}, {"k": "a", "ts": 5}, "'t' (timestamp='t')"),
        ({"key": ("k", "j"), "timestamp": "t"}, {"k": "a", "t": 5}, "'j' (key=('k', 'j'))"),
        ({"key": "k", "value": "v", "timestamp": "t"}, {"k": "a", "t": 5}, "'v' (value='v')"),
    ],
)
def test_a_tuple_or_batch_without_a_named_field_is_refused_with_the_field_and_the_setting(
    props, row, field
) -> None:
    # a bare KeyError 't' (or Arrow's 'Field "t" does not exist in schema') named neither
    acc = Sum if "value" in props else Count
    for inputs in deliveries("input", [row]):
        h = harness(KeyedWindowedOperator(acc(), TimeWindows(10), **props))
        h.run_window(inputs)
        [reason] = reasons(h)
        assert reason.startswith("KeyedWindowedOperator 'win': a tuple (dict) ")
        assert f"has no field {field}" in reason


def test_a_watermark_generator_passes_a_tuple_without_a_time_on_and_counts_it() -> None:
    # it failed the window: the windowed operator behind it refuses such a tuple with the
    # reason (its error port); the generator only moves no watermark for it
    from malhar.window import WatermarkGenerator

    rows = [{"k": "a", "t": 5}, {"k": "c", "t": None}]
    for inputs in deliveries("input", rows):
        h = harness(WatermarkGenerator(timestamp="t"))
        h.run_window(inputs)
        assert h.sink("output").tuples == rows
        assert h.sink("output").controls[-1].payload == Watermark(5)
        assert h.operator.metrics() == {"without_time": 1.0}
    h = harness(WatermarkGenerator(timestamp="t"))
    h.run_window([("input", {"k": "b", "ts": 9}), ("input", {"k": "d", "t": "noon"})])
    assert len(h.sink("output").tuples) == 2 and h.sink("output").controls == []
    assert h.operator.metrics() == {"without_time": 2.0}


def test_a_watermark_generator_says_once_why_a_batch_moves_no_watermark(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a batch of string times failed the application (the doc says: passed on, counted);
    # a column name that does not exist moved no watermark and said nothing
    import logging

    import pyarrow as pa

    from malhar.window import WatermarkGenerator

    strings = pa.RecordBatch.from_pylist([{"ts": "2026-11-21 01:00:00"}] * 3)
    for timestamp, batch, said in [
        ("ts", strings, "the tuple's timestamp '2026-11-21 01:00:00' is not a time"),
        ("tss", pa.RecordBatch.from_pylist([{"ts": 5}] * 2), "has no field 'tss'"),
    ]:
        caplog.clear()
        h = harness(WatermarkGenerator(timestamp=timestamp))
        with caplog.at_level(logging.WARNING, logger="malhar.window"):
            h.run_window([("input", batch), ("input", batch)])
        assert len(h.sink("output").tuples) == 2 * batch.num_rows  # passed on
        assert h.sink("output").controls == []
        assert h.operator.metrics() == {"without_time": 2.0 * batch.num_rows}
        [record] = caplog.records  # once per partition
        assert said in record.getMessage() and "moves no watermark" in record.getMessage()


def test_a_tuples_date_is_midnight_utc_as_a_batchs_date32_is() -> None:
    # a tuple's date was refused ("expected milliseconds ..."); a date32 column was not
    rows = [{"k": "a", "t": dt.date(1970, 1, 2)}, {"k": "a", "t": dt.date(1969, 12, 31)}]
    schema = pa.schema([("k", pa.string()), ("t", pa.date32())])
    got = []
    for inputs in deliveries("input", rows, schema=schema):
        op = KeyedWindowedOperator(Count(), TimeWindows(86_400_000), key="k", timestamp="t")
        got.append(sorted((p[1], p[3]) for p in fired(op, inputs, 2 * 86_400_000)))
    assert got[0] == got[1] == got[2] == [(-86_400_000, 1), (86_400_000, 1)]


def test_a_tuples_timestamp_that_is_not_a_time_says_what_to_give() -> None:
    h = harness(KeyedWindowedOperator(Count(), TimeWindows(10), key="k", timestamp="t"))
    # a bool is an int, 2**63 an int beyond 64 bits: neither is a time
    h.run_window([("input", {"k": "a", "t": t}) for t in ("noon", True, 2**63)])
    said = reasons(h)
    assert re.search(r"'noon' is not a time .*epoch milliseconds", said[0])
    assert len(said) == 3 and all("is not a time" in r for r in said)


@pytest.mark.parametrize("times", [["5"], ["5", "abc"], ["5", "6"], [True, False]])
def test_a_batchs_time_that_a_tuple_may_not_give_goes_to_the_error_port_as_the_tuple(
    times,
) -> None:
    # Arrow casts "5" (and True) to a number: a batch of ["5"] made a pane where the tuple
    # went to the error port; now every row goes there with the tuple's reason
    rows = [{"k": "a", "t": t} for t in times]
    got = []
    for inputs in deliveries("input", rows):
        h = harness(KeyedWindowedOperator(Count(), TimeWindows(10), key="k", timestamp="t"))
        h.run_window(inputs)
        h.put_control("input", Watermark(10))
        h.run_window()
        assert h.sink("output").tuples == []
        got.append(h.sink("error").tuples)
    assert got[0] == got[1] == got[2]
    assert [e["tuple"] for e in got[0]] == rows
    assert all(re.search(r"timestamp .* is not a time \(", e["reason"]) for e in got[0])
    if times[0] == "5":
        assert "'5' is not a time (str '5' is not an event time)" in got[0][0]["reason"]


def test_a_key_that_cannot_be_one_names_the_setting_from_tuples_and_batches() -> None:
    rows = [{"tags": ["x", "y"], "t": 1}]
    for inputs in deliveries("input", rows):
        h = harness(KeyedWindowedOperator(Count(), TimeWindows(10), key="tags", timestamp="t"))
        h.run_window(inputs)
        assert re.search(r"\['x', 'y'\] \(list\) cannot be a key.*'key'", reasons(h)[0])


def test_a_time_whose_windows_pass_the_last_timestamp_is_an_error_row_on_both_paths() -> None:
    # the batch path wrapped the window's end around int64 (an inverted window), the tuple
    # path made an end past it
    from malhar.window.windows import MAX_TIMESTAMP, MIN_TIMESTAMP

    rows = [{"k": "a", "t": MAX_TIMESTAMP - 3}, {"k": "a", "t": 5}, {"k": "a", "t": MIN_TIMESTAMP}]
    for option, held, refused in [
        (TimeWindows(10), [(0, 10)], [MAX_TIMESTAMP - 3, MIN_TIMESTAMP]),
        (TimeWindows(10).slide_by(5), [(0, 10), (5, 15)], [MAX_TIMESTAMP - 3, MIN_TIMESTAMP]),
        (SessionWindows(10), [(MIN_TIMESTAMP, MIN_TIMESTAMP + 10), (5, 15)], [MAX_TIMESTAMP - 3]),
    ]:
        for inputs in deliveries("input", rows):
            h = harness(KeyedWindowedOperator(Count(), option, key="k", timestamp="t"))
            h.run_window(inputs)
            assert sorted((w.start, w.end) for w in h.operator._st.windows()) == held
            assert [e["tuple"]["t"] for e in h.sink("error").tuples] == refused
            assert all("past the first or last timestamp" in e for e in reasons(h))


# -- restarts with other settings ------------------------------------------------------------
def test_a_lateness_set_at_a_restart_purges_the_windows_held_before() -> None:
    # windows made without an allowed lateness were never listed for purging: a restart
    # that set one kept them (and their state) for ever
    h = harness(keyed(allowed_lateness=None))
    put(h, ("a", 1), ("a", 11), ("a", 21), window=1)
    watermark(h, 30)
    h.run_window(window=2)
    assert len(list(h.operator._st.windows())) == 3  # fired ON_TIME, kept: no lateness
    again = OperatorHarness.restored(keyed(allowed_lateness=0), h.checkpoint(), h.context)
    watermark(again, 30)
    again.run_window([("input", ("a", 35))], window=3)
    assert sorted(w.start for w in again.operator._st.windows()) == [30]
    # and once listed, a later restart does not list them again
    assert again.operator._book.purging is True
    later = OperatorHarness.restored(keyed(allowed_lateness=0), again.checkpoint(), h.context)
    later.setup()
    assert later.operator._book.purge == [(40, 30)]


def test_a_restart_with_other_accumulation_parameters_is_refused_and_old_records_compare_by_class() -> (
    None
):
    """TopN(n=3) cells hold the top 3 of each window: with n=5 their panes would be short."""
    h = harness(keyed(TopN(n=3), TimeWindows(60)))
    put(h, ("a", 5))
    saved = h.checkpoint()
    with pytest.raises(WindowConfigError, match=r"accumulation TopN\(n=3, key=None\) -> TopN\(n=5"):
        OperatorHarness.restored(keyed(TopN(n=5), TimeWindows(60)), saved, h.context).setup()
    OperatorHarness.restored(keyed(TopN(n=3), TimeWindows(60)), saved, h.context).setup()

    # a checkpoint whose record names the class only (written before): the class is compared
    old = OperatorHarness.restored(keyed(TopN(n=3), TimeWindows(60)), saved, h.context)
    old.operator._book.shape["accumulation"] = "TopN"
    again = OperatorHarness.restored(keyed(TopN(n=5), TimeWindows(60)), old.checkpoint(), h.context)
    again.setup()
    assert again.operator._book.shape["accumulation"] == "TopN(n=5, key=None)"


def test_a_restart_with_another_window_size_is_refused_while_cells_are_held() -> None:
    """The cells of 60 s windows would fire beside the new 30 s ones, silently."""
    h = harness(keyed(option=TimeWindows(60)))
    put(h, ("a", 5))
    saved = h.checkpoint()
    changed = OperatorHarness.restored(keyed(option=TimeWindows(30)), saved, h.context)
    with pytest.raises(
        WindowConfigError,
        match=r"window_option TimeWindows\(60\) -> TimeWindows\(30\) since the checkpoint, "
        r"which holds 1 window cell",
    ):
        changed.setup()
    with pytest.raises(WindowConfigError, match=r"accumulation Count\(\) -> Sum\(\)"):
        OperatorHarness.restored(keyed(Sum(), TimeWindows(60)), saved, h.context).setup()
    # the same settings (other lateness is fine) go on
    same = OperatorHarness.restored(keyed(option=TimeWindows(60)), saved, h.context)
    put(same, ("a", 6))
    # no cell held (all purged): the new size starts on empty state
    empty = harness(keyed(option=TimeWindows(60)))
    put(empty)
    OperatorHarness.restored(keyed(option=TimeWindows(30)), empty.checkpoint(), h.context).setup()


def test_a_trigger_without_its_own_repr_restarts_on_its_checkpoint() -> None:
    class Plain(AfterCount):  # repr by address: another text in every process
        __repr__ = object.__repr__

    h = harness(keyed(trigger=Plain(2)))
    put(h, ("a", 5))
    again = OperatorHarness.restored(keyed(trigger=Plain(2)), h.checkpoint(), h.context)
    put(again, ("a", 6))
    assert [p[3] for p in panes(again)] == [2]


def test_when_every_sender_is_idle_the_largest_watermark_they_sent_counts() -> None:
    """Two file partitions that ran out of files in the same window: the windows between
    the slower one's last watermark and the faster one's fire (as Flink's valve does)."""
    h = harness(keyed())
    p0, p1 = (ControlSender("s", "up", p, 2) for p in (0, 1))
    put(h, ("a", 5), ("a", 15), ("a", 25))
    watermark(h, 30, p0)
    watermark(h, 12, p1)
    put(h)
    assert sent(h) == [12] and [p[1] for p in panes(h)] == [0]
    idle(h, p0)
    idle(h, p1)
    put(h)
    assert h.operator.watermark == 30 and [p[1] for p in panes(h)] == [0, 10, 20]
    watermark(h, 20, p1)  # active again, behind: nothing goes back
    put(h)
    assert h.operator.watermark == 30


def test_a_merge_operator_whose_inputs_are_all_idle_takes_the_smaller_input() -> None:
    op = WindowedMergeOperator(Cogroup(), TimeWindows(10), timestamp="t", timestamp2="t")
    h = harness(op)
    watermark(h, 30, port="input")
    watermark(h, 10, port="input2")
    h.run_window()
    idle(h, port="input")
    idle(h, port="input2")
    h.run_window()
    assert h.operator.watermark == 10  # the max within an input, the min across inputs


class _Outer:
    class Top(TopN):
        """An accumulation class inside another: its qualified name differs from its name."""


def test_an_unchanged_accumulation_recorded_by_its_class_restarts() -> None:
    """A function parameter puts an address in the repr: the class is recorded, by its
    qualified name, and an unchanged restart compared it with the short one."""

    def top() -> TopN:
        return _Outer.Top(n=3, key=lambda r: r)

    h = harness(keyed(top(), TimeWindows(60)))
    put(h, ("a", 5))
    assert h.operator._book.shape["accumulation"] == "_Outer.Top"
    OperatorHarness.restored(keyed(top(), TimeWindows(60)), h.checkpoint(), h.context).setup()
    with pytest.raises(WindowConfigError, match=r"accumulation _Outer.Top -> Count since"):
        OperatorHarness.restored(keyed(Count(), TimeWindows(60)), h.checkpoint(), h.context).setup()
