"""One output partition's window transactions in a database: the JDBC
:class:`~malhar.io.base.output.TransactionalStore`.

For window ``w`` of partition ``key`` the :class:`~malhar.io.base.committer.WindowCommitter`
runs, through this store::

    BEGIN
      SELECT window_id, target_id FROM meta WHERE key FOR UPDATE  -- >= w: committed, skip
      for each chunk of batch_size rows:
        SAVEPOINT; COPY / multi-row statement; RELEASE  -- on a rejected row: ROLLBACK TO
                                                        -- SAVEPOINT, split the chunk in halves
                                                        -- until the bad rows stand alone
      INSERT INTO error_table ...                       -- the rejected rows (error_table set)
      UPDATE meta SET window_id = w WHERE key
    COMMIT

Readers (READ COMMITTED or stricter) therefore see a window's rows all at once or
not at all. Every wait is bounded (``lock_timeout``, ``statement_timeout``): a
writer stuck behind a zombie's row lock gives up and retries like during an outage.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from malhar.io.base.output import CommitMark, OutputError, TransactionalStore, WindowKey
from malhar.io.jdbc import engine_cache
from malhar.io.jdbc.config import JdbcSettings, split_table
from malhar.io.jdbc.dialects import (
    NULL_KEYS_DISTINCT,
    ChunkWriter,
    chunk_writer,
    compile_statement,
)
from malhar.io.jdbc.errors import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcError,
    db_message,
    is_row_error,
    is_timeout,
    is_transient,
)
from malhar.io.jdbc.meta_store import ErrorTable, MetaTable, StageTable
from malhar.io.jdbc.rows import FIELDS, HIDDEN, ROW, Originals, split_by_fields

__all__ = ["JdbcStore", "TargetInfo"]

log = logging.getLogger("malhar.io.jdbc")

_STATEMENT_TARGET = re.compile(
    r"^\s*(?:insert\s+into|update|merge\s+into|delete\s+from)\s+([^\s(]+)", re.I
)


class TargetInfo:
    """What the checks of the target found (cached per process and settings)."""

    def __init__(
        self,
        table: sa.Table | None,
        target_id: str,
        columns: tuple[str, ...],
        binds: tuple[str, ...],
    ) -> None:
        self.table = table
        self.target_id = target_id  #: what the meta row records: "schema.table"
        self.columns = columns  #: the table's columns, in order
        self.binds = binds  #: a user statement's bind names


class JdbcStore(TransactionalStore[sa.Connection]):
    """The meta row, error table and target table of one output partition.

    Args:
        settings: where and how to write (checked here).
        key: the partition's identity in the meta table.
    """

    stages_batches = True

    def __init__(self, settings: JdbcSettings, key: WindowKey) -> None:
        super().__init__(key)
        self.settings = settings.check()
        self.meta = MetaTable(settings.meta_table)
        self.errors = ErrorTable(settings.error_table) if settings.error_table else None
        self.records_rejected = self.errors is not None
        self.engine: sa.Engine | None = None
        self.info = TargetInfo(None, "", (), ())
        self._stage: StageTable | None = None
        #: the tuples of the window being written (set by the operator): a rejected row
        #: goes to the error port as it was emitted, not as converted for the database
        self.originals: Originals | None = None

    # -- what the operator needs to shape rows --------------------------------------------
    @property
    def target(self) -> sa.Table | None:
        """The reflected target table (None for a user statement)."""
        return self.info.table

    def required_fields(self) -> tuple[str, ...]:
        """Fields every row must have: the conflict key, or a statement's binds."""
        return self.info.binds if self.settings.statement else self.settings.keys

    # -- lifecycle -------------------------------------------------------------------------
    def open(self) -> None:
        """Connect, check the table, create (or migrate) the meta table, and make sure this
        partition's meta row exists and belongs to this target."""
        s = self.settings
        if self.engine is None:
            self.engine = engine_cache.shared_engine(s)
        engine = self.engine
        try:
            conn = engine.connect()
        except Exception as exc:
            if is_transient(exc):
                raise
            raise JdbcConnectionError(
                f"cannot connect to {s.redacted_url}: {db_message(exc)}"
            ) from None
        with conn:
            self.info = engine_cache.checked_target(s, lambda: self.inspect(conn))
        engine_cache.ensure_table_once(s, s.meta_table, lambda: self.meta.ensure(engine))
        if self.errors is not None:
            errors = self.errors
            engine_cache.ensure_table_once(s, errors.name, lambda: errors.ensure(engine))
        self.meta.ensure_row(engine, self.key, self.info.target_id)

    def inspect(self, conn: sa.Connection) -> TargetInfo:
        """The target table (reflected and checked: columns, key constraint) or the user
        statement's target and binds; a missing table or column is a JdbcConfigError."""
        s = self.settings
        insp = sa.inspect(conn)
        default_schema = insp.default_schema_name or ""
        if s.statement:
            _, binds = compile_statement(s.statement, conn.dialect)
            found = _STATEMENT_TARGET.match(s.statement)
            name = found.group(1).replace('"', "").replace("`", "") if found else "statement"
            schema, table = split_table(name)
            target = f"{schema or default_schema}.{table}".lower() if found else name
            return TargetInfo(None, target, (), tuple(binds))
        table = self._reflect(conn)
        target = f"{table.schema or default_schema}.{table.name}"
        return TargetInfo(table, target, tuple(table.c.keys()), ())

    def _reflect(self, conn: sa.Connection) -> sa.Table:
        s = self.settings
        schema, name = split_table(s.table or "")
        try:
            table = sa.Table(name, sa.MetaData(), schema=schema, autoload_with=conn)
        except sa.exc.NoSuchTableError:
            raise JdbcConfigError(
                f"table {s.table!r} does not exist at {s.redacted_url} "
                "(malhar creates only its bookkeeping tables; create the target table first)"
            ) from None
        known = set(table.c.keys())
        reserved = sorted(known.intersection(HIDDEN))
        if reserved:
            raise JdbcConfigError(
                f"table {s.table!r} has the column(s) {reserved}, names the JDBC output keeps "
                "for its own bookkeeping in a window's rows; rename them, or write through a "
                "view that renames them"
            )
        for what, cols in (("columns", s.column_names), ("key_columns", s.keys)):
            unknown = [c for c in cols if c not in known]
            if unknown:
                raise JdbcConfigError(
                    f"{what} {unknown} not in table {s.table!r} (its columns: {sorted(known)})"
                )
        if s.keys:
            unique = _unique_on(conn, schema, name, set(s.keys))
            if unique is None:
                raise JdbcConfigError(
                    f"mode {s.mode!r} on key {list(s.keys)} needs a primary key or unique "
                    f"constraint on exactly these columns in table {s.table!r}"
                )
            table.info[NULL_KEYS_DISTINCT] = unique["nulls_distinct"]
        return table

    def close(self) -> None:
        # The engine is shared by this process's writers (engine_cache) and disposed at
        # exit; its pooled connections are idle between windows.
        self.engine = None

    def _engine(self) -> sa.Engine:
        if self.engine is None:
            raise JdbcError(f"{self.key}: the store is not open")
        return self.engine

    # -- the window protocol --------------------------------------------------------------------
    def read_committed(self) -> CommitMark:
        with self._engine().connect() as conn:
            found = self.meta.read(conn, self.key)
        return CommitMark() if found is None else found[0]

    def begin(self, window: int) -> sa.Connection:
        conn = self._engine().connect()
        try:
            conn.begin()
        except BaseException:
            conn.close()
            raise
        return conn

    def read_committed_locked(self, txn: sa.Connection) -> CommitMark:
        found = self.meta.read(txn, self.key, lock=True)
        if found is None:
            return CommitMark()
        mark, owner = found
        self.meta.check_target(self.key, owner, self.info.target_id)
        return mark

    def write(self, txn: sa.Connection, rows: pa.Table) -> list[dict[str, Any]]:
        """Write the window's rows in chunks of ``batch_size``; rows lacking some fields
        are written with the columns they have, each set of fields on its own
        (:func:`~malhar.io.jdbc.rows.split_by_fields`)."""
        s = self.settings
        if FIELDS in rows.column_names and s.statement:
            parts = [rows.drop_columns([FIELDS])]  # the statement binds what it names
        else:
            parts = split_by_fields(rows, in_order=s.mode == "upsert")
        writer = chunk_writer(txn, s, self.target)
        for columns in dict.fromkeys(tuple(_written(p).column_names) for p in parts):
            writer.check_columns(columns)
            writer.prepare(txn, columns)  # before any savepoint (a staging table)
        rejected: list[dict[str, Any]] = []
        size = int(s.batch_size)
        for part in parts:
            for start in range(0, part.num_rows, size):
                self._isolate(txn, writer, part.slice(start, size), rejected)
        return rejected

    def _isolate(
        self,
        conn: sa.Connection,
        writer: ChunkWriter,
        chunk: pa.Table,
        rejected: list[dict[str, Any]],
    ) -> None:
        """Write ``chunk`` under a savepoint; when the database rejects a row, split the
        chunk until each rejected row stands alone and goes to ``rejected``."""
        try:
            with conn.begin_nested():
                writer.write(conn, _written(chunk))
            return
        except Exception as exc:
            if not is_row_error(exc):
                raise
            if chunk.num_rows == 1:
                rejected.append(self._rejected(chunk, db_message(exc)))
                return
        half = (chunk.num_rows + 1) // 2
        self._isolate(conn, writer, chunk.slice(0, half), rejected)
        self._isolate(conn, writer, chunk.slice(half), rejected)

    def _rejected(self, chunk: pa.Table, reason: str) -> dict[str, Any]:
        """The error-port row of the one row of ``chunk``: the tuple as it was emitted when
        the operator kept it (:class:`~malhar.io.jdbc.rows.Originals`), else the row's
        values (an Arrow batch's, as they are)."""
        if ROW in chunk.column_names:
            index = chunk.column(ROW)[0].as_py()
            if index is not None and self.originals is not None:
                return self.originals.rejected(index, reason)
            chunk = chunk.drop_columns([ROW])
        row = chunk.to_pylist()[0]
        row["error"] = reason
        return row

    def store_rejected(self, txn: sa.Connection, window: int, rows: list[dict[str, Any]]) -> None:
        assert self.errors is not None
        self.errors.insert(txn, self.key, window, rows)

    def read_rejected(self, window: int) -> list[dict[str, Any]]:
        assert self.errors is not None
        with self._engine().connect() as conn:
            return self.errors.read(conn, self.key, window)

    def store_committed(self, txn: sa.Connection, mark: CommitMark) -> None:
        self.meta.store(txn, self.key, mark, self.info.target_id)

    def commit(self, txn: sa.Connection) -> None:
        txn.commit()
        txn.close()

    def abort(self, txn: sa.Connection, error: BaseException | None) -> None:
        try:
            if error is not None and is_transient(error) and not is_timeout(error):
                txn.invalidate()  # never hand a dead connection back to the pool
            else:
                txn.rollback()
        except Exception:  # best effort: the server rolls back a broken session anyway
            pass
        try:
            txn.close()
        except Exception:  # pragma: no cover - best effort
            pass

    def is_transient(self, error: BaseException) -> bool:
        return is_transient(error)

    def describe(self) -> str:
        return self.settings.target

    def failure(self, what: str, error: BaseException, *, attempts: int) -> OutputError:
        s = self.settings
        if not self.is_transient(error):
            return JdbcError(f"{what} for {self.key} into {s.target} failed: {db_message(error)}")
        why = "still unavailable"
        if is_timeout(error):
            why = f"still timing out ({timeout_hint(s)})"
        return JdbcConnectionError(
            f"{what} for {self.key}: database at {s.redacted_url} {why} after {attempts} "
            f"attempts: {db_message(error)}"
        )

    # -- the Spark sink's re-run checks ---------------------------------------------------------
    def committed_partitions(self, window: int) -> dict[int, str | None]:
        with self._engine().connect() as conn:
            return self.meta.partitions(conn, self.key, window)

    def _staging(self) -> StageTable:
        if self._stage is None:
            stage = StageTable(self.settings.meta_table)
            engine = self._engine()
            engine_cache.ensure_table_once(self.settings, stage.name, lambda: stage.ensure(engine))
            self._stage = stage
        return self._stage

    def stage(self, window: int, run: str, rows: pa.Table) -> None:
        stage = self._staging()
        with self._engine().begin() as conn:
            stage.put(conn, self.key, window, run, rows)

    def staged(self, window: int, run: str) -> pa.Table | None:
        stage = self._staging()
        with self._engine().connect() as conn:
            return stage.get(conn, self.key, window, run)

    def drop_staged(self, txn: sa.Connection, window: int) -> None:
        self._staging().drop(txn, self.key, window)


