"""Every DAG validation rule, with the message a user sees."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from malhar import (
    DAG,
    ConfigError,
    InputPort,
    MalharError,
    Operator,
    OutputPort,
    ProcessingMode,
    Property,
    PropertyError,
    State,
    Unifier,
    ValidationError,
)
from malhar import attributes as A
from malhar.state import window_snapshot
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


def test_duplicate_operator_name_fails_at_add_operator() -> None:
    dag, _, _ = _simple()
    with pytest.raises(ValidationError, match="operator name 'out' is used twice"):
        dag.add_operator("out", Collector())
    assert list(dag.operators) == ["src", "out"]


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
        "output port bad.output: unifier TwoOutputUnifier must have exactly one input and one "
        "output port" in p
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
    with pytest.raises(MalharError, match="did you mean 'PARTITIONS'"):
        dag.set_operator_attribute("out", "PARTITION", 2)


def test_a_unifier_that_cannot_be_cascaded_refuses_unifier_limit() -> None:
    # a cascade level of the windowed unifier sends panes to the next, which takes only
    # partials: the application failed once running
    from malhar.window import TimeWindows, WindowedOperator
    from malhar.window.accumulation import Count

    dag, src, out = _simple()
    op = WindowedOperator(Count(), TimeWindows(10), timestamp=lambda t: t)
    totals = dag.add_operator("totals", op, PARTITIONS=4, UNIFIER_LIMIT=2)
    dag.add_stream("s", src.output, totals.input)
    dag.add_stream("t", totals.output, out.input)
    assert any(
        "'totals': UNIFIER_LIMIT=2, but the unifier of its port 'output' (WindowedUnifier) "
        "cannot be cascaded" in p
        for p in _problems(dag)
    )


def _parallel_chain(c_partitions: int | None) -> DAG:
    """src (4 partitions) -> b -> c -> out, b and c PARALLEL_PARTITION."""
    dag = DAG("t")
    src = dag.add_operator("src", ListInput([[1]]), PARTITIONS=4)
    b, c = dag.add_operator("b", Passthrough()), dag.add_operator("c", Passthrough())
    out = dag.add_operator("out", Collector())
    dag.add_stream("s1", src.output, b.input)
    dag.add_stream("s2", b.output, c.input)
    dag.add_stream("s3", c.output, out.input)
    b.input.set_attribute(A.PARALLEL_PARTITION, True)
    c.input.set_attribute(A.PARALLEL_PARTITION, True)
    if c_partitions is not None:
        c.set_attribute(A.PARTITIONS, c_partitions)
    return dag


def test_parallel_partition_follows_the_upstreams_running_count() -> None:
    from malhar.engine.plan import build_plan

    # c's own PARTITIONS agrees with the 4 partitions b runs (b follows src): it was
    # refused, compared with b's unset PARTITIONS (1)
    for own in (None, 4):
        plan = build_plan(_parallel_chain(own))
        assert [(g.operators, g.partitions) for g in plan.groups] == [
            (["src", "b", "c"], 4),
            (["out"], 1),
        ]
    # c's PARTITIONS=1 was accepted, and fused c and then out into the 4-partition group:
    # out, one partition by its attributes, ran four times
    problems = _problems(_parallel_chain(1))
    assert problems == [
        "input port c.input is PARALLEL_PARTITION but 'c' sets PARTITIONS=1 while 'b' runs "
        "4 partitions: drop one of the two"
    ]


class TwoInputs(Operator):
    left = InputPort()
    right = InputPort()
    output = OutputPort()

    def process_left(self, value):
        self.output.emit(value)

    def process_right(self, value):
        self.output.emit(value)


def _two_inputs(right_first: bool, both_parallel: bool) -> DAG:
    dag = DAG("t")
    x = dag.add_operator("x", ListInput([[1]]), PARTITIONS=4)
    y = dag.add_operator("y", ListInput([[1]]), PARTITIONS=2)
    j = dag.add_operator("j", TwoInputs())
    streams = [("l", x.output, j.left), ("r", y.output, j.right)]
    for name, source, sink in reversed(streams) if right_first else streams:
        dag.add_stream(name, source, sink)
    dag.add_stream("o", j.output, dag.add_operator("out", Collector()).input)
    j.left.set_attribute(A.PARALLEL_PARTITION, True)
    if both_parallel:
        j.right.set_attribute(A.PARALLEL_PARTITION, True)
    return dag


def test_parallel_partition_takes_the_count_of_its_own_port_upstream() -> None:
    from malhar.engine.plan import build_plan

    # j.left follows x (4); with the right stream added first j took y's 2
    for right_first in (False, True):
        plan = build_plan(_two_inputs(right_first, both_parallel=False))
        assert plan.groups[plan.group_of["j"]].partitions == 4
    assert _problems(_two_inputs(False, both_parallel=True)) == [
        "operator 'j' has PARALLEL_PARTITION input ports whose upstreams run different "
        "partition counts: j.left from 'x' (4), j.right from 'y' (2); a partition follows "
        "one partition of each, so keep PARALLEL_PARTITION only on ports whose upstreams agree"
    ]


def test_attributes_take_typed_constants_and_check_values() -> None:
    dag, src, out = _simple()
    dag.set_operator_attribute("out", A.PARTITIONS, 3)
    out.set_attribute(A.PROCESSING_MODE, "at_most_once")  # an enum member by name
    src.output.set_attribute(A.PARALLEL_PARTITION, False)
    dag.set_attribute(A.STREAMING_WINDOW_MS, 250)
    assert dag.operators["out"].attributes == {
        "PARTITIONS": 3,
        "PROCESSING_MODE": ProcessingMode.AT_MOST_ONCE,
    }
    assert dag.attr(A.STREAMING_WINDOW_MS) == 250
    with pytest.raises(ConfigError, match="attribute PARTITIONS must be int, got str '3'"):
        dag.set_operator_attribute("out", A.PARTITIONS, "3")
    with pytest.raises(ConfigError, match="PARTITIONS must be int, got bool True"):
        dag.add_operator("more", Collector(), PARTITIONS=True)
    with pytest.raises(ConfigError, match="'sometimes' is not one of"):
        out.set_attribute(A.PROCESSING_MODE, "sometimes")


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
    dag.add_stream("dangling", src.output)
    dag.add_operator("th", Thresholds())
    assert len(_problems(dag)) >= 3


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
    problems = _problems(dag)
    assert any("STREAM_CODEC must be a StreamCodec instance" in p for p in problems)
    with pytest.raises(ConfigError, match="PARALLEL_PARTITION must be bool, got str 'yes'"):
        out.input.set_attribute("PARALLEL_PARTITION", "yes")


# -- explicit state ---------------------------------------------------------------------------
class Undeclared(Operator):
    input = InputPort()
    limit = Property(int, default=3)
    seen = State(set)

    def __init__(self) -> None:
        self.limit = 4  # a property: fine
        self.seen.add("x")  # a state field: fine
        self.lookup = {"a": 1}  # neither: would not reach the partitions

    def process(self, value: Any) -> None:
        self.seen.add(value)


class HoldsALock(Operator):
    input = InputPort()
    guard = State(threading.Lock)

    def process(self, value: Any) -> None:
        pass


def test_an_attribute_that_is_neither_property_nor_state_is_refused() -> None:
    dag, src, _ = _simple()
    op = dag.add_operator("u", Undeclared())
    dag.add_stream("s2", src.output, op.input)
    problems = _problems(dag)
    assert [p for p in problems if "'lookup'" in p] == [
        "operator 'u' (Undeclared): attribute 'lookup' is set before launch but is neither a "
        "Property (configuration) nor a State field (checkpointed), so the partitions would "
        "not get it: declare `lookup = Property(...)` or `lookup = State(...)` on the class, "
        "or create it in setup()"
    ]
    assert not [p for p in problems if "'limit'" in p or "'seen'" in p]


def test_state_that_will_not_pickle_is_named() -> None:
    dag, src, _ = _simple()
    op = dag.add_operator("locked", HoldsALock())
    dag.add_stream("s2", src.output, op.input)
    _ = op.operator.guard  # the factory builds the lock on first use
    problems = _problems(dag)
    assert any(
        p.startswith("operator 'locked' (HoldsALock): guard: TypeError: cannot pickle")
        for p in problems
    ), problems


def test_state_fields_are_the_snapshot_and_properties_are_not() -> None:
    op = Undeclared()
    snapshot = window_snapshot(op)
    assert snapshot == {"fields": {"seen": {"x"}}}
    clone = op.clone()
    assert clone.limit == 4 and clone.seen == {"x"} and clone.seen is not op.seen
    assert not hasattr(clone, "lookup")  # runtime attributes are not copied


class NoHandler(Operator):
    input = InputPort()
    side = InputPort(optional=True)

    def process_input(self, value: Any) -> None:
        pass


def test_an_input_port_without_a_handler_fails_validation() -> None:
    dag, src, _ = _simple()
    op = dag.add_operator("nh", NoHandler())
    dag.add_stream("s2", src.output, op.input)
    assert any(
        "operator 'nh' (NoHandler): input port 'side' has no handler: define process_side" in p
        for p in _problems(dag)
    )


class ConfiguredUnifier(Unifier):
    scale = Property(int, default=1)

    def process(self, value: Any) -> None:
        self.output.emit(value * self.scale)


class Scaled(Operator):
    input = InputPort()
    output = OutputPort(unifier=ConfiguredUnifier)
    factor = Property(int, default=10)

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def get_unifier(self, port: str) -> ConfiguredUnifier:
        return ConfiguredUnifier().configure(scale=self.factor)


def test_unifiers_are_configured_instances() -> None:
    from malhar.engine.plan import build_plan

    dag, src, out = _simple()
    op = dag.add_operator("scaled", Scaled(), PARTITIONS=2)
    op.operator.factor = 7
    dag.add_stream("s", src.output, op.input)
    dag.add_stream("t", op.output, out.input)
    plan = build_plan(dag)
    (route,) = [r for r in plan.routes if r.unifier is not None]
    assert isinstance(route.unifier, ConfiguredUnifier) and route.unifier.scale == 7


def test_a_property_set_on_the_handle_is_refused_with_the_fix() -> None:
    # Apex's addOperator returns the operator, so Apex users write handle.prop = value: it
    # set an attribute of the handle that nothing read, and the operator ran with n=1
    from malhar.algo import TopN

    dag = DAG("t")
    top = dag.add_operator("top", TopN(n=1))
    with pytest.raises(AttributeError, match=r"'n' is a property of TopN\): .*\.operator\.n ="):
        top.n = 5
    with pytest.raises(AttributeError, match="no property 'ordr_by'; did you mean 'order_by'"):
        top.ordr_by = "n"
    with pytest.raises(
        AttributeError, match=r"'n' is a property of TopN: read it as \.operator\.n"
    ):
        _ = top.n
    with pytest.raises(AttributeError, match=r"no port 'dat'.*did you mean 'data'"):
        _ = top.dat
    assert top.operator.n == 1
    top.operator.n = 5
    assert dag.operators["top"].operator.n == 5


def test_a_connectors_checks_across_properties_run_in_validate() -> None:
    # they ran in setup, on the executors: `malhar validate` said the application was
    # valid, and the run failed after Spark had started
    from malhar.io.jdbc import JdbcOutputOperator

    dag, src, _ = _simple()
    db = dag.add_operator(
        "db", JdbcOutputOperator(url="postgress://app@db/shop", table="t", mode="merge_add")
    )
    dag.add_stream("s", src.output, db.input)
    problems = [p for p in _problems(dag) if p.startswith("operator 'db'")]
    assert problems == [
        "operator 'db': url 'postgress://app@db/shop' names no database SQLAlchemy knows "
        "('postgress': Can't load plugin: sqlalchemy.dialects:postgress); write it like "
        "'postgresql://user@host:5432/db'",
        "operator 'db': mode 'merge_add' needs key_columns (the conflict key)",
    ]


def test_a_transactional_output_in_an_application_named_app_is_refused_by_validate() -> None:
    """Before: refused in the output's setup, on the executors, after Spark had started."""
    from malhar.io.fs import ParquetFileOutput

    def dag(name: str | None) -> DAG:
        d = DAG(name) if name else DAG()  # no name at all: named after its checkpoint
        src = d.add_operator("src", ListInput(windows=[[{"a": 1}]]))
        out = d.add_operator("out", ParquetFileOutput("/tmp/never-written", schema="a int"))
        d.add_stream("rows", src.output, out.input)
        return d

    with pytest.raises(ValidationError, match=r"operator 'out': the application has no name"):
        dag("app").validate()  # an app.py run without --name
    dag("named").validate()
    dag(None).validate()


