"""Operators and data of the Spark tests (imported by Spark's Python workers)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from malhar import InputOperator, Operator, OperatorContext, Property, State
from malhar.control import DeliveryType
from malhar.ports import InputPort, OutputPort
from malhar.window import MAX_TIMESTAMP, Watermark, WindowedTuple
from tests.window.helpers import reference_counts

KEYS = ["a", "b", "c", "d", "e"]


def event_windows(windows: int = 6, per_window: int = 40, seed: int = 3) -> list[list[list[Any]]]:
    """Events ``[key, ts]`` per window, out of order within a window and across windows
    (event times in [0, 100 * windows) arrive up to two windows early or late)."""
    rng = random.Random(seed)
    out: list[list[list[Any]]] = [[] for _ in range(windows)]
    for _ in range(windows * per_window):
        ts = rng.randrange(0, 100 * windows)
        w = min(windows - 1, max(0, ts // 100 + rng.randint(-2, 2)))
        out[w].append([rng.choice(KEYS), ts])
    for w in out:
        rng.shuffle(w)
    return out


def reference(windows: list[list[list[Any]]], size: int = 100) -> dict[tuple[Any, int], int]:
    """(key, window start) -> count, by grouping every event."""
    events = [(k, ts) for w in windows for k, ts in w]
    return {(k, w.start): n for (k, w), n in reference_counts(events, size).items()}


class EventSource(InputOperator):
    """Emits ``windows[i]`` in its i-th window (event i of a window to partition i % n) and, at
    the end of every window, the perfect watermark of its partition: the smallest event time
    it has yet to emit (MAX_TIMESTAMP when done). Deterministic by window id."""

    output = OutputPort(control_aware=True)

    windows = Property(list, default=[])
    first_window = State(default=None)

    def __init__(self, windows: list[list[list[Any]]]) -> None:
        self.windows = windows

    def setup(self, context: OperatorContext) -> None:
        self._p, self._n = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        if self.first_window is None:
            self.first_window = window_id
        self._index = window_id - self.first_window
        self._done = False

    def _mine(self, index: int) -> list[list[Any]]:
        if index >= len(self.windows):
            return []
        return [e for i, e in enumerate(self.windows[index]) if i % self._n == self._p]

    def emit_tuples(self) -> None:
        if self._done:
            return
        self._done = True
        for key, ts in self._mine(self._index):
            self.output.emit((key, ts))

    def end_window(self) -> None:
        later = [ts for w in range(self._index + 1, len(self.windows)) for _, ts in self._mine(w)]
        mark = min(later) if later else MAX_TIMESTAMP
        self.output.emit_control(Watermark(mark), DeliveryType.END_WINDOW)


class PaneRecorder(Operator):
    """Keeps the panes it receives as plain tuples, per window, under the checkpoint
    (overwritten on replay: an idempotent output); ``recorded`` reads them back."""

    input = InputPort()
    name = Property(str, default="panes")

    def setup(self, context: OperatorContext) -> None:
        self._dir = Path(context.checkpoint or "/tmp") / "panes" / context.name
        self._dir.mkdir(parents=True, exist_ok=True)

    def begin_window(self, window_id: int) -> None:
        self._w, self._rows = window_id, []

    def process(self, t: WindowedTuple) -> None:
        p = t.pane
        assert p is not None
        self._rows.append(
            [t.key, t.window.start, t.value, p.index, p.timing.value, p.is_retraction]
        )

    def end_window(self) -> None:
        import json

        tmp = self._dir / f".{self._w}.tmp"
        tmp.write_text(json.dumps(self._rows))
        tmp.replace(self._dir / f"{self._w:020d}.json")


def recorded(checkpoint: str, name: str) -> dict[int, list[list[Any]]]:
    import json

    root = Path(checkpoint) / "panes" / name
    return {int(f.stem): json.loads(f.read_text()) for f in sorted(root.glob("*.json"))}


def on_time(recorded_windows: dict[int, list[list[Any]]]) -> dict[tuple[Any, int], Any]:
    """(key, window start) -> value of ON_TIME panes; fails on a duplicate."""
    out: dict[tuple[Any, int], Any] = {}
    for rows in recorded_windows.values():
        for key, start, value, _, timing, retraction in rows:
            if timing == "ON_TIME" and not retraction:
                k = (key, start)
                assert k not in out, f"ON_TIME pane {k} twice"
                out[k] = value
    return out
