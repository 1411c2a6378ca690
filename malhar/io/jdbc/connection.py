"""SQLAlchemy engines for the JDBC output: small pools, pinged before use, shared per process
(see :mod:`malhar.io.jdbc.engine_cache`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from malhar.io.jdbc.config import JdbcOptions


def create_engine(options: JdbcOptions) -> sa.Engine:
    """An engine for ``options``: pre-ping (a restarted server is noticed before use),
    statement parameters kept out of error messages, and for SQLite the documented
    recipe that makes SAVEPOINT and transactional DDL work with pysqlite."""
    url = options.sqlalchemy_url()
    kwargs: dict[str, Any] = {"pool_pre_ping": True, "hide_parameters": True}
    backend = url.get_backend_name()
    if backend == "postgresql" and url.get_driver_name() in ("psycopg2", ""):
        kwargs["connect_args"] = {
            "connect_timeout": int(options.connect_timeout),
            "application_name": "malhar",
        }
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
