"""The windowing machinery shared by the windowed operators and their unifier.

:class:`~malhar.window.impl.settings.WindowedSettings` declares the configuration
(properties) common to all of them; :class:`WindowedCore` is the logic: assigning tuples
to windows, merging sessions, dropping late tuples, and at every streaming-window boundary
advancing the watermark, asking triggers, emitting panes and retractions, and purging
windows past the allowed lateness. Everything it must remember is in two ``State`` fields:
the storage of cells (:mod:`malhar.window.storage`) and a :class:`Book` of the rest. This
module holds the setup, the time and the tuple path; the Arrow batch path is in
:mod:`malhar.window.impl.batches`, the boundary (watermark, triggers, panes, purges) in
:mod:`malhar.window.impl.firing`.

Partial mode: a partition of a partitioned operator whose partitions are *combined*
(non-keyed ones by default) fires no panes itself. At each boundary it emits one
:class:`Partial` per window (and key) it accumulated into since the last boundary and
clears them; the operator's unifier (:class:`~malhar.window.impl.unifier.WindowedUnifier`)
merges the partials of all partitions with ``Accumulation.merge`` and runs the triggers
(Beam's combiner lifting).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from malhar.control import ControlSender
from malhar.operator import OperatorContext
from malhar.state import State
from malhar.window.errors import WindowConfigError
from malhar.window.impl.batches import _BATCH, _PARTIAL, _VALUE, _VALUE2, BatchIngest
from malhar.window.impl.book import Book
from malhar.window.impl.fields import BadTupleError, tuple_millis
from malhar.window.impl.firing import _UNSENT, Firing, Partial
from malhar.window.impl.memory import InMemoryWindowedStorage, divisible
from malhar.window.impl.settings import DEFAULT_STREAMING_WINDOW_MS, WindowedSettings
from malhar.window.panes import AccumulationMode, PaneInfo, Timing
from malhar.window.protocol import Accumulation, MergeAccumulation
from malhar.window.storage import (
    ACC,
    CLOSED,
    EMPTY,
    LAST,
    LAST_TIMING,
    NEW,
    PANES,
    TRIG,
    Cell,
    WindowedStorage,
    new_cell,
)
from malhar.window.triggers import DefaultTrigger, Trigger, TriggerContext, TriggerOption
from malhar.window.watermark import Watermark, WatermarkIdle
from malhar.window.windows import MAX_TIMESTAMP, MIN_TIMESTAMP, Window, WindowOption, to_millis

log = logging.getLogger("malhar.window")

#: Partial lived here before the boundary had its module: checkpoints may name it here
__all__ = ["Partial", "WindowedCore"]


def _described(value: Any) -> str:
    """``repr(value)`` when it says what the value is, else its type's name (a default
    ``repr`` holds an address, another in every process)."""
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text


class WindowedCore(BatchIngest, Firing, WindowedSettings):
    """The logic; see the module docstring. Subclasses call the ``_core_*`` hooks from their
    lifecycle methods and feed tuples through ``_ingest`` / ``_ingest_batch`` /
    ``_add_partial``."""

    #: the storage of cells, created in setup from the ``storage`` template; keyed: a
    #: repartitioning divides the cells by key (``DividedByKey``)
    _store = State(default=None, keyed=True)
    #: the rest of what the operator remembers (its per-key parts divided alike)
    _book = State(default=None, keyed=True)

    #: subclasses: how many input ports feed watermarks
    inputs = 1
    #: subclasses: whether the operator emits its own watermark control tuples
    emits_watermarks = True

    # -- setup ---------------------------------------------------------------------------------
    def _core_setup(self, context: OperatorContext) -> None:
        acc = self.accumulation
        if acc is None:
            raise WindowConfigError(
                f"{type(self).__name__} {context.name!r}: set an accumulation (Count(), Sum() ...)"
            )
        if self.inputs > 1 and not isinstance(acc, MergeAccumulation):
            raise WindowConfigError(
                f"{type(self).__name__} {context.name!r}: a merge operator needs a "
                f"MergeAccumulation (InnerJoin(), Cogroup() ...), got {acc!r}"
            )
        self._acc: Accumulation = acc
        # per key output (a join: a null key matches nothing), where the cells are per key
        by_key = getattr(acc, "output_for_key", None)
        self._output_for_key = by_key if self.keyed else None
        trigger, mode, only = self.trigger, AccumulationMode.DISCARDING, False
        if isinstance(trigger, TriggerOption):
            mode, only = trigger.accumulation_mode, trigger.fire_only_updated_panes
            trigger = trigger.to_trigger()
        elif trigger is None:
            trigger = DefaultTrigger()
        if self.accumulation_mode is not None:
            mode = AccumulationMode.parse(self.accumulation_mode)
        if self.fire_only_updated_panes is not None:
            only = self.fire_only_updated_panes
        if only and mode is AccumulationMode.DISCARDING:
            raise WindowConfigError(
                f"{type(self).__name__} {context.name!r}: fire_only_updated_panes needs "
                "ACCUMULATING or ACCUMULATING_AND_RETRACTING, not DISCARDING"
            )
        self._trigger: Trigger = trigger
        self._init_state = trigger.init()  # trigger states are immutable values: shared
        self._mode = mode
        self._only_updated = bool(only)
        self._keeps_last = only or mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self._retracting = mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self._discarding = mode is AccumulationMode.DISCARDING
        self._react_early = trigger.reacts_before_end()
        self._option: WindowOption | None = self.window_option
        self._sessions = self._option is not None and self._option.merging
        #: the event times whose windows fit in the timestamps there are
        self._times = (
            self._option.time_range
            if isinstance(self._option, WindowOption)
            else (MIN_TIMESTAMP, MAX_TIMESTAMP)
        )
        self._lateness = None if self.allowed_lateness is None else to_millis(self.allowed_lateness)
        self._fixed = None if self.fixed_watermark is None else to_millis(self.fixed_watermark)
        if self._fixed is not None and getattr(self, "timestamp", None) is not None:
            log.warning(
                "%s %r: fixed_watermark follows the windows' implicit time (window id * "
                "STREAMING_WINDOW_MS from the epoch), not event times taken by 'timestamp': "
                "with epoch event times no window closes; use a WatermarkGenerator",
                type(self).__name__,
                context.name,
            )
        self._period = int(
            context.attributes.get("STREAMING_WINDOW_MS")
            or self.streaming_window_ms
            or DEFAULT_STREAMING_WINDOW_MS
        )
        self._partial = context.partitions > 1 and self.combines()
        self._rows = self.output_format == "row"
        self._row_keys = self._key_names()
        if self._book is None:
            self._book = Book(self.inputs)
        if self._store is None:
            template = self.storage if self.storage is not None else InMemoryWindowedStorage()
            self._store = template.empty()
        self._store.setup(context, sessions=self._sessions)
        self._check_shape(context.name)
        self._list_purges()
        self._name = context.name
        self._metrics_base = (self._book.late, self._book.dropped)
        # runtime aliases of the two State fields (never reassigned after setup): the hot
        # paths read them per tuple and per pane, and a State descriptor read is a call
        self._bk: Book = self._book
        self._st: WindowedStorage = self._store
        self._out = self.output.emit  # type: ignore[attr-defined]

    def _check_shape(self, name: str) -> None:
        """Refuse a restart whose window option, accumulation or trigger differs from what
        the checkpointed cells were made with: the old windows would fire beside the new
        ones (60 s panes next to 30 s ones) or hold another accumulator or trigger state."""
        shape = {
            "window_option": _described(self._option),
            "accumulation": _described(self._acc),  # with its parameters: TopN(n=3)
            "trigger": _described(self._trigger),
        }
        held = getattr(self._book, "shape", None)  # None: an older checkpoint
        now = shape
        if held is not None and "(" not in held.get("accumulation", "("):
            # recorded by its class only: before parameters were, or one whose repr holds an
            # address (a function parameter): compare the class, by either of its names
            cls = type(self._acc)
            same = held["accumulation"] in (cls.__name__, cls.__qualname__)
            now = {**shape, "accumulation": held["accumulation"] if same else cls.__qualname__}
        if held is not None and held != now and len(self._store):
            changed = ", ".join(
                f"{field} {held.get(field)} -> {now[field]}"
                for field in now
                if held.get(field) != now[field]
            )
            raise WindowConfigError(
                f"{type(self).__name__} {name!r}: {changed} since the checkpoint, which holds "
                f"{len(self._store)} window cell(s) made with the old setting; they would fire "
                "beside the new ones. Restart with the old setting, or start from a new "
                "checkpoint (or give the operator a new name, with empty state)"
            )
        self._book.shape = shape

    def _list_purges(self) -> None:
        """With an allowed lateness set since the checkpoint (none then), the windows held
        were never listed for purging and would stay for ever: list them, once."""
        book = self._book
        if self._lateness is None:
            book.purging = False
            return
        if getattr(book, "purging", None):  # None: a checkpoint of an older release
            return
        listed = set(book.purge)
        for window in self._store.windows():
            if window.end != MAX_TIMESTAMP and (window.end, window.start) not in listed:
                heapq.heappush(book.purge, (window.end, window.start))
        book.purging = True

    def _key_names(self) -> Any:
        if self.key_names is not None:
            return self.key_names
        key = getattr(self, "key", None)
        if isinstance(key, str | list | tuple):
            return key
        return "key"

    def _core_begin(self, window_id: int) -> None:
        self._bk.cur = window_id
        self._st.begin_window(window_id)

    def holds_state(self) -> bool:
        """Whether a restored instance (no setup) holds what a repartitioning must keep:
        cells, or retractions or partials to send (asked of unifiers,
        ``malhar.engine.unifier_states``; a spillable storage cannot tell: it holds)."""
        store, book = self.__dict__.get("_store"), self.__dict__.get("_book")
        if store is not None and not isinstance(store, InMemoryWindowedStorage):
            return True
        pending = book is not None and bool(book.retractions or book.partials)
        return pending or (store is not None and len(store) > 0)

    def cannot_repartition(self) -> str | None:
        """Cells move with their keys, in memory or in managed state; a spillable storage's
        cannot move without a stream key (not keyed, or fired by the unifier)."""
        storage = self._storage_in_use()
        if storage is None or divisible(self):
            return None
        return getattr(storage, "NOT_DIVIDED", None)

    def managed_state_keys(self) -> Mapping[str, Callable[[bytes], bytes | None]]:
        """Where a spillable storage's managed structures hold the stream key."""
        keys = getattr(self._storage_in_use(), "managed_keys", None)
        return keys() if keys is not None else {}

    def _storage_in_use(self) -> WindowedStorage | None:
        # a restored storage wins over the configured one (see _core_setup)
        restored = self.__dict__.get("_store")
        return restored if restored is not None else self.storage

    def metrics(self) -> dict[str, float]:
        """This window's late and dropped tuples, and the cells held (``malhar.stats``)."""
        book = self._bk
        base = self._metrics_base
        self._metrics_base = (book.late, book.dropped)
        return {
            "late": book.late - base[0],
            "dropped": book.dropped - base[1],
            "cells": len(self._st),
        }

    def _core_checkpointed(self, window_id: int) -> None:
        # the next streaming window, also when begin_window does not come (application
        # windows of several streaming windows)
        self._bk.cur = window_id + 1
        self._st.checkpoint(window_id)

    # -- time ----------------------------------------------------------------------------------
    def now(self) -> int:
        """The processing time: the current streaming window's implicit time."""
        return self._bk.cur * self._period

    def horizon(self) -> int | None:
        """Tuples with event times below this are too late (None: nothing is), and windows
        ending at or before it expire. The end-of-input watermark ``MAX_TIMESTAMP`` expires
        every window, whatever the allowed lateness (Beam's garbage-collection time of a
        window is at most the end of the global window)."""
        wm = self._bk.watermark
        if wm is None:
            return None
        if wm == MAX_TIMESTAMP:
            return MAX_TIMESTAMP
        if self._lateness is None:
            return None
        return wm - self._lateness

    @property
    def watermark(self) -> int | None:
        """The operator's current watermark (None before the first)."""
        return None if self._book is None else self._book.watermark

    @property
    def late_count(self) -> int:
        """Tuples sent to the late port so far."""
        return 0 if self._book is None else self._book.late

    @property
    def dropped_count(self) -> int:
        """Tuples dropped because their window's trigger had finished (or was purged)."""
        return 0 if self._book is None else self._book.dropped

    def _on_control(self, payload: Any, sender: ControlSender | None, port: int = 0) -> bool:
        if isinstance(payload, Watermark):
            self._bk.trackers[port].update(payload.timestamp, sender, self._bk.cur)
            # an operator emits its own watermark downstream; a unifier passes them on
            return self.emits_watermarks
        if isinstance(payload, WatermarkIdle):
            self._bk.trackers[port].idle(sender, self._bk.cur)
            return self.emits_watermarks
        return False

    # -- tuples ----------------------------------------------------------------------------------
    def _late(self, original: Any) -> None:
        self._bk.late += 1
        late = getattr(self, "late", None)
        if late is not None:
            late.emit(original)

    def _ingest(
        self,
        original: Any,
        key: Any,
        value: Any,
        timestamp: Any,
        port: int = 0,
        windows: Sequence[Window] | None = None,
    ) -> None:
        """One tuple: lateness, window assignment, accumulation (``windows`` given: window
        propagation)."""
        if timestamp is None:
            if windows is None and isinstance(self._option, WindowOption):
                timestamp = self.now()  # no extractor: ingestion time
            elif windows is not None:
                timestamp = windows[0].max_timestamp
        elif type(timestamp) is not int or not MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:
            # bool is an int; an int beyond 64 bits is no event time either
            timestamp = tuple_millis(timestamp, f"{type(self).__name__} {self._name!r}")
        if windows is None and not self._times[0] <= timestamp <= self._times[1]:
            raise BadTupleError(
                f"{type(self).__name__} {self._name!r}: the tuple's timestamp {timestamp} has "
                f"windows of {self._option!r} past the first or last timestamp there is "
                f"({MIN_TIMESTAMP}..{MAX_TIMESTAMP}): give event times in epoch milliseconds"
            )
        horizon = self.horizon()
        if horizon is not None and timestamp < horizon:
            self._late(original)
            return
        kind = _VALUE2 if port else _VALUE
        if windows is None:
            if self._sessions:
                if self._partial:
                    self._local(self._option.proto(timestamp), key, value, kind, 1)  # type: ignore[union-attr]
                else:
                    self._session(key, self._option.proto(timestamp), value, kind, 1)  # type: ignore[union-attr]
                return
            windows = self._option.assign(timestamp)  # type: ignore[union-attr]
        add = self._local if self._partial else self._add
        for window in windows:
            add(window, key, value, kind, 1)

    def _local(self, window: Window, key: Any, value: Any, kind: int, n: int) -> None:
        """Partial mode: accumulate into this boundary's partial of (window, key)."""
        slot = self._bk.partials.get((window, key))
        acc = self._acc
        if slot is None:
            slot = self._bk.partials[(window, key)] = [acc.default_accumulated_value(), 0]
        if kind == _VALUE:
            slot[0] = acc.accumulate(slot[0], value)
        elif kind == _VALUE2:
            slot[0] = acc.accumulate2(slot[0], value)  # type: ignore[attr-defined]
        elif kind == _BATCH:
            slot[0] = acc.accumulate_batch(slot[0], value)
        else:
            slot[0] = acc.merge(slot[0], value)
        slot[1] += n

    def _new_cell(self, window: Window, key: Any) -> Cell:
        book, store = self._bk, self._st
        wm = book.watermark
        born_late = wm is not None and window.end <= wm
        if not store.has_window(window):
            if not born_late:
                heapq.heappush(book.ends, (window.end, window.start))
            if self._lateness is not None and window.end != MAX_TIMESTAMP:
                heapq.heappush(book.purge, (window.end, window.start))
        cell = new_cell(self._init_state, on_time=born_late)
        cell.append(False)  # _UNSENT
        return cell

    def _add(self, window: Window, key: Any, value: Any, kind: int, n: int) -> None:
        """Accumulate into the cell of (window, key): a value, a second-input value, a
        partial accumulation or an Arrow array of values."""
        store = self._st
        cell = store.get(window, key)
        fresh = cell is None
        if fresh:
            horizon = self.horizon()
            if horizon is not None and window.end <= horizon:  # a partial for a purged window
                self._bk.dropped += n
                return
            cell = self._new_cell(window, key)
        elif cell[CLOSED]:
            self._bk.dropped += n
            return
        acc = self._acc
        if kind == _PARTIAL:
            cell[ACC] = value if cell[ACC] is EMPTY else acc.merge(cell[ACC], value)
        else:
            current = acc.default_accumulated_value() if cell[ACC] is EMPTY else cell[ACC]
            if kind == _VALUE:
                cell[ACC] = acc.accumulate(current, value)
            elif kind == _VALUE2:
                cell[ACC] = acc.accumulate2(current, value)  # type: ignore[attr-defined]
            else:
                cell[ACC] = acc.accumulate_batch(current, value)
        cell[NEW] += n
        if not self._discarding:
            if len(cell) > _UNSENT:
                cell[_UNSENT] = True
            else:  # a cell checkpointed before the field existed
                cell.append(True)
        if self._react_early:
            self._bk.dirty.add((window, key))
        else:
            wm = self._bk.watermark
            if wm is not None and window.end <= wm:
                self._bk.dirty.add((window, key))
        if fresh or not store.live:
            store.put(window, key, cell)

    def _session(self, key: Any, span: Window, value: Any, kind: int, n: int) -> None:
        """Add to the session of ``key`` that ``span`` (a proto-session, or a partial's
        session) falls in: it fits one, extends one, or bridges several (merged, the
        ones merged away retracted in ACCUMULATING_AND_RETRACTING mode)."""
        store = self._st
        hits = [w for w in store.sessions(key) if w.intersects(span)]
        if not hits:
            self._add(span, key, value, kind, n)
            return
        if len(hits) == 1 and hits[0].contains(span):
            self._add(hits[0], key, value, kind, n)  # fits
            return
        book, acc = self._bk, self._acc
        cells = [store.get(w, key) for w in hits]
        if any(c is not None and c[CLOSED] for c in cells):
            # a finished session takes no more tuples, whether they fit it or extend it
            book.dropped += n
            return
        merged = span
        for w in hits:
            merged = merged.span(w)
        state: Any = EMPTY
        news = 0
        for window, cell in zip(hits, cells, strict=True):
            assert cell is not None
            if cell[ACC] is not EMPTY:
                state = cell[ACC] if state is EMPTY else acc.merge(state, cell[ACC])
            news += cell[NEW]
            if (
                self._mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
                and cell[LAST] is not EMPTY
            ):
                info = PaneInfo(
                    cell[PANES] - 1,
                    Timing(cell[LAST_TIMING] or Timing.EARLY.value),
                    cell[PANES] == 1,
                    False,
                    True,
                )
                book.retractions.append((window, key, cell[LAST], info))
            store.remove(window, key)
            book.dirty.discard((window, key))
        cell = self._new_cell(merged, key)
        ctx = TriggerContext(merged, book.watermark, self.now())
        cell[TRIG] = self._trigger.on_merge([c[TRIG] for c in cells if c is not None], ctx)
        cell[ACC] = state
        cell[NEW] = news
        store.put(merged, key, cell)
        self._add(merged, key, value, kind, n)

    def _add_partial(self, window: Window, key: Any, acc: Any, n: int) -> None:
        """A partial accumulation of ``n`` tuples (from a partition, or an Arrow group)."""
        if self._sessions:
            self._session(key, window, acc, _PARTIAL, n)
        else:
            self._add(window, key, acc, _PARTIAL, n)
