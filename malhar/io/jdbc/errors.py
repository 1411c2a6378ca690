"""Errors of the JDBC output, and how a database failure is classified.

Three kinds of failure matter to a transactional output:

- **transient**: the database is unreachable or went away (connection refused,
  server closed the connection, shutting down / starting up, serialization
  failure, deadlock), or a bounded wait ran out (``lock_timeout``: another writer
  holds the partition's meta row, ``statement_timeout``): the whole window
  transaction is retried with backoff;
- **row**: the database rejected the data (SQLSTATE classes 22 "data exception"
  and 23 "integrity constraint violation", or a DB-API ``DataError`` /
  ``IntegrityError`` on other databases): the rows go to the error port;
- anything else (missing table or column, syntax, permissions, wrong
  password): a clear error, never retried.
"""

from __future__ import annotations

from typing import Any

from malhar.io.base.output import (
    OutputConfigError,
    OutputError,
    OutputUnavailableError,
    WindowRegressionError,
)

__all__ = [
    "JdbcConfigError",
    "JdbcConnectionError",
    "JdbcError",
    "JdbcTargetConflictError",
    "WindowRegressionError",
]

#: SQLSTATEs of a bounded wait that ran out: retried like an outage, reported as such
TIMEOUT_SQLSTATES = frozenset(
    {
        "55P03",  # lock_not_available (lock_timeout, NOWAIT)
        "57014",  # query_canceled (statement_timeout)
    }
)
#: SQLSTATEs worth retrying besides class 08 (connection exception)
TRANSIENT_SQLSTATES = (
    frozenset(
        {
            "40001",  # serialization_failure
            "40P01",  # deadlock_detected
            "53300",  # too_many_connections
            "57P01",  # admin_shutdown
            "57P02",  # crash_shutdown
            "57P03",  # cannot_connect_now (starting up / shutting down)
        }
    )
    | TIMEOUT_SQLSTATES
)

#: words in a connection error that mean "retrying will not help"
_PERMANENT = (
    "password authentication failed",
    "authentication failed",
    "no pg_hba.conf entry",
    "does not exist",
    "permission denied",
    "access denied",
    "no such table",
    "no such column",
    "syntax error",
    "unknown database",
    "invalid dsn",
    "could not translate host name",
)
#: words that mean the server is going away or coming back
_TRANSIENT_WORDS = (
    "starting up",
    "shutting down",
    "terminating connection",
    "closed the connection",
)


class JdbcError(OutputError):
    """The JDBC output failed; the message names the table and window (never a password)."""


class JdbcConfigError(JdbcError, OutputConfigError):
    """The settings cannot work: missing table or column, missing key, contradicting options."""


class JdbcConnectionError(JdbcError, OutputUnavailableError):
    """The database cannot be reached or refuses the login (after the configured retries)."""


class JdbcTargetConflictError(JdbcConfigError):
    """A meta row that belongs to another target table: two applications share a name, or
    an application was re-pointed at another table."""


def original(exc: BaseException) -> BaseException:
    """The DB-API exception behind a SQLAlchemy one (or ``exc`` itself)."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error, when the driver reports one."""
    orig = original(exc)
    code = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    return str(code) if code else None


def _dbapi_kinds(exc: BaseException) -> set[str]:
    return {k.__name__ for k in type(exc).__mro__}


def is_transient(exc: BaseException) -> bool:
    """True when the failure is the database being unavailable: retry the window."""
    if getattr(exc, "connection_invalidated", False):
        return True
    try:
        from sqlalchemy import exc as sa_exc

        if isinstance(exc, sa_exc.DisconnectionError | sa_exc.TimeoutError):
            return True
    except ImportError:  # pragma: no cover - sqlalchemy is a dependency of this package
        pass
    orig = original(exc)
    code = sqlstate(exc)
    if code:
        return code.startswith("08") or code in TRANSIENT_SQLSTATES
    if isinstance(orig, ConnectionError | TimeoutError):
        return True
    kinds = _dbapi_kinds(orig)
    text = str(orig).lower()
    if "InterfaceError" in kinds:  # psycopg2: "connection already closed"
        return True
    if "OperationalError" in kinds:
        if any(w in text for w in _TRANSIENT_WORDS):
            return True
        return not any(p in text for p in _PERMANENT)
    return False


def is_timeout(exc: BaseException) -> bool:
    """True when a bounded wait ran out (``lock_timeout``, ``statement_timeout``; SQLite's
    "database is locked" after its busy timeout)."""
    code = sqlstate(exc)
    if code:
        return code in TIMEOUT_SQLSTATES
    return "database is locked" in str(original(exc)).lower()


def is_row_error(exc: BaseException) -> bool:
    """True when the database rejected the rows themselves (bad value, constraint)."""
    code = sqlstate(exc)
    if code:
        return code[:2] in ("22", "23")
    kinds = _dbapi_kinds(original(exc)) | _dbapi_kinds(exc)
    return bool(kinds & {"IntegrityError", "DataError"})


def db_message(exc: BaseException) -> str:
    """The database's own message for ``exc`` (primary message and detail), one line each."""
    orig = original(exc)
    diag: Any = getattr(orig, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if primary:
        detail = getattr(diag, "message_detail", None)
        return f"{primary} (DETAIL: {detail})" if detail else str(primary)
    text = str(orig).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # psycopg2 connection errors end with a hint line; keep the first two lines at most
    return " ".join(lines[:2]) if lines else type(orig).__name__
