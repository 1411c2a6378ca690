"""A deterministic, replayable input of timed rows for event-time tests (Spark's ``rate``
source, with event times that do not depend on the clock).

The protocol of :class:`EventTimeInput`:

* Row ``n`` (``n = 0, 1, 2 ...``) is ``{"key": f"k{n % keys}", "value": n, "ts": t(n)}``
  with ``t(n) = start_ms + n * step_ms - d(n)``, where ``d(n)`` is a fixed pseudo-random
  delay in ``[0, out_of_order_ms]`` (0 by default: rows come in event-time order).
  :meth:`EventTimeInput.row` gives any row, to compute what a test expects.
* The i-th window the input runs (counted from its first window, which is kept as its
  state) holds rows ``i * rows_per_window`` to ``(i + 1) * rows_per_window - 1``; of those
  partition ``p`` of ``P`` emits the rows with ``n % P == p``. So a replayed window emits
  the same tuples, a restart goes on where its checkpoint left off, and a repartitioned
  input goes on with the next row, dealt over the new partitions.
* Every row is at most ``out_of_order_ms`` behind the event time of a row before it: a
  ``WatermarkGenerator(timestamp="ts", max_out_of_orderness=out_of_order_ms)`` after it
  never makes a row late; a smaller bound makes some rows late, the same ones in every run
  with the same partitioning.
* With ``rows`` the input is bounded (:meth:`~malhar.operator.InputOperator.is_bounded`):
  in the window that emits the last row and in every later one each partition reports
  the metric ``ended`` = 1 and sends the end-of-input watermark ``Watermark(MAX_TIMESTAMP)``
  (END_WINDOW), as the bounded file and JDBC inputs do, so the windows downstream all fire
  and ``RunningApplication.await_end_of_input()`` / ``malhar run`` stop the application.

A window emits all of its rows in one go, whatever the operator's
``MAX_TUPLES_PER_WINDOW``: ``rows_per_window`` is the rate.

Example:
    >>> from malhar.testing import EventTimeInput, OperatorHarness
    >>> h = OperatorHarness(EventTimeInput(rows_per_window=2, step_ms=500, keys=2, rows=3))
    >>> h.run_window()
    >>> h.run_window()                       # the last row: the input ends
    >>> h.sink("output").per_window
    {0: [{'key': 'k0', 'value': 0, 'ts': 0}, {'key': 'k1', 'value': 1, 'ts': 500}],
     1: [{'key': 'k0', 'value': 2, 'ts': 1000}]}
    >>> [c.payload for c in h.sink("output").controls]
    [Watermark(timestamp=9223372036854775807)]
    >>> h.operator.metrics()
    {'ended': 1.0}
"""

from __future__ import annotations

from typing import Any

from malhar.operator import InputOperator, OperatorContext
from malhar.ports import OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.window.watermark import Watermark, send_from_input
from malhar.window.windows import MAX_TIMESTAMP

__all__ = ["EventTimeInput"]

_M64 = (1 << 64) - 1


def _mix(n: int) -> int:
    """SplitMix64's finalizer: a well-spread 64-bit value of ``n`` (no RNG state to keep)."""
    z = (n * 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class EventTimeInput(InputOperator):
    """Emits ``rows_per_window`` timed rows ``{"key", "value", "ts"}`` per window, the same
    ones for the same window index (see the module doc for the protocol)."""

    output = OutputPort(control_aware=True)  # the end-of-input watermark

    rows_per_window = Property(int, default=10, min=1, doc="rows per window (all partitions)")
    start_ms = Property(int, default=0, doc="the event time of row 0 (ms)")
    step_ms = Property(int, default=100, min=0, doc="the event time between rows n and n + 1 (ms)")
    keys = Property(int, default=4, min=1, doc="distinct keys: row n has key f'k{n % keys}'")
    out_of_order_ms = Property(
        int,
        default=0,
        min=0,
        doc="each row's event time is moved back by a fixed pseudo-random 0 .. this many ms",
    )
    rows = Property(
        int,
        default=None,
        min=0,
        doc="rows in all, after which the input ends (end-of-input watermark); None: endless",
    )

    #: the id of the first window this input ran (window ids continue across restarts)
    first_window = State(default=None)

    def __init__(self, **properties: Any) -> None:
        self.configure(**properties)

    def row(self, n: int) -> dict[str, Any]:
        """Row ``n``: what the input emits, in whichever window and partition."""
        ts = self.start_ms + n * self.step_ms
        if self.out_of_order_ms:
            ts -= _mix(n) % (self.out_of_order_ms + 1)
        return {"key": f"k{n % self.keys}", "value": n, "ts": ts}

    def is_bounded(self) -> bool:
        """With ``rows`` the input ends."""
        return self.rows is not None

    def setup(self, context: OperatorContext) -> None:
        self._partition, self._partitions = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        if self.first_window is None:
            self.first_window = window_id
        index = window_id - self.first_window
        start = index * self.rows_per_window
        stop = start + self.rows_per_window
        if self.rows is not None:
            stop = min(stop, self.rows)
        self._rows = range(
            start + (self._partition - start) % self._partitions, stop, self._partitions
        )
        #: every row emitted by the end of this window (by every partition): the input ended
        self._ended_now = self.rows is not None and start + self.rows_per_window >= self.rows
        self._emitted = False

    def emit_tuples(self) -> None:
        if self._emitted:
            return
        self._emitted = True
        for n in self._rows:
            self.output.emit(self.row(n))

    def end_window(self) -> None:
        if self._ended_now:
            send_from_input(self.output, Watermark(MAX_TIMESTAMP))

    def metrics(self) -> dict[str, float]:
        """``ended``: 1 once the (bounded) input has emitted its last row."""
        return {"ended": float(self._ended_now)} if self.rows is not None else {}
