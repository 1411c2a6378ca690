"""The transactional JDBC output operator (Malhar's ``AbstractJdbcTransactionableOutputOperator``
and ``JdbcPOJOInsertOutputOperator``, with upsert and merge-add modes)."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from malhar.io.jdbc.config import DEFAULT_BATCH_SIZE, DEFAULT_META_TABLE, MODES, JdbcOptions, names
from malhar.io.jdbc.errors import db_message
from malhar.io.jdbc.meta_store import WindowKey
from malhar.io.jdbc.rows import RowBuffer
from malhar.io.jdbc.transaction import TransactionalWriter, WindowResult
from malhar.operator import ActivationListener, Operator, OperatorContext
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State

log = logging.getLogger("malhar.io.jdbc")

_NAMES = (list, tuple, str)


class JdbcOutputOperator(Operator, ActivationListener):
    """Writes tuples to a database table exactly once: one transaction per window.

    Each partition buffers its window's tuples and, at the end of the window, writes
    them in **one** transaction together with its row in the meta table
    (application name, operator, partition -> last window). A window replayed after a
    failure finds itself already committed and is skipped, so every window lands in
    the table exactly once; readers never see part of a window.

    Input ``input``: dicts (by column), tuples (positional in ``columns``), or Arrow
    record batches from a typed stream (written without per-row work).
    Output ``error`` (error port): each row the database rejected, as a dict of the
    row plus ``"error"``: the database's message. The other rows of the window still
    commit.

    Example:
        >>> from malhar.io.jdbc import JdbcOutputOperator
        >>> out = JdbcOutputOperator(
        ...     "postgresql+psycopg2://app@db:5432/shop", table="word_counts",
        ...     mode="merge_add", key_columns=["word"])
        >>> out.mode
        'merge_add'
    """

    input = InputPort()
    error = OutputPort(error=True)

    url = Property(str, not_null=True, doc="SQLAlchemy URL; its password is never shown")
    password = Property(str, secret=True, doc="password, when not in the URL")
    table = Property(str, doc="target table (schema.table allowed); must exist")
    mode = Property(str, default="insert", one_of=MODES, doc="insert, upsert or merge_add")
    key_columns = Property(_NAMES, doc="conflict key of upsert / merge_add")
    columns = Property(_NAMES, doc="columns written (positional order of tuples)")
    statement = Property(str, doc="a user statement with :name binds, instead of table + mode")
    batch_size = Property(int, default=DEFAULT_BATCH_SIZE, min=1, doc="rows per COPY / batch")
    meta_table = Property(str, default=DEFAULT_META_TABLE, not_null=True, doc="the meta table")
    retry_attempts = Property(int, default=8, min=1, doc="tries while the database is down")
    retry_backoff = Property((int, float), default=0.5, min=0, doc="first wait between tries (s)")
    max_backoff = Property((int, float), default=10.0, min=0, doc="longest wait between tries (s)")
    connect_timeout = Property(int, default=10, min=1, doc="connection timeout (s)")
    skip_older_windows = Property(
        bool, default=False, doc="skip (instead of failing on) windows older than the committed one"
    )

    #: the open application window's rows (more than one streaming window only with
    #: APPLICATION_WINDOW_COUNT > 1; end_window empties it, so it is cheap to checkpoint)
    _buffer = State(RowBuffer)

    def __init__(self, url: str | None = None, table: str | None = None, **properties: Any) -> None:
        if url is not None:
            self.url = url
        if table is not None:
            self.table = table
        for name, value in properties.items():
            if not isinstance(getattr(type(self), name, None), Property):
                raise TypeError(f"{type(self).__name__} has no property {name!r}")
            if value is not None:
                setattr(self, name, value)

    # -- settings ----------------------------------------------------------------------------
    def options(self) -> JdbcOptions:
        """The operator's properties as :class:`~malhar.io.jdbc.config.JdbcOptions`."""
        return JdbcOptions(
            url=self.url or "",
            password=self.password,
            table=self.table,
            mode=self.mode,
            key_columns=names(self.key_columns),
            columns=names(self.columns),
            statement=self.statement,
            batch_size=self.batch_size,
            meta_table=self.meta_table,
            retry_attempts=self.retry_attempts,
            retry_backoff=float(self.retry_backoff),
            max_backoff=float(self.max_backoff),
            connect_timeout=self.connect_timeout,
            skip_older_windows=bool(self.skip_older_windows),
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._key = WindowKey(context.application, context.name, context.partition)
        self._writer = TransactionalWriter(self.options(), self._key, on_retry=self.on_retry)
        self._writer.open()
        log.info(
            "malhar.io.jdbc: %s writes to %s, last committed window %d",
            self._key,
            self._writer.options.target,
            self._writer.committed,
        )

    def begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._buffer.clear()
        # A replayed window that this partition already committed: drop its tuples.
        self._skip = self._writer.is_committed(window_id)

    def process(self, value: Any) -> None:
        if not self._skip:
            self._buffer.add(value)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if not self._skip:
            self._buffer.add_batch(batch)

    def end_window(self) -> None:
        try:
            if self._skip or not len(self._buffer):
                return  # empty windows do not touch the database
            default = tuple(self._writer.target.c.keys()) if self._writer.target is not None else ()
            rows = self._buffer.to_table(names(self.columns), default)
            result = self._writer.write_window(self._window, rows, before_commit=self.before_commit)
            self._report(result)
        finally:
            self._buffer.clear()

    def _report(self, result: WindowResult) -> None:
        if result.skipped:
            log.info("malhar.io.jdbc: %s window %d already committed", self._key, result.window)
        for row in result.rejected:
            self.error.emit(row)

    def teardown(self) -> None:
        writer = getattr(self, "_writer", None)
        if writer is not None:
            writer.close()

    # -- extension points ------------------------------------------------------------------
    def before_commit(self, connection: sa.Connection, window_id: int) -> None:
        """Called inside the window's transaction, after its rows and meta row are written
        and just before COMMIT: run further statements that must commit with the window."""

    def on_retry(self, attempt: int, delay: float, error: BaseException) -> None:
        """Called when the database is unavailable, before waiting ``delay`` s to retry."""
        log.warning(
            "malhar.io.jdbc: %s database unavailable (attempt %d of %d), retrying in %.2fs: %s",
            getattr(self, "_key", "?"),
            attempt,
            self.retry_attempts,
            delay,
            db_message(error),
        )
