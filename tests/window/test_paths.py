"""Arrow batches against single tuples, partitions against one operator, the merge operator,
checkpoints, and the watermark generator."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from malhar.control import ControlSender, DeliveryType
from malhar.testing import OperatorHarness
from malhar.window import (
    AfterCount,
    AfterWatermark,
    KeyedWindowedMergeOperator,
    KeyedWindowedOperator,
    SessionWindows,
    TimeWindows,
    Watermark,
    WatermarkGenerator,
    WindowedMergeOperator,
    WindowedOperator,
)
from malhar.window.accumulation import (
    Average,
    Cogroup,
    Count,
    FullOuterJoin,
    InnerJoin,
    LeftOuterJoin,
    RightOuterJoin,
    Sum,
    ToList,
)
from malhar.window.impl.core import Partial
from tests.window.helpers import harness, panes, watermark

EVENTS = [
    {"user": u, "ts": ts, "amount": a}
    for u, ts, a in [
        ("ann", 3, 1), ("bob", 7, 2), ("ann", 12, 3), ("cid", 14, 4), ("ann", 19, 5),
        ("bob", 21, 6), ("ann", 5, 7), ("bob", 28, 8), ("cid", 2, 9), ("ann", 25, 10),
    ]
]  # fmt: skip


def run_rows(op, rows, as_batch: bool, watermark_at: int = 1000) -> list:
    h = harness(op)
    if as_batch:
        h.run_window([("input", pa.RecordBatch.from_pylist(rows))])
    else:
        h.run_window([("input", r) for r in rows])
    watermark(h, watermark_at)
    h.run_window()
    return sorted(panes(h), key=repr)


@pytest.mark.parametrize(
    "acc",
    [Count(), Sum(), Average(), ToList(sort=True)],
    ids=["count", "sum", "average", "tolist-generic-path"],
)
@pytest.mark.parametrize(
    "option", [TimeWindows(10), TimeWindows(10).slide_by(5)], ids=["tumbling", "sliding"]
)
def test_batch_path_equals_tuple_path(acc, option) -> None:
    def op():
        return KeyedWindowedOperator(acc, option, key="user", timestamp="ts", value="amount")

    assert run_rows(op(), EVENTS, True) == run_rows(op(), EVENTS, False)


def test_batch_path_reads_timestamp_columns_and_assigns_windows_vectorized(monkeypatch) -> None:
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = [{"k": "a", "at": start + dt.timedelta(seconds=s)} for s in (1, 2, 61)]
    schema = pa.schema([("k", pa.string()), ("at", pa.timestamp("us", "UTC"))])
    op = KeyedWindowedOperator(
        Count(), TimeWindows(dt.timedelta(minutes=1)), key="k", timestamp="at"
    )
    h = harness(op)
    # vectorized: never a call per row into the per-tuple path
    monkeypatch.setattr(op, "_process", lambda *a: pytest.fail("per-row fallback used"))
    h.run_window([("input", pa.RecordBatch.from_pylist(rows, schema=schema))])
    base = int(start.timestamp() * 1000)
    watermark(h, base + 120_000)
    h.run_window()
    assert [(p[1] - base, p[3]) for p in panes(h)] == [(0, 2), (60_000, 1)]


def test_batch_late_rows_and_non_keyed_batches() -> None:
    op = WindowedOperator(Sum(), TimeWindows(10), timestamp="ts", value="amount")
    h = harness(op)
    watermark(h, 10)
    h.run_window()
    h.run_window([("input", pa.RecordBatch.from_pylist(EVENTS))])
    assert sorted(r["ts"] for r in h.sink("late").tuples) == [2, 3, 5, 7]
    watermark(h, 100)
    h.run_window()
    assert [(p[1], p[3]) for p in panes(h)] == [(10, 12), (20, 24)]


def run_partitioned(make, events, partitions: int, assign, *, raw: bool = False) -> list:
    """Events spread over ``partitions`` harnesses in partial mode, their partials merged by
    the operator's unifier; both watermark every partition. ``raw``: what the unifier
    emits (rows with ``output_format="row"``), else its panes."""
    parts = [harness(make(), partition=p, partitions=partitions) for p in range(partitions)]
    unifier = OperatorHarness(make().get_unifier("output"))
    for p, h in enumerate(parts):
        h.run_window([("input", e) for i, e in enumerate(events) if assign(i, e) == p])
    senders = [ControlSender("s", "up", p, partitions) for p in range(partitions)]
    for h in parts:
        for s in senders:
            watermark(h, 1000, s)
        h.run_window(window=1)
    for w in (0, 1):
        items = [t for h in parts for t in h.sink("output").per_window.get(w, [])]
        assert all(isinstance(t, Partial) for t in items)
        unifier.begin_window(w)
        for t in items:
            unifier.put("input", t)
        if w == 1:
            for p, h in enumerate(parts):
                (ctl,) = h.sink("output").controls
                unifier.put_control("input", ctl.payload, ctl.delivery, sender=senders[p])
        unifier.end_window()
    assert len(unifier.sink("output").controls) == partitions  # passed on, one per partition
    return sorted(unifier.sink("output").tuples if raw else panes(unifier), key=repr)


@pytest.mark.parametrize("partitions", [2, 3])
def test_partitions_with_the_unifier_equal_one_operator(partitions: int) -> None:
    def make():
        return WindowedOperator(Average(), TimeWindows(10), timestamp="ts", value="amount")

    single = run_rows(make(), EVENTS, False)
    assert run_partitioned(make, EVENTS, partitions, lambda i, e: i % partitions) == single


def test_partitioned_sessions_merge_in_the_unifier() -> None:
    def make():
        return WindowedOperator(ToList(sort=True), SessionWindows(4), timestamp="ts", value="ts")

    single = run_rows(make(), EVENTS, False)
    assert run_partitioned(make, EVENTS, 2, lambda i, e: i % 2) == single
    assert [p[3] for p in sorted(single, key=lambda p: p[1])] == [
        [2, 3, 5, 7],
        [12, 14],
        [19, 21],
        [25, 28],
    ]


def test_keyed_operator_combined_by_its_unifier() -> None:
    def make():
        return KeyedWindowedOperator(
            Count(), TimeWindows(10), key="user", timestamp="ts", combine_partitions=True
        )

    assert make().get_unifier("output") is not None
    assert KeyedWindowedOperator(Count()).get_unifier("output") is None  # key-partitioned
    assert run_partitioned(make, EVENTS, 2, lambda i, e: i % 2) == run_rows(make(), EVENTS, False)


@pytest.mark.parametrize(
    ("key", "names"),
    [
        ("user", {}),
        (["user", "amount"], {}),
        ("user", {"key_names": ["who"]}),
        (["user", "amount"], {"key_names": ["who", "amt"]}),
    ],
)
def test_the_unifiers_rows_name_the_key_as_one_partitions_do(key, names) -> None:
    # the unifier has no key property: its rows named the key "key" where one partition's
    # named it "user", so the columns changed with the partition count
    def make():
        return KeyedWindowedOperator(
            Sum(), TimeWindows(10), key=key, timestamp="ts", value="amount",
            combine_partitions=True, output_format="row", value_name="total", **names,
        )  # fmt: skip

    h = harness(make())
    h.run_window([("input", e) for e in EVENTS])
    watermark(h, 1000)
    h.run_window()
    single = sorted(h.sink("output").tuples, key=repr)
    want = names.get("key_names", [key] if isinstance(key, str) else key)
    assert single and all(list(r)[: len(want)] == want and "total" in r for r in single)
    assert run_partitioned(make, EVENTS, 2, lambda i, e: i % 2, raw=True) == single


# -- merge operator ------------------------------------------------------------------------------
def test_merge_operator_watermark_is_the_earlier_of_its_inputs() -> None:
    op = KeyedWindowedMergeOperator(
        LeftOuterJoin(), TimeWindows(10), key="id", timestamp="t", value="v"
    )
    h = harness(op)
    h.run_window(
        [("input", {"id": 1, "t": 1, "v": "o1"}), ("input", {"id": 2, "t": 2, "v": "o2"}),
         ("input2", {"id": 1, "t": 3, "v": "p1"})]
    )  # fmt: skip
    watermark(h, 50, port="input")
    h.run_window()
    assert panes(h) == [] and h.sink("output").controls == []  # input2 has no watermark yet
    watermark(h, 10, port="input2")
    h.run_window()
    assert sorted((p[0], p[3]) for p in panes(h)) == [(1, [("o1", "p1")]), (2, [("o2", None)])]
    assert h.sink("output").controls[-1].payload == Watermark(10)


def test_non_keyed_merge_operator_cogroups_and_uses_its_own_extractors() -> None:
    op = WindowedMergeOperator(
        Cogroup(), TimeWindows(10), timestamp="t", timestamp2=lambda r: r[0], value2=lambda r: r[1]
    )
    h = harness(op)
    h.run_window([("input", {"t": 4}), ("input2", (5, "x"))])
    watermark(h, 10, port="input")
    watermark(h, 10, port="input2")
    h.run_window()
    assert [p[3] for p in panes(h)] == [([{"t": 4}], ["x"])]


@pytest.mark.parametrize("acc", [InnerJoin(), LeftOuterJoin(), Cogroup()])
def test_merge_operator_batches_on_either_input_join_as_tuples_do(acc) -> None:
    def run(batches: bool) -> list:
        op = KeyedWindowedMergeOperator(acc, TimeWindows(10), key="id", timestamp="t", value="v")
        h = harness(op)
        left = [{"id": 1, "t": 2, "v": "o1"}, {"id": 2, "t": 3, "v": "o2"}]
        right = [{"id": 1, "t": 5, "v": "p1"}]
        if batches:  # the second input's batch went to the first input's side
            h.run_window([("input", pa.RecordBatch.from_pylist(left)),
                          ("input2", pa.RecordBatch.from_pylist(right))])  # fmt: skip
        else:
            h.run_window([("input", r) for r in left] + [("input2", r) for r in right])
        watermark(h, 10, port="input")
        watermark(h, 10, port="input2")
        h.run_window()
        return sorted((p[0], p[3]) for p in panes(h))

    assert run(batches=True) == run(batches=False) != []


# -- checkpoints ---------------------------------------------------------------------------------
def test_a_restored_operator_replays_a_window_with_the_same_panes() -> None:
    def make():
        return KeyedWindowedOperator(
            Count(), SessionWindows(5), key="user", timestamp="ts",
            trigger=AfterWatermark(early=AfterCount(2)), accumulation_mode="ACCUMULATING_AND_RETRACTING",
            allowed_lateness=100,
        )  # fmt: skip

    h = harness(make())
    h.run_window([("input", e) for e in EVENTS[:5]])
    saved = h.checkpoint()
    window1 = [("input", e) for e in EVENTS[5:]]
    h.run_window(window1)
    watermark(h, 40)
    h.run_window()
    first = panes(h, 1) + panes(h, 2)
    replay = OperatorHarness.restored(make(), saved, h.context)
    replay.run_window(list(reversed(window1)), window=1)  # another arrival order
    watermark(replay, 40)
    replay.run_window(window=2)
    assert panes(replay) == first
    assert any(p[6] for p in first)  # retractions happened (sessions merged)


# -- the watermark generator -------------------------------------------------------------------------
def test_watermark_generator_per_split_minimum_and_silence() -> None:
    gen = WatermarkGenerator(
        timestamp="ts", split_by="partition", max_out_of_orderness=dt.timedelta(milliseconds=5)
    )
    h = OperatorHarness(gen)
    h.run_window([("input", {"partition": 0, "ts": 100}), ("input", {"partition": 1, "ts": 40})])
    h.run_window()  # nothing arrived: no watermark
    h.run_window(
        [
            (
                "input",
                pa.RecordBatch.from_pylist(
                    [{"partition": 1, "ts": 90}, {"partition": 0, "ts": 95}]
                ),
            )
        ]
    )
    marks = [c.payload.timestamp for c in h.sink("output").controls]
    assert marks == [35, 85]
    assert all(c.delivery is DeliveryType.END_WINDOW for c in h.sink("output").controls)
    assert len(h.sink("output").tuples) == 4  # tuples pass through


# -- merge operator: null keys match nothing (SQL), null_keys_match opts out --------------------
NULL_LEFT = [{"id": None, "t": 1, "v": "o0"}, {"id": 1, "t": 2, "v": "o1"},
             {"id": None, "t": 3, "v": "o2"}]  # fmt: skip
NULL_RIGHT = [{"id": None, "t": 4, "v": "p0"}, {"id": 1, "t": 5, "v": "p1"}]


def _merge_panes(acc, batches: bool = False, **props) -> dict:
    op = KeyedWindowedMergeOperator(
        acc, TimeWindows(10), key=props.pop("key", "id"), timestamp="t", value="v", **props
    )
    h = harness(op)
    left, right = NULL_LEFT, NULL_RIGHT
    if batches:
        h.run_window([("input", pa.RecordBatch.from_pylist(left)),
                      ("input2", pa.RecordBatch.from_pylist(right))])  # fmt: skip
    else:
        h.run_window([("input", r) for r in left] + [("input2", r) for r in right])
    watermark(h, 10, port="input")
    watermark(h, 10, port="input2")
    h.run_window()
    return {p[0]: p[3] for p in panes(h)}


@pytest.mark.parametrize("batches", [False, True])
def test_merge_joins_pair_no_null_keys(batches: bool) -> None:
    pair = [("o1", "p1")]
    got = {
        type(acc).__name__: _merge_panes(acc, batches)
        for acc in (InnerJoin(), LeftOuterJoin(), RightOuterJoin(), FullOuterJoin(), Cogroup())
    }
    # the None key's values are unmatched: an inner join pairs none, an outer join each of
    # its outer side(s) with None, once
    assert got["InnerJoin"] == {1: pair, None: []}
    assert got["LeftOuterJoin"] == {1: pair, None: [("o0", None), ("o2", None)]}
    assert got["RightOuterJoin"] == {1: pair, None: [(None, "p0")]}
    assert got["FullOuterJoin"] == {1: pair, None: [("o0", None), ("o2", None), (None, "p0")]}
    # cogroup groups (as Spark's cogroup): the None key is a group
    assert got["Cogroup"] == {1: (["o1"], ["p1"]), None: (["o0", "o2"], ["p0"])}


def test_merge_joins_pair_null_keys_when_asked() -> None:
    got = _merge_panes(InnerJoin(null_keys_match=True))
    assert got == {1: [("o1", "p1")], None: [("o0", "p0"), ("o2", "p0")]}


def test_merge_join_key_of_several_columns_with_a_none_matches_nothing() -> None:
    op = KeyedWindowedMergeOperator(InnerJoin(), TimeWindows(10), key=["a", "b"], timestamp="t")
    h = harness(op)
    rows = [{"a": 1, "b": None, "t": 1}, {"a": 1, "b": 2, "t": 1}]
    h.run_window([("input", r) for r in rows] + [("input2", r) for r in rows])
    watermark(h, 10, port="input")
    watermark(h, 10, port="input2")
    h.run_window()
    got = {p[0]: p[3] for p in panes(h)}
    assert got == {(1, None): [], (1, 2): [(rows[1], rows[1])]}


def test_a_non_keyed_merge_join_pairs_all_of_its_window() -> None:
    op = WindowedMergeOperator(InnerJoin(), TimeWindows(10), timestamp="t", value="v")
    h = harness(op)
    h.run_window([("input", NULL_LEFT[0]), ("input2", NULL_RIGHT[0])])
    watermark(h, 10, port="input")
    watermark(h, 10, port="input2")
    h.run_window()
    assert [p[3] for p in panes(h)] == [[("o0", "p0")]]  # no key: not a null key


def test_a_keyed_merge_join_unifier_pairs_no_null_keys() -> None:
    def make():
        return KeyedWindowedMergeOperator(
            LeftOuterJoin(), TimeWindows(10), key="id", timestamp="t", value="v",
            combine_partitions=True,
        )  # fmt: skip

    parts = [harness(make(), partition=p, partitions=2) for p in range(2)]
    unifier = OperatorHarness(make().get_unifier("output"))
    parts[0].run_window([("input", r) for r in NULL_LEFT])
    parts[1].run_window([("input2", r) for r in NULL_RIGHT])
    senders = [ControlSender("s", "up", p, 2) for p in range(2)]
    for h in parts:
        for s in senders:
            watermark(h, 1000, s, port="input")
            watermark(h, 1000, s, port="input2")
        h.run_window(window=1)
    for w in (0, 1):
        unifier.begin_window(w)
        for h in parts:
            for t in h.sink("output").per_window.get(w, []):
                unifier.put("input", t)
        if w == 1:
            for p, h in enumerate(parts):
                ctl = h.sink("output").controls[-1]
                unifier.put_control("input", ctl.payload, ctl.delivery, sender=senders[p])
        unifier.end_window()
    got = {p[0]: p[3] for p in panes(unifier)}
    assert got == {1: [("o1", "p1")], None: [("o0", None), ("o2", None)]}
