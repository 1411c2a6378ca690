"""The operator base of a transactional output: :class:`TransactionalOutputOperator`
buffers an application window (:class:`WindowBuffer`), writes it at ``end_window``
through a :class:`~malhar.io.base.committer.WindowCommitter`, and emits rejected rows on
its error port. A connector fills ``create_store`` (``docs/howto-output.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import pyarrow as pa

from malhar.io.base.committer import WindowCommitter
from malhar.io.base.output import (
    ERROR_FIELD,
    NO_WINDOW,
    TransactionalSettings,
    TransactionalStore,
    check_application_name,
    checkpoint_run,
    rejected_row,
)
from malhar.operator import ActivationListener, CheckpointListener, Operator, OperatorContext
from malhar.ports import InputPort, OutputPort
from malhar.state import State

log = logging.getLogger("malhar.io.output")

T = TypeVar("T")
Txn = TypeVar("Txn")


# -- the operator ---------------------------------------------------------------------------------
class WindowBuffer:
    """The tuples and Arrow batches of one (application) window, in arrival order, with
    the window's id and whether it is a replay being skipped. Checkpointed with the
    operator (application windows spanning several streaming windows); emptied at
    ``end_window``, so an idle buffer pickles to the same bytes every window."""

    def __init__(self) -> None:
        self.window = NO_WINDOW
        self.skip = False
        self.pieces: list[Any] = []  # lists of tuples and Arrow batches, in arrival order
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def begin(self, window: int, skip: bool) -> None:
        self.clear()
        self.window, self.skip = window, skip

    def clear(self) -> None:
        self.window, self.skip, self.pieces, self.count = NO_WINDOW, False, [], 0

    def add(self, value: Any) -> None:
        """Add one tuple (an Arrow batch or table is added as a batch)."""
        if isinstance(value, pa.RecordBatch | pa.Table):
            self.add_batch(value)
            return
        if not self.pieces or not isinstance(self.pieces[-1], list):
            self.pieces.append([])
        self.pieces[-1].append(value)
        self.count += 1

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add an Arrow record batch (kept as it is: no per-row work)."""
        if batch.num_rows:
            self.pieces.append(batch)
            self.count += batch.num_rows


