"""``DAG.validate()``: every rule, each failure naming what is wrong and how to fix it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from malhar import attributes as A
from malhar.errors import MalharError
from malhar.properties import properties_of
from malhar.schema import SchemaError, compatible
from malhar.suggest import did_you_mean

if TYPE_CHECKING:
    from malhar.dag import DAG


class ValidationError(MalharError, ValueError):
    """The DAG cannot run; ``problems`` lists every reason, one sentence each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            "the application is not valid:\n" + "\n".join(f"  - {p}" for p in self.problems)
        )


def validate(dag: DAG) -> None:
    problems = list(dag._problems)
    if not dag.operators:
        # nothing to run: the plan of an empty DAG failed with a bare max() error
        problems.append(
            f"application {dag.name!r} has no operators: add them with dag.add_operator "
            "(an application function fills the DAG it is given, or returns a DAG)"
        )
    problems += _attributes(dag)
    problems += _streams(dag)
    problems += _ports(dag)
    problems += _port_attributes(dag)
    problems += _properties(dag)
    problems += _state(dag)
    problems += _handlers(dag)
    problems += _unifiers(dag)
    problems += _application_name(dag)
    if not problems:
        try:
            dag.topological_order()
        except ValidationError as exc:
            problems += exc.problems
        else:
            problems += _parallel_partitions(dag)
            problems += _single_partition(dag)
            problems += _fields_read(dag)
    if problems:
        raise ValidationError(problems)


def _application_name(dag: DAG) -> list[str]:
    """A transactional output refuses the default application name in its setup, on the
    executors, after Spark has started: said here first. An application with no name at
    all is named after its checkpoint at launch (``launcher.derived_name``): not refused."""
    from malhar.io.base.output import OutputConfigError, check_application_name
    from malhar.io.base.output_operator import TransactionalOutputOperator

    if not dag.named:
        return []
    for meta in dag.operators.values():
        if isinstance(meta.operator, TransactionalOutputOperator):
            try:
                check_application_name(dag.attr(A.APPLICATION_NAME), f"operator {meta.name!r}")
            except OutputConfigError as exc:
                return [str(exc)]
    return []


