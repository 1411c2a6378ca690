"""The JDBC connectors' checks before a launch (:meth:`malhar.Operator.preflight`): one
connection with the connector's URL and credentials, waiting at most the check's timeout;
the poll input's table or query answers with its key column and the port's fields, the
output's table has the configured columns and a unique constraint on its key (or a
statement compiles against the database), and a typed input stream's rows could be written
there (its fields are columns; the key, the configured columns and the binds are fields). Nothing is created: the meta tables come at
launch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TypeVar

from malhar.io.base.output import RetryPolicy, WindowKey
from malhar.io.jdbc.config import JdbcConnectionSettings, JdbcSettings
from malhar.io.jdbc.connection import create_engine
from malhar.io.jdbc.errors import JdbcConfigError, JdbcConnectionError, db_message
from malhar.io.jdbc.poll_settings import JdbcPollSettings
from malhar.io.jdbc.store import JdbcStore, TargetInfo
from malhar.properties import properties_of
from malhar.suggest import did_you_mean

__all__ = ["check_output", "check_poll_input"]

S = TypeVar("S", bound=JdbcConnectionSettings)

#: one attempt: a database that does not answer is the finding, not something to wait out
ONCE = RetryPolicy(attempts=1, backoff=0.0, max_backoff=0.0)


def check_poll_input(settings: JdbcPollSettings, label: str, timeout: float) -> str:
    """The source's columns and key (read from a query that returns no row)."""
    from malhar.io.jdbc.poll_source import _Core

    waiting = _waiting(settings, JdbcPollSettings, timeout)
    _no_new_database(waiting, label)
    core = _Core(waiting, label, retry=ONCE)
    try:
        names = list(core._names)
    finally:
        core.close()
    return f"{settings.source}: columns {names}, key {settings.key_column!r}"


def check_output(
    settings: JdbcSettings, label: str, timeout: float, fields: Sequence[str] | None = None
) -> str:
    """The target table and its columns (or the statement's target and binds); with the
    ``fields`` of a typed input stream, that its rows can be written at all."""
    s = _waiting(settings, JdbcSettings, timeout)
    _no_new_database(s, label)
    engine = create_engine(s)
    try:
        try:
            conn = engine.connect()
        except Exception as exc:
            raise JdbcConnectionError(
                f"{label}: cannot connect to {s.redacted_url}: {db_message(exc)}"
            ) from None
        with conn:
            try:
                info = JdbcStore(s, WindowKey("preflight", label, 0)).inspect(conn)
            except JdbcConfigError as exc:
                raise JdbcConfigError(f"{label}: {exc}") from None
    finally:
        engine.dispose()
    if fields is not None:
        problems = _unwritable(s, info, list(fields))
        if problems:
            raise JdbcConfigError(f"{label}: " + "; ".join(problems))
    if s.statement:
        return f"{s.redacted_url}: statement into {info.target_id}, binds {list(info.binds)}"
    key = f", key {list(s.keys)} unique" if s.keys else ""
    return f"{s.redacted_url}: table {info.target_id}, columns {list(info.columns)}{key}"


def _unwritable(s: JdbcSettings, info: TargetInfo, fields: list[str]) -> list[str]:
    """Why no row of a stream with these fields could be written (each would go to the
    error port): a field that is not a column, a key or bind it lacks, a configured
    column it never carries."""
    stream = f"the input stream's fields {fields}"

    def lacking(what: str, names: Sequence[str], fix: str) -> list[str]:
        gone = [n for n in names if n not in fields]
        if not gone:
            return []
        return [f"{what} {gone} are not among {stream}: {fix}" + did_you_mean(gone[0], fields)]

    if s.statement:
        return lacking("the statement's binds", info.binds, "every row would be refused")
    if s.column_names:
        return lacking("columns", s.column_names, "rename them in columns or upstream")
    out = []
    unknown = [f for f in fields if f not in info.columns]
    if unknown:
        out.append(
            f"{stream} include {unknown}, which are not columns of {info.target_id} (its "
            f"columns: {list(info.columns)}): every row would be refused; rename them "
            "upstream, or set columns to the ones to write" + did_you_mean(unknown[0], info.columns)
        )
    return out + lacking("key_columns", s.keys, "every row would be refused")


def _no_new_database(settings: JdbcConnectionSettings, label: str) -> None:
    """A SQLite file that is not there would be created by the connection: say so."""
    url = settings.sqlalchemy_url()
    database = url.database or ""
    on_disk = database not in ("", ":memory:") and not database.startswith("file:")
    if url.get_backend_name() == "sqlite" and on_disk and not os.path.exists(database):
        raise JdbcConfigError(
            f"{label}: the SQLite database {database} does not exist (a connection would "
            "create it empty): give the path of the database the application uses"
        )


def _waiting(settings: S, cls: type[S], timeout: float) -> S:
    """A copy of ``settings`` as ``cls`` whose connection waits at most ``timeout``."""
    out = cls()
    out.configure(**{n: getattr(settings, n) for n in properties_of(cls)})
    out.connect_timeout = max(1, min(int(out.connect_timeout), math.ceil(timeout)))
    return out
