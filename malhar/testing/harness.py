"""Drive one operator by hand, without Spark (Malhar's ``CollectorTestSink`` style).

The harness delivers tuples, Arrow batches and control tuples through the engine's
own :class:`~malhar.engine.dispatch.Dispatcher`, so an operator sees exactly what it
would see in a running application (handler choice, tuple/batch conversion, control
de-duplication and END_WINDOW delivery, automatic propagation); it captures every
output port, and checkpoints and restores state the way the engine does.

Example:
    >>> from malhar.algo import UniqueCounter
    >>> from malhar.testing.harness import OperatorHarness
    >>> h = OperatorHarness(UniqueCounter(key_name="word"))
    >>> h.run_window([("data", "a"), ("data", "b"), ("data", "a")])
    >>> h.sink("count").tuples
    [{'word': 'a', 'count': 2}, {'word': 'b', 'count': 1}]
    >>> saved = h.checkpoint()                       # the state after window 0
    >>> replay = OperatorHarness.restored(UniqueCounter(key_name="word"), saved)
    >>> replay.run_window([("data", "a")], window=1)
    >>> replay.sink("count").tuples
    [{'word': 'a', 'count': 1}]

Exceptions raised by the operator reach the caller unchanged (the engine wraps them
in :class:`~malhar.errors.OperatorError`). What the operator emits on a typed output
port is checked against the port's schema as it is emitted: a tuple that would not
convert to the port's Arrow schema (as a route between partitions converts it), a tuple
that is not a dict, or a batch whose columns are not the port's (names and types) raises
:class:`~malhar.errors.OperatorError` naming the operator, the port and the schema.

Managed state (``context.managed_state()``) works when the context names a
checkpoint folder: the harness checkpoints it after every ``end_window`` like the
engine, and :meth:`OperatorHarness.restored` brings it back to the window of the
:meth:`checkpoint`.

After every ``end_window`` the harness also snapshots the operator's state (its
``State`` fields and ``snapshot()``) with the engine's own code
(:class:`~malhar.engine.snapshots.PartitionSnapshots`), so a value that cannot be
checkpointed (a lock, an open file, a client in a ``State`` field) raises the
engine's :class:`~malhar.errors.StateError` naming the field, in the window that put
it there. ``OperatorHarness(op, check_state=False)`` skips that (one pickling of the
state per window), e.g. for a test of many windows over a large state.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from malhar.attributes import MAX_TUPLES_PER_WINDOW
from malhar.control import ControlSender, ControlTuple, DeliveryType
from malhar.engine.checkpoint_identity import checkpoint_identity
from malhar.engine.dispatch import Dispatcher
from malhar.engine.managed import ManagedStates
from malhar.engine.snapshots import PartitionSnapshots
from malhar.engine.typed_rows import (
    arrow_text,
    cast_batch,
    rows_to_batch,
    schema_text,
    unfit_error,
)
from malhar.errors import OperatorError
from malhar.operator import (
    ActivationListener,
    CheckpointListener,
    InputOperator,
    Operator,
    OperatorContext,
)
from malhar.ports import Emitter, OutputPort, ports_of
from malhar.schema import arrow_schema
from malhar.state import restore_window_snapshot, window_snapshot

__all__ = ["CollectorSink", "OperatorHarness", "deliveries"]


@dataclass
class CollectorSink(Emitter):
    """Everything emitted on one output port: tuples, batches (as rows) and control tuples."""

    tuples: list[Any] = field(default_factory=list)
    controls: list[ControlTuple] = field(default_factory=list)
    #: the sender each control tuple went on with (None: the operator's own partition)
    senders: list[ControlSender | None] = field(default_factory=list)
    per_window: dict[int, list[Any]] = field(default_factory=dict)
    window: int = -1
    #: checks what is emitted (a tuple or a batch) against a typed port's schema
    check: Callable[[Any], None] | None = field(default=None, repr=False, compare=False)

    def tuple(self, value: Any) -> None:
        if self.check is not None:
            self.check(value)
        self._keep(value)

    def batch(self, batch: pa.RecordBatch) -> None:
        if self.check is not None:
            self.check(batch)
        for row in batch.to_pylist():
            self._keep(row)

    def _keep(self, value: Any) -> None:
        self.tuples.append(value)
        self.per_window.setdefault(self.window, []).append(value)

    def control(self, ctl: ControlTuple, sender: ControlSender | None = None) -> None:
        self.controls.append(ctl)
        self.senders.append(sender)

    def clear(self) -> None:
        self.tuples.clear()
        self.controls.clear()
        self.senders.clear()
        self.per_window.clear()


class OperatorHarness:
    """Calls an operator's lifecycle directly and captures every output port."""

    def __init__(
        self,
        operator: Operator,
        context: OperatorContext | None = None,
        *,
        window: int = -1,
        check_state: bool = True,
    ) -> None:
        self.operator = operator
        #: snapshot the state after every window as the engine does (see the module docstring)
        self.check_state = check_state
        self._snapshots = PartitionSnapshots(_LastSnapshot())  # type: ignore[arg-type]
        context = context or OperatorContext(name=type(operator).__name__)
        self.managed = ManagedStates(context.checkpoint, context.partition, context.integrity_key)
        identity = context.checkpoint_id
        if identity is None and context.checkpoint is not None:
            identity = checkpoint_identity(context.checkpoint)  # as the engine's launch does
        self.context = dataclasses.replace(
            context, managed=self._managed_state, checkpoint_id=identity
        )
        self.name = self.context.name
        self.window = window  #: the last window begun (the state is after it)
        self.inputs, outputs = ports_of(type(operator))
        self.sinks = {name: CollectorSink() for name in outputs}
        for name, sink in self.sinks.items():
            getattr(operator, name).emitter = sink
            if outputs[name].schema is not None:
                sink.check = _PortCheck(self, outputs[name])
        self.dispatcher = Dispatcher(self.context.partition, self._forward, wrap=False)
        self.dispatcher.set_operators({self.name: operator})
        self._setup = False

    @classmethod
    def restored(
        cls,
        operator: Operator,
        checkpoint: bytes,
        context: OperatorContext | None = None,
        *,
        check_state: bool = True,
    ) -> OperatorHarness:
        """A harness over ``operator`` (freshly configured) with the state of a
        :meth:`checkpoint` put back, as the engine rebuilds a partition after a failure
        (managed state included, from the same context's checkpoint folder)."""
        saved = pickle.loads(checkpoint)
        restore_window_snapshot(operator, saved["operator"])
        return cls(operator, context, window=saved["window"], check_state=check_state)

    def _managed_state(self, operator: str, **options: Any) -> Any:
        return self.managed.get(operator, self.window, **options)

    def _forward(self, op: str, ctl: ControlTuple, sender: ControlSender | None) -> None:
        _, outputs = ports_of(type(self.operator))
        for name, port in outputs.items():
            if not port.error:
                self.sinks[name].control(ctl, sender)

    def sink(self, port: str) -> CollectorSink:
        """What the operator emitted on output ``port``."""
        if port not in self.sinks:
            raise KeyError(
                f"{type(self.operator).__name__} has no output port {port!r}; "
                f"its output ports: {sorted(self.sinks)}"
            )
        return self.sinks[port]

    def _port(self, port: str) -> str:
        if port not in self.inputs:
            raise KeyError(
                f"{type(self.operator).__name__} has no input port {port!r}; "
                f"its input ports: {sorted(self.inputs)}"
            )
        return port

    def setup(self) -> OperatorHarness:
        self.operator.setup(self.context)
        if isinstance(self.operator, ActivationListener):
            self.operator.activate(self.context)
        self._setup = True
        return self

    def begin_window(self, window: int | None = None) -> None:
        if not self._setup:
            self.setup()
        self.window = self.window + 1 if window is None else window
        self.dispatcher.begin_window(self.window)
        for name, sink in self.sinks.items():
            sink.window = self.window
            getattr(self.operator, name).count = 0
        self.operator.begin_window(self.window)

    def put(self, port: str, value: Any) -> None:
        """Deliver one tuple (or a ``pyarrow.RecordBatch``) to input ``port``."""
        port = self._port(port)
        if isinstance(value, pa.RecordBatch):
            self.dispatcher.deliver_batch(self.name, port, value)
        else:
            self.dispatcher.deliver_tuple(self.name, port, value)

    def put_control(
        self,
        port: str,
        payload: Any,
        delivery: DeliveryType = DeliveryType.IMMEDIATE,
        sender: ControlSender | None = None,
    ) -> Any:
        """Deliver a control tuple to ``port`` as the engine would: an IMMEDIATE one now
        (returns what the handler returned), an END_WINDOW one just before ``end_window``;
        equal copies in one window are delivered once unless the handler takes the
        sender. A port that is not control aware forwards it to the output sinks."""
        ctl = ControlTuple(payload, delivery)
        return self.dispatcher.deliver_control(self.name, self._port(port), ctl, sender)

    def end_window(self) -> None:
        self.dispatcher.end_window_controls(self.name)
        self.operator.end_window()
        self.managed.checkpoint(self.window)
        if self.check_state:
            # the engine's snapshot of the window: raises its StateError naming the field
            # that will not pickle
            ops = {self.name: self.operator}
            self._snapshots.save(self.window, ops, {}, {}, iter(ops.items()))
        if isinstance(self.operator, CheckpointListener):
            self.operator.checkpointed(self.window)

    def emit_tuples(self) -> None:
        if not isinstance(self.operator, InputOperator):
            raise TypeError("emit_tuples needs an InputOperator")
        self.operator.emit_tuples()

    def run_window(self, inputs: Iterable[tuple[str, Any]] = (), window: int | None = None) -> None:
        """One whole window: begin, every ``(input port, tuple or batch)`` pair in order, end."""
        self.begin_window(window)
        if isinstance(self.operator, InputOperator):
            # Like the engine: call emit_tuples until a call emits nothing or the
            # window's MAX_TUPLES_PER_WINDOW is reached.
            limit = self.context.attributes.get(
                MAX_TUPLES_PER_WINDOW.name, MAX_TUPLES_PER_WINDOW.default
            )
            while True:
                before = sum(getattr(self.operator, p).count for p in self.sinks)
                self.emit_tuples()
                after = sum(getattr(self.operator, p).count for p in self.sinks)
                if after == before or after >= limit:
                    break
        for item in inputs:
            if not (isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], str)):
                raise TypeError(
                    f"run_window takes (input port, tuple or batch) pairs, got {item!r}; "
                    f"{type(self.operator).__name__}'s input ports: {sorted(self.inputs)}"
                )
            self.put(*item)
        self.end_window()

    def checkpoint(self) -> bytes:
        """The operator's checkpointed state after the last window (what the engine saves)."""
        from pyspark import cloudpickle

        saved = {"operator": window_snapshot(self.operator), "window": self.window}
        return cloudpickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL)

    def committed(self, window: int) -> None:
        if isinstance(self.operator, CheckpointListener):
            self.operator.committed(window)
        self.managed.committed(window)

    def teardown(self) -> None:
        if isinstance(self.operator, ActivationListener):
            self.operator.deactivate()
        self.operator.teardown()
        self.managed.close()


