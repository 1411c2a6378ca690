"""Spillable windowed storage on managed state (Malhar's ``SpillableWindowedKeyedStorage``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from malhar.operator import OperatorContext
from malhar.window.errors import WindowConfigError
from malhar.window.storage import Cell, WindowedStorage
from malhar.window.windows import MAX_TIMESTAMP, MIN_TIMESTAMP, Window

__all__ = ["SpillableWindowedStorage"]


class SpillableWindowedStorage(WindowedStorage):
    """Cells in the operator partition's managed state (``context.managed_state()``,
    ``malhar.util.state``): memory-bounded (``budget_bytes``), spilled to a local store,
    checkpointed incrementally by the engine after every window (a window's checkpoint
    costs what changed in it, not the size of the state), restored on any worker: windows
    and keys far larger than memory work.

    Layout (files under ``<checkpoint>/malhar/managed/<operator>/<partition>/``):

    - ``cells``: a ``SpillableMap`` ``(window start, window end, key) -> cell`` (in key
      order, so a window's cells are one contiguous range; keys must be None, bools, ints,
      floats, bytes, strs or tuples of those);
    - ``windows``: ``(start, end) -> number of cells``;
    - ``sessions`` (session windows only): a ``SpillableSetMultimap`` ``key -> (start, end)``.

    The engine (or the harness, given a checkpoint folder) owns the managed state's life:
    restore before the first window, ``checkpoint`` after each, ``committed``, ``close``.

    Example:
        >>> import tempfile
        >>> from malhar.testing import OperatorHarness
        >>> from malhar.operator import OperatorContext
        >>> from malhar.window import KeyedWindowedOperator, TimeWindows, Watermark
        >>> from malhar.window.accumulation import Count
        >>> op = KeyedWindowedOperator(Count(), TimeWindows(10), timestamp=lambda kv: kv[1],
        ...                            storage=SpillableWindowedStorage(budget_bytes=16 << 20))
        >>> h = OperatorHarness(op, OperatorContext(name="counts", checkpoint=tempfile.mkdtemp()))
        >>> h.run_window([("input", ("a", 1)), ("input", ("a", 2))])
        >>> h.put_control("input", Watermark(10))
        True
        >>> h.run_window()
        >>> [(t.key, t.value) for t in h.sink("output").tuples]
        [('a', 2)]
        >>> h.teardown()
    """

    live = False

    def __init__(self, budget_bytes: int = 64 << 20) -> None:
        from malhar.util.state.manager import check_budget_bytes

        check_budget_bytes(budget_bytes, "SpillableWindowedStorage")  # found by validate
        self.budget_bytes = budget_bytes
        self._cells: Any = None
        #: set by a repartitioning, which moves the cells by key but not the counts of
        #: ``windows``: the next setup counts them again from the cells
        self._recount = False

    def empty(self) -> SpillableWindowedStorage:
        return SpillableWindowedStorage(self.budget_bytes)

    def __getstate__(self) -> dict[str, Any]:
        # configuration only: the data is in the managed state's own checkpoint files
        state: dict[str, Any] = {"budget_bytes": self.budget_bytes}
        if self._recount:
            state["recount"] = True
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["budget_bytes"])  # type: ignore[misc]
        self._recount = bool(state.get("recount"))

    def setup(self, context: OperatorContext, *, sessions: bool) -> None:
        from malhar.util.state import AUTO_KEY, INT, INT_VALUE, PICKLE, TupleCodec

        try:
            state = context.managed_state(budget_bytes=self.budget_bytes)
        except RuntimeError as exc:
            raise WindowConfigError(f"SpillableWindowedStorage of {context.name!r}: {exc}") from exc
        pair = TupleCodec(INT, INT)
        self._cells = state.map("cells", key_codec=_cell_key_codec(), value_codec=PICKLE)
        self._windows = state.map("windows", key_codec=pair, value_codec=INT_VALUE)
        self._by_key = (
            state.set_multimap("sessions", key_codec=AUTO_KEY, value_codec=pair)
            if sessions
            else None
        )
        if self._recount:
            self._count_windows()
            self._recount = False

    def _count_windows(self) -> None:
        """``windows`` from the cells (after a repartitioning): one pass over their keys."""
        counts: dict[tuple[int, int], int] = {}
        for start, end, _ in self._cells:
            counts[start, end] = counts.get((start, end), 0) + 1
        self._windows.clear()
        for window, n in sorted(counts.items()):
            self._windows[window] = n

    # -- cells -----------------------------------------------------------------------------
    def get(self, window: Window, key: Any) -> Cell | None:
        return self._cells.get((window.start, window.end, key))

    def put(self, window: Window, key: Any, cell: Cell) -> None:
        k = (window.start, window.end, key)
        if k not in self._cells:
            w = (window.start, window.end)
            self._windows[w] = self._windows.get(w, 0) + 1
            if self._by_key is not None:
                self._by_key.add(key, w)
        self._cells[k] = cell

    def remove(self, window: Window, key: Any) -> None:
        k = (window.start, window.end, key)
        if k not in self._cells:
            return
        del self._cells[k]
        w = (window.start, window.end)
        left = self._windows.get(w, 1) - 1
        if left:
            self._windows[w] = left
        else:
            del self._windows[w]
        if self._by_key is not None:
            self._by_key.discard(key, w)

    def has_window(self, window: Window) -> bool:
        return (window.start, window.end) in self._windows

    def keys(self, window: Window) -> list[Any]:
        lo = (window.start, window.end, None)
        # the next (start, end) pair; the global window's end + 1 is beyond 64 bits
        if window.end < MAX_TIMESTAMP:
            hi = (window.start, window.end + 1, None)
        else:
            hi = (window.start + 1, MIN_TIMESTAMP, None)
        return [k[2] for k, _ in self._cells.range(lo, hi)]

    def remove_window(self, window: Window) -> int:
        keys = self.keys(window)
        for key in keys:
            self.remove(window, key)
        return len(keys)

    def windows(self) -> Iterator[Window]:
        return iter([Window(s, e) for s, e in self._windows])

    def sessions(self, key: Any) -> list[Window]:
        if self._by_key is None:
            raise RuntimeError("SpillableWindowedStorage: sessions() needs setup(sessions=True)")
        return sorted(Window(s, e) for s, e in self._by_key.get(key))

    def __len__(self) -> int:
        return len(self._cells)

    def __repr__(self) -> str:
        return f"SpillableWindowedStorage(budget_bytes={self.budget_bytes})"

    #: why an operator that is not keyed (or combines its partitions) cannot be
    #: repartitioned with it (``Operator.cannot_repartition``)
    NOT_DIVIDED = (
        "its cells are in a SpillableWindowedStorage and it is not keyed (or combines its "
        "partitions in a unifier): its cells have no stream key to be divided by"
    )

    # -- repartitioning (malhar.state.DividedByKey) ----------------------------------------------
    # The cells are in managed state, which the engine moves by key itself, by the stream
    # key of ``managed_keys``; here only the configuration is pooled and divided.
    @classmethod
    def pooled(cls, values: Any, operator: Any) -> SpillableWindowedStorage:
        """A storage of the operator's configured budget (else the old partitions'): their
        cells are managed state. Refused for an operator whose cells have no stream key
        (also when only its checkpoint, not its configuration, says spillable)."""
        from malhar.errors import StateError
        from malhar.window.impl.memory import divisible

        if not divisible(operator):
            raise StateError(cls.NOT_DIVIDED)
        configured = getattr(operator, "storage", None)
        if isinstance(configured, SpillableWindowedStorage):
            return cls(configured.budget_bytes)
        return cls(max(v.budget_bytes for v in values if isinstance(v, SpillableWindowedStorage)))

    def divided(self, owner_of: Any, n: int) -> list[SpillableWindowedStorage]:
        """``n`` storages that count their windows again from the cells they are given."""
        parts = [SpillableWindowedStorage(self.budget_bytes) for _ in range(n)]
        for part in parts:
            part._recount = True
        return parts

    @staticmethod
    def managed_keys() -> dict[str, Callable[[bytes], bytes | None]]:
        """Where the stream key is in the managed structures' keys
        (``Operator.managed_state_keys``): the third part of a cell's ``(start, end,
        key)``; ``windows`` is counted again from the cells; ``sessions`` is keyed by the
        stream key itself."""
        return {"cells": _stream_key_of_cell, "windows": _recounted}


@functools.cache
def _cell_key_codec() -> Any:
    """``(window start, window end, stream key)``: a window's cells are one key range."""
    from malhar.util.state import AUTO_KEY, INT, TupleCodec

    return TupleCodec(INT, INT, AUTO_KEY)


def _stream_key_of_cell(encoded: bytes) -> bytes:
    start, end, _ = _cell_key_codec().codecs
    _, at = start.decode_from(encoded, 0)
    _, at = end.decode_from(encoded, at)
    return encoded[at:]


def _recounted(encoded: bytes) -> None:
    return None
