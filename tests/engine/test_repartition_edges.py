"""Edges of dynamic partitioning that need no Spark: fusion after a repartitioning, a
leftover shutdown flag, stop() racing a repartitioning, keyed state built from its
factory, and custom snapshot() state."""

from __future__ import annotations

import pickle
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark import cloudpickle

from malhar import DAG, InputPort, KeyCodec, Operator, OutputPort, State
from malhar import attributes as A
from malhar.engine import generations
from malhar.engine import repartition as R
from malhar.engine.application import RunningApplication
from malhar.engine.launcher import Started
from malhar.engine.state_store import StateStore
from malhar.errors import StateError
from malhar.partitioning import Partition, spread
from malhar.state import window_snapshot
from malhar.stats import Response
from malhar.testing.operators import Collector, ListInput
from malhar.testing.services.process import wait_until
from tests.engine.ops import KeyedRunningCount, RatedKeys


class Fwd(Operator):
    input = InputPort()
    output = OutputPort()

    def process(self, row: Any) -> None:
        self.output.emit(row)


# -- 1. a repartitioned operator is not fused behind its upstream by equal counts ----------
def _fusable_dag() -> DAG:
    """src(2) -> U(3, keyed) -> X(2): X's count becoming 3 would fuse it behind U."""
    dag = DAG("fuse")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    u = dag.add_operator("U", KeyedRunningCount(), PARTITIONS=3)
    x = dag.add_operator("X", Fwd(), PARTITIONS=2)
    dag.add_stream("a", src.output, u.input)
    dag.add_stream("b", u.output, x.input)
    u.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    return dag


def test_repartitioned_operator_keeps_its_group_and_upstream_routing(tmp_path: Path) -> None:
    dag = _fusable_dag()
    ck = str(tmp_path)
    gen1 = generations.Generation(1, 5, {"X": generations.OperatorPartitioning.of(spread(3))})
    plan = R.planned(dag, ck, gen1)
    u, x = plan.groups[plan.group_of["U"]], plan.groups[plan.group_of["X"]]
    assert u.operators == ["U"] and u.routing is None  # U stays routed by hash % 3
    assert x.operators == ["X"] and x.routing == (3, [0, 1, 2, 0])
    R.check_requests(dag, {"X": 2}, plan)  # X can be repartitioned again


def test_parallel_partition_follower_still_fuses(tmp_path: Path) -> None:
    dag = DAG("follow")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=1)
    u = dag.add_operator("U", KeyedRunningCount(), PARTITIONS=2)
    x = dag.add_operator("X", Fwd())
    dag.add_stream("a", src.output, u.input)
    dag.add_stream("b", u.output, x.input)
    u.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    x.input.set_attribute(A.PARALLEL_PARTITION, True)
    part = generations.OperatorPartitioning.of(spread(3))
    plan = R.planned(dag, str(tmp_path), generations.Generation(1, 5, {"U": part, "X": part}))
    group = plan.groups[plan.group_of["X"]]
    assert group.operators == ["U", "X"] and group.partitions == 3
    assert group.routing == part.routing()


def test_a_parallel_follower_with_its_own_agreeing_partitions_moves_too(tmp_path: Path) -> None:
    # X's PARTITIONS=2 agrees with U's (validation makes it); it stayed at 2 when U moved to
    # 3, and the new DAG was refused in the middle of the repartitioning
    dag = DAG("follow")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=1)
    u = dag.add_operator("U", KeyedRunningCount(), PARTITIONS=2)
    x = dag.add_operator("X", Fwd(), PARTITIONS=2)
    y = dag.add_operator("Y", Fwd(), PARTITIONS=2)
    dag.add_stream("a", src.output, u.input)
    dag.add_stream("b", u.output, x.input)
    dag.add_stream("c", x.output, y.input)
    u.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    x.input.set_attribute(A.PARALLEL_PARTITION, True)
    assert R._followers(dag, ["U", "X", "Y"], "U") == ["U", "X"]  # Y: equal counts only
    part = generations.OperatorPartitioning.of(spread(3))
    plan = R.planned(dag, str(tmp_path), generations.Generation(1, 5, {"U": part, "X": part}))
    assert plan.groups[plan.group_of["X"]].operators == ["U", "X"]


