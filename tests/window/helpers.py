"""Helpers of the windowed operator tests: drive harnesses, read panes, batch references."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from malhar.control import ControlSender, DeliveryType
from malhar.operator import OperatorContext
from malhar.testing import OperatorHarness
from malhar.window import Watermark, Window, WindowedTuple


def pane(t: WindowedTuple) -> tuple[Any, ...]:
    """(key, start, end, value, index, timing, retraction) of an emitted tuple."""
    p = t.pane
    assert p is not None
    return (t.key, t.window.start, t.window.end, t.value, p.index, p.timing.value, p.is_retraction)


def panes(h: OperatorHarness, window: int | None = None) -> list[tuple[Any, ...]]:
    sink = h.sink("output")
    found = sink.tuples if window is None else sink.per_window.get(window, [])
    return [pane(t) for t in found]


def watermarks(h: OperatorHarness) -> list[int]:
    return [c.payload.timestamp for c in h.sink("output").controls]


def harness(
    op: Any, *, period: int = 1000, partition: int = 0, partitions: int = 1
) -> OperatorHarness:
    """A harness whose context says the streaming window period (processing time)."""
    ctx = OperatorContext(
        name="win",
        partition=partition,
        partitions=partitions,
        attributes={"STREAMING_WINDOW_MS": period},
    )
    return OperatorHarness(op, ctx)


def watermark(
    h: OperatorHarness, ts: int, sender: ControlSender | None = None, port: str = "input"
) -> None:
    h.put_control(port, Watermark(ts), DeliveryType.END_WINDOW, sender=sender)


def final_on_time(tuples: Iterable[WindowedTuple]) -> dict[tuple[Any, Window], Any]:
    """(key, window) -> value of the ON_TIME panes (retractions left out)."""
    out: dict[tuple[Any, Window], Any] = {}
    for t in tuples:
        assert t.pane is not None
        if t.pane.timing.value == "ON_TIME" and not t.pane.is_retraction:
            key = (t.key, t.window)
            assert key not in out, f"two ON_TIME panes for {key}"
            out[key] = t.value
    return out


def reference_counts(
    events: Iterable[tuple[Any, int]], size: int, slide: int | None = None
) -> dict[tuple[Any, Window], int]:
    """Batch reference: count per (key, window) by grouping the input."""
    slide = slide or size
    out: dict[tuple[Any, Window], int] = defaultdict(int)
    for key, ts in events:
        last = ts - ts % slide
        for start in range(last - size + slide, last + 1, slide):
            out[(key, Window(start, start + size))] += 1
    return dict(out)


def fired(op: Any, inputs: list[tuple[str, Any]], at: int) -> list[tuple[Any, ...]]:
    """The panes ``op`` emits for ``inputs`` once the watermark reaches ``at``."""
    h = harness(op)
    h.run_window(inputs)
    watermark(h, at)
    h.run_window([])
    return panes(h)
