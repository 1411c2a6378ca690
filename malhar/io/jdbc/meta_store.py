"""The meta table: the last window each output partition committed (Malhar's ``JdbcTransactionalStore``).

One row per (application, operator, partition) holds the last committed window
id. The row is written **in the same transaction** as that window's data, so
the database either has both or neither: a window replayed after a crash finds
its id already there and is skipped. The application is identified by its
stable name (not a per-launch id), so the skip also works after a restart.

The table is created when missing::

    CREATE TABLE malhar_meta (
        app_id        VARCHAR(255) NOT NULL,
        operator_id   VARCHAR(255) NOT NULL,
        partition_id  INTEGER      NOT NULL,
        window_id     BIGINT       NOT NULL,
        updated_at    TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
        PRIMARY KEY (app_id, operator_id, partition_id)
    )
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from malhar.io.jdbc.config import DEFAULT_META_TABLE, split_table
from malhar.io.jdbc.errors import is_transient

#: the window id of a partition that has committed nothing yet
NO_WINDOW = -1


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


@dataclass(frozen=True)
class WindowKey:
    """Who owns a meta row: the application's stable name, the operator, its partition."""

    application: str
    operator: str
    partition: int

    def __str__(self) -> str:
        return f"{self.application}/{self.operator}/{self.partition}"


class JdbcTransactionalStore:
    """Reads and writes the meta table (created if missing)."""

    def __init__(self, meta_table: str = DEFAULT_META_TABLE) -> None:
        schema, name = split_table(meta_table)
        self.name = meta_table
        self.table = sa.Table(
            name,
            sa.MetaData(),
            sa.Column("app_id", sa.String(255), primary_key=True),
            sa.Column("operator_id", sa.String(255), primary_key=True),
            sa.Column("partition_id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("window_id", sa.BigInteger, nullable=False),
            sa.Column(
                "updated_at",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.current_timestamp(),
            ),
            schema=schema,
        )

    def _where(self, key: WindowKey) -> sa.ColumnElement[bool]:
        c = self.table.c
        return sa.and_(
            c.app_id == key.application,
            c.operator_id == key.operator,
            c.partition_id == key.partition,
        )

    def _insert(self, key: WindowKey, window: int) -> sa.Insert:
        return self.table.insert().values(
            app_id=key.application,
            operator_id=key.operator,
            partition_id=key.partition,
            window_id=window,
        )

    # -- set-up (own transactions) ---------------------------------------------------------
    def ensure_table(self, engine: sa.Engine) -> None:
        """Create the meta table unless it exists (safe when partitions race to create it)."""
        create_if_missing(engine, self.table)

    def ensure_row(self, engine: sa.Engine, key: WindowKey) -> int:
        """Make sure ``key`` has a row (window -1 when new); return its committed window.

        The row must exist before any window transaction, so that the transaction can
        lock it (``SELECT ... FOR UPDATE``) and two writers of one partition serialize.
        """
        with engine.begin() as conn:
            found = self.committed_window(conn, key)
            if found is not None:
                return found
        try:
            with engine.begin() as conn:
                conn.execute(self._insert(key, NO_WINDOW))
            return NO_WINDOW
        except sa.exc.IntegrityError:
            with engine.begin() as conn:  # inserted concurrently by another writer
                found = self.committed_window(conn, key)
            return NO_WINDOW if found is None else found

    # -- inside a window transaction --------------------------------------------------------
    def committed_window(
        self, conn: sa.Connection, key: WindowKey, *, lock: bool = False
    ) -> int | None:
        """The last committed window of ``key`` (None without a row); ``lock`` takes a row
        lock until the transaction ends (ignored where unsupported, e.g. SQLite, whose
        write transactions are serialized anyway)."""
        query = sa.select(self.table.c.window_id).where(self._where(key))
        if lock:
            query = query.with_for_update()
        value = conn.execute(query).scalar_one_or_none()
        return None if value is None else int(value)

    def store_committed_window(self, conn: sa.Connection, key: WindowKey, window: int) -> None:
        """Record ``window`` as committed for ``key`` (part of the caller's transaction)."""
        result = conn.execute(
            self.table.update()
            .where(self._where(key))
            .values(window_id=window, updated_at=sa.func.current_timestamp())
        )
        if result.rowcount == 0:
            conn.execute(self._insert(key, window))

    def remove(self, conn: sa.Connection, key: WindowKey) -> None:
        """Forget ``key`` (its next window starts from scratch)."""
        conn.execute(self.table.delete().where(self._where(key)))

    def all_windows(self, conn: sa.Connection) -> dict[WindowKey, int]:
        """Every meta row: key -> committed window (for tools and tests)."""
        c = self.table.c
        rows = conn.execute(sa.select(c.app_id, c.operator_id, c.partition_id, c.window_id))
        return {WindowKey(a, o, int(p)): int(w) for a, o, p, w in rows}
