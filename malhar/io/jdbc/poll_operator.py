"""The JDBC poll input operator (Malhar's ``JdbcPOJOPollInputOperator``), exactly once, on
:class:`~malhar.io.base.ReplayableInput`.

A table (or a query) is read incrementally in the order of ``key_column``, a column whose
values only grow as rows are added (an id, an insertion timestamp).

**Partitions by key ranges.** The first partition to start writes the *plan* of the
operator, once, under the checkpoint (``<checkpoint>/malhar/jdbc-poll/<operator>.json``,
created without overwrite: every partition and every restart uses the same plan): the
rows present at launch are cut into ``N`` ranges of about equal row counts at key
boundaries. Partitions ``0 .. N-2`` read their range (a backfill) and then idle; partition
``N-1`` reads the last range and every row added after it, polling every
``poll_interval_ms`` (Malhar's "poller partition"). With one partition it reads everything.

**Windows and replay.** A partition's position is the largest key it has read
(checkpointed). A new window reads ``key > position`` (up to its range's end, and up to
the late-row bound below), through a server-side cursor, ``fetch_size`` rows at a time,
up to ``max_records_per_window`` rows, ending at a key boundary (rows sharing the last key
are all read in the same window, so a window may hold a few more rows than the cap). Its
window record is the key range read and the row count, ``{"low": k1, "high": k2, "rows":
n}``; a replayed window reads ``k1 < key <= k2`` again and checks the count
(:class:`~malhar.io.base.ReplayError` when rows in the range were deleted, or committed
there after the window read it).

**Rows committed late.** Polling by a growing key misses a row whose key was allocated
before a larger one but committed after the poll read past it (two concurrent inserting
transactions). The rule: a read goes no further than the largest key that was already in
the table ``commit_lag_ms`` ago (the partition looks at ``max(key)`` at every poll and keeps
the observations), so any transaction shorter than ``commit_lag_ms`` has committed its rows
before their range is read. With the default 0, rows must be committed in key order (one
writer, or keys assigned at commit). When windows are committed, their ranges are counted
again (``check_late_rows``), and once more ``late_rows_recheck_ms`` later (a transaction
longer than ``commit_lag_ms`` may still be open when the window is committed, a fraction of
a second after the read): rows that arrived in a range after it was read are reported (a
warning and the metric ``late_rows``): raise ``commit_lag_ms``. The second count is kept in
memory only: a partition that restarts in between does not make it.

**Event time.** A backfill partition (not the last, polling one) whose range is read to
its end never reads again: from the first window in which it reads nothing and has nothing
left in its range (an empty range: from window 0) it sends ``WatermarkIdle()``
(END_WINDOW) at the end of every window, as a file input out of files does
(:mod:`malhar.io.fs.idle_input`), so that a ``WatermarkGenerator`` after it passes the
idleness on and a windowed operator downstream leaves the partition out of its watermark
minimum instead of waiting for it for ever. The polling partition never says so (rows may
come at any time), nor does a single partition (it is the poller). Such a window's record
has ``"idle": true``, so a replayed window sends the same. A subclass that redeclares
``output`` must declare it ``control_aware=True`` for this (else it says nothing).

**Bounded** (``bounded=True``). The input reads the rows present when the plan was made
(keys up to the largest one then; a row committed later with a smaller key is read if its
range is not read yet), then ends, as a file input with ``end_marker`` does
(:mod:`malhar.io.fs.end_of_input`). The plan records the largest key at that time
(``"max"``; the ranges are cut below it), so every partition and every restart agree on
the end; the last partition reads ``(its bound, max]`` and does not poll (rows added after
the plan are not read). ``commit_lag_ms`` still applies: no partition reads before the
plan is ``commit_lag_ms`` old, so a transaction holding a key below ``max`` has committed;
rows committed into a range after it was read are reported (``check_late_rows``), not read.
A partition that has read its whole range has *ended*: at the end of that window (the one
that read its last rows, or an empty range's window 0) and of every later one it sends
``Watermark(MAX_TIMESTAMP)`` (END_WINDOW) instead of ``WatermarkIdle``, its window record
has ``"end": true`` (a replayed window sends the same), and it reports the metric
``ended`` = 1: ``is_bounded()`` is True, so ``malhar run`` and
``RunningApplication.await_end_of_input()`` stop the application once every partition has
ended. Refused, naming the fix: a checkpoint whose plan has no ``"max"`` (made by an
unbounded run, or before it was recorded: the largest key at a restart would differ
between partitions and take in later rows), a checkpoint that ended restarted with
``bounded=False`` (its end-of-input watermark has closed every event-time window
downstream), and ``poll_interval_ms`` set along with ``bounded`` (it never polls).

**Ports.** ``output``: one dict per row on the base class (its values as the Arrow types of
:mod:`malhar.io.jdbc.poll_reader` give them back); a subclass that declares a typed output
port (``output = OutputPort("id bigint, amount decimal(12,2), ...", control_aware=True)``)
gets Arrow batches of that schema (columns by name), with no per-row work (without
``control_aware=True`` it cannot send ``WatermarkIdle``, see "Event time"). ``error`` (error
port): a row with a value that cannot be converted, as ``{"key": <its key as text>,
"error": reason}``, in the first run and in replays alike.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from malhar.io.base.input import ReplayableInput, ReplayError, WindowRecord
from malhar.io.jdbc.connection import create_engine
from malhar.io.jdbc.errors import JdbcConfigError
from malhar.io.jdbc.poll_database import PollDatabase
from malhar.io.jdbc.poll_keys import decode_key, encode_key, show_key
from malhar.io.jdbc.poll_reader import rows_to_batch
from malhar.io.jdbc.poll_settings import JdbcPollSettings, describe_source, source_changes
from malhar.io.jdbc.poll_unread_rows import NULLS_EVERY_S, UnreadRowReports
from malhar.io.jdbc.range_reader import RangeReader
from malhar.operator import OperatorContext
from malhar.ports import OutputPort
from malhar.state import State

__all__ = ["JdbcPollInputOperator"]

log = logging.getLogger("malhar.io.jdbc.poll")

#: a window record: {"low": key, "high": key, "rows": n} (keys as encode_key gives them),
#: plus "idle": true when the window sent WatermarkIdle (a backfill partition done reading),
#: or "end": true when it sent the end-of-input watermark (bounded: the range read)
Record = dict[str, Any]


class JdbcPollInputOperator(
    PollDatabase, UnreadRowReports, ReplayableInput[Record], JdbcPollSettings
):
    """Reads a table or a query incrementally by a growing key, exactly once.

    Example:
        >>> from malhar.io.jdbc import JdbcPollInputOperator
        >>> src = JdbcPollInputOperator(
        ...     "postgresql://app@db/shop", table="orders", key_column="id",
        ...     password="${env:SHOP_PASSWORD}",    # read where the partition runs
        ...     poll_interval_ms=500, fetch_size=5_000, commit_lag_ms=2_000,
        ...     max_records_per_window=20_000)
        >>> src.key_column
        'id'
    """

    #: control aware: a backfill partition done reading says it is idle (WatermarkIdle)
    output = OutputPort(control_aware=True)
    error = OutputPort("key string, error string", error=True)

    #: the largest key read (encoded; None: the partition's range start)
    _position = State(default=None)
    #: the partition read its whole (backfill) range
    _done = State(default=False)
    #: the partition count of the plan (a changed count is refused)
    _partitions = State(default=None)
    #: what the position is a key of (source_identity(); None: a checkpoint written before
    #: it was recorded); another source is refused
    _source = State(default=None)
    #: bounded: the partition read its whole range and sent the end-of-input watermark
    _ended = State(default=False)

    def __init__(self, url: str | None = None, **properties: Any) -> None:
        if url is not None:
            self.url = url
        self.configure(**properties)

    def cannot_repartition(self) -> str | None:
        return (
            "a JDBC poll input keeps its partition count (its key ranges) for the life of "
            "its checkpoint; launch with the count it ran with, or start a new checkpoint"
        )

    def preflight(self, label: str, timeout: float) -> str:
        """The source's columns and key (see :mod:`malhar.io.jdbc.preflight`)."""
        from malhar.io.jdbc.preflight import check_poll_input

        self.check_poll()
        return check_poll_input(self, label, timeout)

    # -- ReplayableInput -----------------------------------------------------------------------
    def open(self, context: OperatorContext) -> None:
        self.check_poll()
        if self._ended and not self.bounded:
            self._refuse_unbounded("its checkpoint says")
        self._check_source(self._source, "its checkpoint")
        self._source = self.source_identity()
        if self._partitions is not None and self._partitions != context.partitions:
            raise JdbcConfigError(
                f"{self.label}: the checkpoint was written with {self._partitions} partitions, "
                f"now {context.partitions}: a JDBC poll input keeps its partition count (and "
                "its key ranges) for the life of its checkpoint"
            )
        self._partitions = context.partitions
        self._retry = self.retry_policy()
        # a private engine: the partition holds one connection for its life
        self._engine = create_engine(self)
        self._conn: Any = None
        self._raw = False
        self._retrying("connecting", self._connect)
        self._setup_query()
        self._typed = self._port_schema()
        plan = self._retrying("planning the key ranges", lambda: self._plan(context))
        p, n = context.partition, context.partitions
        bounds = plan["bounds"]
        start = plan["start"]
        self._low = start if p == 0 else bounds[p - 1]
        self._high = None if p == n - 1 else bounds[p]
        self._last = p == n - 1
        self._poller = self._last and not self.bounded
        self._empty_range = plan["empty"] and not self._poller
        if self._last and self.bounded:  # up to the largest key at plan time, then the end
            self._high = plan["max"]
            if self._high is None:
                self._empty_range = True  # no row at plan time
            # else the database reads (low, max]: only it orders keys as the column does
            # (text under a collation is not Python's order), so no comparison here
        self._ready_at = float(plan["created"]) + self.commit_lag_ms / 1000
        self._observed: deque[tuple[float, Any]] = deque()
        self._idle_now = self._ended_now = False
        self._last_poll = -1e18
        self._cursor: RangeReader | None = None
        self._late = 0
        #: ranges to count again: (when, low, high, rows counted at the commit), key order
        self._recheck: deque[tuple[float, Any, Any, int]] = deque()
        self._null_keys = 0
        self._bad_keys = 0
        self._nulls_at = -1e18
        if self._last:  # one partition reports them
            self._report_null_keys()
        log.info(
            "%s reads %s, key %r in (%s, %s]%s",
            self.label,
            self.source,
            self.key_column,
            self._low,
            "∞" if self._high is None else self._high,
            f", then polls every {self.poll_interval_ms} ms"
            if self._poller
            else (", then ends" if self.bounded else ""),
        )

    def _refuse_unbounded(self, who: str) -> None:
        raise JdbcConfigError(
            f"{self.label}: {who} the input ended (it was bounded and sent the end-of-input "
            "watermark, so the operators after it have closed every event-time window), but "
            "bounded is now False: rows polled from here on would all be late. Keep "
            "bounded=True on this checkpoint, or poll on a new checkpoint directory with "
            f"start_after set to the last key read ({show_key(self._position)})"
        )

    def _check_source(self, recorded: Any, where: str) -> None:
        """Refuse key positions recorded for another source: continued in this one they
        would skip rows (or read them again), silently."""
        now = self.source_identity()
        changed = source_changes(recorded, now)
        if not changed:
            return
        at = (
            f" (this partition had read {self.key_column} up to {show_key(self._position)})"
            if self._position is not None
            else ""
        )
        raise JdbcConfigError(
            f"{self.label}: {where} was written for {describe_source(recorded)}, but the "
            f"operator now reads {describe_source(now)} (changed: {', '.join(changed)}){at}: "
            "its key positions mean nothing there, and continuing from them would skip or "
            "misread rows. Restore the settings the checkpoint was written with, or start "
            "this operator on a new checkpoint directory (start_after leaves out the keys "
            "already read)"
        )

    def close(self) -> None:
        self._close_cursor()
        self._drop_connection()
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()

    def begin_new_window(self, window_id: int) -> None:
        self._window_low = self._position if self._position is not None else self._low
        self._window_high = self._window_low
        self._rows = 0
        self._finished = False
        self._caught_up = False

    def read(self, limit: int) -> int:
        if self._finished:
            return 0
        if self._cursor is None:
            upper = self._upper_bound()
            if upper is _NOTHING:
                self._finished = True
                return 0
            self._upper = upper
            self._cursor = RangeReader(self, self._window_low, upper, "reading")
        wanted = min(limit, self.fetch_size)
        rows = self._cursor.fetch(wanted)  # ends at a key boundary
        if self._cursor.exhausted:
            self._finish_query(caught_up=True)
        elif len(rows) >= limit:  # the window is full (at a key boundary: ties included)
            self._finish_query(caught_up=False)
        if not rows:
            return 0
        self._emit(rows)
        last = encode_key(rows[-1][self._key_index])
        self._window_high = last
        self._position = last
        self._rows += len(rows)
        return len(rows)

    def window_record(self) -> Record:
        self._close_cursor()  # the window's read ends here (a full window may stop mid-range)
        record: Record = {"low": self._window_low, "high": self._window_high, "rows": self._rows}
        read_all = self._done or self._empty_range
        if self.bounded:
            read_all = read_all or self._ended  # ended before (a restart): never reads again
            # bounded: a partition with its whole range read has ended (in the window that
            # read its last rows, and every window after); recorded for the replay
            self._idle_now = False
            self._ended_now = read_all
            if read_all:
                self._ended = True
                record["end"] = True
            return record
        # a backfill partition with its whole range read never reads again: idle for good
        # (the poller never is: rows may come at any time); recorded for the replay
        self._ended_now = False
        self._idle_now = not self._poller and not self._rows and read_all
        if self._idle_now:
            record["idle"] = True
        return record

    def end_window(self) -> None:
        super().end_window()  # the record saved (a new window) or advanced past (a replay)
        recheck = getattr(self, "_recheck", None)
        if recheck and recheck[0][0] <= time.monotonic():
            self._recheck_due()  # also when no window is committed with rows
        self._say_if_idle()
        self._say_if_ended()

    def is_bounded(self) -> bool:
        """With ``bounded`` the input ends: every partition reads its range of the rows
        present at plan time, then sends the end-of-input watermark (see "Bounded")."""
        return bool(self.bounded)

    def replay(self, record: Record) -> int:
        expected = int(record["rows"])
        if expected == 0:
            return 0
        low, high = record["low"], record["high"]
        reader = RangeReader(self, low, high, "replaying")
        n = 0
        try:
            while not reader.exhausted:
                chunk = reader.fetch(self.fetch_size)
                n += len(chunk)
                if n > expected:
                    break
                self._emit(chunk)
        finally:
            reader.close()
            self._end_read()
        if n != expected:
            raise ReplayError(
                f"{self.label}: window {self.window_id} read {expected} rows with "
                f"{self.key_column} in ({show_key(low)}, {show_key(high)}] of {self.source}, which "
                f"now has {n} there: rows were deleted, or committed into the range after it "
                "was read (raise commit_lag_ms); cannot replay exactly"
            )
        return n

    def advance_past(self, record: Record) -> None:
        self._position = record["high"]
        self._done = False  # the next window finds out whether the range is exhausted
        # a replayed window sends what its first run sent (a record written before idleness
        # was recorded has no "idle": it sent nothing)
        self._idle_now = bool(record.get("idle", False))
        self._ended_now = bool(record.get("end", False))
        if self._ended_now:
            if not self.bounded:
                self._refuse_unbounded(f"the record of window {self.window_id} says")
            self._ended = True

    def release(self, records: list[WindowRecord[Record]]) -> None:
        if not self.check_late_rows:
            return
        if self._last and records and time.monotonic() - self._nulls_at >= NULLS_EVERY_S:
            self._report_null_keys()  # a count of the whole table (or its index): not often
        for window, record in records:
            if not record or not record.get("rows"):
                continue
            try:
                found = self._count(record["low"], record["high"])
            except Exception as exc:  # monitoring only: never fail a window on it
                log.info("%s: counting window %d again failed: %s", self.label, window, exc)
                return
            self._report_late(found - int(record["rows"]), record["low"], record["high"], window)
            if self.late_rows_recheck_ms:
                due = time.monotonic() + self.late_rows_recheck_ms / 1000
                self._recheck.append((due, record["low"], record["high"], found))
        self._recheck_due()

    def metrics(self) -> dict[str, float]:
        late, self._late = getattr(self, "_late", 0), 0
        out = {"late_rows": float(late)} if late else {}
        if getattr(self, "_null_keys", 0):
            out["null_key_rows"] = float(self._null_keys)
        if getattr(self, "_bad_keys", 0):
            out["non_finite_key_rows"] = float(self._bad_keys)
        if self.bounded:  # 1 once the partition has read its whole range (see "Bounded")
            out["ended"] = float(getattr(self, "_ended_now", False))
        return out

    def _say_if_idle(self) -> None:
        if getattr(self, "_idle_now", False):
            from malhar.window.watermark import WatermarkIdle, send_from_input

            send_from_input(self.output, WatermarkIdle())

    def _say_if_ended(self) -> None:
        """Send the end-of-input watermark if this window ended the partition (or came
        after): the event-time windows downstream all fire."""
        if getattr(self, "_ended_now", False):
            from malhar.window.watermark import Watermark, send_from_input
            from malhar.window.windows import MAX_TIMESTAMP

            send_from_input(self.output, Watermark(MAX_TIMESTAMP))

    # -- reading ---------------------------------------------------------------------------------
    def _upper_bound(self) -> Any:
        """The window's upper key bound (encoded; None: unbounded), or _NOTHING to read."""
        if self._empty_range or self._done or (self.bounded and self._ended):
            return _NOTHING  # an ended partition never reads again (a restart included)
        lag = self.commit_lag_ms / 1000
        if not self._poller:
            if lag and time.time() < self._ready_at:
                return _NOTHING  # rows of the plan's ranges may still be committing
            return self._high
        now = time.monotonic()
        if now - self._last_poll < self.poll_interval_ms / 1000:
            return _NOTHING
        self._last_poll = now
        if not lag:
            return None
        newest = self._retrying("reading the largest key", self._max_key)
        self._observed.append((now, newest))
        safe: Any = _NOTHING
        while self._observed and self._observed[0][0] <= now - lag:
            safe = self._observed.popleft()[1]
        if safe is not _NOTHING:
            self._observed.appendleft((now - lag, safe))  # still the bound until a newer one
        else:
            return _NOTHING
        if safe is None:
            return _NOTHING  # the source was empty then
        position = self._window_low
        below = position is not None and decode_key(position)
        # a shortcut where Python orders keys as the database does; text is ordered by the
        # column's collation there: the read of (position, safe] decides
        if below is not False and not isinstance(below, str) and below >= decode_key(safe):
            return _NOTHING
        return safe

    def _finish_query(self, *, caught_up: bool) -> None:
        self._finished = True
        self._close_cursor()
        if caught_up and not self._poller and self._upper is self._high:
            self._done = True  # the backfill range is read to its end

    def _emit(self, rows: list[Any]) -> None:
        batch, errors = rows_to_batch(rows, self._names, self._types, self._key_index)
        for e in errors:
            self.error.emit(e)
        if not batch.num_rows:
            return
        if self._typed is not None:
            self.output.emit_batch(batch.select(self._typed.names))
        else:
            for row in batch.to_pylist():
                self.output.emit(row)

    def _close_cursor(self) -> None:
        cursor, self._cursor = getattr(self, "_cursor", None), None
        if cursor is not None:
            cursor.close()
            self._end_read()


_NOTHING: Any = object()