def test_fields_a_windowed_operator_reads_must_be_in_a_typed_stream() -> None:
    # a misspelled key or timestamp column passed validation and sent every tuple to the
    # error port at run time (walkthrough: empty output, exit 0); checked through a
    # WatermarkGenerator, whose untyped output carries its input's tuples
    from malhar.window import KeyedWindowedOperator, TimeWindows, WatermarkGenerator
    from malhar.window.accumulation import Count

    class Clicks(ListInput):
        output = OutputPort("user string, ts bigint")

    def build(key: str, timestamp: str, generator_ts: str = "ts") -> DAG:
        dag = DAG("fields")
        src = dag.add_operator("src", Clicks([]))
        marks = dag.add_operator("marks", WatermarkGenerator(timestamp=generator_ts))
        count = dag.add_operator(
            "count",
            KeyedWindowedOperator(Count(), TimeWindows(60_000), key=key, timestamp=timestamp),
        )
        dag.add_stream("clicks", src.output, marks.input)
        dag.add_stream("marked", marks.output, count.input)
        dag.add_stream("counts", count.output, dag.add_operator("out", Collector()).input)
        return dag

    build("user", "ts").validate()
    with pytest.raises(ValidationError) as info:
        build("usr", "tss", generator_ts="time").validate()
    text = str(info.value)
    assert (
        "operator 'marks' reads the field(s) ['time'] of its input 'input', which stream "
        "'clicks' does not have: its fields are ['user', 'ts']"
    ) in text
    assert (
        "operator 'count' reads the field(s) ['tss', 'usr'] of its input 'input', which stream "
        "'marked' does not have: its fields are ['user', 'ts'] (as declared by src.output)"
    ) in text
    untyped = DAG("untyped")  # nothing declared: nothing to check
    src = untyped.add_operator("src", ListInput([]))
    count = untyped.add_operator(
        "count", KeyedWindowedOperator(Count(), TimeWindows(60_000), key="usr", timestamp="t")
    )
    untyped.add_stream("s", src.output, count.input)
    untyped.add_stream("o", count.output, untyped.add_operator("out", Collector()).input)
    untyped.validate()