class _LastSnapshot:
    """The store of the harness's :class:`PartitionSnapshots`: the last snapshot, in memory."""

    def __init__(self) -> None:
        self.saved: tuple[int, bytes] | None = None

    def describe(self, window: int) -> str:
        return f"the harness's snapshot after window {window}"

    def load(self, before: int) -> tuple[int, bytes] | None:
        return self.saved if self.saved is not None and self.saved[0] <= before else None

    def save(self, window: int, data: bytes) -> None:
        self.saved = (window, data)


class _PortCheck:
    """Checks what an operator emits on one typed output port (see the module docstring)."""

    def __init__(self, harness: OperatorHarness, port: OutputPort) -> None:
        self.harness, self.port = harness, port
        self.schema = arrow_schema(port.schema)
        self.columns = [(f.name, f.type) for f in self.schema]

    def __call__(self, value: Any) -> None:
        if isinstance(value, pa.RecordBatch):
            cast_batch(value, self.schema, self.fail)  # raises with pyarrow's reason
            if [(f.name, f.type) for f in value.schema] != self.columns:
                raise self.fail(
                    "a batch",
                    f"its columns are ({arrow_text(value.schema)}), not "
                    f"({arrow_text(self.schema)}): cast it, e.g. batch.cast(schema)",
                )
        else:
            rows_to_batch([value], self.schema, self.fail)

    def fail(self, what: str, reason: str) -> OperatorError:
        h = self.harness
        ddl = schema_text(self.port)
        return unfit_error(h.name, h.context.partition, h.window, self.port.name, ddl, what, reason)


def deliveries(
    port: str, rows: list[dict[str, Any]], schema: pa.Schema | None = None
) -> list[list[tuple[str, Any]]]:
    """The same rows delivered three ways, as ``run_window`` inputs: one tuple at a time, as
    one Arrow batch, and as two batches (the first row, then the rest). An operator must
    give the same output for each: its ``process`` and ``process_batch`` paths agree.

    Example:
        >>> from malhar.algo import Sum
        >>> from malhar.testing.harness import OperatorHarness, deliveries
        >>> outputs = []
        >>> for inputs in deliveries("data", [{"v": 1}, {"v": 2}]):
        ...     h = OperatorHarness(Sum(value="v"))
        ...     h.run_window(inputs)
        ...     outputs.append(h.sink("sum").tuples)
        >>> outputs
        [[{'sum': 3}], [{'sum': 3}], [{'sum': 3}]]
    """
    batch = pa.RecordBatch.from_pylist
    return [
        [(port, row) for row in rows],
        [(port, batch(rows, schema=schema))],
        [(port, batch(rows[:1], schema=schema)), (port, batch(rows[1:], schema=schema))],
    ]
