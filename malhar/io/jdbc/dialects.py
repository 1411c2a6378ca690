"""How a chunk of rows is applied to the table, per mode and per database.

PostgreSQL through psycopg2 (the fast path):

- ``insert``: ``COPY table (cols) FROM STDIN WITH (FORMAT csv)``;
- ``upsert`` / ``merge_add``: COPY into a temporary staging table (``ON COMMIT
  DROP``), then one ``INSERT INTO table AS t (cols) SELECT ... FROM staging
  ON CONFLICT (key) DO UPDATE SET c = EXCLUDED.c`` (upsert) or
  ``SET c = t.c + EXCLUDED.c`` (merge_add, the seed's ``MERGE``). Keys that
  repeat inside a chunk are folded first, in SQL from the staging table (last row
  wins for upsert, values summed for merge_add, NULL when one is NULL; rows with a
  NULL key are not folded), as PostgreSQL refuses to update a row twice in one
  statement;
- a user statement: ``psycopg2.extras.execute_batch``.

Other databases: SQLAlchemy Core ``executemany`` (``INSERT``; ``ON CONFLICT`` for
SQLite, ``ON DUPLICATE KEY UPDATE`` for MySQL/MariaDB, and update-then-insert
per row elsewhere), or ``text(statement)`` executemany.

Identifiers are quoted by the dialect's identifier preparer; values are always
bound or streamed through COPY, never formatted into SQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import sqlalchemy as sa

from malhar.io.jdbc.config import JdbcSettings
from malhar.io.jdbc.connection import driver_connection, uses_psycopg2
from malhar.io.jdbc.errors import JdbcConfigError
from malhar.io.jdbc.rows import to_csv

SEQ = "__malhar_seq"
#: ``Table.info`` key: False when the key's unique constraint is ``NULLS NOT DISTINCT``.
NULL_KEYS_DISTINCT = "malhar_null_keys_distinct"


class ChunkWriter:
    """Applies chunks of a window's rows inside the open window transaction."""

    def __init__(self, options: JdbcSettings, target: sa.Table | None) -> None:
        self.options = options
        self.target = target
        self.keys = options.keys

    def prepare(self, conn: sa.Connection, columns: Sequence[str]) -> None:
        """Once per transaction, before the first chunk (outside any savepoint)."""

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:  # pragma: no cover
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------
    def check_columns(self, columns: Sequence[str]) -> None:
        """Every column must exist in the target; the key must be written."""
        if self.target is None:
            return
        known = set(self.target.c.keys())
        unknown = [c for c in columns if c not in known]
        if unknown:
            raise JdbcConfigError(
                f"column(s) {unknown} not in table {self.options.table!r} "
                f"(its columns: {sorted(known)})"
            )
        absent = [k for k in self.keys if k not in columns]
        if absent:
            raise JdbcConfigError(
                f"mode {self.options.mode!r} needs the key column(s) {absent} in every row"
            )


def python_rows(target: sa.Table | None, chunk: pa.Table) -> list[dict[str, Any]]:
    """The chunk as dicts for SQLAlchemy, JSON text parsed back for JSON columns."""
    rows = chunk.to_pylist()
    if target is None:
        return rows
    json_cols = [
        c for c in chunk.column_names if c in target.c and isinstance(target.c[c].type, sa.JSON)
    ]
    for c in json_cols:
        for r in rows:
            if isinstance(r[c], str):
                try:
                    r[c] = json.loads(r[c])
                except ValueError:
                    pass  # not JSON: let the database judge the text
    return rows


# -- PostgreSQL (psycopg2) -------------------------------------------------------------------
class _Postgres(ChunkWriter):
    def q(self, conn: sa.Connection, name: str) -> str:
        return conn.dialect.identifier_preparer.quote(name)

    def table_sql(self, conn: sa.Connection) -> str:
        assert self.target is not None
        return conn.dialect.identifier_preparer.format_table(self.target)

    def copy(self, conn: sa.Connection, into: str, columns: Sequence[str], chunk: pa.Table) -> None:
        cols = ", ".join(self.q(conn, c) for c in columns)
        with driver_connection(conn).cursor() as cur:
            cur.copy_expert(f"COPY {into} ({cols}) FROM STDIN WITH (FORMAT csv)", to_csv(chunk))


class PostgresCopyInsert(_Postgres):
    """``insert`` on PostgreSQL: COPY straight into the table."""

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:
        self.copy(conn, self.table_sql(conn), chunk.column_names, chunk)


