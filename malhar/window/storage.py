"""Where a windowed operator keeps its state: one :class:`Cell` per window (and key).

A cell holds the accumulation and the bookkeeping of its triggers and panes. The
operator reads a cell with ``get``, changes it, and writes it back with ``put``; a
storage may hand out copies (a spillable one does); one that hands out the stored
object itself says ``live = True`` and is spared the ``put`` of a changed cell.

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
from malhar.window.windows import Window

__all__ = ["EMPTY", "Cell", "WindowedStorage", "new_cell"]


class _Empty:
    """No accumulated value (a window that has not accumulated, or was discarded)."""

    def __reduce__(self) -> str:
        return "EMPTY"

    def __repr__(self) -> str:
        return "EMPTY"

    def __bool__(self) -> bool:
        return False


EMPTY: Any = _Empty()


#: A cell is a plain list (pickled by C code alone: the engine checkpoints every cell
#: of the in-memory storage at each window, and per-object Python in the pickler cost
#: ~10x): its fields, by index:
ACC = 0  #: the accumulated value, or EMPTY
TRIG = 1  #: the trigger's state
PANES = 2  #: how many panes (not retractions) were emitted
LAST = 3  #: the last pane's value (retractions, fire_only_updated_panes), or EMPTY
LAST_TIMING = 4  #: the last pane's timing (a Timing value: "EARLY" ...), or None
ON_TIME = 5  #: the ON_TIME pane is behind (or the cell was born late): later panes are LATE
CLOSED = 6  #: the trigger finished: tuples for the cell are dropped
NEW = 7  #: tuples accumulated since the trigger was last asked
TIMER = 8  #: the processing-time deadline scheduled for the trigger, or None

Cell = list  #: the type of a cell (see the field indexes above)


def new_cell(trig: Any, *, on_time: bool = False) -> list[Any]:
    """A fresh cell with trigger state ``trig``."""
    return [EMPTY, trig, 0, EMPTY, None, on_time, False, 0, None]


class WindowedStorage:
    """The storage interface (Malhar's ``WindowedStorage`` / ``WindowedKeyedStorage`` /
    ``SessionWindowedStorage`` in one). Non-keyed operators use the key None."""

    #: ``get`` hands out the stored cell itself, so a change needs no ``put`` (in memory)
    live = False

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
