"""Operators for tests: an in-memory input and a collecting output (Malhar's CollectorTestSink).

Both work inside Spark tasks: :class:`Collector` writes what it received per
window under the checkpoint (one file per window and partition, overwritten on
replay, so it is an idempotent output) and :func:`collected` reads it back.
"""

from __future__ import annotations

import os
import pickle
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from malhar.operator import InputOperator, Operator, OperatorContext
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State


class ListInput(InputOperator):
    """Emits ``windows[i]`` in the i-th window it runs (round robin over its partitions).

    Deterministic by window id, so a replayed window emits the same tuples.
    """

    output = OutputPort()

    windows = Property(list, default=[], doc="the tuples of each window, in order")
    #: the id of the first window this input ran (window ids continue across restarts)
    first_window = State(default=None)

    def __init__(self, windows: Sequence[Sequence[Any]]) -> None:
        self.windows = [list(w) for w in windows]

    def setup(self, context: OperatorContext) -> None:
        self._partition, self._partitions = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        if self.first_window is None:
            self.first_window = window_id
        self._index = window_id - self.first_window
        self._emitted = False

    def emit_tuples(self) -> None:
        if self._emitted:
            return
        self._emitted = True
        if self._index < len(self.windows):
            for i, value in enumerate(self.windows[self._index]):
                if i % self._partitions == self._partition:
                    self.output.emit(value)


class Collector(Operator):
    """Keeps every tuple it receives, per window, in ``<checkpoint>/malhar/collect``."""

    input = InputPort(optional=False)

    def setup(self, context: OperatorContext) -> None:
        root = context.checkpoint or os.environ.get("MALHAR_COLLECT_DIR", "/tmp/malhar-collect")
        self._dir = Path(root) / "malhar" / "collect" / context.name / str(context.partition)
        self._dir.mkdir(parents=True, exist_ok=True)

    def begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._items: list[Any] = []

    def process(self, value: Any) -> None:
        self._items.append(value)

    def end_window(self) -> None:
        tmp = self._dir / f".{self._window}.tmp"
        tmp.write_bytes(pickle.dumps(self._items))
        tmp.replace(self._dir / f"{self._window:020d}.pkl")


class TypedCollector(Collector):
    """A :class:`Collector` whose input port is typed: receives dict rows."""

    input = InputPort("value string", optional=False)


def collected(checkpoint: str, operator: str) -> dict[int, list[Any]]:
    """What the Collector named ``operator`` received: window id -> tuples (all partitions)."""
    root = Path(checkpoint) / "malhar" / "collect" / operator
    out: dict[int, list[Any]] = defaultdict(list)
    if not root.exists():
        return {}
    for part in sorted(root.iterdir(), key=lambda p: int(p.name)):
        for f in sorted(part.glob("*.pkl")):
            out[int(f.stem)].extend(pickle.loads(f.read_bytes()))
    return dict(sorted(out.items()))
