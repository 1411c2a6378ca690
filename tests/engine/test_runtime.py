"""The engine on local Spark: partitioning, unifiers, application windows, lifecycle,
processing modes and control tuples, asserted on what operators really received."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar import DAG, ApplicationFailed, ProcessingMode, StreamCodec, launch, run
from malhar.testing.operators import Collector, collected
from tests.engine.ops import (
    AppWindowSum,
    Blocker,
    ControlRecorder,
    ControlSource,
    EventLog,
    FailOnce,
    FailsInUnifier,
    Forwarder,
    Numbers,
    RunningTotal,
    SenderRecorder,
    SlowTeardown,
    SumPerKey,
    WatermarkSource,
    window_items,
)

pytestmark = pytest.mark.integration


class FirstItem(StreamCodec):
    """Partitions (key, value) tuples by key with a stable hash."""

    def partition(self, value):
        return sum(value[0].encode())


def expected_sums(windows: range) -> dict[int, list[tuple[str, int]]]:
    out = {}
    for w in windows:
        acc: Counter = Counter()
        for k, v in window_items(w):
            acc[k] += v
        out[w] = sorted(acc.items())
    return out


def sum_dag(src_parts: int, sum_parts: int, codec: StreamCodec | None, limit: int = 0) -> DAG:
    dag = DAG("sums")
    src = dag.add_operator("src", Numbers(), PARTITIONS=src_parts)
    agg = dag.add_operator("sum", SumPerKey(), PARTITIONS=sum_parts, UNIFIER_LIMIT=limit)
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, agg.input)
    dag.add_stream("sums", agg.output, out.input)
    if codec is not None:
        agg.input.set_attribute("STREAM_CODEC", codec)
    return dag


def _sorted_windows(result: dict[int, list]) -> dict[int, list]:
    return {w: sorted(v) for w, v in result.items()}


def test_single_partition_sums(spark, tmp_path: Path) -> None:
    run(sum_dag(1, 1, None), windows=3, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    assert _sorted_windows(collected(str(tmp_path), "out")) == expected_sums(range(3))


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    src_parts=st.integers(1, 3),
    sum_parts=st.integers(1, 4),
    keyed=st.booleans(),
    limit=st.sampled_from([0, 2]),
)
def test_partitioned_equals_unpartitioned(
    spark, tmp_path_factory, src_parts, sum_parts, keyed, limit
) -> None:
    ckpt = tmp_path_factory.mktemp("p")
    codec = FirstItem() if keyed else None
    dag = sum_dag(src_parts, sum_parts, codec, limit)
    run(dag, windows=3, spark=spark, checkpoint=str(ckpt), window_ms=50)
    got = collected(str(ckpt), "out")
    # The unifier in front of the single collector merges partial sums of every partition.
    merged = {}
    for w, items in got.items():
        acc: Counter = Counter()
        for k, v in items:
            acc[k] += v
        merged[w] = sorted(acc.items())
    assert merged == expected_sums(range(3))


def test_mxn_unifier_per_downstream_partition(spark, tmp_path: Path) -> None:
    """3 partial-sum partitions -> 2 keyed downstream partitions, one unifier each."""
    dag = DAG("mxn")
    src = dag.add_operator("src", Numbers(), PARTITIONS=2)
    agg = dag.add_operator("sum", SumPerKey(), PARTITIONS=3)
    out = dag.add_operator("out", Collector(), PARTITIONS=2)
    dag.add_stream("items", src.output, agg.input)
    dag.add_stream("sums", agg.output, out.input)
    out.input.set_attribute("STREAM_CODEC", FirstItem())
    run(dag, windows=3, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    got = _sorted_windows(collected(str(tmp_path), "out"))
    # With one unifier per downstream partition every key arrives once per window, fully merged.
    assert got == expected_sums(range(3))
    per_partition = {
        p.name: [
            k
            for w in sorted(p.glob("*.pkl"))
            for k, _ in __import__("pickle").loads(w.read_bytes())
        ]
        for p in (tmp_path / "malhar" / "collect" / "out").iterdir()
    }
    assert len(per_partition) == 2
    assert not set(per_partition["0"]) & set(per_partition["1"])  # sticky keys


def test_running_state_carried_across_windows(spark, tmp_path: Path) -> None:
    dag = DAG("total")
    src = dag.add_operator("src", Numbers(), PARTITIONS=2)
    tot = dag.add_operator("total", RunningTotal())
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, tot.input)
    dag.add_stream("totals", tot.output, out.input)
    run(dag, windows=4, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    running, expected = 0, {}
    for w in range(4):
        running += sum(v for _, v in window_items(w))
        expected[w] = [running]
    assert collected(str(tmp_path), "out") == expected


def test_application_window_of_three(spark, tmp_path: Path) -> None:
    dag = DAG("appwin")
    src = dag.add_operator("src", Numbers())
    agg = dag.add_operator("agg", AppWindowSum(), APPLICATION_WINDOW_COUNT=3)
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, agg.input)
    dag.add_stream("sums", agg.output, out.input)
    run(dag, windows=9, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    got = {w: v for w, v in collected(str(tmp_path), "out").items() if v}
    total = lambda ws: sum(v for w in ws for _, v in window_items(w))  # noqa: E731
    assert got == {
        2: [(0, total(range(3)))],
        5: [(3, total(range(3, 6)))],
        8: [(6, total(range(6, 9)))],
    }


def test_lifecycle_order_per_partition(spark, tmp_path: Path) -> None:
    dag = DAG("life")
    src = dag.add_operator("src", Numbers(per_window=4))
    log = dag.add_operator("log", EventLog(), PARTITIONS=2)
    dag.add_stream("items", src.output, log.input)
    log.input.set_attribute("STREAM_CODEC", FirstItem())
    run(dag, windows=4, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    for part in ("0", "1"):
        events = [
            json.loads(x) for x in (tmp_path / "events" / f"{part}.jsonl").read_text().splitlines()
        ]
        by_instance = defaultdict(list)
        for e in events:
            by_instance[e["id"]].append(e)
        windows_seen = []
        for evs in by_instance.values():
            names = [e["e"] for e in evs if e["e"] not in ("process", "committed")]
            assert names[:2] == ["setup", "activate"]
            body = names[2:]
            if body[-2:] == ["deactivate", "teardown"]:
                body = body[:-2]
            assert body == ["begin", "end"] * (len(body) // 2), names
            windows_seen += [e["w"] for e in evs if e["e"] == "begin"]
        assert sorted(windows_seen) == [0, 1, 2, 3]
        last = next(evs for evs in by_instance.values() if any(e.get("w") == 3 for e in evs))
        assert [e["e"] for e in last][-2:] == ["deactivate", "teardown"]


@pytest.mark.parametrize("mode", [ProcessingMode.AT_LEAST_ONCE, ProcessingMode.AT_MOST_ONCE])
def test_processing_mode_on_replay(spark, tmp_path: Path, mode: ProcessingMode) -> None:
    def build() -> DAG:
        dag = DAG(f"mode-{mode.value}")
        src = dag.add_operator("src", Numbers(per_window=3))
        fwd = dag.add_operator("fwd", Forwarder(), PROCESSING_MODE=mode, PARTITIONS=2)
        fail = dag.add_operator("fail", FailOnce(fail_window=2))
        out = dag.add_operator("out", Collector())
        dag.add_stream("a", src.output, fwd.input)
        dag.add_stream("b", fwd.output, fail.input)
        dag.add_stream("c", fail.output, out.input)
        return dag

    app = launch(build(), spark=spark, checkpoint=str(tmp_path), windows=5, window_ms=50)
    with pytest.raises(Exception, match="injected failure in window 2"):
        app.await_completion()
    app.query.stop()
    assert app.last_window == 1
    # The restart first replays window 2 (from Spark's offset log), then runs 3 new windows.
    run(build(), windows=3, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    got = {w: sorted(v) for w, v in collected(str(tmp_path), "out").items()}
    expected = {w: sorted(window_items(w, per_window=3)) for w in range(6)}
    if mode is ProcessingMode.AT_MOST_ONCE:
        expected[2] = []  # the in-flight window is skipped, exactly that one
    assert got == expected


def test_control_tuples_delivery_propagation_dedup(spark, tmp_path: Path) -> None:
    dag = DAG("control")
    src = dag.add_operator("src", ControlSource(), PARTITIONS=2)
    fwd = dag.add_operator("fwd", Forwarder(), PARTITIONS=2)
    rec = dag.add_operator("rec", ControlRecorder(), PARTITIONS=2)
    out = dag.add_operator("out", Collector())
    dag.add_stream("a", src.output, fwd.input)
    dag.add_stream("b", fwd.output, rec.input)
    dag.add_stream("c", rec.output, out.input)
    rec.input.set_attribute("STREAM_CODEC", FirstItem())
    run(dag, windows=2, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    logs = collected(str(tmp_path), "out")
    for w in (0, 1):
        assert len(logs[w]) == 2  # both receiver partitions (broadcast)
        for seen in logs[w]:
            controls = [x for x in seen if x[0] == "control"]
            # two upstream partitions forwarded each control tuple; each arrives once
            assert controls == [("control", ("now", w)), ("control", ("at-end", w))]
            assert seen[-2:] == [("control", ("at-end", w)), ("end_window",)]


def test_control_tuple_opt_out_stops_propagation(spark, tmp_path: Path) -> None:
    dag = DAG("optout")
    src = dag.add_operator("src", ControlSource())
    blk = dag.add_operator("blk", Blocker())
    rec = dag.add_operator("rec", ControlRecorder())
    out = dag.add_operator("out", Collector())
    dag.add_stream("a", src.output, blk.input)
    dag.add_stream("b", blk.output, rec.input)
    dag.add_stream("c", rec.output, out.input)
    run(dag, windows=1, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    (seen,) = collected(str(tmp_path), "out")[0]
    assert seen == [
        ("data", "data-before"),
        ("data", "data-after"),
        ("control", ("at-end", 0)),
        ("end_window",),
    ]


@pytest.mark.parametrize("down_parts", [1, 2])
def test_cascading_unifier_equals_unpartitioned(spark, tmp_path: Path, down_parts: int) -> None:
    from malhar.engine.plan import build_plan, cascade_fans

    assert cascade_fans(8, 2) == [4, 2]
    assert cascade_fans(5, 2) == [3, 2]
    assert cascade_fans(2, 2) == []
    dag = DAG("cascade")
    src = dag.add_operator("src", Numbers(), PARTITIONS=2)
    agg = dag.add_operator("sum", SumPerKey(), PARTITIONS=5, UNIFIER_LIMIT=2)
    out = dag.add_operator("out", Collector(), PARTITIONS=down_parts)
    dag.add_stream("items", src.output, agg.input)
    dag.add_stream("sums", agg.output, out.input)
    agg.input.set_attribute("STREAM_CODEC", FirstItem())
    out.input.set_attribute("STREAM_CODEC", FirstItem())
    plan = build_plan(dag)
    cascade = [g for g in plan.groups if g.cascade_route is not None]
    assert [g.partitions for g in cascade] == [3 * down_parts, 2 * down_parts]
    run(dag, windows=3, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    assert _sorted_windows(collected(str(tmp_path), "out")) == expected_sums(range(3))


def test_control_aware_ports_learn_each_copy_and_its_sender(spark, tmp_path: Path) -> None:
    dag = DAG("senders")
    src = dag.add_operator("src", WatermarkSource(), PARTITIONS=3)
    direct = dag.add_operator("direct", SenderRecorder())
    fwd = dag.add_operator("fwd", SumPerKey(), PARTITIONS=4, UNIFIER_LIMIT=2)
    behind = dag.add_operator("behind", SenderRecorder())
    out1 = dag.add_operator("out1", Collector())
    out2 = dag.add_operator("out2", Collector())
    dag.add_stream("a", src.output, direct.input, fwd.input)
    dag.add_stream("b", fwd.output, behind.input)  # through cascading unifiers (4 -> 2 -> 1)
    dag.add_stream("c", direct.output, out1.input)
    dag.add_stream("d", behind.output, out2.input)
    run(dag, windows=2, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    for w in (0, 1):
        ((copies, minimum),) = collected(str(tmp_path), "out1")[w]
        # one copy per upstream partition, each with its sender; the minimum of all three
        assert copies == [("src", p, 3, 100 * w + p) for p in range(3)]
        assert minimum == 100 * w
        ((copies, minimum),) = collected(str(tmp_path), "out2")[w]
        # every fwd partition (not control aware) passed on the three watermarks with their
        # senders, as the unifiers did: the minimum is src's, not the largest per fwd partition
        assert sorted(copies) == sorted(
            ("src", p, 3, 100 * w + p) for _ in range(4) for p in range(3)
        )
        assert minimum == 100 * w


def test_unifier_errors_name_the_unifier(spark, tmp_path: Path) -> None:
    dag = DAG("badunifier")
    src = dag.add_operator("src", Numbers(), PARTITIONS=2)
    mid = dag.add_operator("mid", FailsInUnifier(), PARTITIONS=2)
    out = dag.add_operator("out", Collector())
    dag.add_stream("a", src.output, mid.input)
    dag.add_stream("b", mid.output, out.input)
    with pytest.raises(ApplicationFailed) as info:
        run(dag, windows=1, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    assert info.value.reason.startswith(
        "OperatorError: operator 'mid.output->out.input#unifier' partition 0 failed in process "
        "of window 0: ValueError: cannot unify"
    ), info.value.reason


def test_await_completion_and_stop_honour_their_timeouts(spark, tmp_path: Path) -> None:
    dag = DAG("timeouts")
    src = dag.add_operator("src", Numbers())
    slow = dag.add_operator("slow", SlowTeardown())
    out = dag.add_operator("out", Collector())
    dag.add_stream("a", src.output, slow.input)
    dag.add_stream("b", slow.output, out.input)
    app = launch(dag, spark=spark, checkpoint=str(tmp_path), window_ms=50)  # unbounded
    try:
        app.await_window(1)
        began = time.monotonic()
        with pytest.raises(TimeoutError, match="application 'timeouts': not done after 1s"):
            app.await_completion(timeout=1.0)  # an unbounded run never completes
        assert time.monotonic() - began < 20
        assert app.query.isActive  # still running: the caller decides
        began = time.monotonic()
        with pytest.raises(TimeoutError, match="stopping application 'timeouts'"):
            app.stop(timeout=2.0)  # the last window's teardown takes 60 s
        assert time.monotonic() - began < 30
        assert not app.query.isActive  # aborted
    finally:
        app.abort()
