"""Drive one operator by hand, without Spark (Malhar's ``CollectorTestSink`` style).

>>> from malhar.testing.harness import OperatorHarness
>>> h = OperatorHarness(MyOperator())                 # doctest: +SKIP
>>> h.run_window([("input", "a b a")])                # doctest: +SKIP
>>> h.sink("output").tuples                           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from malhar.attributes import MAX_TUPLES_PER_WINDOW
from malhar.control import ControlTuple, DeliveryType
from malhar.operator import (
    ActivationListener,
    CheckpointListener,
    InputOperator,
    Operator,
    OperatorContext,
)
from malhar.ports import Emitter, handler, ports_of


@dataclass
class CollectorSink(Emitter):
    """Everything emitted on one output port: tuples, batches (as rows) and control tuples."""

    tuples: list[Any] = field(default_factory=list)
    controls: list[ControlTuple] = field(default_factory=list)
    per_window: dict[int, list[Any]] = field(default_factory=dict)
    window: int = -1

    def tuple(self, value: Any) -> None:
        self.tuples.append(value)
        self.per_window.setdefault(self.window, []).append(value)

    def batch(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            self.tuple(row)

    def control(self, ctl: ControlTuple) -> None:
        self.controls.append(ctl)

    def clear(self) -> None:
        self.tuples.clear()
        self.controls.clear()
        self.per_window.clear()


class OperatorHarness:
    """Calls an operator's lifecycle directly and captures every output port."""

    def __init__(self, operator: Operator, context: OperatorContext | None = None) -> None:
        self.operator = operator
        self.context = context or OperatorContext(name=type(operator).__name__)
        self.window = -1
        _, outputs = ports_of(type(operator))
        self.sinks = {name: CollectorSink() for name in outputs}
        for name, sink in self.sinks.items():
            getattr(operator, name).emitter = sink
        self._setup = False

    def sink(self, port: str) -> CollectorSink:
        return self.sinks[port]

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
        for name, sink in self.sinks.items():
            sink.window = self.window
            getattr(self.operator, name).count = 0
        self.operator.begin_window(self.window)

    def put(self, port: str, value: Any) -> None:
        """Deliver one tuple (or a ``pyarrow.RecordBatch``) to input ``port``."""
        inputs, _ = ports_of(type(self.operator))
        if port not in inputs:
            raise KeyError(f"{type(self.operator).__name__} has no input port {port!r}")
        if isinstance(value, pa.RecordBatch):
            fn = handler(self.operator, inputs[port], "process_batch")
            if fn is not None:
                fn(value)
                return
            for row in value.to_pylist():
                self.put(port, row)
            return
        fn = handler(self.operator, inputs[port], "process")
        if fn is None:
            raise TypeError(f"{type(self.operator).__name__} has no process method for {port!r}")
        fn(value)

    def put_control(
        self, port: str, payload: Any, delivery: DeliveryType = DeliveryType.IMMEDIATE
    ) -> Any:
        inputs, _ = ports_of(type(self.operator))
        fn = handler(self.operator, inputs[port], "process_control")
        return fn(payload) if fn else None

    def end_window(self) -> None:
        self.operator.end_window()
        if isinstance(self.operator, CheckpointListener):
            self.operator.checkpointed(self.window)

    def emit_tuples(self) -> None:
        if not isinstance(self.operator, InputOperator):
            raise TypeError("emit_tuples needs an InputOperator")
        self.operator.emit_tuples()

    def run_window(self, inputs: Iterable[tuple[str, Any]] = (), window: int | None = None) -> None:
        """One whole window: begin, every ``(port, tuple)`` in order, end."""
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
        for port, value in inputs:
            self.put(port, value)
        self.end_window()

    def committed(self, window: int) -> None:
        if isinstance(self.operator, CheckpointListener):
            self.operator.committed(window)

    def teardown(self) -> None:
        if isinstance(self.operator, ActivationListener):
            self.operator.deactivate()
        self.operator.teardown()
