"""Building an application: operators, streams and attributes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from malhar import attributes as A
from malhar.operator import InputOperator, Operator
from malhar.ports import InputPort, OutputPort, ports_of
from malhar.properties import properties_of
from malhar.suggest import did_you_mean


@dataclass
class PortRef:
    operator: str
    port: str

    def __str__(self) -> str:
        return f"{self.operator}.{self.port}"


@dataclass
class Stream:
    """One writer (an output port) and one or more readers (input ports)."""

    name: str
    source: PortRef | None = None
    sinks: list[PortRef] = field(default_factory=list)


def declared_codecs(operator: Operator) -> dict[str, Any]:
    """The stream codecs an operator that partitions by key (``partitioning()`` of kind
    ``keyed``, as the catalogue's dedup, joins, TopN ... declare) needs on its input ports;
    empty for any other operator."""
    how = getattr(operator, "partitioning", None)
    if how is None:
        return {}
    partitioning = how()
    return dict(partitioning.codecs) if partitioning.kind == "keyed" else {}


@dataclass
class OperatorMeta:
    name: str
    operator: Operator
    attributes: dict[str, Any] = field(default_factory=dict)
    port_attributes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def inputs(self) -> dict[str, InputPort]:
        return ports_of(type(self.operator))[0]

    @property
    def outputs(self) -> dict[str, OutputPort]:
        return ports_of(type(self.operator))[1]

    def attr(self, attribute: A.Attribute) -> Any:
        """The operator's value of ``attribute``, or its default."""
        return self.attributes.get(attribute.name, attribute.default)

    def port_attr(self, port: str, attribute: A.Attribute) -> Any:
        return self.port_attributes.get(port, {}).get(attribute.name, attribute.default)

    def input_codec(self, port: str, partitions: int) -> Any:
        """The stream codec of a route into input ``port`` when the operator runs
        ``partitions`` partitions: the port's ``STREAM_CODEC``; else, on more than one
        partition, the codec a keyed operator declares for the port (Apex's
        ``InputPort.getStreamCodec``), so that each key reaches one partition without
        ``partition_by_key``. It does not decide whether there is a route: an operator
        fused by equal counts stays fused, and a keyed one is then refused unless its port
        says ``PARALLEL_PARTITION=True`` (``malhar.engine.plan``)."""
        codec = self.port_attr(port, A.STREAM_CODEC)
        if codec is not None or partitions <= 1:
            return codec
        return declared_codecs(self.operator).get(port)

    @property
    def partitions(self) -> int:
        return int(self.attr(A.PARTITIONS))

    @property
    def is_input(self) -> bool:
        return isinstance(self.operator, InputOperator)


class DAG:
    """A directed acyclic graph of operators joined by streams.

    Example:
        >>> from malhar import DAG
        >>> from malhar.testing.operators import ListInput, Collector
        >>> dag = DAG("example")
        >>> src = dag.add_operator("src", ListInput(windows=[[1, 2], [3]]))
        >>> out = dag.add_operator("out", Collector())
        >>> _ = dag.add_stream("numbers", src.output, out.input)
        >>> dag.validate()
    """

    def __init__(self, name: str | None = None, **attributes: Any) -> None:
        self._name = name or "app"
        self.operators: dict[str, OperatorMeta] = {}
        self.streams: dict[str, Stream] = {}
        self.attributes: dict[str, Any] = {}
        if name is not None:
            self.set_attribute(A.APPLICATION_NAME, name)
        for key, value in attributes.items():
            self.set_attribute(key, value)
        self._problems: list[str] = []

    @property
    def name(self) -> str:
        """The application's name; outputs key their exactly-once records by it, so keep it
        stable across restarts. Without one, ``launch`` derives one from the checkpoint.
        Setting it names the application (APPLICATION_NAME), as ``DAG(name)`` does."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value
        self.set_attribute(A.APPLICATION_NAME, value)

    @property
    def named(self) -> bool:
        """True once the application has an explicit name (``DAG(name)``, APPLICATION_NAME)."""
        return A.APPLICATION_NAME.name in self.attributes

    # -- building --------------------------------------------------------------------------
    def add_operator(self, name: str, operator: Operator, **attributes: Any) -> OperatorHandle:
        """Add ``operator`` under a unique ``name``; keyword arguments set operator attributes."""
        if not isinstance(operator, Operator):
            raise TypeError(
                f"add_operator({name!r}): expected an Operator, got {type(operator).__name__}"
            )
        from malhar.validation import ValidationError

        if name in self.operators:
            raise ValidationError(
                [f"operator name {name!r} is used twice: give each operator a unique name"]
            )
        if not isinstance(name, str) or not name.strip() or name.startswith("__"):
            raise ValidationError(
                [
                    f"operator name {name!r} is not allowed: use a non-empty name that does not "
                    "start with '__' (reserved for the engine, e.g. its window log '__app__')"
                ]
            )
        if not name.isprintable():
            raise ValidationError([f"operator name {name!r} has control characters"])
        meta = OperatorMeta(name, operator)
        self.operators[name] = meta
        for key, value in attributes.items():
            self.set_operator_attribute(name, key, value)
        return OperatorHandle(self, meta)

    def add_stream(self, name: str, source: PortHandle, *sinks: PortHandle) -> Stream:
        """Connect one output port to one or more input ports."""
        if name in self.streams:
            stream = self.streams[name]
        else:
            stream = self.streams[name] = Stream(name)
        if source is not None:
            if not source.is_output:
                self._problems.append(
                    f"stream {name!r}: {source.ref} is an input port and cannot write a stream"
                )
            elif stream.source is not None and str(stream.source) != str(source.ref):
                self._problems.append(
                    f"stream {name!r} has two writers ({stream.source} and {source.ref}): "
                    "a stream has exactly one output port writing it"
                )
            else:
                stream.source = source.ref
        for sink in sinks:
            if sink.is_output:
                self._problems.append(
                    f"stream {name!r}: {sink.ref} is an output port and cannot read a stream"
                )
            else:
                stream.sinks.append(sink.ref)
        return stream

    def set_attribute(self, key: A.Attribute | str, value: Any) -> None:
        """Set an application attribute (``A.STREAMING_WINDOW_MS`` or its name)."""
        attribute = A.lookup(A.APPLICATION, key, "application")
        self.attributes[attribute.name] = attribute.coerce(value)
        if attribute is A.APPLICATION_NAME:
            self._name = value

    def set_operator_attribute(self, operator: str, key: A.Attribute | str, value: Any) -> None:
        """Set an operator attribute (``A.PARTITIONS`` or its name)."""
        attribute = A.lookup(A.OPERATOR, key, "operator")
        self.operators[operator].attributes[attribute.name] = attribute.coerce(value)

    def set_port_attribute(
        self, operator: str, port: str, key: A.Attribute | str, value: Any
    ) -> None:
        """Set a port attribute (``A.STREAM_CODEC`` or its name)."""
        attribute = A.lookup(A.PORT, key, "port")
        self.operators[operator].port_attributes.setdefault(port, {})[attribute.name] = (
            attribute.coerce(value)
        )

    def attr(self, attribute: A.Attribute) -> Any:
        """The application's value of ``attribute``, or its default."""
        return self.attributes.get(attribute.name, attribute.default)

    # -- queries -----------------------------------------------------------------------------
    def stream_into(self, ref: PortRef) -> Stream | None:
        """The stream that feeds input port ``ref``, or None."""
        for s in self.streams.values():
            if any(str(k) == str(ref) for k in s.sinks):
                return s
        return None

    def streams_from(self, operator: str) -> list[Stream]:
        """The streams written by ``operator``'s output ports."""
        return [s for s in self.streams.values() if s.source and s.source.operator == operator]

    def upstream(self, operator: str) -> list[str]:
        """The operators writing the streams ``operator`` reads (once per stream)."""
        ups = []
        for s in self.streams.values():
            if s.source and any(k.operator == operator for k in s.sinks):
                ups.append(s.source.operator)
        return ups

    def parallel_upstreams(self, operator: str) -> list[tuple[PortRef, str]]:
        """``(input port, upstream operator)`` of each ``PARALLEL_PARTITION`` input port of
        ``operator`` that a stream feeds, in stream order."""
        meta = self.operators[operator]
        return [
            (sink, s.source.operator)
            for s in self.streams.values()
            if s.source is not None and s.source.operator in self.operators
            for sink in s.sinks
            if sink.operator == operator and meta.port_attr(sink.port, A.PARALLEL_PARTITION)
        ]

    def partition_counts(self) -> dict[str, int]:
        """The partition count each operator runs with: its ``PARTITIONS``; else, when an
        input port is ``PARALLEL_PARTITION``, its upstream's count (validation makes several
        such upstreams agree); else 1. Raises ValidationError on a cycle."""
        counts: dict[str, int] = {}
        for name in self.topological_order():
            meta = self.operators[name]
            ups = self.parallel_upstreams(name)
            own = A.PARTITIONS.name in meta.attributes or not ups
            counts[name] = meta.partitions if own else counts[ups[0][1]]
        return counts

    def topological_order(self) -> list[str]:
        """Operator names, upstream first; raises ValidationError on a cycle."""
        from malhar.validation import ValidationError

        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = " -> ".join([*path[path.index(name) :], name])
                raise ValidationError([f"the DAG has a cycle: {cycle}; streams must not loop back"])
            state[name] = 1
            for up in self.upstream(name):
                if up in self.operators:
                    visit(up, [*path, name])
            state[name] = 2
            order.append(name)

        for name in self.operators:
            visit(name, [])
        return order

    def validate(self) -> None:
        """Check the DAG before anything runs; raise ValidationError listing every problem."""
        from malhar.validation import validate

        validate(self)


@dataclass
class PortHandle:
    dag: DAG
    ref: PortRef
    is_output: bool

    def set_attribute(self, key: A.Attribute | str, value: Any) -> PortHandle:
        self.dag.set_port_attribute(self.ref.operator, self.ref.port, key, value)
        return self


class OperatorHandle:
    """What ``DAG.add_operator`` returns: ports as attributes, attributes as a method."""

    def __init__(self, dag: DAG, meta: OperatorMeta) -> None:
        self._dag = dag
        self.meta = meta
        self.name = meta.name

    _OWN = frozenset({"_dag", "meta", "name"})

    def __getattr__(self, port: str) -> PortHandle:
        inputs, outputs = ports_of(type(self.meta.operator))
        if port in outputs:
            return PortHandle(self._dag, PortRef(self.name, port), True)
        if port in inputs:
            return PortHandle(self._dag, PortRef(self.name, port), False)
        cls = type(self.meta.operator)
        if port in properties_of(cls):
            hint = f"; {port!r} is a property of {cls.__name__}: read it as .operator.{port}"
        else:
            hint = did_you_mean(port, [*inputs, *outputs])
        raise AttributeError(
            f"operator {self.name!r} ({cls.__name__}) has no port {port!r}; "
            f"ports: {sorted([*inputs, *outputs])}{hint}"
        )

    def __setattr__(self, key: str, value: Any) -> None:
        # Apex's addOperator returns the operator itself, so ``handle.prop = v`` is what an
        # Apex user writes; on this handle it set an attribute nothing reads
        if key in self._OWN:
            object.__setattr__(self, key, value)
            return
        cls = type(self.meta.operator)
        known = properties_of(cls)
        if key in known:
            what, how = f"{key!r} is a property of {cls.__name__}", f".operator.{key} = ..."
        else:
            what = f"{cls.__name__} has no property {key!r}{did_you_mean(key, known)}"
            how = ".operator.configure(...)"
        raise AttributeError(
            f"cannot set {key!r} on the handle of operator {self.name!r} ({what}): set "
            f"properties on the operator ({how}) and attributes with .set_attribute(...)"
        )

    def set_attribute(self, key: A.Attribute | str, value: Any) -> OperatorHandle:
        self._dag.set_operator_attribute(self.name, key, value)
        return self

    @property
    def operator(self) -> Operator:
        return self.meta.operator