def test_fields_the_catalogue_operators_read_must_be_in_a_typed_stream() -> None:
    from malhar.algo import StreamJoin, TimeBasedDedup, TopN

    class Orders(ListInput):
        output = OutputPort("id bigint, ts bigint, amount double")

    class Refunds(ListInput):
        output = OutputPort("order_id bigint, ts bigint")

    def problems(*operators: tuple[str, Any, str]) -> str:
        dag = DAG("catalogue-fields")
        orders = dag.add_operator("orders", Orders([]))
        refunds = dag.add_operator("refunds", Refunds([]))
        for name, op, port in operators:
            meta = dag.add_operator(name, op)
            if port == "join":
                dag.add_stream(f"{name}-l", orders.output, meta.left)
                dag.add_stream(f"{name}-r", refunds.output, meta.right)
            else:
                dag.add_stream(f"{name}-in", orders.output, getattr(meta, port))
        try:
            dag.validate()
        except ValidationError as exc:
            return str(exc)
        return ""

    assert not problems(
        ("dedup", TimeBasedDedup(key="id", time="ts"), "input"),
        ("top", TopN(n=3, order_by="amount"), "data"),
        ("join", StreamJoin(left_key="id", right_key="order_id"), "join"),
    )
    text = problems(
        ("dedup", TimeBasedDedup(key="idd", time="ts"), "input"),
        ("top", TopN(n=3, order_by=1), "data"),  # a position names no field: not checked
        ("join", StreamJoin(left_key="id"), "join"),  # right_key defaults to left_key
    )
    assert "operator 'dedup' reads the field(s) ['idd'] of its input 'input'" in text
    assert "did you mean 'id'?" in text
    assert "operator 'join' reads the field(s) ['id'] of its input 'right', which stream " in text
    assert "'top'" not in text


