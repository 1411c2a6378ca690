"""The bookkeeping tables of the JDBC output (Malhar's ``JdbcTransactionalStore``).

**The meta table** holds one row per (application, operator, partition): the last
window that partition committed, written **in the same transaction** as that
window's rows, so the database has both or neither. A window replayed after a crash
finds its id already there and is skipped. The row also names the table it belongs
to (``target_id``): a writer whose target is another table is refused
(:class:`~malhar.io.jdbc.errors.JdbcTargetConflictError`) instead of skipping windows
that were never written there. The Spark sink also records the fingerprint of the
partition's batch and the execution that committed it.

::

    CREATE TABLE malhar_meta (
        app_id        VARCHAR(255) NOT NULL,
        operator_id   VARCHAR(255) NOT NULL,
        partition_id  INTEGER      NOT NULL,
        window_id     BIGINT       NOT NULL,
        updated_at    TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
        target_id     VARCHAR(512),            -- schema.table written
        run_id        VARCHAR(64),             -- who committed: the Spark sink's run, or checkpoint:<id>
        window_digest VARCHAR(64),             -- Spark sink: rows:fingerprint of the batch
        PRIMARY KEY (app_id, operator_id, partition_id)
    )

A meta table created by an earlier version (without the last three columns) is
migrated with ``ALTER TABLE ... ADD COLUMN`` (nullable); its rows keep working and
take the target of the first writer that opens them.

**The error table** (optional, ``error_table``) keeps the rows a window rejected, in
the window's transaction, so a replay of the window re-emits them. **The staging
table** (``<meta_table>_stage``) holds a Spark sink partition's rows of a partially
committed batch until the driver applies them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import sqlalchemy as sa

from malhar.io.base.output import ERROR_FIELD, NO_WINDOW, CommitMark, WindowKey, rows_json
from malhar.io.jdbc.config import split_table
from malhar.io.jdbc.errors import JdbcTargetConflictError, is_transient
from malhar.io.jdbc.rows import text_value

__all__ = ["ErrorTable", "MetaTable", "StageTable", "create_if_missing"]


def create_if_missing(engine: sa.Engine, table: sa.Table) -> None:
    """``CREATE TABLE`` unless ``table`` exists; safe when several tasks race to create it
    (the losers' CREATE fails on the winner's catalog entry, and then the table exists)."""

    def exists() -> bool:
        with engine.connect() as conn:
            return sa.inspect(conn).has_table(table.name, schema=table.schema)

    if exists():
        return
    try:
        with engine.begin() as conn:
            table.create(conn, checkfirst=True)
    except sa.exc.DBAPIError as exc:
        if is_transient(exc) or not exists():
            raise


def add_missing_columns(engine: sa.Engine, table: sa.Table, columns: Sequence[str]) -> list[str]:
    """``ALTER TABLE ... ADD COLUMN`` for each of ``columns`` (nullable columns of ``table``)
    that the existing table lacks; safe when several writers migrate at once. Returns the
    columns added."""

    def present() -> set[str]:
        with engine.connect() as conn:
            return {
                c["name"] for c in sa.inspect(conn).get_columns(table.name, schema=table.schema)
            }

    have = present()
    added = []
    prep = engine.dialect.identifier_preparer
    for name in columns:
        if name in have:
            continue
        col = table.c[name]
        sql = (
            f"ALTER TABLE {prep.format_table(table)} ADD COLUMN {prep.quote(name)} "
            f"{col.type.compile(dialect=engine.dialect)}"
        )
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(sql)
            added.append(name)
        except sa.exc.DBAPIError as exc:
            if is_transient(exc) or name not in present():  # not a concurrent migration
                raise
    return added


def _key_columns() -> list[sa.Column]:
    return [
        sa.Column("app_id", sa.String(255), primary_key=True),
        sa.Column("operator_id", sa.String(255), primary_key=True),
        sa.Column("partition_id", sa.Integer, primary_key=True, autoincrement=False),
    ]


def _where(table: sa.Table, key: WindowKey) -> sa.ColumnElement[bool]:
    c = table.c
    return sa.and_(
        c.app_id == key.application, c.operator_id == key.operator, c.partition_id == key.partition
    )


class MetaTable:
    """Reads and writes the meta table (created, or migrated, when needed)."""

    #: columns added since the first version (nullable; migrated in)
    ADDED = ("target_id", "run_id", "window_digest")

    def __init__(self, name: str) -> None:
        schema, table = split_table(name)
        self.name = name
        self.table = sa.Table(
            table,
            sa.MetaData(),
            *_key_columns(),
            sa.Column("window_id", sa.BigInteger, nullable=False),
            sa.Column(
                "updated_at",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.current_timestamp(),
            ),
            sa.Column("target_id", sa.String(512), nullable=True),
            sa.Column("run_id", sa.String(64), nullable=True),
            sa.Column("window_digest", sa.String(64), nullable=True),
            schema=schema,
        )

    # -- set-up (own transactions) ---------------------------------------------------------
    def ensure(self, engine: sa.Engine) -> None:
        """Create the meta table unless it exists; add the columns an older one lacks."""
        create_if_missing(engine, self.table)
        add_missing_columns(engine, self.table, self.ADDED)

    def ensure_row(self, engine: sa.Engine, key: WindowKey, target: str) -> CommitMark:
        """Make sure ``key`` has a row for ``target`` (window -1 when new); return its mark.

        The row must exist before any window transaction, so that the transaction can
        lock it (``SELECT ... FOR UPDATE``) and two writers of one partition serialize.
        A row without a target (written by an earlier version) is adopted.

        Raises:
            JdbcTargetConflictError: the row belongs to another target table.
        """
        with engine.begin() as conn:
            found = self.read(conn, key)
            if found is not None:
                mark, owner = found
                if owner is None:
                    conn.execute(
                        self.table.update()
                        .where(_where(self.table, key), self.table.c.target_id.is_(None))
                        .values(target_id=target)
                    )
                else:
                    self.check_target(key, owner, target)
                return mark
        try:
            with engine.begin() as conn:
                conn.execute(self._insert(key, CommitMark(), target))
            return CommitMark()
        except sa.exc.IntegrityError:
            with engine.begin() as conn:  # inserted concurrently by another writer
                found = self.read(conn, key)
            if found is None:
                return CommitMark()
            self.check_target(key, found[1] or target, target)
            return found[0]

    def check_target(self, key: WindowKey, owner: str | None, target: str) -> None:
        """Refuse a meta row that belongs to another target."""
        if owner is not None and owner != target:
            raise JdbcTargetConflictError(
                f"the meta row {key} in {self.name!r} belongs to {owner!r}, but this output "
                f"writes {target!r}. Two applications share the name {key.application!r} "
                f"(and operator {key.operator!r}), or the application was re-pointed at another "
                "table: its windows would be skipped as if they were already written there. "
                "Give the application a name of its own; or, when re-pointing is intended "
                f"and the new table has none of its windows, delete the application's rows "
                f"from {self.name!r} (DELETE FROM {self.name} WHERE app_id = "
                f"'{key.application}' AND operator_id = '{key.operator}')"
            )

    # -- inside a window transaction --------------------------------------------------------
    def read(
        self, conn: sa.Connection, key: WindowKey, *, lock: bool = False
    ) -> tuple[CommitMark, str | None] | None:
        """``(mark, target)`` of ``key`` (None without a row); ``lock`` takes a row lock until
        the transaction ends (ignored where unsupported, e.g. SQLite, whose write
        transactions are serialized anyway)."""
        c = self.table.c
        query = sa.select(c.window_id, c.window_digest, c.run_id, c.target_id).where(
            _where(self.table, key)
        )
        if lock:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            return None
        window, digest, run, target = row
        return CommitMark(int(window), digest, run), target

    def store(self, conn: sa.Connection, key: WindowKey, mark: CommitMark, target: str) -> None:
        """Record ``mark`` as committed for ``key`` (part of the caller's transaction)."""
        result = conn.execute(
            self.table.update()
            .where(_where(self.table, key))
            .values(
                window_id=mark.window,
                window_digest=mark.digest,
                run_id=mark.run,
                target_id=target,
                updated_at=sa.func.current_timestamp(),
            )
        )
        if result.rowcount == 0:
            conn.execute(self._insert(key, mark, target))

    def partitions(self, conn: sa.Connection, key: WindowKey, window: int) -> dict[int, str | None]:
        """Partitions of ``key``'s application and operator at ``window`` or later, with
        the run that committed each."""
        c = self.table.c
        rows = conn.execute(
            sa.select(c.partition_id, c.run_id).where(
                c.app_id == key.application, c.operator_id == key.operator, c.window_id >= window
            )
        )
        return {int(p): r for p, r in rows}

    def all_windows(self, conn: sa.Connection) -> dict[WindowKey, int]:
        """Every meta row: key -> committed window (for tools and tests)."""
        c = self.table.c
        rows = conn.execute(sa.select(c.app_id, c.operator_id, c.partition_id, c.window_id))
        return {WindowKey(a, o, int(p)): int(w) for a, o, p, w in rows}

    def _insert(self, key: WindowKey, mark: CommitMark, target: str) -> sa.Insert:
        return self.table.insert().values(
            app_id=key.application,
            operator_id=key.operator,
            partition_id=key.partition,
            window_id=mark.window if mark.window is not None else NO_WINDOW,
            window_digest=mark.digest,
            run_id=mark.run,
            target_id=target,
        )


class ErrorTable:
    """Rows a window rejected, stored in the window's transaction (``row_json``, ``error``)."""

    ADDED = ("row_index",)

    def __init__(self, name: str) -> None:
        schema, table = split_table(name)
        self.name = name
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("app_id", sa.String(255), nullable=False),
            sa.Column("operator_id", sa.String(255), nullable=False),
            sa.Column("partition_id", sa.Integer, nullable=False),
            sa.Column("window_id", sa.BigInteger, nullable=False),
            sa.Column("row_json", sa.Text, nullable=False),
            sa.Column("error", sa.Text, nullable=False),
            sa.Column(
                "created_at",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.current_timestamp(),
            ),
            sa.Column("row_index", sa.Integer, nullable=True),
            sa.Index(None, "app_id", "operator_id", "partition_id", "window_id"),
            schema=schema,
        )

    def ensure(self, engine: sa.Engine) -> None:
        """Create the table unless it exists; add the columns an older one lacks."""
        create_if_missing(engine, self.table)
        add_missing_columns(engine, self.table, self.ADDED)

    def insert(
        self, conn: sa.Connection, key: WindowKey, window: int, rows: list[dict[str, Any]]
    ) -> None:
        """Store ``rows`` (error-port rows) with ``window`` (part of the window's transaction)."""
        conn.execute(
            self.table.insert(),
            [
                {
                    "app_id": key.application,
                    "operator_id": key.operator,
                    "partition_id": key.partition,
                    "window_id": window,
                    "row_json": rows_json(
                        {k: v for k, v in r.items() if k != ERROR_FIELD}, default=text_value
                    ),
                    "error": str(r.get(ERROR_FIELD, "")),
                    "row_index": i,
                }
                for i, r in enumerate(rows)
            ],
        )

    def read(self, conn: sa.Connection, key: WindowKey, window: int) -> list[dict[str, Any]]:
        """The rows stored with ``window``, in their order, as error-port rows (values
        JSON-decoded: dates, decimals and bytes come back as text)."""
        c = self.table.c
        rows = conn.execute(
            sa.select(c.row_json, c.error)
            .where(_where(self.table, key), c.window_id == window)
            .order_by(c.row_index)
        )
        return [{**json.loads(row_json), ERROR_FIELD: error} for row_json, error in rows]


