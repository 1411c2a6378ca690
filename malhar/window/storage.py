"""Where a windowed operator keeps its state: one :class:`Cell` per window (and key).

A cell holds the accumulation and the bookkeeping of its triggers and panes. The
operator reads a cell with ``get``, changes it, and writes it back with ``put``; a
storage may hand out copies (a spillable one does), an in-memory one the object itself.

Implementations:

- :class:`~malhar.window.impl.memory.InMemoryWindowedStorage` (the default): plain
  dicts in a ``State`` field, pickled with the operator at the end of every streaming
  window. Right when the state is small (the windows and keys alive at once fit in
  memory and a pickle of them per window is cheap).
- a spillable storage on managed state (``malhar.util.state``) fits the same interface;
  see ``docs/window.md`` ("State storage") for its status.

The lifecycle hooks (``setup``, ``begin_window``, ``checkpoint``, ``committed``,
``teardown``) are called by the operator; the in-memory storage ignores them, a storage
with its own checkpoint files uses them to restore ``window - 1`` before the first
window it runs and to checkpoint each streaming window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from malhar.operator import OperatorContext
from malhar.window.panes import Timing
from malhar.window.windows import Window

__all__ = ["EMPTY", "Cell", "WindowedStorage"]


class _Empty:
    """No accumulated value (a window that has not accumulated, or was discarded)."""

    def __reduce__(self) -> str:
        return "EMPTY"

    def __repr__(self) -> str:
        return "EMPTY"

    def __bool__(self) -> bool:
        return False


EMPTY: Any = _Empty()


def _cell(*fields: Any) -> Cell:
    cell = Cell.__new__(Cell)
    (
        cell.acc,
        cell.trig,
        cell.panes,
        cell.last,
        cell.last_timing,
        cell.on_time,
        cell.closed,
        cell.new,
        cell.timer,
    ) = fields
    return cell


class Cell:
    """The state of one window (and key).

    Attributes:
        acc: the accumulated value, or :data:`EMPTY`.
        trig: the trigger's state.
        panes: how many panes (not retractions) were emitted.
        last: the last pane's value (kept for retractions and ``fire_only_updated_panes``),
            or :data:`EMPTY`.
        last_timing: the last pane's timing.
        on_time: the ON_TIME pane is behind us (or the cell was born late): later panes
            are LATE.
        closed: the trigger finished; tuples for this cell are dropped.
        new: tuples accumulated since the trigger was last asked.
        timer: the processing-time deadline scheduled for the trigger, or None.
    """

    __slots__ = ("acc", "closed", "last", "last_timing", "new", "on_time", "panes", "timer", "trig")

    def __init__(self, trig: Any, *, on_time: bool = False) -> None:
        self.acc: Any = EMPTY
        self.trig = trig
        self.panes = 0
        self.last: Any = EMPTY
        self.last_timing: Timing | None = None
        self.on_time = on_time
        self.closed = False
        self.new = 0
        self.timer: int | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _cell, (
            self.acc,
            self.trig,
            self.panes,
            self.last,
            self.last_timing,
            self.on_time,
            self.closed,
            self.new,
            self.timer,
        )

    def __repr__(self) -> str:
        return f"Cell(acc={self.acc!r}, panes={self.panes}, closed={self.closed}, new={self.new})"


class WindowedStorage:
    """The storage interface (Malhar's ``WindowedStorage`` / ``WindowedKeyedStorage`` /
    ``SessionWindowedStorage`` in one). Non-keyed operators use the key None."""

    def empty(self) -> WindowedStorage:
        """A new, empty storage configured like this one (one per operator partition)."""
        return type(self)()

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, context: OperatorContext, *, sessions: bool) -> None:
        """Before the first window of this partition instance (after a restore too);
        ``sessions``: keep the per-key index that :meth:`sessions` needs."""

    def begin_window(self, window_id: int) -> None:
        """A streaming window begins."""

    def checkpoint(self, window_id: int) -> None:
        """The streaming window ``window_id`` ended: make its changes durable."""

    def committed(self, window_id: int) -> None:
        """``window_id`` is committed in the whole application."""

    def teardown(self) -> None:
        """The partition instance is retired."""

    # -- cells -----------------------------------------------------------------------------
    def get(self, window: Window, key: Any) -> Cell | None:
        raise NotImplementedError

    def put(self, window: Window, key: Any, cell: Cell) -> None:
        raise NotImplementedError

    def remove(self, window: Window, key: Any) -> None:
        """Drop one cell (a window without cells is dropped too)."""
        raise NotImplementedError

    def has_window(self, window: Window) -> bool:
        raise NotImplementedError

    def keys(self, window: Window) -> list[Any]:
        """The keys holding a cell in ``window``."""
        raise NotImplementedError

    def remove_window(self, window: Window) -> int:
        """Drop a window with all its cells (purge); returns how many cells went."""
        raise NotImplementedError

    def windows(self) -> Iterator[Window]:
        raise NotImplementedError

    def sessions(self, key: Any) -> list[Window]:
        """The windows holding a cell for ``key`` (session windows), by start."""
        raise NotImplementedError

    def __len__(self) -> int:
        """How many cells."""
        raise NotImplementedError
