"""The windowing machinery shared by the windowed operators and their unifier.

:class:`~malhar.window.impl.settings.WindowedSettings` declares the configuration
(properties) common to all of them; :class:`WindowedCore` is the logic: assigning tuples
to windows, merging sessions, dropping late tuples, and at every streaming-window boundary
advancing the watermark, asking triggers, emitting panes and retractions, and purging
windows past the allowed lateness. Everything it must remember is in two ``State`` fields: the storage of cells
(:mod:`malhar.window.storage`) and a :class:`Book` of the rest.

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
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from malhar.control import ControlSender, DeliveryType
from malhar.operator import OperatorContext
from malhar.state import State
from malhar.util.epoch_millis import epoch_millis
from malhar.util.int_sums import may_wrap
from malhar.util.nan_order import nan_mask
from malhar.window._order import ordered
from malhar.window.errors import WindowConfigError
from malhar.window.impl.book import Book
from malhar.window.impl.fields import tuple_millis
from malhar.window.impl.memory import InMemoryWindowedStorage, divisible
from malhar.window.impl.settings import DEFAULT_STREAMING_WINDOW_MS, WindowedSettings
from malhar.window.panes import AccumulationMode, PaneInfo, Timing, WindowedTuple
from malhar.window.protocol import Accumulation, MergeAccumulation
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
    WindowedStorage,
    new_cell,
)
from malhar.window.triggers import DefaultTrigger, Trigger, TriggerContext, TriggerOption
from malhar.window.watermark import Watermark, WatermarkIdle
from malhar.window.windows import MAX_TIMESTAMP, MIN_TIMESTAMP, Window, WindowOption, to_millis

log = logging.getLogger("malhar.window")

_VALUE, _VALUE2, _PARTIAL, _BATCH = 0, 1, 2, 3
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


def _described(value: Any) -> str:
    """``repr(value)`` when it says what the value is, else its type's name (a default
    ``repr`` holds an address, another in every process)."""
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text


class WindowedCore(WindowedSettings):
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

    # -- Arrow batches -----------------------------------------------------------------------------
    def _timestamps(self, batch: pa.RecordBatch, column: Any) -> np.ndarray | None:
        """Epoch milliseconds of a batch's rows; None when some row has none (a null, a
        value that is not a time): the batch then goes row by row, and those rows to the
        error port with their reasons."""
        if column is None:
            return np.full(batch.num_rows, self.now(), dtype=np.int64)
        arr = batch.column(column)
        if arr.null_count:
            return None
        try:  # floored to the millisecond, as a tuple's time is
            return epoch_millis(arr)
        except (ValueError, TypeError, pa.ArrowInvalid):
            return None

    def _ingest_batch(
        self,
        batch: pa.RecordBatch,
        keys: Sequence[str],
        value: str | None,
        timestamp: str | None,
        port: int = 0,
    ) -> bool:
        """A batch, vectorized: timestamps, the late filter, window assignment and one
        Arrow hash aggregation per batch. Returns False when the batch cannot be handled
        vectorized (the caller then goes row by row)."""
        if not self._vectorizable(batch, keys, value, port):
            return False
        if batch.num_rows == 0:
            return True
        ts = self._timestamps(batch, timestamp)
        if ts is None:
            return False
        batch, ts = self._drop_late(batch, ts)
        if batch.num_rows:
            self._fold(self._grouped(batch, ts, keys, value), len(keys))
        return True

    def _vectorizable(
        self, batch: pa.RecordBatch, keys: Sequence[str], value: str | None, port: int
    ) -> bool:
        """Whether Arrow's kernels give what the accumulation gives value by value."""
        acc = self._acc
        # the second input of a merge accumulates value by value (accumulate2)
        if port != 0:
            return False
        option, fast = self._option, acc.arrow_aggregations is not None
        if option is None or option.merging or not (fast or value is not None):
            return False
        if any(pa.types.is_nested(batch.schema.field(k).type) for k in keys):
            return False  # Arrow groups by no list or struct: row by row, which says why
        return not (
            fast
            and value is not None
            and batch.num_rows
            and _arrow_differs(acc.arrow_aggregations or (), batch.column(value))
        )

    def _drop_late(self, batch: pa.RecordBatch, ts: Any) -> tuple[pa.RecordBatch, Any]:
        """``batch`` and its times without the rows behind the horizon (each to _late)."""
        horizon = self.horizon()
        if horizon is None:
            return batch, ts
        late = ts < horizon
        if not late.any():
            return batch, ts
        for row in batch.filter(pa.array(late)).to_pylist():
            self._late(row)
        keep = ~late
        return batch.filter(pa.array(keep)), ts[keep]

    def _grouped(
        self, batch: pa.RecordBatch, ts: Any, keys: Sequence[str], value: str | None
    ) -> pa.Table:
        """One row per (window, key): its count and the accumulation's Arrow aggregates,
        or the list of its values when the accumulation has none."""
        rows, starts, ends = self._option.assign_batch(ts)
        take = None if len(rows) == batch.num_rows else pa.array(rows)
        columns: dict[str, Any] = {"__start": starts, "__end": ends}
        for i, name in enumerate(keys):
            col = batch.column(name)
            columns[f"__k{i}"] = col if take is None else col.take(take)
        if value is not None:
            col = batch.column(value)
            columns["__v"] = col if take is None else col.take(take)
        group_by = ["__start", "__end", *(f"__k{i}" for i in range(len(keys)))]
        aggregations: list[tuple[Any, str]] = [([], "count_all")]
        functions = self._acc.arrow_aggregations
        if functions is None:
            aggregations.append(("__v", "list"))
        else:
            aggregations += [("__v", fn) for fn in functions if fn != "count_all"]
        return pa.table(columns).group_by(group_by, use_threads=False).aggregate(aggregations)

    def _fold(self, grouped: pa.Table, nk: int) -> None:
        """Add each (window, key) row of :meth:`_grouped` to the panes."""
        cols = [grouped.column(i).to_pylist() for i in range(2 + nk)]
        counts = grouped.column("count_all").to_pylist()
        acc = self._acc
        functions = acc.arrow_aggregations
        if functions is not None:
            results = [
                counts if fn == "count_all" else grouped.column(f"__v_{fn}").to_pylist()
                for fn in functions
            ]
            from_aggregates = acc.from_aggregates
            partials = (from_aggregates(*(r[i] for r in results)) for i in range(len(counts)))
            kind = _PARTIAL
        else:
            lists = grouped.column("__v_list").combine_chunks()
            offsets, flat = lists.offsets.to_numpy(), lists.values
            partials = (
                flat.slice(int(offsets[i]), int(offsets[i + 1] - offsets[i]))
                for i in range(len(counts))
            )
            kind = _BATCH
        add = self._local if self._partial else self._add
        for i, (n, partial) in enumerate(zip(counts, partials, strict=True)):
            window = Window(cols[0][i], cols[1][i])
            key = None if nk == 0 else cols[2][i] if nk == 1 else tuple(c[i] for c in cols[2:])
            add(window, key, partial, kind, n)

    # -- the boundary --------------------------------------------------------------------------
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


def _arrow_differs(aggregations: Sequence[str], values: Any) -> bool:
    """Whether Arrow's aggregation of ``values`` could differ from the tuples' (then a batch
    goes row by row): an int64 sum that could wrap, a min or max over NaN (Arrow skips it;
    malhar ranks it above every number, as Spark does)."""
    if "sum" in aggregations and may_wrap(values):
        return True
    return ("min" in aggregations or "max" in aggregations) and nan_mask(values) is not None
