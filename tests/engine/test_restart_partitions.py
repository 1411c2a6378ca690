"""Restarting from a checkpoint with another static partition count (PARTITIONS): keyed
state moves by key, as a dynamic repartitioning moves it, or the launch is refused."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, InputPort, KeyCodec, Operator, OutputPort, State, run
from malhar import attributes as A
from malhar.engine import generations
from malhar.errors import StateError
from malhar.testing.operators import Collector, collected
from tests.engine.ops import KeyedRunningCount, ManagedKeyCount, RatedKeys, keyed_items


class PerPartitionSeen(KeyedRunningCount):
    """A keyed counter with per-partition state that is not keyed: it cannot move."""

    seen = State(set)  # the keys this partition saw: differs between partitions

    def process(self, row: dict[str, Any]) -> None:
        super().process(row)
        self.seen.add(row["key"])


class Stateless(Operator):
    input = InputPort()
    output = OutputPort()

    def process(self, row: Any) -> None:
        self.output.emit(row)


def _expected(window: int) -> list[tuple[str, int]]:
    totals: Counter = Counter()
    for w in range(window + 1):
        totals.update(r["key"] for r in keyed_items(w, 100, 50))
    return sorted((k, totals[k]) for k in {r["key"] for r in keyed_items(window, 100, 50)})


def _dag(counter: Any, partitions: int) -> DAG:
    dag = DAG("restart-partitions")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    count = dag.add_operator("count", counter, PARTITIONS=partitions)
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, count.input)
    dag.add_stream("counts", count.output, out.input)
    count.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    return dag


def _runs(spark: Any, checkpoint: str, make: Any, counts: list[int], windows: int = 3) -> None:
    for n in counts:
        run(_dag(make(), n), windows=windows, spark=spark, checkpoint=checkpoint, window_ms=100)


def _check_exact(checkpoint: str, windows: int) -> None:
    got = collected(checkpoint, "out")
    assert sorted(got) == list(range(windows)), "a window is missing or repeated"
    for w, pairs in got.items():
        # a key held by two partitions shows up twice, a lost count shows up short
        assert sorted(map(tuple, pairs)) == _expected(w), f"window {w}"


@pytest.mark.slow
@pytest.mark.parametrize("make", [KeyedRunningCount, ManagedKeyCount], ids=["state", "managed"])
def test_a_keyed_counter_restarted_with_more_then_fewer_partitions_counts_exactly(
    spark, tmp_path: Path, make: Any
) -> None:
    checkpoint = str(tmp_path / "ck")
    _runs(spark, checkpoint, make, [2, 3, 2])
    _check_exact(checkpoint, 9)
    gen = generations.load(checkpoint)
    assert gen.generation == 2 and "count" not in gen.operators  # still a static count
    assert gen.counts["count"] == 2


@pytest.mark.slow
def test_a_restart_that_cannot_move_the_state_is_refused_and_the_old_count_goes_on(
    spark, tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "ck")
    _runs(spark, checkpoint, PerPartitionSeen, [2])
    with pytest.raises(
        StateError,
        match=r"operator 'count': PARTITIONS is now 3, but the checkpoint .* ran it with 2 "
        r"partitions.*field 'seen' differs.*launch with the count it ran with \(2\)",
    ):
        run(_dag(PerPartitionSeen(), 3), windows=3, spark=spark, checkpoint=checkpoint)
    _runs(spark, checkpoint, PerPartitionSeen, [2])
    _check_exact(checkpoint, 6)


@pytest.mark.slow
def test_a_stateless_operator_changes_its_count_between_runs(spark, tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ck")
    for n in (2, 3, 1):
        dag = DAG("restart-stateless")
        src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
        mid = dag.add_operator("mid", Stateless(), PARTITIONS=n)
        out = dag.add_operator("out", Collector())
        dag.add_stream("items", src.output, mid.input)
        dag.add_stream("rows", mid.output, out.input)
        run(dag, windows=2, spark=spark, checkpoint=checkpoint, window_ms=100)
    got = collected(checkpoint, "out")
    assert sorted(got) == list(range(6))
    for w, rows in got.items():
        assert sorted(r["key"] for r in rows) == sorted(r["key"] for r in keyed_items(w, 100, 50))
    assert generations.load(checkpoint).generation == 0  # nothing to move


def test_a_static_count_the_manifest_overrides_is_said(tmp_path: Path, caplog) -> None:
    from malhar.engine.reconcile import reconcile

    checkpoint = str(tmp_path / "ckpt")
    # the state a running repartition left: 'count' on 4 partitions
    generations.commit(
        checkpoint,
        generations.Generation(
            generation=1, operators={"count": generations.OperatorPartitioning(4)}
        ),
    )
    with caplog.at_level("INFO", logger="malhar"):
        reconcile(_dag(KeyedRunningCount(), 2), checkpoint, -1)
    said = [r.getMessage() for r in caplog.records if "is not applied" in r.getMessage()]
    assert said == [
        "malhar: operator 'count' runs 4 partitions, as its last repartitioning while running "
        "left it (the checkpoint's partitioning.json); its PARTITIONS=2 is not applied: this "
        "checkpoint does not record the PARTITIONS it was last launched with, so a change "
        "cannot be told; repartition it while it runs (malhar repartition, "
        "RunningApplication.repartition)"
    ]
    assert all(
        r.levelname == "WARNING" for r in caplog.records if "is not applied" in r.getMessage()
    )


def test_an_input_partitioner_that_says_it_cannot_repartition_is_refused(tmp_path: Path) -> None:
    # a Partitioner input was dealt at launch without asking it (review)
    from malhar.engine.reconcile import _leads_as_input
    from malhar.engine.repartition import planned
    from malhar.errors import ConfigError

    class Dealt(RatedKeys):
        reason: str | None = None

        def define_partitions(self, existing: list, context: Any) -> list:
            return existing

        def partitioned(self, partitions: dict) -> None:
            pass

        def cannot_repartition(self) -> str | None:
            return self.reason

    dag = DAG("dealt")
    source = Dealt()
    src = dag.add_operator("src", source, PARTITIONS=2)
    dag.add_stream("items", src.output, dag.add_operator("out", Collector()).input)
    plan = planned(dag, str(tmp_path / "ck"), generations.Generation())
    assert _leads_as_input(dag, plan, "src")
    source.reason = "its positions are tied to the partition numbers"
    with pytest.raises(ConfigError, match="Dealt cannot be repartitioned: its positions are tied"):
        _leads_as_input(dag, plan, "src")


def test_counts_of_an_old_checkpoint_ignore_folders_of_an_earlier_larger_count(
    tmp_path: Path,
) -> None:
    from malhar.engine.reconcile import _counts_in_folders
    from malhar.util.fs.names import encode_segment

    # an old checkpoint ran 'count' with 8 partitions, later with 4: folders 4..7 stayed
    group = tmp_path / "ck" / "malhar" / "state" / encode_segment("src+count")
    for p, window in [(0, 5), (1, 5), (2, 5), (3, 5), (4, 2), (5, 2), (6, 2), (7, 2)]:
        (group / str(p)).mkdir(parents=True)
        (group / str(p) / f"{window:020d}.state").write_bytes(b"x")
    got = _counts_in_folders(str(tmp_path / "ck"), generations.Generation(), {"src", "count"})
    assert got == {"src": 4, "count": 4}


@pytest.mark.slow
def test_a_count_change_inside_an_application_window_is_refused(spark, tmp_path: Path) -> None:
    # the rewritten snapshots closed every open application window: an output's buffered
    # windows were lost
    checkpoint = str(tmp_path / "ck")

    def dag(partitions: int) -> DAG:
        d = DAG("restart-partitions")
        src = d.add_operator("src", RatedKeys(), PARTITIONS=2)
        count = d.add_operator("count", KeyedRunningCount(), PARTITIONS=partitions)
        passing = d.add_operator("pass", Stateless(), APPLICATION_WINDOW_COUNT=5)
        out = d.add_operator("out", Collector())
        d.add_stream("items", src.output, count.input)
        d.add_stream("counts", count.output, passing.input)
        d.add_stream("passed", passing.output, out.input)
        count.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
        return d

    run(dag(2), windows=3, spark=spark, checkpoint=checkpoint, window_ms=100)
    with pytest.raises(StateError, match=r"'pass'.*inside its application window of 5"):
        run(dag(3), windows=3, spark=spark, checkpoint=checkpoint, window_ms=100)


@pytest.mark.slow
@pytest.mark.parametrize("make", [KeyedRunningCount, ManagedKeyCount], ids=["state", "managed"])
def test_a_changed_partitions_takes_over_from_a_repartitioning_while_running(
    spark, tmp_path: Path, make: Any
) -> None:
    # a PARTITIONS changed after a running repartitioning was silently not applied
    # (walkthrough): the checkpoint now records the PARTITIONS of every launch
    from malhar import launch

    checkpoint = str(tmp_path / "ck")
    app = launch(_dag(make(), 2), spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        app.await_window(2)
        app.repartition({"count": 3})  # by partition keys: a routing table, not hash % n
        app.await_window(app.last_window + 2)
    finally:
        app.stop()
    last = app.last_window
    # the same PARTITIONS as at the launch: the running repartitioning's count stands
    run(_dag(make(), 2), windows=3, spark=spark, checkpoint=checkpoint, window_ms=100)
    assert generations.load(checkpoint).operators["count"].partitions == 3
    # another PARTITIONS: applied, the state moved from the routing table's partitions
    run(_dag(make(), 3), windows=3, spark=spark, checkpoint=checkpoint, window_ms=100)
    gen = generations.load(checkpoint)
    assert "count" not in gen.operators and gen.counts["count"] == 3
    assert gen.declared["count"] == 3
    _check_exact(checkpoint, last + 7)
