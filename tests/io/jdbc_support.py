"""Shared pieces of the JDBC connector tests (``tests/io/test_jdbc_*.py``): unique names,
one statement on the real PostgreSQL fixture, a fresh table, the database URL as a secret
reference for the Spark data sources."""

from __future__ import annotations

import uuid
from typing import Any


def unique_name(prefix: str) -> str:
    """``prefix_<8 hex>``: a table or application name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def run_sql(pg: Any, sql: str, params: tuple = ()) -> list[tuple]:
    """Run one statement in its own transaction on ``pg``; its rows (none for DDL/DML). No
    ``params``: the text goes as it is (a ``%`` is just a ``%``)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            rows = cur.fetchall() if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()


def new_table(pg: Any, prefix: str, columns: str) -> str:
    """Create a table named after ``prefix`` with ``columns`` (SQL); its name."""
    name = unique_name(prefix)
    run_sql(pg, f"CREATE TABLE {name} ({columns})")
    return name


#: the environment variable :func:`jdbc_url_reference` names
URL_ENV = "MALHAR_TEST_PG_URL"


def jdbc_url_reference(spark: Any, pg: Any, monkeypatch: Any) -> str:
    """``${env:...}`` naming the test database's URL (with its password), set in the
    environment of the driver and of Spark's Python workers (``SparkContext.environment``:
    the JVM started before the test set it); the JDBC data sources refuse a literal one."""
    monkeypatch.setenv(URL_ENV, pg.sqlalchemy_url)
    monkeypatch.setitem(spark.sparkContext.environment, URL_ENV, pg.sqlalchemy_url)
    return "${env:" + URL_ENV + "}"