def test_fields_the_outputs_write_by_name_must_be_in_a_typed_stream() -> None:
    # a misspelled key column of an output sent every row to its error port at run time
    from malhar.io.fs import JsonLinesFileOutput
    from malhar.io.jdbc import JdbcOutputOperator
    from malhar.io.kafka import KafkaOutputOperator

    class Counts(ListInput):
        output = OutputPort("word string, n bigint, day string")

    dag = DAG("output-fields")
    src = dag.add_operator("counts", Counts([]))
    outputs = {
        "db": JdbcOutputOperator(
            "sqlite:///never-opened.db", table="t", mode="upsert", key_columns="wrd"
        ),
        "topic": KafkaOutputOperator(
            bootstrap_servers="b:9092", topic="t", key_column="word", value_column="count"
        ),
        "files": JsonLinesFileOutput(
            path="/tmp/never-written", partition_by="date", schema="date string, n bigint"
        ),
    }
    sinks = [dag.add_operator(name, op).input for name, op in outputs.items()]
    dag.add_stream("s", src.output, *sinks)
    with pytest.raises(ValidationError) as info:
        dag.validate()
    text = str(info.value)
    assert "operator 'db' reads the field(s) ['wrd'] of its input 'input'" in text
    assert "did you mean 'word'?" in text
    assert "operator 'topic' reads the field(s) ['count']" in text  # the key is there
    assert "operator 'files' reads the field(s) ['date']" in text


