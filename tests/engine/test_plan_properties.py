"""The plan's invariants on random DAGs: every operator runs the partition count
``DAG.partition_counts`` gives it, fused members agree with their group, every stream
edge is local or a route, and a route's level is below its destination's."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from malhar import DAG, InputPort, Operator, OutputPort, Unifier, ValidationError
from malhar import attributes as A
from malhar.engine.plan import Plan, build_plan
from malhar.testing.operators import Collector, ListInput


class Merge(Unifier):
    def process(self, value: Any) -> None:
        self.output.emit(value)


class One(Operator):
    input = InputPort()
    output = OutputPort()

    def process(self, value: Any) -> None:
        self.output.emit(value)


class Unified(One):
    output = OutputPort(unifier=Merge)


class Two(Operator):
    left = InputPort()
    right = InputPort()
    output = OutputPort()

    def process_left(self, value: Any) -> None:
        self.output.emit(value)

    def process_right(self, value: Any) -> None:
        self.output.emit(value)


@st.composite
def dags(draw: st.DrawFn) -> DAG:
    dag = DAG("random")
    n_inputs = draw(st.integers(1, 2))
    n_ops = draw(st.integers(1, 5))
    handles: dict[str, Any] = {}
    names: list[str] = []
    parts = st.sampled_from([None, 1, 2, 3])
    for i in range(n_inputs):
        p = draw(parts)
        extra = {} if p is None else {"PARTITIONS": p}
        handles[f"in{i}"] = dag.add_operator(f"in{i}", ListInput([[1]]), **extra)
        names.append(f"in{i}")
    for i in range(n_ops):
        kind = draw(st.sampled_from([One, Unified, Two, Collector]))
        name = f"op{i}"
        p = draw(parts)
        handle = dag.add_operator(name, kind(), **({} if p is None else {"PARTITIONS": p}))
        ports = ["left", "right"] if kind is Two else ["input"]
        for port in ports:
            up = draw(st.sampled_from(names))
            dag.add_stream(f"{up}-{name}-{port}", handles[up].output, getattr(handle, port))
            if draw(st.booleans()):
                getattr(handle, port).set_attribute(A.PARALLEL_PARTITION, True)
        if kind is not Collector:
            handles[name] = handle
            names.append(name)
    return dag


def _counts(dag: DAG) -> dict[str, int]:
    """What each operator should run: its own PARTITIONS, else a parallel port's upstream's
    (validated to agree), else 1."""
    counts: dict[str, int] = {}

    def count(name: str) -> int:
        if name not in counts:
            meta = dag.operators[name]
            ups = [
                s.source.operator
                for s in dag.streams.values()
                for sink in s.sinks
                if sink.operator == name and meta.port_attr(sink.port, A.PARALLEL_PARTITION)
            ]
            own = meta.attributes.get("PARTITIONS")
            counts[name] = own if own is not None else count(ups[0]) if ups else 1
        return counts[name]

    for name in dag.operators:
        count(name)
    return counts


def _check(dag: DAG, plan: Plan) -> None:
    counts = _counts(dag)
    placed = [op for g in plan.groups for op in g.operators]
    assert sorted(placed) == sorted(dag.operators)  # every operator in one group
    for name in dag.operators:
        group = plan.groups[plan.group_of[name]]
        assert group.partitions == counts[name], name
        if dag.operators[name].is_input:
            assert group.level == 0 and group.operators[0] == name
    routed = {(str(r.source), str(r.sink)) for r in plan.routes}
    for s in dag.streams.values():
        for sink in s.sinks:
            up, down = plan.group_of[s.source.operator], plan.group_of[sink.operator]
            if up == down:
                assert sink in plan.local_edges[str(s.source)]
            else:
                assert (str(s.source), str(sink)) in routed
                assert plan.groups[up].level < plan.groups[down].level
    for r in plan.routes:
        assert r.upstream_partitions == counts[r.source.operator]
        if r.unifier is not None:
            assert r.upstream_partitions > 1


@settings(max_examples=300, deadline=None)
@given(dags())
def test_the_plan_runs_every_operator_with_its_partition_count(dag: DAG) -> None:
    try:
        dag.validate()
    except ValidationError as exc:
        # the only rules random shapes can break: parallel ports' counts
        assert all("PARALLEL_PARTITION" in p for p in exc.problems), exc.problems
        event("refused")
        return
    event("planned")
    _check(dag, build_plan(dag))
