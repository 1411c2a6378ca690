"""The JDBC poll input's work with its database, apart from reading windows: the
partition's connection and its retries, the source's columns and types, the counting and
key queries, and the key-range plan made with them. :class:`PollDatabase`, a mixin of
:class:`~malhar.io.jdbc.poll_operator.JdbcPollInputOperator`; the Spark data source
(:mod:`malhar.io.jdbc.poll_source`) and :class:`~malhar.io.jdbc.range_reader.RangeReader`
use the same code through the operator."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from malhar.io.jdbc.config import split_table
from malhar.io.jdbc.connection import uses_psycopg2
from malhar.io.jdbc.errors import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcError,
    db_message,
    is_transient,
)
from malhar.io.jdbc.poll_keys import decode_key, encode_key, start_key
from malhar.io.jdbc.poll_reader import (
    Cursor,
    PollQuery,
    arrow_type_of,
    arrow_type_of_sqlalchemy,
    json_text,
    lenient_time_casts,
    params,
    pg_key_guard,
)
from malhar.operator import OperatorContext
from malhar.ports import ports_of
from malhar.schema import arrow_schema, to_struct_type

__all__ = ["PLAN_DIR", "PollDatabase"]

# the operator's logger: its messages read as the operator's wherever the code lives
log = logging.getLogger("malhar.io.jdbc.poll")

#: the folder of the key-range plans, under ``<checkpoint>/malhar/``
PLAN_DIR = "jdbc-poll"


class PollDatabase:
    """The database side of the JDBC poll input (a mixin of
    :class:`~malhar.io.jdbc.poll_operator.JdbcPollInputOperator`, see the module doc).

    The operator's ``open`` sets the retry policy and the engine, then calls
    :meth:`_connect` (under :meth:`_retrying`), :meth:`_setup_query` and :meth:`_plan`;
    its reads go through :meth:`_open_cursor` and :meth:`_end_read`.
    """

    # provided by the operator
    _retry: Any  # RetryPolicy: the delays of _retrying
    _engine: sa.Engine
    _conn: Any  # the DBAPI connection (psycopg2) or the SQLAlchemy one; None: not connected
    _raw: bool  # _conn is psycopg2's own connection
    _check_source: Any  # (recorded, where) -> None: refuses another source's positions

    # -- the connection ----------------------------------------------------------------------
    def _connect(self) -> None:
        self._drop_connection()
        try:
            conn = self._engine.connect()
        except Exception as exc:
            if is_transient(exc):
                raise
            raise JdbcConnectionError(
                f"{self.label}: cannot connect to {self.redacted_url}: {db_message(exc)}"
            ) from None
        if uses_psycopg2(conn):
            raw = conn.connection.driver_connection
            json_text(raw)
            lenient_time_casts(raw)  # an unconvertible date: an error row, not a failed fetch
            self._sa_conn, self._conn, self._raw = conn, raw, True
        else:
            self._sa_conn, self._conn, self._raw = conn, conn, False

    def _drop_connection(self) -> None:
        sa_conn = getattr(self, "_sa_conn", None)
        self._sa_conn, self._conn = None, None
        if sa_conn is not None:
            try:
                sa_conn.invalidate()
            except Exception:
                pass
            try:
                sa_conn.close()
            except Exception:
                pass

    def _retrying(self, what: str, fn: Any) -> Any:
        delays = self._retry.delays()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except JdbcError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise JdbcError(
                        f"{self.label}: {what} {self.source} failed: {db_message(exc)}"
                    ) from None
                delay = next(delays, None)
                if delay is None:
                    raise JdbcConnectionError(
                        f"{self.label}: {what} {self.source}: database still unavailable after "
                        f"{attempt} attempts: {db_message(exc)}"
                    ) from None
                log.warning(
                    "%s: %s failed (attempt %d), retrying in %.2fs: %s",
                    self.label,
                    what,
                    attempt,
                    delay,
                    db_message(exc),
                )
                self._drop_connection()
                time.sleep(delay)

    def _end_read(self, *, broken: bool = False) -> None:
        """End the read's transaction (no snapshot is held between windows)."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.rollback()
        except Exception:
            broken = True
        if broken:
            self._drop_connection()

    # -- queries ---------------------------------------------------------------------------------
    def _scalar(self, sql: str, args: dict[str, Any]) -> Any:
        if self._conn is None:
            self._connect()
        try:
            if self._raw:
                with self._conn.cursor() as cur:
                    cur.execute(sql, args)
                    row = cur.fetchone()
            else:
                row = self._conn.execute(sa.text(sql), args).fetchone()
        except Exception:
            self._end_read(broken=True)
            raise
        self._end_read()
        return None if row is None else row[0]

    def _max_key(self) -> Any:
        value = self._scalar(self._query.max_sql(), {})
        return None if value is None else encode_key(value)

    def _count(self, low: Any, high: Any) -> int:
        sql = self._query.count_sql(low is not None, high is not None)
        args = params(
            None if low is None else decode_key(low), None if high is None else decode_key(high)
        )
        return int(self._scalar(sql, args) or 0)

    def _open_cursor(self, low: Any, high: Any) -> Cursor:
        if self._conn is None:
            self._connect()
        sql = self._query.range_sql(low is not None, high is not None)
        args = params(
            None if low is None else decode_key(low), None if high is None else decode_key(high)
        )
        try:
            return Cursor(self._conn, sql, args, self.fetch_size, raw=self._raw)
        except Exception:
            self._end_read(broken=True)
            raise

    # -- the source ------------------------------------------------------------------------------
    def _setup_query(self) -> None:
        """The statements, the source's columns and types, and the key's cast and guard."""
        self._query = PollQuery(self, self._engine.dialect, raw=self._raw)
        self._names, self._types, self._key_index = self._retrying(
            "checking the source", self._inspect
        )
        sql_type, guard = self._retrying("checking the key's type", self._key_sql_type)
        self._query.set_key_type(sql_type, guard)

    def _key_sql_type(self) -> tuple[str | None, str | None]:
        """PostgreSQL: the key column's type by name (from its type OID in the result, never
        from user text) and the guard of its special values (see pg_key_guard)."""
        oid = getattr(self, "_key_type_code", None)
        dialect = self._engine.dialect
        if dialect.name != "postgresql" or not isinstance(oid, int) or isinstance(oid, bool):
            return None, None
        # typmod -1, not NULL: "bpchar", not "character" (char(1): a cast truncated the key)
        name = self._scalar(
            f"SELECT format_type(CAST({self._query._param('oid')} AS oid), -1)", {"oid": oid}
        )
        if not name or name == "-" or name.startswith("???"):
            return None, None
        return str(name), pg_key_guard(oid, getattr(dialect, "server_version_info", None))

    def _inspect(self) -> tuple[list[str], list[pa.DataType | None], int]:
        """The source's columns and their Arrow types; a missing table or column fails here,
        naming it."""
        try:
            cursor = Cursor(
                self._conn, self._query.probe_sql(), {}, 1, raw=self._raw, server_side=False
            )
        except Exception as exc:
            self._end_read(broken=is_transient(exc))
            if is_transient(exc):
                raise
            raise JdbcConfigError(self._missing(exc)) from None
        try:
            description = cursor.description
        finally:
            cursor.close()
            self._end_read()
        names = [d[0] for d in description]
        if self.key_column not in names:
            raise JdbcConfigError(
                f"{self.label}: key_column {self.key_column!r} is not a column of "
                f"{self.source} (its columns: {names})"
            )
        self._key_type_code = description[names.index(self.key_column)][1]
        overrides = dict(self.column_types or {})
        unknown = [c for c in overrides if c not in names]
        if unknown:
            raise JdbcConfigError(
                f"{self.label}: column_types names {unknown}, which {self.source} does not "
                f"have (its columns: {names})"
            )
        typed = self._port_schema()
        reflected = {} if self._raw or not self.table else self._reflect()
        types: list[pa.DataType | None] = []
        for d in description:
            name = d[0]
            if typed is not None and name in typed.names:
                types.append(typed.field(name).type)
            elif name in overrides:
                types.append(
                    arrow_schema(to_struct_type(f"`{name}` {overrides[name]}")).field(0).type
                )
            else:
                types.append(self._db_type(d, reflected))
        if typed is not None:
            missing = [n for n in typed.names if n not in names]
            if missing:
                raise JdbcConfigError(
                    f"{self.label}: the output port's fields {missing} are not columns of "
                    f"{self.source} (its columns: {names})"
                )
        return names, types, names.index(self.key_column)

    def _db_type(self, column: Any, reflected: dict[str, Any]) -> pa.DataType | None:
        if self._raw:  # PostgreSQL: the result's type OIDs (unknown ones: text)
            return arrow_type_of(column[1], column[4], column[5]) or pa.string()
        return reflected.get(column[0])

    def _reflect(self) -> dict[str, Any]:
        schema, name = split_table(self.table or "")
        table = sa.Table(name, sa.MetaData(), schema=schema, autoload_with=self._conn)
        self._end_read()
        return {c.name: arrow_type_of_sqlalchemy(c.type) for c in table.columns}

    def _missing(self, exc: Exception) -> str:
        text = db_message(exc)
        if self.table:
            return f"{self.label}: cannot read table {self.table!r} at {self.redacted_url}: {text}"
        return f"{self.label}: cannot run the query at {self.redacted_url}: {text}"

    def _port_schema(self) -> pa.Schema | None:
        _, outputs = ports_of(type(self))
        struct = outputs["output"].schema
        return None if struct is None else arrow_schema(struct)

    # -- the key-range plan ----------------------------------------------------------------------
    def _plan(self, context: OperatorContext) -> dict[str, Any]:
        """The operator's key-range plan: read, or made once and kept under the checkpoint."""
        from malhar.util.fs import StorageExistsError, filesystem_for

        if context.checkpoint is None:
            raise JdbcConfigError(f"{self.label}: a JDBC poll input needs a checkpoint location")
        fs, root = filesystem_for(context.checkpoint)
        path = fs.join(root, "malhar", PLAN_DIR, f"{context.name}.json")
        existing = fs.status(path)
        if existing is None:
            plan = self._make_plan(context.partitions)
            tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
            fs.create(tmp, json.dumps(plan, sort_keys=True).encode())
            try:
                fs.rename(tmp, path, overwrite=False)
                log.info("%s: key-range plan %s", self.label, plan)
            except StorageExistsError:  # another partition made it first: use that one
                fs.delete(tmp)
        plan = json.loads(fs.read_all(path))
        if self.bounded and "max" not in plan:
            raise JdbcConfigError(
                f"{self.label}: bounded=True reads the rows present when the key-range plan "
                f"was made, but the checkpoint's plan ({path}) was made by an unbounded run "
                "(or before that bound was recorded): it has no largest key, so no partition "
                "can tell where the input ends (the largest key "
                "now would take in rows added since, and differ between partitions and "
                "restarts). Run this checkpoint with bounded=False (it polls as before), or "
                "start the bounded run on a new checkpoint directory (start_after leaves out "
                "the keys already read)"
            )
        # a partition with no state yet (a crash before its first snapshot) replays its
        # recorded windows: the plan is then what knows the source
        self._check_source(plan.get("source"), f"the checkpoint's key-range plan ({path})")
        if plan["partitions"] != context.partitions or plan["key_column"] != self.key_column:
            raise JdbcConfigError(
                f"{self.label}: the checkpoint's key-range plan ({path}) is for "
                f"{plan['partitions']} partitions by {plan['key_column']!r}, the operator now "
                f"has {context.partitions} by {self.key_column!r}: keep them for the life of "
                "the checkpoint"
            )
        return plan

    def _start(self) -> Any:
        """``start_after`` as an encoded key of the key column's type (None: not set)."""
        if self.start_after is None:
            return None
        key_type = self._types[self._key_index]
        return encode_key(start_key(self.start_after, key_type, self.label))

    def _make_plan(self, n: int) -> dict[str, Any]:
        start = self._start()
        low_arg = None if start is None else decode_key(start)
        # bounded: the largest key now is where the input ends (the ranges are cut below
        # it, so that rows added while the plan is made fall to the last partition);
        # unbounded plans leave it out (a key the driver cannot convert is then reported
        # by the read that meets it, naming the row)
        top = self._max_key() if self.bounded else None
        high_arg = None if top is None else decode_key(top)
        bounds: list[Any] = []
        empty = False
        if n > 1:
            q = self._query
            has_low, has_high = start is not None, top is not None
            count = int(
                self._scalar(q.count_sql(has_low, has_high), params(low_arg, high_arg)) or 0
            )
            empty = count == 0
            for i in range(1, n):
                if empty:
                    bounds.append(start)
                    continue
                offset = max(0, (i * count) // n - 1)
                key = self._scalar(
                    q.nth_key_sql(has_low, has_high), params(low_arg, high_arg, offset=offset)
                )
                bounds.append(
                    encode_key(key) if key is not None else (bounds[-1] if bounds else start)
                )
        plan = {
            "partitions": n,
            "key_column": self.key_column,
            "source": self.source_identity(),
            "start": start,
            "bounds": bounds,
            "empty": empty,
            "created": time.time(),
        }
        if self.bounded:  # an unbounded plan has no end: a bounded restart of it is refused
            plan["max"] = top
        return plan
