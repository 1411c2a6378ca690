"""In-memory windowed storage: dicts checkpointed whole with the operator every window."""

from __future__ import annotations

import bisect
import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from malhar.errors import StateError
from malhar.operator import OperatorContext
from malhar.window.storage import Cell, WindowedStorage
from malhar.window.windows import Window

__all__ = ["InMemoryWindowedStorage"]


class InMemoryWindowedStorage(WindowedStorage):
    """Cells in ``{window: {key: cell}}`` (Malhar's ``InMemoryWindowedKeyedStorage``).

    The storage is a ``State`` value of the operator: the whole of it is pickled after
    every streaming window in which it changed (cells are plain lists, pickled by the C
    pickler in one piece). Purged windows leave with their cells.

    Example:
        >>> from malhar.window.storage import new_cell
        >>> s = InMemoryWindowedStorage()
        >>> s.put(Window(0, 10), "a", new_cell(trig=None))
        >>> s.keys(Window(0, 10)), len(s)
        (['a'], 1)
        >>> s.remove_window(Window(0, 10))
        1
    """

    live = True

    def __init__(self) -> None:
        self.cells: dict[Window, dict[Any, Cell]] = {}
        #: key -> its windows by start (only with session windows)
        self.by_key: dict[Any, list[Window]] | None = None
        self._count = 0

    def __getstate__(self) -> dict[str, Any]:
        # One C pickle of all cells, kept as bytes: the engine's pickler (cloudpickle) would
        # otherwise call into Python for every cell (~10x slower at 100k cells). Cells that
        # only cloudpickle can handle (classes defined in __main__) fall back to it.
        try:
            blob = pickle.dumps(self.cells, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            from pyspark import cloudpickle

            blob = cloudpickle.dumps(self.cells, protocol=pickle.HIGHEST_PROTOCOL)
        return {"cells": blob, "count": self._count}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cells = pickle.loads(state["cells"])
        self._count = state["count"]
        self.by_key = None  # rebuilt by setup() when sessions need it

    def setup(self, context: OperatorContext, *, sessions: bool) -> None:
        if sessions and self.by_key is None:
            self.by_key = {}
            for window, cells in self.cells.items():
                for key in cells:
                    bisect.insort(self.by_key.setdefault(key, []), window)

    def get(self, window: Window, key: Any) -> Cell | None:
        cells = self.cells.get(window)
        return None if cells is None else cells.get(key)

    def put(self, window: Window, key: Any, cell: Cell) -> None:
        cells = self.cells.get(window)
        if cells is None:
            cells = self.cells[window] = {}
        if key not in cells:
            self._count += 1
            if self.by_key is not None:
                bisect.insort(self.by_key.setdefault(key, []), window)
        cells[key] = cell

    def remove(self, window: Window, key: Any) -> None:
        cells = self.cells.get(window)
        if cells is None or key not in cells:
            return
        del cells[key]
        self._count -= 1
        if not cells:
            del self.cells[window]
        self._unindex(window, key)

    def _unindex(self, window: Window, key: Any) -> None:
        if self.by_key is not None:
            mine = self.by_key.get(key)
            if mine is not None:
                mine.remove(window)
                if not mine:
                    del self.by_key[key]

    def has_window(self, window: Window) -> bool:
        return window in self.cells

    def keys(self, window: Window) -> list[Any]:
        return list(self.cells.get(window, ()))

    def remove_window(self, window: Window) -> int:
        cells = self.cells.pop(window, None)
        if cells is None:
            return 0
        self._count -= len(cells)
        for key in cells:
            self._unindex(window, key)
        return len(cells)

    def windows(self) -> Iterator[Window]:
        return iter(list(self.cells))

    def sessions(self, key: Any) -> list[Window]:
        if self.by_key is None:
            raise RuntimeError("InMemoryWindowedStorage: sessions() needs setup(sessions=True)")
        return list(self.by_key.get(key, ()))

    def __len__(self) -> int:
        return self._count

    # -- repartitioning (malhar.state.DividedByKey) ----------------------------------------------
    @classmethod
    def pooled(
        cls, values: Sequence[InMemoryWindowedStorage | None], operator: Any
    ) -> InMemoryWindowedStorage:
        """The cells of every old partition; a cell of one window and key in two of them
        is refused (the operator's input was not partitioned by its key). Cells are
        divisible by key when the operator is keyed and fires them itself: a combined
        one fires them in its unifier once it has more than one partition."""
        pool = cls()
        pool._divisible = divisible(operator)
        for part, store in enumerate(values):
            for window, cells in (store.cells if store is not None else {}).items():
                mine = pool.cells.setdefault(window, {})
                both = mine.keys() & cells.keys()
                if both:
                    raise StateError(
                        f"window cells of key {next(iter(both))!r} (window {window}) are held "
                        f"by two partitions (partition {part} among them): the windowed "
                        "operator's input was not partitioned by its key (give it "
                        "STREAM_CODEC=op.key_codec())"
                    )
                mine.update(cells)
                pool._count += len(cells)
        return pool

    def divided(
        self, owner_of: Callable[[list[Any]], list[int]], n: int
    ) -> list[InMemoryWindowedStorage]:
        """``n`` storages, each with the cells of the keys ``owner_of`` gives it."""
        parts = [InMemoryWindowedStorage() for _ in range(n)]
        if n > 1 and self._count and not getattr(self, "_divisible", True):
            raise StateError(
                "a windowed operator that is not keyed (or combines its partitions) holds its "
                "cells on its one partition (on more, its unifier does): they cannot be "
                "divided among partitions. Repartition it while it has no window open, or "
                "start it with its partitions from a new checkpoint"
            )
        keys = list({k for cells in self.cells.values() for k in cells})
        owner = dict(zip(keys, owner_of(keys), strict=True))
        for window, cells in self.cells.items():
            for key, cell in cells.items():
                parts[owner[key]].put(window, key, cell)
        return parts


def divisible(operator: Any) -> bool:
    """Whether a windowed operator's cells (and its per-key bookkeeping) can be divided by
    key among partitions: it is keyed and fires them on its own partitions."""
    combines = getattr(operator, "combines", None)
    return bool(getattr(operator, "keyed", False)) and not (combines is not None and combines())
