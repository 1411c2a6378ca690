"""Dynamic partitioning: partition keys, partitioners, and repartitioning a running
application exactly once."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, ConfigError, KeyCodec, launch
from malhar import attributes as A
from malhar.engine import generations
from malhar.partitioning import (
    Partition,
    PartitioningContext,
    StatelessThroughputBasedPartitioner,
    merge,
    routing_table,
    split,
    spread,
)
from malhar.stats import OperatorStats, WindowStats
from malhar.testing.operators import Collector, collected
from malhar.testing.services.process import wait_until
from tests.drivers import kill_when_paused, start_driver
from tests.engine.ops import AppWindowKeyCount, KeyedRunningCount, RatedKeys, keyed_items

ROOT = Path(__file__).resolve().parents[2]


def expected(window: int, per_window: int = 100, keys: int = 50) -> list[tuple[str, int]]:
    totals: Counter = Counter()
    for w in range(window + 1):
        totals.update(r["key"] for r in keyed_items(w, per_window, keys))
    return sorted((k, totals[k]) for k in {r["key"] for r in keyed_items(window, per_window, keys)})


def test_partition_keys_split_merge_and_route_every_value_once() -> None:
    keys = spread(3)
    assert routing_table(keys) == (3, [0, 1, 2, 0])
    halves = split(keys[1])
    mask, table = routing_table([keys[0], *halves, keys[2]])
    assert mask == 7 and sorted(set(table)) == [0, 1, 2, 3]
    assert routing_table([merge(keys[:2]), keys[2]]) == (3, [0, 0, 1, 0])


def _stats(rates: dict[int, float]) -> OperatorStats:
    return OperatorStats(
        "op",
        len(rates),
        [
            WindowStats(0, p, {"input": int(r)}, {}, started=0.0, ended=1.0)
            for p, r in rates.items()
        ],
    )


def test_a_keyed_field_holding_a_key_in_two_partitions_is_refused() -> None:
    # the pooled dict kept one partition's value and dropped the other's without a word
    from malhar.engine.state_moves import _redistribute
    from malhar.errors import StateError

    old = [KeyedRunningCount(), KeyedRunningCount()]
    old[0].counts, old[1].counts = {"a": 1, "b": 1}, {"a": 2}
    new = [Partition(KeyedRunningCount(), k) for k in spread(2)]
    with pytest.raises(StateError, match=r"field 'counts' holds key 'a' in two partitions"):
        _redistribute(
            "count", old, new, KeyCodec("key"), None, routing_table([p.keys for p in new])
        )


def test_an_operator_fused_behind_the_request_is_asked_too() -> None:
    # a BoundedDedup fused behind the requested operator follows its count: it was found
    # out only after the application had stopped
    from malhar.algo import BoundedDedup
    from malhar.engine.plan import build_plan
    from malhar.engine.repartition import check_requests
    from malhar.errors import ConfigError

    dag = DAG("fused")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    dedup = dag.add_operator("dedup", BoundedDedup(key="key"))
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, dedup.input)
    dag.add_stream("unique", dedup.unique, out.input)
    dedup.input.set_attribute(A.PARALLEL_PARTITION, True)
    plan = build_plan(dag)
    with pytest.raises(ConfigError, match=r"'dedup' \(BoundedDedup\) \(fused behind 'src'\)"):
        check_requests(dag, {"src": 3}, plan)
    with pytest.raises(ConfigError, match="repartition the first operator of the chain"):
        check_requests(dag, {"dedup": 3}, plan)


def test_the_throughput_partitioner_splits_busy_and_merges_idle_neighbours() -> None:
    part = StatelessThroughputBasedPartitioner(maximum=100, minimum=10, cooldown_ms=0)
    existing = [Partition(KeyedRunningCount(), k) for k in spread(4)]
    assert part.process_stats(_stats({0: 150, 1: 50, 2: 50, 3: 50})).repartition_required
    new = part.define_partitions(existing, PartitioningContext("op"))
    assert len(new) == 5 and new[2].operator is existing[1].operator  # kept as it was
    routing_table([p.keys for p in new])  # still covers every value exactly once
    assert part.process_stats(_stats({0: 50, 1: 5, 2: 5, 3: 50})).repartition_required
    new = part.define_partitions(existing, PartitioningContext("op"))
    assert len(new) == 3 and sorted(new[1].keys.keys) == [1, 2]
    assert not part.process_stats(_stats({0: 50, 1: 5, 2: 50, 3: 5})).repartition_required


def _dag(counter: KeyedRunningCount | None = None) -> DAG:
    dag = DAG("repartition")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    count = dag.add_operator("count", counter or KeyedRunningCount())
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, count.input)
    dag.add_stream("counts", count.output, out.input)
    count.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    return dag


def _check_exact(checkpoint: str) -> dict[int, list]:
    got = collected(checkpoint, "out")
    assert sorted(got) == list(range(max(got) + 1)), "a window is missing"
    for w, pairs in got.items():
        assert sorted(pairs) == expected(w), f"window {w}"
    return got


def _repartitioned(
    spark, dag: DAG, checkpoint: str, name: str, counts: list[int], start: int, between: int
) -> tuple[Any, list[generations.Generation]]:
    """Run ``dag`` to window ``start``, then repartition ``name`` to each of ``counts`` with
    ``between`` windows after each; returns the stopped application and the generations."""
    done = []
    app = launch(dag, spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        app.await_window(start)
        for n in counts:
            done.append(app.repartition({name: n}))
            assert done[-1].operators[name].partitions == n
            assert app.plan.groups[app.plan.group_of[name]].partitions == n
            app.await_window(app.last_window + between)
    finally:
        app.stop()
    return app, done


@pytest.mark.integration
def test_a_keyed_counter_goes_from_one_to_four_to_two_partitions_exactly(
    spark, tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "ck")
    _, (first, second) = _repartitioned(spark, _dag(), checkpoint, "count", [4, 2], 3, 4)
    assert second.generation == 2
    assert generations.load(checkpoint).operators["count"].partitions == 2
    got = _check_exact(checkpoint)
    assert max(got) >= 11
    # the three partitionings each ran windows (ids never went backwards, none repeated)
    assert first.window < second.window < max(got)


def _join_dag(partitions: int = 2, *, by_key: bool = True) -> DAG:
    from malhar.algo import StreamJoin, partition_by_key

    dag = DAG("join-repartition")
    left = dag.add_operator("left", RatedKeys().configure(keys=20))
    right = dag.add_operator("right", RatedKeys().configure(keys=20, per_window=30))
    # tuples stay joinable for 3 windows: the state a repartitioning moves decides matches
    join = StreamJoin("key", "key", expiry_windows=3)
    join_op = dag.add_operator("join", join, PARTITIONS=partitions)
    if by_key:
        partition_by_key(join_op)
    out = dag.add_operator("out", Collector())
    dag.add_stream("l", left.output, join_op.left)
    dag.add_stream("r", right.output, join_op.right)
    dag.add_stream("joined", join_op.output, out.input)
    return dag


@pytest.mark.integration
def test_a_stream_join_gives_what_it_gives_unrepartitioned_over_repartitionings(
    spark, tmp_path: Path
) -> None:
    # FieldCodec (the catalogue's keyed operators) could not place managed-state keys: the
    # repartitioning failed (and with it the application)
    moved = str(tmp_path / "moved")
    app, _ = _repartitioned(spark, _join_dag(), moved, "join", [3, 1], 2, 2)
    last = app.last_window
    # the local stores stay where they were (by the application's checkpoint): each
    # partitioning used to leave a copy of the state under its generation's root
    from malhar.util.state.manager import default_local_dir

    for generation in (1, 2):
        stale = default_local_dir(generations.state_root(moved, generation), "join", 0)
        assert not Path(stale).parent.exists(), stale
    assert Path(default_local_dir(moved, "join", 0)).exists()
    still = str(tmp_path / "still")
    app = launch(_join_dag(), spark=spark, checkpoint=still, window_ms=100)
    try:
        app.await_window(last)
    finally:
        app.stop()

    def per_window(checkpoint: str) -> dict[int, Counter]:
        got = collected(checkpoint, "out")
        return {w: Counter(r["key"] for r in got.get(w, [])) for w in range(last + 1)}

    moved_rows, still_rows = per_window(moved), per_window(still)
    assert sum(sum(c.values()) for c in still_rows.values()) > 0
    assert moved_rows == still_rows


@pytest.mark.integration
def test_a_keyed_operator_of_one_partition_without_codec_repartitions_by_its_own(
    spark, tmp_path: Path
) -> None:
    # on one partition nothing routes by key; the repartitioning failed to place the
    # state ("no STREAM_CODEC") although on two partitions the join routes by the codecs
    # it declares
    moved = str(tmp_path / "moved")
    app, _ = _repartitioned(spark, _join_dag(1, by_key=False), moved, "join", [2], 2, 2)
    last = app.last_window
    still = str(tmp_path / "still")
    app = launch(_join_dag(1, by_key=False), spark=spark, checkpoint=still, window_ms=100)
    try:
        app.await_window(last)
    finally:
        app.stop()
    moved_rows, still_rows = (collected(c, "out") for c in (moved, still))
    assert sum(len(still_rows.get(w, [])) for w in range(last + 1)) > 0
    for w in range(last + 1):
        assert Counter(r["key"] for r in moved_rows.get(w, [])) == Counter(
            r["key"] for r in still_rows.get(w, [])
        ), w


@pytest.mark.integration
def test_a_dedup_is_refused_before_the_application_stops(spark, tmp_path: Path) -> None:
    # its eviction order (BoundedDedup) or time horizon (TimeBasedDedup) is per partition:
    # the repartitioning failed with "state field 'next_seq' differs between its partitions"
    from malhar.algo import BoundedDedup, partition_by_key

    dag = DAG("dedup-repartition")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    dedup = partition_by_key(dag.add_operator("dedup", BoundedDedup(key="key"), PARTITIONS=2))
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, dedup.input)
    dag.add_stream("unique", dedup.unique, out.input)
    app = launch(dag, spark=spark, checkpoint=str(tmp_path / "ck"), window_ms=100)
    try:
        app.await_window(0)
        with pytest.raises(ConfigError, match=r"'dedup' .*BoundedDedup.* cannot be repartitioned"):
            app.repartition({"dedup": 3})
        assert app.query.isActive  # never stopped
    finally:
        app.stop()


class _Failing:
    """A partitioner that fails (as a buggy user partitioner or a bad request would)."""

    def define_partitions(self, existing: list[Partition], context: PartitioningContext):
        raise RuntimeError("this partitioner fails")

    def partitioned(self, partitions: dict[int, Partition]) -> None:
        raise AssertionError("not reached")


@pytest.mark.integration
def test_a_failed_repartitioning_leaves_the_application_running_on_its_partitions(
    spark, tmp_path: Path
) -> None:
    # the query was stopped first and never started again: the application just ended
    checkpoint = str(tmp_path / "ck")
    app = launch(_dag(), spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        app.await_window(1)
        with pytest.raises(ConfigError, match="no operator 'cout' to repartition"):
            app.repartition({"cout": 2})
        with pytest.raises(RuntimeError, match="this partitioner fails"):
            app.repartition({"count": _Failing()})
        assert app.active
        app.await_window(app.last_window + 3)
    finally:
        app.stop()
    assert generations.load(checkpoint).generation == 0
    assert max(_check_exact(checkpoint)) >= 4


@pytest.mark.integration
def test_a_repartitioning_waits_for_the_end_of_an_application_window(spark, tmp_path: Path) -> None:
    """With APPLICATION_WINDOW_COUNT=3 the stop before the repartitioning comes at the end of
    an application window: no application window is cut short by it."""
    checkpoint = str(tmp_path / "ck")
    dag = _dag(AppWindowKeyCount())
    dag.set_operator_attribute("count", A.APPLICATION_WINDOW_COUNT, 3)
    app = launch(dag, spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        app.await_window(0)
        done = [app.repartition({"count": 3}), app.repartition({"count": 2})]
        for generation in done:  # the last window before each ended one
            assert (generation.window + 1) % 3 == 0, generation.window
        app.await_window(generation.window + 6)
        last = app.last_window
    finally:
        app.stop()  # this stop may cut the last application window short: not checked
    got = {w: pairs for w, pairs in collected(checkpoint, "out").items() if pairs and w <= last}
    assert max(got) > generation.window
    for w, pairs in got.items():
        assert (w + 1) % 3 == 0, f"window {w} ended an application window early"
        keys = {r["key"] for v in (w - 2, w - 1, w) for r in keyed_items(v, 100, 50)}
        assert sorted(pairs) == [p for p in expected(w) if p[0] in keys], f"window {w}"


@pytest.mark.integration
def test_the_throughput_partitioner_splits_under_load_and_merges_when_idle(
    spark, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    # 2,000 tuples per window: above 400/s per partition even when a loaded machine (two
    # test workers on two cores) stretches windows to seconds
    (checkpoint / "rate").write_text("2000")
    dag = _dag()
    partitioner = StatelessThroughputBasedPartitioner(maximum=400, minimum=150, cooldown_ms=0)
    dag.set_operator_attribute("count", A.PARTITIONER, partitioner)
    dag.set_operator_attribute("count", A.STATS_LISTENERS, [partitioner])
    dag.set_operator_attribute("count", A.PARTITIONS, 2)
    app = launch(dag, spark=spark, checkpoint=str(checkpoint), window_ms=100)
    try:
        # ~2,000 tuples per window over 2 partitions: far above 400/s each: split
        wait_until(lambda: len(app.repartitions) >= 1, timeout=180, what="a split")
        assert app.repartitions[0].operators["count"].partitions > 2
        (checkpoint / "rate").write_text("4")  # now far below 150/s per partition: merge
        wait_until(
            lambda: any(
                g.operators["count"].partitions < app.repartitions[0].operators["count"].partitions
                for g in app.repartitions[1:]
            ),
            timeout=180,
            what="a merge",
        )
    finally:
        app.stop()


def _start(checkpoint: Path, windows: int, *pause: str) -> subprocess.Popen:
    args = [str(checkpoint), str(windows), *pause]
    log = checkpoint.parent / "driver.log"
    return start_driver("tests.engine.repartition_crash_app", *args, log=log)


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_a_sigkill_during_a_repartitioning_recovers_to_one_partitioning(tmp_path: Path) -> None:
    """Killed at each step of a repartitioning (before and after its commit point), the
    next start finds the old or the new partitioning, and every window stays exact."""
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    seen = []
    for pause in ("loaded", "snapshots", "managed", "committed"):
        kill_when_paused(_start(checkpoint, 0, pause), checkpoint, pause)
        gen = generations.load(str(checkpoint))
        seen.append((pause, gen.generation))
        parts = {op: gen.operators[op].partitions for op in gen.operators}
        new = {"fields": 3, "managed": 3, "windows": 3, "totals": 2, "spilled": 3}
        assert parts in ({}, new), parts
    # before the commit point the old partitioning stays, after it the new one
    assert [g for _, g in seen][:3] == [0, 0, 0] and seen[3][1] == 1
    proc = _start(checkpoint, 8)
    assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    for out in ("out1", "out2"):
        got = collected(str(checkpoint), out)
        assert sorted(got) == list(range(max(got) + 1)), out
        assert all(sorted(got[w]) == expected(w) for w in got), out
    journal = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert all(sorted(map(tuple, e["v"])) == expected(e["w"]) for e in journal)
    _check_windowed_panes(str(checkpoint))


def _check_windowed_panes(checkpoint: str) -> None:
    """The windowed counts (windows of two streaming windows, by key and in all) fired
    every closed window once, ON_TIME, with the count of its two windows' items."""
    last = max(collected(checkpoint, "out1"))
    closed = range(0, (last - 1) * 100, 200)  # window [s, s + 200) fires in s // 100 + 2
    for out, by_key in (("out3", True), ("out4", False), ("out5", True)):
        got: dict[tuple[Any, int], int] = {}
        for panes in collected(checkpoint, out).values():
            for t in panes:
                assert t.pane.timing.value == "ON_TIME", (out, t)
                assert (t.key, t.window.start) not in got, (out, t)
                got[(t.key, t.window.start)] = t.value
        want: Counter = Counter()
        for start in closed:
            for w in (start // 100, start // 100 + 1):
                want.update((r["key"] if by_key else None, start) for r in keyed_items(w, 100, 50))
        assert {k: v for k, v in got.items() if k[1] in closed} == dict(want), out
