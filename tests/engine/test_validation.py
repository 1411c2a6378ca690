"""Every DAG validation rule, with the message a user sees."""

from __future__ import annotations

import pytest

from malhar import (
    DAG,
    InputPort,
    Operator,
    OutputPort,
    Property,
    PropertyError,
    Unifier,
    ValidationError,
)
from malhar.testing.operators import Collector, ListInput


class Passthrough(Operator):
    input = InputPort()
    output = OutputPort()

    def process(self, value):
        self.output.emit(value)


class Typed(Operator):
    input = InputPort("word string, n bigint")
    output = OutputPort("word string")


class NeedsOutput(Operator):
    input = InputPort()
    output = OutputPort(optional=False)


class Thresholds(Operator):
    input = InputPort(optional=True)
    limit = Property(int, default=5, min=1, max=10)
    name = Property(str, not_null=True, pattern=r"[a-z]+")
    mode = Property(str, default="keep", one_of=("keep", "drop"))


class TwoOutputUnifier(Unifier):
    extra = OutputPort()


class BadUnifierOp(Operator):
    input = InputPort()
    output = OutputPort(unifier=TwoOutputUnifier)


def _problems(dag: DAG) -> list[str]:
    with pytest.raises(ValidationError) as info:
        dag.validate()
    return info.value.problems


def _simple() -> tuple[DAG, object, object]:
    dag = DAG("t")
    src = dag.add_operator("src", ListInput([[1]]))
    out = dag.add_operator("out", Collector())
    return dag, src, out


def test_valid_dag_passes() -> None:
    dag, src, out = _simple()
    dag.add_stream("s", src.output, out.input)
    dag.validate()


def test_duplicate_operator_name() -> None:
    dag, src, out = _simple()
    dag.add_operator("out", Collector())
    dag.add_stream("s", src.output, out.input)
    assert any("operator name 'out' is used twice" in p for p in _problems(dag))


def test_cycle_is_named() -> None:
    dag = DAG("t")
    a = dag.add_operator("a", Passthrough())
    b = dag.add_operator("b", Passthrough())
    dag.add_stream("ab", a.output, b.input)
    dag.add_stream("ba", b.output, a.input)
    problems = _problems(dag)
    assert any(("cycle" in p and "a -> b -> a" in p) or "b -> a -> b" in p for p in problems)


def test_two_writers_on_one_stream() -> None:
    dag = DAG("t")
    a = dag.add_operator("a", ListInput([[1]]))
    b = dag.add_operator("b", ListInput([[2]]))
    out = dag.add_operator("out", Collector())
    dag.add_stream("s", a.output, out.input)
    dag.add_stream("s", b.output)
    assert any("stream 's' has two writers (a.output and b.output)" in p for p in _problems(dag))


def test_required_input_not_connected() -> None:
    dag, _, _ = _simple()
    problems = _problems(dag)
    assert any("input port out.input is required but not connected" in p for p in problems)


def test_required_output_not_connected() -> None:
    dag, src, _ = _simple()
    n = dag.add_operator("n", NeedsOutput())
    dag.add_stream("s", src.output, n.input)
    dag.add_operator("out2", Collector())
    problems = _problems(dag)
    assert any("output port n.output must be connected" in p for p in problems)
    assert any("out2.input is required" in p for p in problems)


def test_input_port_reads_one_stream() -> None:
    dag, src, out = _simple()
    other = dag.add_operator("other", ListInput([[2]]))
    dag.add_stream("s1", src.output, out.input)
    dag.add_stream("s2", other.output, out.input)
    assert any("input port out.input reads 2 streams" in p for p in _problems(dag))


def test_schema_incompatibility() -> None:
    dag = DAG("t")
    a = dag.add_operator("a", Typed())
    b = dag.add_operator("b", Typed())
    dag.add_stream("ab", a.output, b.input)
    src = dag.add_operator("src", ListInput([[1]]))
    dag.add_stream("in", src.output, a.input)
    problems = _problems(dag)
    assert any(
        "a.output cannot feed b.input: column 'n' is missing upstream" in p for p in problems
    )
    assert any(
        "src.output cannot feed a.input: the upstream port is untyped" in p for p in problems
    )


def test_property_constraints_checked_on_assignment_and_validate() -> None:
    op = Thresholds()
    with pytest.raises(PropertyError, match=r"Thresholds.limit: 11 is above the maximum 10"):
        op.limit = 11
    with pytest.raises(PropertyError, match=r"does not match the pattern"):
        op.name = "ABC"
    with pytest.raises(PropertyError, match=r"'x' is not one of \['keep', 'drop'\]"):
        op.mode = "x"
    with pytest.raises(PropertyError, match=r"expected int, got str"):
        op.limit = "3"
    dag = DAG("t")
    dag.add_operator("th", op)
    assert any("property 'name' must be set" in p for p in _problems(dag))


def test_unifier_must_have_one_output() -> None:
    dag, src, out = _simple()
    bad = dag.add_operator("bad", BadUnifierOp(), PARTITIONS=2)
    dag.add_stream("s", src.output, bad.input)
    dag.add_stream("t", bad.output, out.input)
    assert any(
        "unifier TwoOutputUnifier of bad.output must have exactly one input and one output port"
        in p
        for p in _problems(dag)
    )


def test_bad_attributes() -> None:
    dag, src, out = _simple()
    dag.add_stream("s", src.output, out.input)
    dag.set_operator_attribute("out", "PARTITIONS", 0)
    dag.set_operator_attribute("src", "UNIFIER_LIMIT", 1)
    problems = _problems(dag)
    assert any("'out': attribute PARTITIONS must be an int >= 1, got 0" in p for p in problems)
    assert any("UNIFIER_LIMIT must be 0 (no cascade) or >= 2" in p for p in problems)
    with pytest.raises(KeyError, match="unknown operator attribute 'PARTITION'"):
        dag.set_operator_attribute("out", "PARTITION", 2)


def test_unknown_port_is_named() -> None:
    dag, src, _ = _simple()
    with pytest.raises(AttributeError, match=r"operator 'src' \(ListInput\) has no port 'outptu'"):
        _ = src.outptu


def test_stream_without_reader() -> None:
    dag, src, out = _simple()
    dag.add_stream("dangling", src.output)
    assert any("stream 'dangling' has no reader" in p for p in _problems(dag))


def test_every_problem_reported_at_once() -> None:
    dag, src, _ = _simple()
    dag.add_operator("src", ListInput([[1]]))
    assert len(_problems(dag)) >= 2


class Secretive(Operator):
    input = InputPort(optional=True)
    password = Property(str, pattern=r"[a-z]+")
    token = Property(str, secret=True, one_of=("a", "b"))


def test_secret_property_values_never_in_errors() -> None:
    op = Secretive()
    with pytest.raises(PropertyError) as info:
        op.password = "Hunter2!"
    assert "Hunter2!" not in str(info.value) and "***" in str(info.value)
    with pytest.raises(PropertyError) as info:
        op.token = "s3cr3t"
    assert "s3cr3t" not in str(info.value)


def test_port_attributes_are_checked() -> None:
    dag, src, out = _simple()
    dag.add_stream("s", src.output, out.input)
    out.input.set_attribute("STREAM_CODEC", "word")
    out.input.set_attribute("PARALLEL_PARTITION", "yes")
    problems = _problems(dag)
    assert any("STREAM_CODEC must be a StreamCodec instance" in p for p in problems)
    assert any("PARALLEL_PARTITION must be True or False, got 'yes'" in p for p in problems)