class PostgresCopyMerge(_Postgres):
    """``upsert`` / ``merge_add`` on PostgreSQL: COPY to a staging table, one INSERT ... ON CONFLICT.

    Repeated keys are folded in SQL, from the staging table (whose columns have the target's
    types), so that keys equal for the database are one key (``'a'`` and ``'a '`` in a
    ``char(n)`` key, ``'1'`` and ``'01'`` in an integer key) and the result never depends on
    ``batch_size``:

    - ``upsert``: ``DISTINCT ON (key) ... ORDER BY key, seq DESC``: the last row wins;
    - ``merge_add``: ``GROUP BY key``, each value ``SUM(c)``, or NULL when one of the
      key's values is NULL (as ``t.c + NULL`` is NULL across batches);
    - rows with a NULL in a (nullable, unique) key column are never folded: NULLs are
      distinct for a unique constraint, so each such row is inserted as it is.
    """

    def __init__(self, options: JdbcSettings, target: sa.Table | None) -> None:
        super().__init__(options, target)
        self.stages: dict[tuple[str, ...], str] = {}

    def prepare(self, conn: sa.Connection, columns: Sequence[str]) -> None:
        digest = hashlib.sha1(
            f"{self.options.table}|{','.join(columns)}".encode(), usedforsecurity=False
        ).hexdigest()[:10]
        stage = self.q(conn, f"__malhar_stage_{digest}")
        self.stages[tuple(columns)] = stage
        cols = ", ".join(self.q(conn, c) for c in columns)
        conn.exec_driver_sql(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DROP AS "
            f"SELECT {cols}, 0::bigint AS {self.q(conn, SEQ)} FROM {self.table_sql(conn)} "
            "WITH NO DATA"
        )

    def _nullable_keys(self) -> list[str]:
        if self.target is None:
            return list(self.keys)
        if not self.target.info.get(NULL_KEYS_DISTINCT, True):
            return []  # NULLS NOT DISTINCT: NULL keys conflict, and are folded like others
        return [k for k in self.keys if self.target.c[k].nullable]

    def merge_sql(self, conn: sa.Connection, columns: Sequence[str], stage: str) -> str:
        q = lambda n: self.q(conn, n)  # noqa: E731
        keys = [q(k) for k in self.keys]
        values = [c for c in columns if c not in self.keys]
        cols = ", ".join(q(c) for c in columns)
        nullable = [q(k) for k in self._nullable_keys()]
        some_null = " OR ".join(f"{k} IS NULL" for k in nullable)
        where = f"WHERE NOT ({some_null})" if nullable else ""
        # Rows go in in key order, so concurrent writers of overlapping keys (partitions of
        # one output, or the flagship's direct plan) lock them in the same order: they wait
        # for each other instead of deadlocking.
        if self.options.mode == "merge_add":
            parts = [
                q(c)
                if c in self.keys
                else f"CASE WHEN COUNT({q(c)}) = COUNT(*) THEN SUM({q(c)}) END"
                for c in columns
            ]
            select = (
                f"SELECT {', '.join(parts)} FROM {stage} {where} GROUP BY {', '.join(keys)} "
                f"ORDER BY {', '.join(keys)}"
            )
        else:  # upsert: the last row of each key wins
            select = (
                f"SELECT DISTINCT ON ({', '.join(keys)}) {cols} FROM {stage} {where} "
                f"ORDER BY {', '.join(keys)}, {q(SEQ)} DESC"
            )
        if nullable:  # NULL keys are distinct: such rows are inserted, never folded
            select = f"({select}) UNION ALL (SELECT {cols} FROM {stage} WHERE {some_null})"
        if not values:
            action = "DO NOTHING"
        elif self.options.mode == "merge_add":
            action = "DO UPDATE SET " + ", ".join(
                f"{q(c)} = t.{q(c)} + EXCLUDED.{q(c)}" for c in values
            )
        else:
            action = "DO UPDATE SET " + ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in values)
        return (
            f"INSERT INTO {self.table_sql(conn)} AS t ({cols}) {select} "
            f"ON CONFLICT ({', '.join(keys)}) {action}"
        )

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:
        columns = chunk.column_names
        stage = self.stages[tuple(columns)]
        if self.options.mode == "upsert":  # the arrival order decides which row wins
            seq = pa.array(np.arange(chunk.num_rows, dtype=np.int64))
            self.copy(conn, stage, [*columns, SEQ], chunk.append_column(SEQ, seq))
        else:
            self.copy(conn, stage, columns, chunk)
        conn.exec_driver_sql(self.merge_sql(conn, columns, stage))
        conn.exec_driver_sql(f"TRUNCATE {stage}")


