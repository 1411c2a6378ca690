"""Delivering tuples, Arrow batches and control tuples to operators' input ports.

One :class:`Dispatcher` serves the operator instances of one group partition (the
engine) or one operator (``malhar.testing.OperatorHarness``), so both call user
code the same way. Its handler table is built once, when the instances are set:
for every input port, the operator's ``process…`` methods in order of preference
(see :class:`~malhar.ports.InputPort`), whether the port is control aware, and
whether its control handler asks for the sender.

Control tuples (the control-tuples guide): an IMMEDIATE one reaches a
control-aware port at once, an END_WINDOW one just before ``end_window``; equal
copies of one window (one per upstream partition) are delivered once, unless the
handler takes the sender (``process_control(payload, sender)``), which sees every
copy. A port that is not control aware forwards every copy, with its sender, to the
operator's non-error output ports, and so does a handler that returns a false value
(each copy of the tuple it declined, with its sender).

Every call into user code goes through :meth:`Dispatcher.call`, which wraps an
exception in :class:`~malhar.errors.OperatorError` naming operator, partition,
method and window.
"""

from __future__ import annotations

import inspect
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from malhar.control import ControlSender, ControlTuple, DeliveryType
from malhar.errors import OperatorError
from malhar.ports import InputPort, handler, ports_of
from malhar.schema import arrow_schema


@dataclass(frozen=True)
class PortHandlers:
    """How one input port of one operator instance receives what arrives."""

    process: Callable[[Any], Any] | None
    process_batch: Callable[[pa.RecordBatch], Any] | None
    process_control: Callable[..., Any] | None
    control_aware: bool
    wants_sender: bool
    schema: pa.Schema | None  # to turn single tuples into a batch for process_batch only


def wants_sender(fn: Callable[..., Any] | None) -> bool:
    """True for a control handler written ``process_control(self, payload, sender)``."""
    if fn is None:
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: the one-argument form
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def port_handlers(op: Any, port: InputPort) -> PortHandlers:
    """The handler table entry of ``port`` on the instance ``op``."""
    control = handler(op, port, "process_control") if port.control_aware else None
    schema = port.schema
    return PortHandlers(
        process=handler(op, port, "process"),
        process_batch=handler(op, port, "process_batch"),
        process_control=control,
        control_aware=port.control_aware,
        wants_sender=wants_sender(control),
        schema=None if schema is None else arrow_schema(schema),
    )


def missing_handlers(op: Any) -> list[str]:
    """Input ports of ``op`` that nothing can receive on (``DAG.validate`` reports them)."""
    out = []
    for name, port in ports_of(type(op))[0].items():
        h = port_handlers(op, port)
        if h.process is None and h.process_batch is None:
            out.append(
                f"input port {name!r} has no handler: define process_{name}(tuple) or "
                f"process_batch_{name}(batch) (or process/process_batch when it is the "
                "only input port)"
            )
        elif h.process is None and h.schema is None:
            out.append(
                f"input port {name!r} is untyped but only has a batch handler: give the port "
                "a schema, or define a process method for single tuples"
            )
    return out


ForwardControl = Callable[[str, ControlTuple, "ControlSender | None"], None]


