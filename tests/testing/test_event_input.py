"""``EventTimeInput``: timed rows that are the same for the same window index and partition,
so a replay, a restart and a repartitioning go on with the same stream; bounded with
``rows``, it ends as the other bounded inputs do (metric ``ended``, the end-of-input
watermark). Then on Spark: its rows counted per key in event-time windows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, launch
from malhar.operator import OperatorContext
from malhar.properties import PropertyError
from malhar.testing import Collector, EventTimeInput, OperatorHarness, collected
from malhar.window import (
    MAX_TIMESTAMP,
    KeyedWindowedOperator,
    TimeWindows,
    Watermark,
    WatermarkGenerator,
)
from malhar.window.accumulation import Count

END = Watermark(MAX_TIMESTAMP)


def harness(partition: int = 0, partitions: int = 1, **props: Any) -> OperatorHarness:
    context = OperatorContext("events", partition=partition, partitions=partitions)
    return OperatorHarness(EventTimeInput(**props), context)


def windows(h: OperatorHarness, ids: range) -> dict[int, list[dict]]:
    for w in ids:
        h.run_window(window=w)
    return {w: h.sink("output").per_window.get(w, []) for w in ids}


def test_rows_follow_the_window_index_not_the_window_id() -> None:
    h = harness(rows_per_window=3, start_ms=1_000, step_ms=250, keys=2)
    got = windows(h, range(100, 103))  # ids continue across runs: counted from the first
    assert got[100] == [
        {"key": "k0", "value": 0, "ts": 1_000},
        {"key": "k1", "value": 1, "ts": 1_250},
        {"key": "k0", "value": 2, "ts": 1_500},
    ]
    assert [r["value"] for r in got[102]] == [6, 7, 8]
    assert got[102][-1] == {"key": "k0", "value": 8, "ts": 3_000}
    # another run with the same properties, from another first window: the same rows
    again = windows(harness(rows_per_window=3, start_ms=1_000, step_ms=250, keys=2), range(3))
    assert list(again.values()) == list(got.values())
    assert h.sink("output").controls == []  # endless: no end-of-input watermark
    assert not h.operator.is_bounded() and h.operator.metrics() == {}


def test_a_replayed_window_emits_what_its_first_run_did_and_a_restart_goes_on() -> None:
    props = {"rows_per_window": 4, "keys": 3, "out_of_order_ms": 700}
    h = harness(**props)
    windows(h, range(10, 12))
    saved = h.checkpoint()  # after window 11
    first = windows(h, range(12, 14))
    replay = OperatorHarness.restored(EventTimeInput(**props), saved, h.context)
    assert windows(replay, range(12, 14)) == first
    assert [r["value"] for r in first[12]] == [8, 9, 10, 11]


def test_partitions_share_each_window_by_row_number() -> None:
    props = {"rows_per_window": 7, "keys": 5, "out_of_order_ms": 50}
    whole = windows(harness(**props), range(3))
    parts = [windows(harness(p, 3, **props), range(3)) for p in range(3)]
    for w in range(3):
        for p in range(3):
            assert {r["value"] % 3 for r in parts[p][w]} <= {p}
        merged = sorted((r for part in parts for r in part[w]), key=lambda r: r["value"])
        assert merged == whole[w]


def test_a_repartitioned_input_goes_on_with_the_next_row_over_its_new_partitions() -> None:
    props = {"rows_per_window": 6}
    old = [harness(p, 2, **props) for p in range(2)]
    for h in old:
        windows(h, range(2))  # rows 0 .. 11
    saved = old[0].checkpoint()  # the first window, its only state, is every partition's
    new = []
    for p in range(3):
        context = OperatorContext("events", partition=p, partitions=3)
        new.append(OperatorHarness.restored(EventTimeInput(**props), saved, context))
    got = [windows(h, range(2, 3))[2] for h in new]
    assert [[r["value"] for r in part] for part in got] == [[12, 15], [13, 16], [14, 17]]


def test_out_of_order_rows_stay_within_the_bound_of_every_row_before_them() -> None:
    source = EventTimeInput(step_ms=10, out_of_order_ms=35)
    rows = [source.row(n) for n in range(2_000)]
    delays = [n * 10 - r["ts"] for n, r in enumerate(rows)]
    assert min(delays) == 0 and max(delays) == 35  # the whole range is used
    highest = rows[0]["ts"]
    disordered = 0
    for r in rows[1:]:  # a generator with max_out_of_orderness=35 never makes one late
        assert r["ts"] >= highest - 35
        disordered += r["ts"] < highest
        highest = max(highest, r["ts"])
    assert disordered > 500
    assert [r["ts"] for r in rows] == [
        EventTimeInput(step_ms=10, out_of_order_ms=35).row(n)["ts"] for n in range(2_000)
    ]


def test_a_bounded_input_ends_in_the_window_with_its_last_row_and_says_so_after() -> None:
    h = harness(1, 2, rows_per_window=4, rows=10)
    ended, controls = [], []
    for w in range(5):
        h.run_window(window=w)
        ended.append(h.operator.metrics()["ended"])
        controls.append([c.payload for c in h.sink("output").controls])
        h.sink("output").controls.clear()
    assert h.operator.is_bounded()
    got = {w: [r["value"] for r in rows] for w, rows in h.sink("output").per_window.items()}
    assert got == {0: [1, 3], 1: [5, 7], 2: [9]}  # rows 8 and 9 in window 2, then none
    assert ended == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert controls == [[], [], [END], [END], [END]]


def test_a_partition_without_rows_ends_with_the_others() -> None:
    h = harness(3, 4, rows_per_window=5, rows=3)  # rows 0 .. 2: none for partition 3
    h.run_window()
    assert h.sink("output").tuples == []
    assert [c.payload for c in h.sink("output").controls] == [END]
    assert h.operator.metrics() == {"ended": 1.0}


def test_settings_out_of_range_are_refused() -> None:
    with pytest.raises(PropertyError, match="rows_per_window: 0 is below the minimum 1"):
        EventTimeInput(rows_per_window=0)
    with pytest.raises(PropertyError, match="keys"):
        EventTimeInput(keys=0)
    with pytest.raises(PropertyError, match="has no property 'row'"):
        EventTimeInput(row=3)


@pytest.mark.integration
def test_keyed_event_time_counts_on_spark(spark: Any, tmp_path: Path) -> None:
    source = EventTimeInput(rows_per_window=25, step_ms=100, keys=2, out_of_order_ms=250, rows=200)
    dag = DAG("event-time-input")
    src = dag.add_operator("src", source, PARTITIONS=2)
    marks = dag.add_operator(
        "marks", WatermarkGenerator(timestamp="ts", max_out_of_orderness=250), PARTITIONS=2
    )
    counter = KeyedWindowedOperator(
        Count(), TimeWindows(1_000), key="key", timestamp="ts", output_format="row"
    )
    counts = dag.add_operator("counts", counter, PARTITIONS=2)
    counts.input.set_attribute("STREAM_CODEC", counter.key_codec())
    dag.add_stream("events", src.output, marks.input)
    dag.add_stream("timed", marks.output, counts.input)
    dag.add_stream("panes", counts.output, dag.add_operator("out", Collector()).input)
    ckpt = str(tmp_path / "ckpt")
    app = launch(dag, spark=spark, checkpoint=ckpt, window_ms=100)
    assert app.bounded
    app.await_end_of_input(timeout=300)  # the end-of-input watermark fires the last windows
    panes = [p for rows in collected(ckpt, "out").values() for p in rows]
    got = {(p["key"], p["window_start"]): p["value"] for p in panes}
    assert len(got) == len(panes)  # one pane per key and window
    assert {p["timing"] for p in panes} == {"ON_TIME"}
    # every row in its window, none late (the generator's bound is the input's disorder)
    expected = Counter((r["key"], r["ts"] // 1_000 * 1_000) for r in map(source.row, range(200)))
    assert got == dict(expected)
    per_key = {
        "k0": [1, 5, 5, 5, 6, 4, 6, 5, 4, 5, 6, 4, 5, 5, 5, 5, 5, 5, 5, 6, 3],
        "k1": [0, 6, 5, 4, 5, 5, 6, 5, 5, 5, 4, 6, 4, 6, 4, 6, 5, 5, 4, 6, 4],
    }  # windows -1 s (row 2 at 200 - 209 ms) .. 19 s
    starts = range(-1_000, 20_000, 1_000)
    assert got == {
        (k, start): n for k, ns in per_key.items() for start, n in zip(starts, ns, strict=True) if n
    }
    assert sum(got.values()) == 200
