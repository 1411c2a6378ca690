"""One database transaction per window: the rows and the meta row, all or nothing.

:class:`TransactionalWriter` is the part shared by the malhar operator and the
Spark sink. For window ``w`` of partition ``key`` it runs::

    BEGIN
      SELECT window_id FROM meta WHERE key FOR UPDATE   -- >= w: already committed, skip
      for each chunk of batch_size rows:
        SAVEPOINT; COPY / multi-row statement; RELEASE  -- on a rejected row: ROLLBACK TO
                                                        -- SAVEPOINT, split the chunk in halves
                                                        -- until the bad rows stand alone
      UPDATE meta SET window_id = w WHERE key
    COMMIT

Readers (READ COMMITTED or stricter) therefore see a window's rows all at once or
not at all. When the database is unavailable (refused, restarted, connection
closed) the whole transaction is retried with exponential backoff; if a COMMIT
was lost in flight, the retry finds the meta row already at ``w`` and skips, so
the window is in the table exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import sqlalchemy as sa

from malhar.io.jdbc import engine_cache
from malhar.io.jdbc.config import JdbcOptions, split_table
from malhar.io.jdbc.dialects import ChunkWriter, chunk_writer
from malhar.io.jdbc.errors import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcError,
    WindowRegressionError,
    db_message,
    is_row_error,
    is_transient,
)
from malhar.io.jdbc.meta_store import NO_WINDOW, JdbcTransactionalStore, WindowKey

log = logging.getLogger("malhar.io.jdbc")

T = TypeVar("T")

#: called inside the transaction after the rows, before the meta row: (connection, window, rejected rows)
RejectHook = Callable[[sa.Connection, int, list[dict[str, Any]]], None]
#: called inside the transaction after the meta row, just before COMMIT: (connection, window)
CommitHook = Callable[[sa.Connection, int], None]
#: told about every retry: (attempt, delay in seconds, the error)
RetryHook = Callable[[int, float, BaseException], None]


@dataclass
class WindowResult:
    """What happened to one window."""

    window: int
    skipped: bool = False  #: already committed earlier: nothing written
    written: int = 0  #: rows the database accepted (and committed)
    rejected: list[dict[str, Any]] = field(default_factory=list)  #: rows + "error"
    attempts: int = 0  #: transactions tried (1 when the database was up)


def _log_retry(attempt: int, delay: float, error: BaseException) -> None:
    log.warning(
        "malhar.io.jdbc: database unavailable (attempt %d), retrying in %.2fs: %s",
        attempt,
        delay,
        db_message(error),
    )


class TransactionalWriter:
    """Writes windows of one output partition exactly once.

    Args:
        options: where and how to write.
        key: the partition's identity in the meta table.
        on_retry: told about every retry (logs a warning by default).
    """

    def __init__(
        self, options: JdbcOptions, key: WindowKey, *, on_retry: RetryHook | None = None
    ) -> None:
        self.options = options.check()
        self.key = key
        self.on_retry = on_retry or _log_retry
        self.store = JdbcTransactionalStore(options.meta_table)
        self.engine: sa.Engine | None = None
        self.target: sa.Table | None = None
        self.committed = NO_WINDOW  #: the last window known committed for ``key``

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> TransactionalWriter:
        """Connect, check the table, create the meta table if missing, read the committed window."""
        if self.engine is None:
            self.engine = engine_cache.shared_engine(self.options)
        self.retrying("connecting", self._open)
        return self

    def _open(self) -> None:
        assert self.engine is not None
        try:
            conn = self.engine.connect()
        except Exception as exc:
            if is_transient(exc):
                raise
            raise JdbcConnectionError(
                f"cannot connect to {self.options.redacted_url}: {db_message(exc)}"
            ) from None
        engine = self.engine
        with conn:
            if self.options.table:
                self.target = engine_cache.checked_target(self.options, lambda: self._reflect(conn))
            else:
                self.target = None
        engine_cache.ensure_meta_table_once(self.options, lambda: self.store.ensure_table(engine))
        self.committed = self.store.ensure_row(engine, self.key)

    def _reflect(self, conn: sa.Connection) -> sa.Table:
        o = self.options
        schema, name = split_table(o.table or "")
        try:
            table = sa.Table(name, sa.MetaData(), schema=schema, autoload_with=conn)
        except sa.exc.NoSuchTableError:
            raise JdbcConfigError(
                f"table {o.table!r} does not exist at {o.redacted_url} "
                "(malhar creates only its meta table; create the target table first)"
            ) from None
        known = set(table.c.keys())
        for what, cols in (("columns", o.columns), ("key_columns", o.key_columns)):
            unknown = [c for c in cols if c not in known]
            if unknown:
                raise JdbcConfigError(
                    f"{what} {unknown} not in table {o.table!r} (its columns: {sorted(known)})"
                )
        if o.key_columns and not self._is_unique(conn, schema, name, set(o.key_columns)):
            raise JdbcConfigError(
                f"mode {o.mode!r} on key {list(o.key_columns)} needs a primary key or unique "
                f"constraint on exactly these columns in table {o.table!r}"
            )
        return table

    @staticmethod
    def _is_unique(conn: sa.Connection, schema: str | None, name: str, keys: set[str]) -> bool:
        insp = sa.inspect(conn)
        candidates: list[set[str]] = []
        try:
            candidates.append(
                set(insp.get_pk_constraint(name, schema=schema)["constrained_columns"])
            )
            candidates += [
                set(u["column_names"]) for u in insp.get_unique_constraints(name, schema=schema)
            ]
            candidates += [
                set(i["column_names"])
                for i in insp.get_indexes(name, schema=schema)
                if i.get("unique")
            ]
        except NotImplementedError:
            return True  # the dialect cannot tell: let the database decide
        return keys in candidates

    def refresh(self) -> int:
        """Re-read the committed window from the database."""
        assert self.engine is not None

        def read() -> int:
            assert self.engine is not None
            with self.engine.connect() as conn:
                found = self.store.committed_window(conn, self.key)
            return NO_WINDOW if found is None else found

        self.committed = max(self.committed, self.retrying("reading the meta table", read))
        return self.committed

    def is_committed(self, window: int, committed: int | None = None) -> bool:
        """True when ``window`` is already in the table (a replay: skip it).

        A window *older* than the committed one raises :class:`WindowRegressionError`
        unless ``skip_older_windows`` is set: ids only go backwards when the application
        restarted with a new checkpoint under the same name, and skipping would drop rows.
        """
        done = self.committed if committed is None else committed
        if window < done and not self.options.skip_older_windows:
            raise WindowRegressionError(
                f"{self.key}: window {window} is older than window {done}, already committed "
                f"in {self.options.meta_table!r} at {self.options.redacted_url}. Window ids went "
                "backwards: the application restarted with a new checkpoint under a name that "
                "already has meta rows. Keep the checkpoint, give the application a new name, "
                f"or delete its rows from {self.options.meta_table!r} (or set "
                "skip_older_windows to skip such windows)"
            )
        return window <= done

    def close(self) -> None:
        # The engine is shared by this process's writers (engine_cache) and disposed at
        # exit; its pooled connections are idle between windows.
        self.engine = None

    # -- windows -----------------------------------------------------------------------------
    def write_window(
        self,
        window: int,
        rows: pa.Table,
        *,
        on_rejected: RejectHook | None = None,
        before_commit: CommitHook | None = None,
    ) -> WindowResult:
        """Write ``rows`` as window ``window`` in one transaction, unless already committed."""
        if self.engine is None:
            self.open()
        if self.is_committed(window):
            return WindowResult(window, skipped=True)
        result = WindowResult(window)

        def attempt() -> WindowResult:
            result.attempts += 1
            return self._transaction(window, rows, result, on_rejected, before_commit)

        self.retrying(f"writing window {window}", attempt)
        return result

    def _transaction(
        self,
        window: int,
        rows: pa.Table,
        result: WindowResult,
        on_rejected: RejectHook | None,
        before_commit: CommitHook | None,
    ) -> WindowResult:
        assert self.engine is not None
        result.rejected, result.written, result.skipped = [], 0, False
        with self.engine.connect() as conn:
            try:
                with conn.begin():
                    done = self.store.committed_window(conn, self.key, lock=True)
                    if done is not None and self.is_committed(window, done):
                        result.skipped = True
                        self.committed = max(self.committed, done)
                        return result
                    if rows.num_rows:
                        writer = chunk_writer(conn, self.options, self.target)
                        writer.check_columns(rows.column_names)
                        self._write_rows(conn, writer, rows, result)
                    if result.rejected and on_rejected is not None:
                        on_rejected(conn, window, result.rejected)
                    self.store.store_committed_window(conn, self.key, window)
                    if before_commit is not None:
                        before_commit(conn, window)
            except Exception as exc:
                if is_transient(exc) and not conn.invalidated:
                    try:
                        conn.invalidate()  # never hand a dead connection back to the pool
                    except Exception:  # pragma: no cover - best effort
                        pass
                raise
        self.committed = window
        return result

    def _write_rows(
        self, conn: sa.Connection, writer: ChunkWriter, rows: pa.Table, result: WindowResult
    ) -> None:
        writer.prepare(conn, rows.column_names)
        size = self.options.batch_size
        for start in range(0, rows.num_rows, size):
            self._isolate(conn, writer, rows.slice(start, size), result)

    def _isolate(
        self, conn: sa.Connection, writer: ChunkWriter, chunk: pa.Table, result: WindowResult
    ) -> None:
        """Write ``chunk`` under a savepoint; when the database rejects a row, split the
        chunk until each rejected row stands alone and goes to ``result.rejected``."""
        try:
            with conn.begin_nested():
                writer.write(conn, chunk)
            result.written += chunk.num_rows
            return
        except Exception as exc:
            if not is_row_error(exc):
                raise
            if chunk.num_rows == 1:
                row = chunk.to_pylist()[0]
                row["error"] = db_message(exc)
                result.rejected.append(row)
                return
        half = (chunk.num_rows + 1) // 2
        self._isolate(conn, writer, chunk.slice(0, half), result)
        self._isolate(conn, writer, chunk.slice(half), result)

    # -- retries -----------------------------------------------------------------------------
    def retrying(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn``; while the database is unavailable, retry with exponential backoff."""
        o = self.options
        delay = float(o.retry_backoff)
        for attempt in range(1, o.retry_attempts + 1):
            try:
                return fn()
            except JdbcError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise JdbcError(
                        f"{what} for {self.key} into {o.target} failed: {db_message(exc)}"
                    ) from exc
                if attempt == o.retry_attempts:
                    raise JdbcConnectionError(
                        f"{what} for {self.key}: database at {o.redacted_url} still unavailable "
                        f"after {attempt} attempts: {db_message(exc)}"
                    ) from exc
                self.on_retry(attempt, delay, exc)
                time.sleep(delay)
                delay = min(delay * 2, float(o.max_backoff))
        raise AssertionError("unreachable")  # pragma: no cover
