"""Input and output ports, declared on operator classes.

A port is a class attribute; on an operator instance it is bound to the
runtime's wiring. Ports are never part of checkpointed state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

import pyarrow as pa
from pyspark.sql.types import StructType

from malhar.control import ControlSender, ControlTuple, DeliveryType
from malhar.schema import SchemaSpec, to_struct_type

if TYPE_CHECKING:
    from malhar.operator import Operator

_PORTS_ATTR = "_malhar_ports"


class Port:
    """Common part of input and output ports."""

    is_input: bool = False

    def __init__(self, schema: SchemaSpec = None, *, optional: bool, control_aware: bool) -> None:
        self.schema_spec = schema
        self.optional = optional
        self.control_aware = control_aware
        self.name = "?"
        self._struct: StructType | None = None
        self._resolved = False

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def schema(self) -> StructType | None:
        """The port's Spark schema; None for an untyped port (pickled Python objects)."""
        if not self._resolved:
            self._struct = to_struct_type(self.schema_spec, where=f"port {self.name!r}")
            self._resolved = True
        return self._struct


class InputPort(Port):
    """An input port.

    Tuples reach the operator through, in this order of preference:
    ``process_batch_<port>(batch)`` / ``process_batch(batch)`` (a ``pyarrow.RecordBatch``),
    ``process_<port>(tuple)`` / ``process(tuple)`` (a dict per row, or the object itself on
    an untyped port). The unprefixed names serve operators with one input port.
    Control-aware ports get ``process_control_<port>(payload)`` / ``process_control(payload)``;
    returning True there stops the automatic propagation of that control tuple.
    """

    is_input = True

    def __init__(
        self, schema: SchemaSpec = None, *, optional: bool = False, control_aware: bool = False
    ) -> None:
        super().__init__(schema, optional=optional, control_aware=control_aware)

    def __get__(self, instance: Any, owner: type) -> InputPort:
        return self


class OutputPort(Port):
    """An output port; ``error=True`` makes it an error port whose tuples are counted per window.

    Args:
        schema: a Spark DDL string, a ``StructType``, a dataclass, or None (Python objects).
        optional: may stay unconnected (True by default for output ports).
        error: an error port: emitted tuples are counted per window in the metrics.
        control_aware: the port may emit control tuples.
        unifier: the :class:`~malhar.operator.Unifier` that merges this port's output
            across partitions: an instance (configured), or a class built without
            arguments. ``Operator.get_unifier(port)`` may build it from the operator's
            properties instead.
        warn_unread: when no stream reads the port, its first tuple per partition is
            logged (WARNING) before being dropped, as an error port's: for tuples left
            out of the main output (a dedup's ``expired``). Always on for error ports.
    """

    def __init__(
        self,
        schema: SchemaSpec = None,
        *,
        optional: bool = True,
        error: bool = False,
        control_aware: bool = False,
        unifier: Any = None,
        warn_unread: bool = False,
    ) -> None:
        super().__init__(schema, optional=optional, control_aware=control_aware)
        self.error = error
        self.unifier = unifier
        #: unconnected, its first tuple is logged (as an error port's) rather than dropped
        #: without a word: for tuples the operator leaves out of its main output
        self.warn_unread = warn_unread or error

    @overload
    def __get__(self, instance: None, owner: type) -> OutputPort: ...
    @overload
    def __get__(self, instance: object, owner: type) -> BoundOutput: ...
    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        ports = instance.__dict__.setdefault(_PORTS_ATTR, {})
        bound = ports.get(self.name)
        if bound is None:
            bound = ports[self.name] = BoundOutput(self)
        return bound


class Emitter:
    """Where a bound output port sends what the operator emits (set by the runtime)."""

    def tuple(self, value: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def batch(self, batch: pa.RecordBatch) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def control(
        self, ctl: ControlTuple, sender: ControlSender | None = None
    ) -> None:  # pragma: no cover - interface
        """Send a control tuple on; ``sender`` is passed on only by unifiers."""
        raise NotImplementedError


class _Discard(Emitter):
    def tuple(self, value: Any) -> None:
        pass

    def batch(self, batch: pa.RecordBatch) -> None:
        pass

    def control(self, ctl: ControlTuple, sender: ControlSender | None = None) -> None:
        pass


DISCARD = _Discard()


class BoundOutput:
    """An output port of one operator instance: ``emit``, ``emit_batch``, ``emit_control``."""

    __slots__ = ("count", "emitter", "port")

    def __init__(self, port: OutputPort) -> None:
        self.port = port
        self.emitter: Emitter = DISCARD
        self.count = 0  # tuples emitted in the current window (error ports report it)

    def emit(self, value: Any) -> None:
        """Emit one tuple: a dict (typed port) or any picklable object (untyped port)."""
        self.count += 1
        self.emitter.tuple(value)

    def emit_batch(self, batch: pa.RecordBatch) -> None:
        """Emit a whole Arrow record batch (typed ports)."""
        self.count += batch.num_rows
        self.emitter.batch(batch)

    def emit_control(self, payload: Any, delivery: DeliveryType = DeliveryType.IMMEDIATE) -> None:
        """Emit a control tuple; the port must be declared ``control_aware=True``."""
        if not self.port.control_aware:
            raise TypeError(
                f"output port {self.port.name!r} is not control aware: "
                "declare it with OutputPort(..., control_aware=True)"
            )
        self.emitter.control(ControlTuple(payload, delivery))

    @property
    def connected(self) -> bool:
        return self.emitter is not DISCARD


def ports_of(cls: type) -> tuple[dict[str, InputPort], dict[str, OutputPort]]:
    """The input and output ports declared on an operator class (bases included)."""
    inputs: dict[str, InputPort] = {}
    outputs: dict[str, OutputPort] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, InputPort):
                inputs[name] = value
            elif isinstance(value, OutputPort):
                outputs[name] = value
    return inputs, outputs


def handler(op: Operator, port: InputPort, kind: str) -> Callable | None:
    """The operator's method for ``kind`` ("process", "process_batch", "process_control")."""
    specific = getattr(op, f"{kind}_{port.name}", None)
    if specific is not None:
        return specific
    inputs, _ = ports_of(type(op))
    if len(inputs) == 1:
        return getattr(op, kind, None)
    return None