# -- 2. a shutdown flag left by a dead driver ----------------------------------------------
def test_start_query_clears_a_leftover_shutdown_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from malhar.engine import launcher
    from malhar.engine.spark_io import MalharStreamReader, shutdown_flag_path

    ck = str(tmp_path)
    flag = Path(shutdown_flag_path(ck))
    flag.parent.mkdir(parents=True)
    flag.write_bytes(b"")  # a driver killed inside stop()

    class Reached(Exception):
        pass

    def no_spark(*args: Any, **kwargs: Any) -> Any:
        raise Reached

    monkeypatch.setattr(launcher, "build_dataframe", no_spark)
    dag = DAG("flag")
    s = dag.add_operator("s", ListInput([[1]]))
    dag.add_stream("x", s.output, dag.add_operator("c", Collector()).input)
    dag.set_attribute(A.CHECKPOINT, ck)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(environment={}))
    with pytest.raises(Reached):  # the flag goes before the query is built
        launcher.start_query(dag, spark, ck, None, lambda *a: None)  # type: ignore[arg-type]
    assert not flag.exists()
    reader = MalharStreamReader("", ck, 1, None, 1)
    assert reader.latestOffset(reader.initialOffset())["shutdown"] is False


# -- 3. stop()/abort() during a repartitioning ---------------------------------------------
class FakeQuery:
    def __init__(self, gate: threading.Event | None) -> None:
        self.isActive = True
        self.gate = gate

    def processAllAvailable(self) -> None:
        if self.gate is not None:
            self.gate.wait(10)

    def stop(self) -> None:
        self.isActive = False

    def exception(self) -> None:
        return None

    def awaitTermination(self, t: float) -> None:
        time.sleep(t)


class Harness:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.queries: list[FakeQuery] = []
        self.gate: threading.Event | None = None  # blocks processAllAvailable while unset
        self.entered = threading.Event()  # the (fake) state move began
        self.release = threading.Event()
        self.moved = 0

        def move(dag: DAG, ck: str, window: int, requests: Any, stats: Any = None) -> Any:
            self.moved += 1
            self.entered.set()
            self.release.wait(10)
            return generations.Generation(1, window)

        monkeypatch.setattr(R, "repartition", move)
        monkeypatch.setattr(R, "check_requests", lambda *a, **k: None)
        dag = DAG("race")
        s = dag.add_operator("s", ListInput([[1]]))
        dag.add_stream("x", s.output, dag.add_operator("c", Collector()).input)
        self.app = RunningApplication(dag, None, str(tmp_path), None, self.start_query)  # type: ignore[arg-type]
        self.app.start()

    def start_query(self, *args: Any) -> Started:
        q = FakeQuery(self.gate)
        self.queries.append(q)
        return Started(plan=None, query=q, progress=None, stats=None)  # type: ignore[arg-type]

    def active(self) -> list[FakeQuery]:
        return [q for q in self.queries if q.isActive]


def _thread(target: Callable[[], Any], out: list[Any]) -> threading.Thread:
    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("how", ["stop", "abort"])
def test_stop_during_a_repartitioning_is_not_undone_by_its_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    h = Harness(tmp_path, monkeypatch)
    out: list[Any] = []
    rep = _thread(lambda: h.app.repartition({"c": 2}), out)
    assert h.entered.wait(10)  # the query is stopped, the state is moving
    stopped: list[Any] = []
    stopper = _thread(getattr(h.app, how), stopped)
    wait_until(lambda: h.app._stopping, timeout=10, what="stop() under way")
    h.release.set()
    rep.join(10)
    stopper.join(10)
    assert stopped == [None]
    assert isinstance(out[0], generations.Generation)  # committed, not restarted
    assert h.active() == [] and len(h.queries) == 1
    assert not h.app.active
    with pytest.raises(RuntimeError, match="stopped"):
        h.app.repartition({"c": 3})
    # a stats listener's request after stop() is ignored
    h.app._on_stats_response("c", object(), Response(repartition_required=True))  # type: ignore[arg-type]
    assert not h.app._repartitioning.is_set() and len(h.queries) == 1


def test_stop_during_a_repartitionings_orderly_stop_skips_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch)
    h.queries[0].gate = gate = threading.Event()
    out: list[Any] = []
    rep = _thread(lambda: h.app.repartition({"c": 2}), out)
    wait_until(h.app._repartitioning.is_set, timeout=10, what="the repartitioning under way")
    stopped: list[Any] = []
    stopper = _thread(h.app.stop, stopped)
    wait_until(lambda: h.app._stopping, timeout=10, what="stop() under way")
    gate.set()  # the repartitioning's last window completes
    rep.join(10)
    stopper.join(10)
    assert isinstance(out[0], RuntimeError) and h.moved == 0
    assert stopped == [None] and h.active() == [] and len(h.queries) == 1