def _attributes(dag: DAG) -> list[str]:
    out = []
    period = dag.attr(A.STREAMING_WINDOW_MS)
    if not isinstance(period, int) or period < 1:
        out.append(
            f"application attribute STREAMING_WINDOW_MS must be a positive int, got {period!r}"
        )
    for meta in dag.operators.values():
        for attr in (A.PARTITIONS, A.APPLICATION_WINDOW_COUNT, A.MAX_TUPLES_PER_WINDOW):
            value = meta.attr(attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                out.append(
                    f"operator {meta.name!r}: attribute {attr.name} must be an int >= 1, got {value!r}"
                )
        limit = meta.attr(A.UNIFIER_LIMIT)
        if not isinstance(limit, int) or limit == 1 or limit < 0:
            out.append(
                f"operator {meta.name!r}: UNIFIER_LIMIT must be 0 (no cascade) or >= 2, got {limit!r}"
            )
        elif limit:
            for port in meta.outputs:
                unifier = meta.operator.get_unifier(port)
                if unifier is not None and not unifier.cascades:
                    out.append(
                        f"operator {meta.name!r}: UNIFIER_LIMIT={limit}, but the unifier of "
                        f"its port {port!r} ({type(unifier).__name__}) cannot be cascaded (a "
                        "level's output is not what the next level takes): remove "
                        "UNIFIER_LIMIT"
                    )
        if not isinstance(meta.attr(A.PROCESSING_MODE), A.ProcessingMode):
            out.append(
                f"operator {meta.name!r}: PROCESSING_MODE must be a malhar.ProcessingMode, "
                f"got {meta.attr(A.PROCESSING_MODE)!r}"
            )
    return out


def _streams(dag: DAG) -> list[str]:
    out = []
    for stream in dag.streams.values():
        if stream.source is None:
            out.append(f"stream {stream.name!r} has no writer: connect an output port to it")
        if not stream.sinks:
            out.append(f"stream {stream.name!r} has no reader: connect at least one input port")
        for ref in [stream.source, *stream.sinks]:
            if ref is not None and ref.operator not in dag.operators:
                out.append(f"stream {stream.name!r} names unknown operator {ref.operator!r}")
    return out


def _ports(dag: DAG) -> list[str]:
    out = []
    readers: dict[str, list[str]] = {}
    written: set[str] = set()
    for stream in dag.streams.values():
        if stream.source:
            written.add(str(stream.source))
        for sink in stream.sinks:
            readers.setdefault(str(sink), []).append(stream.name)
    for meta in dag.operators.values():
        for name, port in meta.inputs.items():
            ref = f"{meta.name}.{name}"
            streams = readers.get(ref, [])
            if len(streams) > 1:
                out.append(
                    f"input port {ref} reads {len(streams)} streams ({', '.join(streams)}): "
                    "an input port reads one stream"
                )
            if not streams and not port.optional:
                out.append(
                    f"input port {ref} is required but not connected: add a stream into it "
                    "or declare it InputPort(optional=True)"
                )
        for name, port in meta.outputs.items():
            ref = f"{meta.name}.{name}"
            if not port.optional and ref not in written:
                out.append(
                    f"output port {ref} must be connected (declared optional=False): add a stream from it"
                )
        for port in [*meta.inputs.values(), *meta.outputs.values()]:
            try:
                _ = port.schema
            except SchemaError as exc:
                out.append(f"operator {meta.name!r}: {exc}")
    for stream in dag.streams.values():
        if not stream.source or stream.source.operator not in dag.operators:
            continue
        src_port = dag.operators[stream.source.operator].outputs.get(stream.source.port)
        for sink in stream.sinks:
            if sink.operator not in dag.operators:
                continue
            dst_port = dag.operators[sink.operator].inputs.get(sink.port)
            if src_port is None or dst_port is None:
                continue
            try:
                why = compatible(src_port.schema, dst_port.schema)
            except SchemaError:
                continue
            if why:
                out.append(
                    f"stream {stream.name!r}: {stream.source} cannot feed {sink}: {why}; "
                    "make the port schemas agree"
                )
    return out


def typed_inputs(dag: DAG) -> dict[str, tuple[list[str], str]]:
    """The field names of the stream into each input port (``"op.port"``) whose schema is
    known, and the output port that declared it: the writing port's own schema, or one
    carried through a pass-through (``Operator.schema_follows``) from further up. An
    untyped stream is left out. Needs an acyclic DAG."""
    into: dict[str, Any] = {}  # "op.port" -> the stream into it
    for stream in dag.streams.values():
        for sink in stream.sinks:
            into[str(sink)] = stream

    def schema_of(ref: Any) -> tuple[Any, str] | None:
        """The schema a stream written by ``ref`` carries, and who declared it."""
        meta = dag.operators.get(ref.operator)
        port = meta.outputs.get(ref.port) if meta is not None else None
        if port is None:
            return None
        try:
            if port.schema is not None:
                return port.schema, str(ref)
        except SchemaError:
            return None  # said by _ports
        follows = meta.operator.schema_follows(ref.port)
        upstream = into.get(f"{ref.operator}.{follows}") if follows else None
        if upstream is None or upstream.source is None:
            return None
        return schema_of(upstream.source)

    out: dict[str, tuple[list[str], str]] = {}
    for sink, stream in into.items():
        found = schema_of(stream.source) if stream.source is not None else None
        if found is not None:
            out[sink] = (list(found[0].fieldNames()), found[1])
    return out


def _fields_read(dag: DAG) -> list[str]:
    """Every field an operator reads by name (``Operator.fields_read``) is in the schema
    of the stream into that port (:func:`typed_inputs`). Needs an acyclic DAG."""
    typed = typed_inputs(dag)
    out = []
    for stream in dag.streams.values():
        for sink in stream.sinks:
            meta = dag.operators.get(sink.operator)
            if meta is None or str(sink) not in typed:
                continue
            names, declared = typed[str(sink)]
            missing = [f for f in meta.operator.fields_read(sink.port) if f not in names]
            if missing:
                via = "" if declared == str(stream.source) else f" (as declared by {declared})"
                out.append(
                    f"operator {sink.operator!r} reads the field(s) {missing} of its input "
                    f"{sink.port!r}, which stream {stream.name!r} does not have: its fields are "
                    f"{names}{via}; fix the operator's settings or the column names"
                    + did_you_mean(missing[0], names)
                )
    return out


def _parallel_partitions(dag: DAG) -> list[str]:
    """A ``PARALLEL_PARTITION`` port makes its operator run as many partitions as the
    upstream (which may itself follow one): an own ``PARTITIONS`` must agree, and so must
    the upstreams of several such ports. Needs an acyclic DAG."""
    out = []
    counts = dag.partition_counts()
    for name, meta in dag.operators.items():
        ups = dag.parallel_upstreams(name)
        if len({counts[up] for _, up in ups}) > 1:
            listed = ", ".join(f"{sink} from {up!r} ({counts[up]})" for sink, up in ups)
            out.append(
                f"operator {name!r} has PARALLEL_PARTITION input ports whose upstreams run "
                f"different partition counts: {listed}; a partition follows one partition of "
                "each, so keep PARALLEL_PARTITION only on ports whose upstreams agree"
            )
        elif ups and A.PARTITIONS.name in meta.attributes and meta.partitions != counts[ups[0][1]]:
            sink, up = ups[0]
            out.append(
                f"input port {sink} is PARALLEL_PARTITION but {name!r} sets "
                f"PARTITIONS={meta.partitions} while {up!r} runs {counts[up]} partitions: "
                "drop one of the two"
            )
    return out


def _single_partition(dag: DAG) -> list[str]:
    """An operator that says it runs on one partition only (``partitioning()`` of kind
    ``single``) would keep a separate state per partition and give partial results."""
    out = []
    for name, count in dag.partition_counts().items():
        operator = dag.operators[name].operator
        how = getattr(operator, "partitioning", None)
        if count > 1 and how is not None and how().kind == "single":
            why = getattr(operator, "cannot_repartition", lambda: None)()
            out.append(
                f"operator {name!r} ({type(operator).__name__}) runs on one partition only"
                f"{f': {why}' if why else ''}; with {count} partitions each would give a "
                "partial result: set PARTITIONS=1"
            )
    return out


def _port_attributes(dag: DAG) -> list[str]:
    from malhar.codec import StreamCodec

    out = []
    for meta in dag.operators.values():
        for port, attrs in meta.port_attributes.items():
            if port not in meta.inputs and port not in meta.outputs:
                out.append(f"operator {meta.name!r} has no port {port!r} to set attributes on")
            codec = attrs.get(A.STREAM_CODEC.name)
            if codec is not None and not isinstance(codec, StreamCodec):
                out.append(
                    f"input port {meta.name}.{port}: STREAM_CODEC must be a StreamCodec instance "
                    f"(for example KeyCodec('word')), got {type(codec).__name__}"
                )
            parallel = attrs.get(A.PARALLEL_PARTITION.name, False)
            if not isinstance(parallel, bool):
                out.append(
                    f"input port {meta.name}.{port}: PARALLEL_PARTITION must be True or False, "
                    f"got {parallel!r}"
                )
    return out


def _properties(dag: DAG) -> list[str]:
    out = []
    for meta in dag.operators.values():
        out += [f"operator {meta.name!r}: {p}" for p in operator_problems(meta.operator)]
    return out


def operator_problems(operator: Any) -> list[str]:
    """What is wrong with one operator on its own: its property values, and a connector's
    (or windowed operator's) checks across its properties (``settings_problems``)."""
    out = []
    for name, prop in properties_of(type(operator)).items():
        problem = prop.problem(getattr(operator, name))
        if problem:
            out.append(f"property {name!r} {problem}")
    # a connector's checks across its properties (mode 'merge_add' needs key_columns):
    # they ran in setup, on the executors, after Spark had started
    settings_problems = getattr(operator, "settings_problems", None)
    if callable(settings_problems):
        own = set(operator.property_problems())
        out += [p for p in settings_problems() if p not in own]
    return out


def _state(dag: DAG) -> list[str]:
    """Attributes that would not reach the partitions, and values that will not pickle."""
    from malhar.state import undeclared_attributes, unpicklable_attributes

    out = []
    for meta in dag.operators.values():
        kind = type(meta.operator).__name__
        for name in undeclared_attributes(meta.operator):
            out.append(
                f"operator {meta.name!r} ({kind}): attribute {name!r} is set before launch but "
                "is neither a Property (configuration) nor a State field (checkpointed), so "
                f"the partitions would not get it: declare `{name} = Property(...)` or "
                f"`{name} = State(...)` on the class, or create it in setup()"
            )
        for why in unpicklable_attributes(meta.operator):
            out.append(
                f"operator {meta.name!r} ({kind}): {why}; properties and state are pickled "
                "into the plan and the checkpoints, so they must pickle (create clients, "
                "locks and open files in setup())"
            )
    return out


def _handlers(dag: DAG) -> list[str]:
    from malhar.engine.dispatch import missing_handlers

    return [
        f"operator {meta.name!r} ({type(meta.operator).__name__}): {why}"
        for meta in dag.operators.values()
        for why in missing_handlers(meta.operator)
    ]


def _unifiers(dag: DAG) -> list[str]:
    from malhar.operator import Unifier
    from malhar.ports import ports_of

    out = []
    for meta in dag.operators.values():
        for name in meta.outputs:
            where = f"output port {meta.name}.{name}"
            try:
                unifier = meta.operator.get_unifier(name)
            except Exception as exc:
                out.append(f"{where}: get_unifier failed: {type(exc).__name__}: {exc}")
                continue
            if unifier is None:
                continue
            if not isinstance(unifier, Unifier):
                out.append(
                    f"{where}: the unifier must be a Unifier instance (or a Unifier subclass "
                    f"in OutputPort(unifier=...)), got {type(unifier).__name__}"
                )
                continue
            ins, outs = ports_of(type(unifier))
            if len(outs) != 1 or len(ins) != 1:
                out.append(
                    f"{where}: unifier {type(unifier).__name__} must have exactly one input "
                    f"and one output port (has {len(ins)} and {len(outs)})"
                )
    return out