class PostgresStatement(_Postgres):
    """A user statement on PostgreSQL: ``execute_batch`` with the statement's ``:name`` binds."""

    def __init__(self, options: JdbcSettings, target: sa.Table | None) -> None:
        super().__init__(options, target)
        self.sql = ""
        self.binds: list[str] = []

    def prepare(self, conn: sa.Connection, columns: Sequence[str]) -> None:
        self.sql, self.binds = compile_statement(self.options.statement or "", conn.dialect)
        missing = [b for b in self.binds if b not in columns]
        if missing:
            raise JdbcConfigError(
                f"the statement binds {missing}, which the rows do not have "
                f"(their columns: {list(columns)})"
            )

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:
        from psycopg2.extras import execute_batch

        rows = chunk.select(self.binds).to_pylist() if self.binds else chunk.to_pylist()
        with driver_connection(conn).cursor() as cur:
            execute_batch(cur, self.sql, rows, page_size=max(1, len(rows)))


def compile_statement(statement: str, dialect: sa.Dialect) -> tuple[str, list[str]]:
    """The driver's SQL for a ``:name``-style statement, and its bind names in order."""
    clause = sa.text(statement)
    compiled = clause.compile(dialect=dialect)
    return str(compiled), list(compiled.params)


# -- any database (SQLAlchemy Core) ----------------------------------------------------------
class CoreInsert(ChunkWriter):
    """``insert`` anywhere: Core ``executemany`` (multi-row VALUES where the dialect batches)."""

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:
        assert self.target is not None
        conn.execute(self.target.insert(), python_rows(self.target, chunk))


class CoreMerge(ChunkWriter):
    """``upsert`` / ``merge_add`` anywhere: the dialect's native upsert, else update-or-insert."""

    def _native(self, conn: sa.Connection, columns: Sequence[str]) -> Any | None:
        assert self.target is not None
        t = self.target
        values = [c for c in columns if c not in self.keys]
        add = self.options.mode == "merge_add"
        name = conn.dialect.name
        if name in ("sqlite", "postgresql"):
            if name == "sqlite":
                from sqlalchemy.dialects.sqlite import insert
            else:
                from sqlalchemy.dialects.postgresql import insert
            stmt = insert(t)
            if not values:
                return stmt.on_conflict_do_nothing(index_elements=list(self.keys))
            new = stmt.excluded
            return stmt.on_conflict_do_update(
                index_elements=list(self.keys),
                set_={c: (t.c[c] + new[c]) if add else new[c] for c in values},
            )
        if name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import insert

            stmt = insert(t)
            new = stmt.inserted
            if not values:
                values = [self.keys[0]]  # a no-op update: keep the row
                return stmt.on_duplicate_key_update({values[0]: t.c[values[0]]})
            return stmt.on_duplicate_key_update(
                {c: (t.c[c] + new[c]) if add else new[c] for c in values}
            )
        return None

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:
        assert self.target is not None
        rows = python_rows(self.target, chunk)
        stmt = self._native(conn, chunk.column_names)
        if stmt is not None:
            conn.execute(stmt, rows)
            return
        t = self.target
        values = [c for c in chunk.column_names if c not in self.keys]
        add = self.options.mode == "merge_add"
        where = sa.and_(*(t.c[k] == sa.bindparam(f"k_{k}") for k in self.keys))
        sets = {
            c: (t.c[c] + sa.bindparam(f"v_{c}")) if add else sa.bindparam(f"v_{c}") for c in values
        }
        update = t.update().where(where).values(sets) if values else None
        for row in rows:
            if update is not None:
                params = {f"k_{k}": row[k] for k in self.keys}
                params.update({f"v_{c}": row[c] for c in values})
                if conn.execute(update, params).rowcount:
                    continue
            elif conn.execute(
                sa.select(sa.literal(1)).select_from(t).where(where),
                {f"k_{k}": row[k] for k in self.keys},
            ).first():
                continue
            conn.execute(t.insert(), row)


class CoreStatement(ChunkWriter):
    """A user statement anywhere: ``text(statement)`` executemany."""

    def prepare(self, conn: sa.Connection, columns: Sequence[str]) -> None:
        _, binds = compile_statement(self.options.statement or "", conn.dialect)
        missing = [b for b in binds if b not in columns]
        if missing:
            raise JdbcConfigError(
                f"the statement binds {missing}, which the rows do not have "
                f"(their columns: {list(columns)})"
            )

    def write(self, conn: sa.Connection, chunk: pa.Table) -> None:
        conn.execute(sa.text(self.options.statement or ""), chunk.to_pylist())


def chunk_writer(
    conn: sa.Connection, options: JdbcSettings, target: sa.Table | None
) -> ChunkWriter:
    """The writer for this database and these options."""
    fast = uses_psycopg2(conn)
    if options.statement:
        return PostgresStatement(options, target) if fast else CoreStatement(options, target)
    if options.mode == "insert":
        return PostgresCopyInsert(options, target) if fast else CoreInsert(options, target)
    return PostgresCopyMerge(options, target) if fast else CoreMerge(options, target)