class StageTable:
    """A Spark sink partition's rows of a partially committed batch (Arrow IPC), kept until
    the driver applies them (:class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`)."""

    def __init__(self, meta_table: str) -> None:
        schema, table = split_table(meta_table)
        self.name = f"{meta_table}_stage"
        self.table = sa.Table(
            f"{table}_stage",
            sa.MetaData(),
            *_key_columns(),
            sa.Column("window_id", sa.BigInteger, nullable=False),
            sa.Column("run_id", sa.String(64), nullable=False),
            sa.Column("row_count", sa.BigInteger, nullable=False),
            sa.Column("data", sa.LargeBinary, nullable=False),
            schema=schema,
        )

    def ensure(self, engine: sa.Engine) -> None:
        create_if_missing(engine, self.table)

    def put(
        self, conn: sa.Connection, key: WindowKey, window: int, run: str, rows: pa.Table
    ) -> None:
        sink = io.BytesIO()
        with ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        conn.execute(self.table.delete().where(_where(self.table, key)))
        conn.execute(
            self.table.insert().values(
                app_id=key.application,
                operator_id=key.operator,
                partition_id=key.partition,
                window_id=window,
                run_id=run,
                row_count=rows.num_rows,
                data=sink.getvalue(),
            )
        )

    def get(self, conn: sa.Connection, key: WindowKey, window: int, run: str) -> pa.Table | None:
        c = self.table.c
        data = conn.execute(
            sa.select(c.data).where(_where(self.table, key), c.window_id == window, c.run_id == run)
        ).scalar_one_or_none()
        if data is None:
            return None
        return ipc.open_stream(io.BytesIO(bytes(data))).read_all()

    def drop(self, conn: sa.Connection, key: WindowKey, window: int) -> None:
        conn.execute(
            self.table.delete().where(_where(self.table, key), self.table.c.window_id <= window)
        )
