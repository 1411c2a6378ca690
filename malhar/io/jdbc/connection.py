"""SQLAlchemy engines for the JDBC output: small pools, pinged before use, shared per process
(see :mod:`malhar.io.jdbc.engine_cache`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from malhar.io.jdbc.config import JdbcSettings


def _ms(seconds: float | int | None) -> int:
    return max(0, round(float(seconds or 0) * 1000))


def create_engine(settings: JdbcSettings) -> sa.Engine:
    """An engine for ``settings``: pre-ping (a restarted server is noticed before use),
    statement parameters kept out of error messages, bounded waits (PostgreSQL:
    ``lock_timeout`` and ``statement_timeout`` of every session; SQLite: the busy
    timeout), and for SQLite the documented recipe that makes SAVEPOINT and
    transactional DDL work with pysqlite."""
    url = settings.sqlalchemy_url()
    kwargs: dict[str, Any] = {"pool_pre_ping": True, "hide_parameters": True}
    backend = url.get_backend_name()
    if backend == "postgresql" and url.get_driver_name() in ("psycopg2", ""):
        kwargs["connect_args"] = {
            "connect_timeout": int(settings.connect_timeout),
            "application_name": "malhar",
            "options": (
                f"-c lock_timeout={_ms(settings.lock_timeout)} "
                f"-c statement_timeout={_ms(settings.statement_timeout)}"
            ),
        }
    elif backend == "sqlite":
        # pysqlite waits this long for another writer's lock ("database is locked")
        wait = float(settings.lock_timeout or 0) or 3600 * 24
        kwargs["connect_args"] = {"timeout": wait}
    if backend != "sqlite":
        kwargs.update(pool_size=1, max_overflow=4)  # writers of a process share it
    engine = sa.create_engine(url, **kwargs)
    if backend == "sqlite":
        _sqlite_transactions(engine)
    return engine


def _sqlite_transactions(engine: sa.Engine) -> None:
    # pysqlite's own transaction handling defers BEGIN and breaks SAVEPOINT; SQLAlchemy's
    # SQLite dialect docs ("Serializable isolation / Savepoints / Transactional DDL")
    # give this recipe: turn it off and emit BEGIN ourselves.
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN")


def uses_psycopg2(conn: sa.Connection) -> bool:
    """True when ``conn`` is PostgreSQL through psycopg2 (COPY and execute_batch available)."""
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg2"


def driver_connection(conn: sa.Connection) -> Any:
    """The DB-API connection under ``conn`` (same transaction)."""
    return conn.connection.driver_connection
