"""What a windowed operator remembers besides its cells, and how a repartitioning pools
and divides it by key."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

from malhar.window.panes import PaneInfo
from malhar.window.watermark import WatermarkTracker
from malhar.window.windows import Window

__all__ = ["Book"]


class Book:
    """Everything a windowed operator remembers besides its cells (checkpointed).

    A keyed ``State`` value (:class:`~malhar.state.DividedByKey`): when the operator is
    repartitioned, the books of its partitions are pooled (the watermark and the window
    ends are the operator's, the same in every partition that heard the same control
    tuples; timers, dirty cells, retractions and partials are per key) and each new
    partition gets the per-key parts of its keys.
    """

    def __init__(self, inputs: int) -> None:
        #: the operator's watermark: never goes backwards; None before the first one
        self.watermark: int | None = None
        #: one tracker per input port (the merge operator has two)
        self.trackers = [WatermarkTracker() for _ in range(inputs)]
        #: the streaming window being processed (processing time = cur * period)
        self.cur = 0
        #: (end, start) of windows whose end the watermark has not passed yet
        self.ends: list[tuple[int, int]] = []
        #: (end, start) of windows to purge once the horizon passes their end
        self.purge: list[tuple[int, int]] = []
        #: purge lists every window held (False: made without an allowed lateness)
        self.purging = False
        #: (due, seq, start, end, key) processing-time deadlines of triggers
        self.timers: list[tuple[int, int, int, int, Any]] = []
        self.seq = 0
        #: cells with tuples since the last boundary whose trigger must be asked
        self.dirty: set[tuple[Window, Any]] = set()
        #: retractions of windows merged away (sessions), emitted at the next boundary
        self.retractions: list[tuple[Window, Any, Any, PaneInfo]] = []
        #: what the cells were made with (see ``WindowedCore._check_shape``)
        self.shape: dict[str, str] | None = None
        #: partial mode: (window, key) -> [accumulation, tuples] since the last boundary
        self.partials: dict[tuple[Window, Any], list[Any]] = {}
        #: tuples beyond the allowed lateness (sent to the late port)
        self.late = 0
        #: tuples for windows whose trigger finished, or already purged
        self.dropped = 0

    # -- repartitioning (malhar.state.DividedByKey) ----------------------------------------------
    @classmethod
    def pooled(cls, values: Sequence[Book | None], operator: Any) -> Book:
        """One book of every old partition's: the furthest watermark and window, every
        window end and purge, every per-key entry (timers renumbered in their order)."""
        from malhar.window.impl.memory import divisible

        books = [b for b in values if b is not None]
        pool = cls(len(books[0].trackers) if books else 1)
        pool._divisible = divisible(operator)
        if not books:
            return pool
        marks = [b.watermark for b in books if b.watermark is not None]
        pool.watermark = max(marks) if marks else None
        pool.trackers = [
            WatermarkTracker.pooled([b.trackers[i] for b in books])
            for i in range(len(books[0].trackers))
        ]
        pool.cur = max(b.cur for b in books)
        pool.ends = sorted({e for b in books for e in b.ends})
        pool.purge = sorted({e for b in books for e in b.purge})
        # by (due, seq) only: a tie must not compare keys (of any type) in the heap
        timers = sorted((t for b in books for t in b.timers), key=lambda t: t[:2])
        pool.timers = [(t[0], i, t[2], t[3], t[4]) for i, t in enumerate(timers)]
        pool.seq = len(timers)
        pool.dirty = {d for b in books for d in b.dirty}
        pool.retractions = [r for b in books for r in b.retractions]
        pool.shape = next((b.shape for b in books if b.shape is not None), None)
        pool.purging = all(getattr(b, "purging", None) for b in books)
        for b in books:
            pool.partials.update(b.partials)
        pool.late = sum(b.late for b in books)
        pool.dropped = sum(b.dropped for b in books)
        return pool

    def divided(self, owner_of: Callable[[list[Any]], list[int]], n: int) -> list[Book]:
        """``n`` books: each with the operator-wide parts and the per-key entries of the
        keys ``owner_of`` gives it; the counters stay whole in the first."""
        parts = []
        for index in range(n):
            part = Book(len(self.trackers))
            part.watermark, part.cur, part.shape, part.seq = (
                self.watermark,
                self.cur,
                self.shape,
                self.seq,
            )
            part.trackers = [t.for_partition(index) for t in self.trackers]
            part.ends, part.purge = list(self.ends), list(self.purge)
            part.purging = getattr(self, "purging", None)
            parts.append(part)
        parts[0].late, parts[0].dropped = self.late, self.dropped

        def deal(entries: list[Any], key_of: Callable[[Any], Any]) -> list[int]:
            if not getattr(self, "_divisible", True):
                # not per stream key (the key None, or a combined operator's): its cells
                # were not divided either (refused where they held any), so the first
                return [0] * len(entries)
            return owner_of([key_of(e) for e in entries])

        for t, p in zip(self.timers, deal(self.timers, lambda t: t[4]), strict=True):
            parts[p].timers.append(t)  # in heap order still: the pool's are sorted
        dirty = list(self.dirty)
        for d, p in zip(dirty, deal(dirty, lambda d: d[1]), strict=True):
            parts[p].dirty.add(d)
        for r, p in zip(self.retractions, deal(self.retractions, lambda r: r[1]), strict=True):
            parts[p].retractions.append(r)
        partials = list(self.partials.items())
        for (wk, acc), p in zip(partials, deal(partials, lambda e: e[0][1]), strict=True):
            parts[p].partials[wk] = acc
        for part in parts:
            heapq.heapify(part.timers)
        return parts