def test_a_timed_out_orderly_stop_goes_on_with_the_old_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch)
    h.queries[0].gate = gate = threading.Event()  # the last window never completes
    try:
        with pytest.raises(TimeoutError, match="goes on with the partitions it had"):
            h.app.repartition({"c": 2}, timeout=0.2)
        assert h.moved == 0
        assert len(h.queries) == 2 and h.active() == [h.queries[1]]
        assert h.app.active
    finally:
        gate.set()


# -- 4./5. state of the repartitioned partitions -------------------------------------------
class DefaultCounts(Operator):
    input = InputPort()
    output = OutputPort()
    counts = State(lambda: defaultdict(int), keyed=True)

    def process(self, row: dict[str, Any]) -> None:
        self.counts[row["key"]] += 1


class Custom(Operator):
    """State in a custom snapshot()/restore() pair."""

    input = InputPort()
    output = OutputPort()

    def process(self, row: Any) -> None:
        self._seen = self.__dict__.get("_seen", 0) + 1

    def snapshot(self) -> Any:
        return {"seen": self.__dict__.get("_seen", 0)}

    def restore(self, snapshot: Any) -> None:
        self._seen = snapshot["seen"]


class Keep:
    """A partitioner that keeps the partitions as they are."""

    def define_partitions(self, existing: list[Partition], context: Any) -> list[Partition]:
        return existing

    def partitioned(self, partitions: dict[int, Partition]) -> None:
        pass


WINDOW = 4


def _repartition(
    tmp_path: Path, cls: type, n_old: int, request: Any, fill: Callable[[Any, int], None]
) -> list[dict[str, Any]]:
    """Snapshots of ``op`` (``n_old`` partitions, filled by ``fill``) after a repartitioning."""
    dag = DAG("t")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=1)
    op = dag.add_operator("op", cls(), PARTITIONS=n_old)
    dag.add_stream("a", src.output, op.input)
    op.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    ck = str(tmp_path)
    plan = R.planned(dag, ck, generations.Generation())
    for g in plan.groups:
        for p in range(g.partitions):
            ops = {}
            for name in g.operators:
                inst = plan.operator(name).clone()
                if name == "op":
                    fill(inst, p)
                ops[name] = window_snapshot(inst)
            state = {"ops": ops, "unifiers": {}, "open": dict.fromkeys(g.operators, False)}
            StateStore(ck, g.key, p).save(WINDOW, cloudpickle.dumps(state))
    gen = R.repartition(dag, ck, WINDOW, {"op": request})
    plan = R.planned(dag, ck, gen)
    g = plan.groups[plan.group_of["op"]]
    return [
        pickle.loads(StateStore(plan.state_root or "", g.key, p).load(WINDOW)[1])["ops"]["op"]  # type: ignore[index]
        for p in range(g.partitions)
    ]


def test_keyed_state_of_new_partitions_comes_from_its_factory(tmp_path: Path) -> None:
    def fill(op: Any, p: int) -> None:
        for i in range(p, 10, 2):
            op.counts[f"k{i}"] += 1

    snaps = _repartition(tmp_path, DefaultCounts, 2, 3, fill)
    fields = [s["fields"]["counts"] for s in snaps]
    assert all(type(c) is defaultdict and c.default_factory is int for c in fields)
    assert sorted(k for c in fields for k in c) == sorted(f"k{i}" for i in range(10))
    fields[0]["new"] += 1  # process() of a key first seen after the repartitioning


def test_custom_snapshot_state_is_refused_not_dropped(tmp_path: Path) -> None:
    def fill(op: Any, p: int) -> None:
        op._seen = 100 + p

    with pytest.raises(StateError, match=r"'op'.*snapshot\(\).*State fields"):
        _repartition(tmp_path, Custom, 2, 3, fill)
    assert generations.load(str(tmp_path)).generation == 0  # nothing committed


def test_custom_snapshot_state_kept_by_a_partitioner_that_keeps_the_partitions(
    tmp_path: Path,
) -> None:
    def fill(op: Any, p: int) -> None:
        op._seen = 100 + p

    snaps = _repartition(tmp_path, Custom, 2, Keep(), fill)
    assert [s["custom"] for s in snaps] == [{"seen": 100}, {"seen": 101}]
