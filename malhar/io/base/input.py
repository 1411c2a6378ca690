"""The replayable input contract: what every exactly-once input connector subclasses.

An input operator partition must emit, for a window the engine replays after a failure,
exactly the tuples it emitted the first time, and must go on after it as if nothing had
happened (Apex's idempotent input; Malhar's ``AbstractKafkaInputOperator`` and
``AbstractFileInputOperator`` with their ``WindowDataManager``). :class:`ReplayableInput`
owns that protocol; a connector author fills a few methods:

=========================================  ===================================================
``open(context)``                          build runtime objects (clients, the partition's
                                           share of the source); restore nothing
``begin_new_window(window_id)``            optional: a new window starts (prefetch, timers)
``read(limit) -> int``                     emit up to ``limit`` new items now; return how many
                                           were read (0: nothing more in this window)
``window_record() -> R``                   what this new window read, JSON-able (offset
                                           ranges, files and byte ranges, key ranges)
``replay(record) -> int``                  emit exactly the items of a recorded window again
``advance_past(record)``                   move the position past a recorded window
``release(records)``                       optional: windows are committed downstream:
                                           commit offsets, delete or move files
``close()``                                optional: release runtime objects
=========================================  ===================================================

The base class decides, per window, between a **new** window (its id is after the largest
window recorded in the partition's window data manager: ``begin_new_window``, then
``read`` until it returns 0 or the window's limit is reached, then ``window_record`` is
saved under the window id in ``end_window``, before the engine completes the window) and
a **replayed** one (``replay`` of the saved record, then ``advance_past``). On
``committed(w)`` it hands the records of the windows up to ``w`` to ``release`` and purges
the window data manager. The author's position (offsets, files) is :class:`~malhar.state.State`
of the subclass, checkpointed with every window; everything built in ``open`` is runtime.

The window data manager is the partition's ``FSWindowDataManager`` under the checkpoint
(JSON records, local FS or HDFS, as durable as the storage layer makes it by default).
See ``docs/howto-input.md`` for a complete connector.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any, Generic, NamedTuple, TypeVar

from malhar.attributes import APPLICATION_WINDOW_COUNT, MAX_TUPLES_PER_WINDOW
from malhar.errors import ConfigError, MalharError, StateError
from malhar.operator import CheckpointListener, InputOperator, OperatorContext
from malhar.properties import Property
from malhar.state import State

__all__ = ["ReplayError", "ReplayableInput", "WindowRecord"]

#: the type of a connector's window record (a JSON-able value: dict, list, str, number)
R = TypeVar("R")


class ReplayError(MalharError, RuntimeError):
    """A window cannot be replayed with exactly the items it had (its record is gone, or
    the source no longer holds what it names)."""


class WindowRecord(NamedTuple, Generic[R]):
    """One recorded window: its id and what :meth:`ReplayableInput.window_record` returned
    (as read back from the window data manager, i.e. after a JSON round trip)."""

    window: int
    record: R


class ReplayableInput(InputOperator, CheckpointListener, Generic[R], metaclass=ABCMeta):
    """Base class of input operators that replay a window exactly (see the module doc).

    Subclasses fill :meth:`read`, :meth:`window_record`, :meth:`replay`,
    :meth:`advance_past` and usually :meth:`open`; they do not override the lifecycle
    methods (``setup``, ``begin_window``, ``emit_tuples``, ``end_window``, ``committed``,
    ``teardown``), which run the protocol.

    Example (a complete connector: ``malhar/testing/line_input.py``, ``docs/howto-input.md``):
        >>> import tempfile
        >>> from malhar import OperatorContext, OutputPort, State
        >>> from malhar.io.base import ReplayableInput
        >>> from malhar.testing.harness import OperatorHarness
        >>> class Numbers(ReplayableInput):
        ...     # 0, 1, 2, ... three per window
        ...     output = OutputPort()
        ...     position = State(default=0)  # the next number: checkpointed
        ...     def begin_new_window(self, window_id):
        ...         self.first = self.position  # runtime: this window's first number
        ...     def read(self, limit):
        ...         n = min(limit, self.first + 3 - self.position)
        ...         for i in range(self.position, self.position + n):
        ...             self.output.emit(i)
        ...         self.position += n
        ...         return n
        ...     def window_record(self):
        ...         return {"start": self.first, "end": self.position}
        ...     def replay(self, record):
        ...         for i in range(record["start"], record["end"]):
        ...             self.output.emit(i)
        ...         return record["end"] - record["start"]
        ...     def advance_past(self, record):
        ...         self.position = record["end"]
        >>> checkpoint = tempfile.mkdtemp()
        >>> h = OperatorHarness(Numbers(), OperatorContext("numbers", checkpoint=checkpoint))
        >>> h.run_window(); h.run_window()
        >>> h.sink("output").per_window
        {0: [0, 1, 2], 1: [3, 4, 5]}
        >>> again = OperatorHarness(Numbers(), OperatorContext("numbers", checkpoint=checkpoint))
        >>> again.run_window(window=1)  # a replay: the recorded window, exactly
        >>> again.run_window()  # then new numbers from where window 1 ended
        >>> again.sink("output").per_window
        {1: [3, 4, 5], 2: [6, 7, 8]}
    """

    max_records_per_window = Property(
        int,
        default=None,
        min=1,
        doc="items per window and partition (the operator's MAX_TUPLES_PER_WINDOW applies too)",
    )

    #: windows recorded in the window data manager and not yet handed to release()
    _unreleased = State(list)
    #: the largest window handed to release() (-1: none)
    _released = State(default=-1)

    # -- what a connector fills ----------------------------------------------------------------
    def open(self, context: OperatorContext) -> None:
        """Build the runtime objects of this partition (clients, its share of the source).

        Called from ``setup``, after the window data manager is ready and with the
        :class:`~malhar.state.State` fields restored. Work out here which part of the
        source this partition reads (``context.partition`` of ``context.partitions``)."""

    def begin_new_window(self, window_id: int) -> None:
        """A new (not replayed) window begins; :meth:`read` calls follow. Optional."""

    @abstractmethod
    def read(self, limit: int) -> int:
        """Emit up to ``limit`` new items through the output ports, advance the position,
        and return how many items were read (those sent to an error port included).

        Called repeatedly within a window. Return 0 when nothing more is to be read in this
        window (nothing available now, or a limit of the connector's own was reached): the
        window then ends. Return quickly; do not wait for data for long."""

    @abstractmethod
    def window_record(self) -> R:
        """What this new window read, enough for :meth:`replay` to emit exactly the same
        items and for :meth:`advance_past` to restore the position after it.

        Must be JSON-able and not None (an empty window still returns a record, e.g.
        ``{"ranges": []}``); :meth:`replay` and :meth:`release` receive it after a JSON round
        trip (tuples become lists, dict keys strings)."""

    @abstractmethod
    def replay(self, record: R) -> int:
        """Emit exactly the items of a recorded window again, in the same order within each
        part of the source; return how many. Raise :class:`ReplayError` when the source no
        longer holds them (retention, a changed file) rather than emitting something else."""

    @abstractmethod
    def advance_past(self, record: R) -> None:
        """Set the position to where it was after the recorded window. Called at the end of
        every replayed window, also when the engine skipped its emission (at-most-once)."""

    def release(self, records: list[WindowRecord[R]]) -> None:
        """The windows of ``records`` are committed downstream and will never be replayed:
        commit offsets, delete or move fully read files. Optional.

        May be called again for the same windows after a restart: make it idempotent.
        ``records`` are in window order; windows whose record is gone are left out."""

    def close(self) -> None:
        """Release what :meth:`open` built (also called when ``open`` failed half way)."""

    # -- what a connector may read ---------------------------------------------------------------
    @property
    def window_id(self) -> int:
        """The current window's id (-1 before the first window)."""
        return getattr(self, "_window_id", -1)

    @property
    def replaying(self) -> bool:
        """Whether the current window is a replay of a recorded one."""
        return getattr(self, "_replay_record", None) is not None

    @property
    def window_data_manager(self) -> Any:
        """This partition's window data manager (``FSWindowDataManager``, JSON records)."""
        return self._wdm

    @property
    def label(self) -> str:
        """``operator 'name' partition i``, for messages."""
        return getattr(self, "_label", type(self).__name__)

    # -- the protocol (not overridden by connectors) ---------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._label = f"operator {context.name!r} partition {context.partition}"
        attrs = context.attributes
        if int(attrs.get(APPLICATION_WINDOW_COUNT.name, 1)) != 1:
            raise ConfigError(
                f"{self._label}: a replayable input records what it read per streaming window; "
                "it does not take APPLICATION_WINDOW_COUNT (set it on the operators after it)"
            )
        engine_limit = int(attrs.get(MAX_TUPLES_PER_WINDOW.name, MAX_TUPLES_PER_WINDOW.default))
        self._window_limit = min(engine_limit, self.max_records_per_window or engine_limit)
        self._window_id = -1
        self._replay_record: Any = None
        self._window_count = 0
        self._window_done = True
        self._wdm = context.window_data_manager(serializer="json")
        self._wdm.setup()
        #: window -> record saved by this instance and not released yet (as read back)
        self._saved: dict[int, Any] = {}
        try:
            self.open(context)
        except BaseException:
            self.close()
            self._wdm.teardown()
            raise

    def begin_window(self, window_id: int) -> None:
        self._window_id = window_id
        self._window_count = 0
        self._window_done = False
        self._replay_record = None
        if window_id <= self._wdm.partition_largest_window():
            record = self._wdm.retrieve(window_id)
            if record is None:
                raise ReplayError(
                    f"{self._label}: window {window_id} must be replayed but its record is not "
                    "in the window data manager (purged after it was committed?)"
                )
            self._replay_record = record
        else:
            self.begin_new_window(window_id)

    def emit_tuples(self) -> None:
        if self._window_done:
            return
        if self._replay_record is not None:
            self._window_done = True  # a replay emits the whole window at once
            self._window_count = self.replay(self._replay_record)
            return
        remaining = self._window_limit - self._window_count
        n = self.read(remaining) if remaining > 0 else 0
        if n <= 0:
            self._window_done = True
        else:
            self._window_count += n

    def end_window(self) -> None:
        window = self._window_id
        if self._replay_record is not None:
            self.advance_past(self._replay_record)
        else:
            record = self.window_record()
            if record is None:
                raise StateError(
                    f"{self._label}: window_record() returned None for window {window}; return "
                    "a JSON-able record (e.g. an empty list of ranges for a window that read "
                    "nothing) so that every window can be replayed"
                )
            serializer = self._wdm.serializer
            try:
                self._wdm.save(record, window)
                # release() gets it from memory, not by a read of the log (a WebHDFS round
                # trip per window on HDFS), in the form a read would give
                self._saved[window] = serializer.loads(serializer.dumps(record))
            except TypeError as exc:  # the JSON serializer's complaint
                raise StateError(
                    f"{self._label}: the record of window {window} is not JSON-able: {exc}"
                ) from None
        if window > self._released and (not self._unreleased or self._unreleased[-1] < window):
            self._unreleased.append(window)

    def committed(self, window_id: int) -> None:
        if window_id <= self._released:
            return  # delivered again after a restart: released already
        due = [w for w in self._unreleased if w <= window_id]
        saved = self._saved
        records = [
            WindowRecord(w, r)
            for w in due
            if (r := saved.pop(w) if w in saved else self._wdm.retrieve(w)) is not None
        ]
        if records:
            self.release(records)
        previous = self._released
        self._unreleased = [w for w in self._unreleased if w > window_id]
        self._released = window_id
        # Purge only what an earlier, already checkpointed release covered: if this
        # partition fails before its next snapshot, the restored state releases these
        # windows again and finds their records.
        if previous >= 0:
            self._wdm.committed(previous)

    def teardown(self) -> None:
        try:
            self.close()
        finally:
            wdm = getattr(self, "_wdm", None)
            if wdm is not None:
                wdm.teardown()