def _written(chunk: pa.Table) -> pa.Table:
    """``chunk`` without its :data:`~malhar.io.jdbc.rows.ROW` column (never written)."""
    return chunk.drop_columns([ROW]) if ROW in chunk.column_names else chunk


def timeout_hint(settings: JdbcSettings) -> str:
    """Which bounded wait ran out, and what usually holds it."""
    return (
        f"lock_timeout={settings.lock_timeout}s, statement_timeout="
        f"{settings.statement_timeout}s: another writer of this partition (a zombie task, a "
        "manual session) or a long transaction holds a lock it needs"
    )


def _unique_on(
    conn: sa.Connection, schema: str | None, name: str, keys: set[str]
) -> dict[str, bool] | None:
    """None when no primary key, unique constraint or unique index is on exactly ``keys``;
    else ``{"nulls_distinct": ...}``: False when one of them is ``NULLS NOT DISTINCT``
    (PostgreSQL 15+), so that rows with NULL keys conflict and are folded like others."""
    insp = sa.inspect(conn)
    candidates: list[tuple[set[str], dict[str, Any]]] = []
    try:
        candidates.append(
            (set(insp.get_pk_constraint(name, schema=schema)["constrained_columns"]), {})
        )
        candidates += [
            (set(u["column_names"]), dict(u.get("dialect_options") or {}))
            for u in insp.get_unique_constraints(name, schema=schema)
        ]
        candidates += [
            (set(i["column_names"]), dict(i.get("dialect_options") or {}))
            for i in insp.get_indexes(name, schema=schema)
            if i.get("unique")
        ]
    except NotImplementedError:
        return {"nulls_distinct": True}  # the dialect cannot tell: let the database decide
    found = [options for columns, options in candidates if columns == keys]
    if not found:
        return None
    return {"nulls_distinct": not any(o.get("postgresql_nulls_not_distinct") for o in found)}