class TransactionalOutputOperator(
    Operator, TransactionalSettings, ActivationListener, CheckpointListener
):
    """The operator base of a transactional output: each partition writes a window in one
    transaction of its :class:`TransactionalStore`, so every window lands exactly once.

    A connector author subclasses it (usually together with the connector's settings
    class) and fills :meth:`create_store`, and :meth:`window_rows` when tuples need
    checking or converting. The base buffers the window's tuples and Arrow batches in a
    :class:`~malhar.state.State` field (an application window may span several streaming
    windows), drops the tuples of a window that is already committed (a replay), writes
    the window at ``end_window`` through a :class:`WindowCommitter`, and emits rejected
    rows on the error port ``error`` as ``{**row, "error": reason}``. With a store that
    records rejected rows, a replayed window re-emits the rows it rejected the first time.

    The committed-window records are keyed by (application name, operator, partition):
    the application must have an explicit, unique name (``DAG("name")``); the engine's
    default name is refused, since every unnamed application would share it.
    """

    input = InputPort()
    error = OutputPort(error=True)

    #: the open window's tuples, id and replay flag (see WindowBuffer)
    _buffer = State(WindowBuffer)

    def __init__(self, **properties: Any) -> None:
        """Set properties by name (an unknown name fails naming the closest ones)."""
        self.configure(**properties)

    # -- to fill ------------------------------------------------------------------------------
    def create_store(self, context: OperatorContext) -> TransactionalStore[Any]:
        """The store of this partition (not opened yet), built from the properties."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_store()")

    def window_rows(self, buffer: WindowBuffer) -> tuple[pa.Table, list[dict[str, Any]]]:
        """The window's rows as one Arrow table, and the tuples that cannot be written
        (as :func:`rejected_row`): Arrow batches as they are, each run of tuples through
        :meth:`tuples_table`."""
        tables: list[pa.Table] = []
        bad: list[dict[str, Any]] = []
        for piece in buffer.pieces:
            if not isinstance(piece, list):
                tables.append(
                    pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece
                )
                continue
            table, refused = self.tuples_table(piece)
            if table is not None:
                tables.append(table)
            bad.extend(refused)
        if not tables:
            return pa.table({}), bad
        if len(tables) == 1:
            return tables[0], bad
        return pa.concat_tables(tables, promote_options="permissive"), bad

    def tuples_table(self, tuples: list[Any]) -> tuple[pa.Table | None, list[dict[str, Any]]]:
        """A run of tuples as one table (None: no row), and those refused (as
        :func:`rejected_row`). By default mappings are rows and anything else is refused."""
        good = []
        bad = []
        for value in tuples:
            if isinstance(value, Mapping):
                good.append(value)
            else:
                bad.append(rejected_row(value, f"expected a mapping, got {type(value).__name__}"))
        return (pa.Table.from_pylist(good) if good else None), bad

    # -- extension points ------------------------------------------------------------------
    def before_commit(self, txn: Any, window_id: int) -> None:
        """Called inside the window's transaction, after its rows and committed-window
        record, just before commit (``txn`` is what the store's ``begin`` returned)."""

    def on_retry(self, attempt: int, delay: float, error: BaseException) -> None:
        """Called when the target is unavailable, before waiting ``delay`` s to retry."""
        log.warning(
            "malhar output %s: unavailable (attempt %d of %d), retrying in %.2fs: %s",
            self._store.key if hasattr(self, "_store") else "?",
            attempt,
            self.retry_attempts,
            delay,
            error,
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        check_application_name(context.application, type(self).__name__)
        self._store = self.create_store(context)
        self._committer = WindowCommitter(
            self._store,
            retry=self.retry_policy(),
            skip_older_windows=bool(self.skip_older_windows),
            on_retry=self.on_retry,
            # recorded with each window: a new checkpoint's window 0 is not a replay
            run=checkpoint_run(context.checkpoint_id),
        )
        self._committer.open()
        log.info(
            "malhar output: %s writes to %s, last committed window %d",
            self._store.key,
            self._store.describe(),
            self._committer.committed,
        )

    def begin_window(self, window_id: int) -> None:
        # A replayed window that this partition already committed: drop its tuples.
        self._buffer.begin(window_id, self._committer.is_committed(window_id))

    def process(self, value: Any) -> None:
        if not self._buffer.skip:
            self._buffer.add(value)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if not self._buffer.skip:
            self._buffer.add_batch(batch)

    def end_window(self) -> None:
        buffer = self._buffer
        try:
            if buffer.skip:
                # a replay: re-emit the rows this window rejected when it was committed
                self._emit(self._committer.replayed_rejects(buffer.window), buffer.window)
                return
            if not len(buffer):
                return  # empty windows do not touch the target
            rows, bad = self.window_rows(buffer)
            result = self._committer.commit_window(
                buffer.window, rows, rejected=bad, before_commit=self.before_commit
            )
            if result.skipped:
                log.info(
                    "malhar output: %s window %d already committed", self._store.key, result.window
                )
            self._emit(result.rejected, result.window)
        finally:
            buffer.clear()

    def _emit(self, rejected: list[dict[str, Any]], window: int) -> None:
        if not rejected:
            return
        log.warning(
            "malhar output: %s window %d: %d row(s) rejected to the error port, first: %s",
            self._store.key,
            window,
            len(rejected),
            rejected[0].get(ERROR_FIELD),
        )
        for row in rejected:
            self.error.emit(row)

    def committed(self, window_id: int) -> None:
        store = getattr(self, "_store", None)
        if store is not None:
            store.committed(window_id)

    def teardown(self) -> None:
        committer = getattr(self, "_committer", None)
        if committer is not None:
            committer.close()

    # -- for subclasses ---------------------------------------------------------------------
    @property
    def _window(self) -> int:
        """The open window's id (``NO_WINDOW`` between windows)."""
        return self._buffer.window

    @property
    def _skip(self) -> bool:
        """True while the open window is a replay of a committed one (its tuples dropped)."""
        return self._buffer.skip


__all__ = ["TransactionalOutputOperator", "WindowBuffer"]