class Dispatcher:
    """Calls the handlers of a set of operator instances; see the module docstring.

    Args:
        partition: the partition these instances run as (named in errors).
        forward: ``forward(operator, control, sender)`` sends a control tuple on from
            ``operator``'s non-error output ports. ``sender`` is set when the operator
            passes on a copy it received (a unifier, an operator that is not control aware):
            the upstream partition's identity survives it; None when the operator's own
            handler declined the tuple, whose partition is then the new sender.
        wrap: wrap exceptions of user code in :class:`~malhar.errors.OperatorError` (the
            engine); the operator harness lets unit tests see the operator's own exception.
    """

    def __init__(self, partition: int, forward: ForwardControl, *, wrap: bool = True) -> None:
        self.partition = partition
        self.forward = forward
        self.wrap = wrap
        self.window = -1  #: the window being processed (named in errors)
        self.ops: dict[str, Any] = {}
        self.table: dict[tuple[str, str], PortHandlers] = {}
        #: operators that get no tuples in this window (at-most-once replays)
        self.skip: set[str] = set()
        #: END_WINDOW control tuples waiting for their operator's end_window
        self.pending_end: dict[str, list[tuple[str, ControlTuple, ControlSender | None]]] = (
            defaultdict(list)
        )
        self._seen: dict[tuple[str, str], set[bytes]] = defaultdict(set)
        #: (operator, port) -> control tuple -> the senders of its copies in this window, for
        #: a handler that gets each tuple once
        self._copies: dict[tuple[str, str], dict[bytes, list[ControlSender | None]]] = defaultdict(
            dict
        )
        #: (operator, port, control tuple) the handler declined in this window: later copies
        #: go on at once
        self._declined: set[tuple[str, str, bytes]] = set()
        #: tuples delivered per (operator, port) in this window (statistics)
        self.received: dict[tuple[str, str], int] = defaultdict(int)
        #: operators that pass control tuples on as they came (unifiers): every copy,
        #: with its sender, so that a sender-aware port downstream hears each partition
        self.transparent: set[str] = set()

    def set_operators(self, ops: dict[str, Any], transparent: Iterable[str] = ()) -> None:
        """Take the instances (after a restore) and build the handler table once."""
        self.ops = dict(ops)
        self.transparent = set(transparent)
        self.table = {
            (name, pname): port_handlers(op, port)
            for name, op in self.ops.items()
            for pname, port in ports_of(type(op))[0].items()
        }

    def begin_window(self, window: int) -> None:
        self.window = window
        self._seen.clear()
        self._copies.clear()
        self._declined.clear()
        self.skip.clear()
        self.received.clear()

    # -- calling user code -------------------------------------------------------------
    def call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        if not self.wrap:
            return fn(*args)
        try:
            return fn(*args)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(
                f"operator {name!r} partition {self.partition} failed in "
                f"{getattr(fn, '__name__', 'a call')} of window {self.window}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    # -- data ----------------------------------------------------------------------------
    def deliver_tuple(self, op: str, port: str, value: Any) -> None:
        if op in self.skip:
            return
        self.received[(op, port)] += 1
        h = self.table[(op, port)]
        if h.process is not None:
            self.call(op, h.process, value)
        else:
            assert h.process_batch is not None and h.schema is not None  # DAG.validate
            self.call(op, h.process_batch, pa.RecordBatch.from_pylist([value], schema=h.schema))

    def deliver_objects(self, op: str, port: str, values: list[Any]) -> None:
        if op in self.skip:
            return
        h = self.table[(op, port)]
        if h.process is None:
            for v in values:
                self.deliver_tuple(op, port, v)
            return
        self.received[(op, port)] += len(values)
        fn, call = h.process, self.call
        for v in values:
            call(op, fn, v)

    def deliver_batch(self, op: str, port: str, batch: pa.RecordBatch) -> None:
        if op in self.skip:
            return
        self.received[(op, port)] += batch.num_rows
        h = self.table[(op, port)]
        if h.process_batch is not None:
            self.call(op, h.process_batch, batch)
        else:
            assert h.process is not None  # DAG.validate
            fn, call = h.process, self.call
            for row in batch.to_pylist():
                call(op, fn, row)

    # -- control tuples --------------------------------------------------------------------
    def deliver_control(
        self, op: str, port: str, ctl: ControlTuple, sender: ControlSender | None = None
    ) -> Any:
        """Deliver (or queue, or forward) one copy of a control tuple; returns what an
        IMMEDIATE handler returned."""
        h = self.table[(op, port)]
        if not h.control_aware:
            # Passed on as it came, with its sender, as a unifier does: under this
            # partition's identity the copies of several upstream partitions would look like
            # one sender's, and a port that combines its senders' values downstream (a
            # windowed operator's watermark: their minimum) would see their latest or
            # largest instead, and take data behind it for late.
            if op not in self.transparent:
                key = pickle.dumps((sender, ctl.payload), protocol=pickle.HIGHEST_PROTOCOL)
                seen = self._seen[(op, port)]
                if key in seen:
                    return None  # the same copy again (another route from its sender)
                seen.add(key)
            self.forward(op, ctl, sender)
            return None
        if not h.wants_sender:
            key = pickle.dumps(ctl.payload, protocol=pickle.HIGHEST_PROTOCOL)
            senders = self._copies[(op, port)].get(key)
            if senders is not None:
                # the same control tuple from another upstream partition: handled once, and
                # passed on with each copy's sender if the handler declined it
                if sender not in senders:
                    senders.append(sender)
                    if (op, port, key) in self._declined:
                        self.forward(op, ctl, sender)
                return None
            self._copies[(op, port)][key] = [sender]
        if ctl.delivery is DeliveryType.END_WINDOW:
            self.pending_end[op].append((port, ctl, sender))
            return None
        return self._handle(op, port, ctl, sender)

    def end_window_controls(self, op: str) -> None:
        """Deliver ``op``'s END_WINDOW control tuples (just before its ``end_window``)."""
        for port, ctl, sender in self.pending_end.pop(op, []):
            self._handle(op, port, ctl, sender)

    def _handle(self, op: str, port: str, ctl: ControlTuple, sender: ControlSender | None) -> Any:
        h = self.table[(op, port)]
        fn = h.process_control
        if fn is None:
            handled = False
        elif h.wants_sender:
            handled = self.call(op, fn, ctl.payload, sender)
        else:
            handled = self.call(op, fn, ctl.payload)
        if not handled:
            # passed on as it came: each copy with its sender (a unifier's, or the copies
            # the one-copy delivery folded into this one)
            copies = [sender]
            if not h.wants_sender:
                key = pickle.dumps(ctl.payload, protocol=pickle.HIGHEST_PROTOCOL)
                copies = self._copies[(op, port)].get(key) or copies
                self._declined.add((op, port, key))
            for s in copies:
                self.forward(op, ctl, s)
        return handled