def test_setting_the_name_names_the_application() -> None:
    # an application that set dag.name in its populate function was still "unnamed", and
    # its exactly-once outputs refused it (walkthrough)
    dag = DAG()
    assert dag.name == "app" and not dag.named
    dag.name = "clicks"
    assert dag.named and dag.attributes["APPLICATION_NAME"] == "clicks"
    dag.set_attribute("APPLICATION_NAME", "orders")
    assert dag.name == "orders"


def test_an_empty_application_and_a_function_that_returns_no_dag_are_refused(tmp_path) -> None:
    # the plan of an empty DAG failed with "max() arg is an empty sequence", exit 1
    from malhar import DAG, ValidationError
    from malhar.app.loading import ApplicationError, load_application

    with pytest.raises(ValidationError, match=r"has no operators: add them with dag\.add_operator"):
        DAG("empty").validate()
    (tmp_path / "ret.py").write_text("def notdag():\n    return 42\n")
    with pytest.raises(ApplicationError, match="returned int 42, not a DAG"):
        load_application(f"{tmp_path / 'ret.py'}:notdag", name="e")


def test_secret_settings_that_are_no_text_are_never_shown() -> None:
    # a password of digits (an int from -c), and the checkpoint's integrity key, were
    # printed in clear in the refusal and in the config line
    from malhar import MalharError
    from malhar.app.config import apply_config
    from malhar.redaction import Scrubber, is_secret_key

    assert is_secret_key("dt.attr.CHECKPOINT_INTEGRITY_KEY")
    from malhar.properties import Property

    password = Property(str, default=None, doc="a password")
    password.name, password.secret = "password", True
    assert password.problem(12345678) == (
        "expected str, got int *** (as text: quote it; on the command line "
        "-c ...password='\"...\"')"
    )
    assert password.problem(123).startswith("expected str, got int *** ")  # short ones too
    assert password.problem({"a": 1}) == "expected str, got dict ***"
    scrub = Scrubber()
    scrub.add(12345678, "password")
    assert scrub("expected str, got int 12345678") == "expected str, got int ***"
    dag, _, _ = _simple()
    with pytest.raises(MalharError) as err:
        apply_config(dag, {"dt.attr.CHECKPOINT_INTEGRITY_KEY": 98765432})
    assert "98765432" not in str(err.value) and "got int ***" in str(err.value)
    with pytest.raises(MalharError) as err:
        apply_config(dag, {"dt.operator.out.attr.PARTITIONS": "x"})
    assert str(err.value).count("attribute PARTITIONS") == 1, str(err.value)
