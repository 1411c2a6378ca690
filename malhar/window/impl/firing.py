"""The windowed operators' streaming-window boundary: the watermark advances, triggers are
asked, panes and retractions are emitted, windows past the allowed lateness fire their
final pane and are purged (``WindowedCore._core_boundary``); in partial mode, the
:class:`Partial` accumulations go to the unifier instead.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from malhar.control import DeliveryType
from malhar.window._order import ordered
from malhar.window.panes import PaneInfo, Timing, WindowedTuple
from malhar.window.storage import (
    ACC,
    CLOSED,
    EMPTY,
    LAST,
    LAST_TIMING,
    NEW,
    ON_TIME,
    PANES,
    TIMER,
    TRIG,
    Cell,
)
from malhar.window.triggers import TriggerContext
from malhar.window.watermark import Watermark, WatermarkIdle
from malhar.window.windows import MAX_TIMESTAMP, Window

_EARLY, _ON_TIME, _LATE = Timing.EARLY, Timing.ON_TIME, Timing.LATE
#: builds a named tuple without its Python-level __new__ (panes are made per key and window)
_tuple_new = tuple.__new__
#: a cell field beyond the storage's (``malhar.window.storage``): tuples accumulated since
#: the last pane, in the ACCUMULATING modes (DISCARDING ones: the accumulation is not
#: EMPTY); a cell checkpointed before it existed has no such field (unsent when it never
#: fired: what fired before is not known)
_UNSENT = 9


@dataclass(frozen=True, slots=True)
class Partial:
    """What a partition in partial mode sends its unifier: the accumulation of ``n``
    tuples of one window (and key) since the last boundary."""

    window: Window
    key: Any
    acc: Any
    n: int


class Firing:
    """The boundary of :class:`~malhar.window.impl.core.WindowedCore` (a mixin: it uses the
    core's settings, book, storage, ``now`` and ``horizon``)."""

    def _advance_watermark(self) -> None:
        book = self._bk
        if self._fixed is not None:
            candidate: int | None = self.now() - self._fixed
        else:
            # an input whose every sender is idle (declared, or silent past the timeout)
            # does not hold the others back
            live = [t for t in book.trackers if not t.all_idle(book.cur, self.idle_timeout_windows)]
            if live:
                values = [t.combined(book.cur, self.idle_timeout_windows) for t in live]
                candidate = None if None in values else min(values)  # type: ignore[type-var]
            else:
                # every sender idle: nothing an input's senders hold can be behind the largest
                # watermark they sent (Flink's valve flushes it when all channels go idle);
                # across the inputs of a merge operator, the smallest of those
                highest = [t.highest() for t in book.trackers]
                candidate = None if None in highest else min(highest)  # type: ignore[type-var]
        if candidate is not None and (book.watermark is None or candidate > book.watermark):
            book.watermark = candidate

    def _core_boundary(self) -> None:
        """A streaming-window boundary (``end_window``): see the module docstring."""
        book, store = self._bk, self._st
        self._advance_watermark()
        if self._partial:
            self._flush_partials()
            self._emit_watermark()
            return
        wm = book.watermark
        now = self.now()
        horizon = self.horizon()
        retract = self._acc.retraction
        if book.retractions:
            # windows, then keys (as panes): the order of a window's tuples must not show
            for window, key, value, info in ordered(book.retractions, key=lambda r: r[:2]):
                self._emit(window, key, retract(value), info)
            book.retractions = []
        dirty = book.dirty
        book.dirty = set()
        # tuples that arrived while a window was early, for a trigger that does not react
        # before the end, need no on_elements: only the cells marked dirty get it
        todo = dirty if self._react_early else set(dirty)
        ended: set[Window] = set()  # windows whose every cell is in todo
        if wm is not None:
            while book.ends and book.ends[0][0] <= wm:
                end, start = heapq.heappop(book.ends)
                window = Window(start, end)
                ended.add(window)
                todo.update((window, k) for k in store.keys(window))
        while book.timers and book.timers[0][0] <= now:
            _, _, start, end, key = heapq.heappop(book.timers)
            todo.add((Window(start, end), key))
        # the windows that expire at this boundary: their cells with tuples in no pane yet
        # fire a final pane first (in _evaluate), with the cells the trigger is asked about
        expiring: list[Window] = []
        if horizon is not None:
            while book.purge and book.purge[0][0] <= horizon:
                end, start = heapq.heappop(book.purge)
                expiring.append(Window(start, end))
            if horizon == MAX_TIMESTAMP:  # the end of the input: every window expires
                expiring = list(store.windows())
        # (the common case, a window that ends and expires at once, adds nothing here)
        extra = {(w, k) for w in expiring if w not in ended for k in store.keys(w)}
        extra.difference_update(todo)
        if todo or extra:
            ctx = TriggerContext(Window(0, 0), wm, now)
            cells = ordered(todo | extra) if extra else ordered(todo)
            self._evaluate(cells, ctx, horizon, None if self._react_early else dirty, extra)
        for window in expiring:
            store.remove_window(window)
        self._emit_watermark()

    def _evaluate(
        self,
        todo: list[tuple[Window, Any]],
        ctx: TriggerContext,
        horizon: int | None,
        dirty: set[tuple[Window, Any]] | None = None,
        expiring: set[tuple[Window, Any]] | None = None,
    ) -> None:
        """Ask the trigger of every cell in ``todo`` (in that order), fire the panes;
        ``dirty`` given: only those cells get ``on_elements``; those in ``expiring`` are
        not asked, only given their final pane. A cell of a window that expires (its end
        at or before ``horizon``: it is purged at this boundary) and holds tuples in no
        pane yet fires a final pane (``is_last``) when its trigger does not (Beam fires
        what is pending when a window expires, whatever the trigger)."""
        store, book = self._st, self._bk
        get, live = store.get, store.live
        trigger = self._trigger
        on_elements, should_fire, on_fire = (
            trigger.on_elements,
            trigger.should_fire,
            trigger.on_fire,
        )
        deadline, fire = trigger.deadline, self._fire
        for window, key in todo:
            cell = get(window, key)
            if cell is None or cell[CLOSED]:
                continue
            ctx.window = window
            if expiring and (window, key) in expiring:
                if self._unsent(cell):
                    fire(window, key, cell, ctx, True)
                    cell[CLOSED] = True
                    if not live:
                        store.put(window, key, cell)
                continue
            state = cell[TRIG]
            if cell[NEW]:
                if dirty is None or (window, key) in dirty:
                    state = on_elements(state, cell[NEW], ctx)
                cell[NEW] = 0
            expires = horizon is not None and window.end <= horizon
            if should_fire(state, ctx):
                state, finished = on_fire(state, ctx)
                fire(window, key, cell, ctx, finished or expires)
                cell[CLOSED] = finished
            if expires and not cell[CLOSED] and self._unsent(cell):
                fire(window, key, cell, ctx, True)  # the final pane
                cell[CLOSED] = True
            cell[TRIG] = state
            due = None if cell[CLOSED] else deadline(state)
            if due is not None and due != cell[TIMER]:
                book.seq += 1
                heapq.heappush(book.timers, (due, book.seq, window.start, window.end, key))
            cell[TIMER] = due
            if not live:
                store.put(window, key, cell)

    def _unsent(self, cell: Cell) -> bool:
        """Whether ``cell`` holds tuples that are in no pane yet."""
        if cell[ACC] is EMPTY:
            return False
        if self._discarding:
            return True
        if len(cell) > _UNSENT:
            return bool(cell[_UNSENT])
        return cell[PANES] == 0  # checkpointed before the field: pending if it never fired

    def _fire(self, window: Window, key: Any, cell: Cell, ctx: TriggerContext, last: bool) -> None:
        wm = ctx.watermark
        if wm is None or window.end > wm:
            timing = _EARLY
        elif cell[ON_TIME]:
            timing = _LATE
        else:
            timing = _ON_TIME
            cell[ON_TIME] = True
        if cell[ACC] is EMPTY:
            return  # nothing arrived since the last (discarding) pane
        acc = self._acc
        by_key = self._output_for_key
        value = acc.output(cell[ACC]) if by_key is None else by_key(key, cell[ACC])
        previous = cell[LAST]
        if self._only_updated and previous is not EMPTY and value == previous:
            return
        panes = cell[PANES]
        if self._retracting and previous is not EMPTY:
            before = Timing(cell[LAST_TIMING]) if cell[LAST_TIMING] else timing
            info = _tuple_new(PaneInfo, (panes - 1, before, panes == 1, False, True))
            self._emit(window, key, acc.retraction(previous), info)
        self._emit(
            window, key, value, _tuple_new(PaneInfo, (panes, timing, panes == 0, last, False))
        )
        cell[PANES] = panes + 1
        if len(cell) > _UNSENT:
            cell[_UNSENT] = False
        if self._keeps_last:
            cell[LAST], cell[LAST_TIMING] = value, timing.value
        if self._discarding:
            cell[ACC] = EMPTY

    def _emit(self, window: Window, key: Any, value: Any, info: PaneInfo) -> None:
        t = _tuple_new(WindowedTuple, (window, value, key, info, window.end - 1))
        self._out(t.to_row(self._row_keys, self.value_name) if self._rows else t)

    def _emit_watermark(self) -> None:
        if not self.emits_watermarks:
            return
        book = self._bk
        if self._fixed is None and all(
            t.all_idle(book.cur, self.idle_timeout_windows) for t in book.trackers
        ):
            # every input is idle (declared, or silent past idle_timeout_windows): so is this
            # operator (its watermark would hold the next operator back for no data)
            self.output.emit_control(WatermarkIdle(), DeliveryType.END_WINDOW)  # type: ignore[attr-defined]
            return
        wm = self._bk.watermark
        if wm is not None:
            self.output.emit_control(Watermark(wm), DeliveryType.END_WINDOW)  # type: ignore[attr-defined]

    def _flush_partials(self) -> None:
        partials = self._bk.partials
        if not partials:
            return
        self._bk.partials = {}
        for window, key in ordered(partials):
            acc, n = partials[(window, key)]
            self.output.emit(Partial(window, key, acc, n))  # type: ignore[attr-defined]
