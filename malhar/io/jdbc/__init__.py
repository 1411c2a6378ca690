"""Transactional JDBC output: exactly-once rows in a database, one transaction per window.

- :class:`JdbcOutputOperator`: the malhar operator (entry point ``JdbcOutput``);
- :class:`JdbcSink`: the same as a Spark sink, ``df.writeStream.format("malhar_jdbc")``
  (call :func:`register` once per session);
- :class:`JdbcSettings` / :class:`JdbcSinkSettings`: the settings, declared once;
- :class:`JdbcStore`: one partition's window transactions (a
  :class:`~malhar.io.base.output.TransactionalStore`).

See ``docs/connectors/jdbc.md``.
"""

from __future__ import annotations

from typing import Any

from malhar.io.base.output import WindowContentMismatchError, WindowRegressionError
from malhar.io.jdbc.config import MODES, JdbcSettings, JdbcSinkSettings
from malhar.io.jdbc.errors import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcError,
    JdbcTargetConflictError,
)
from malhar.io.jdbc.output_operator import JdbcOutputOperator
from malhar.io.jdbc.store import JdbcStore

__all__ = [
    "MODES",
    "SINK_NAME",
    "JdbcConfigError",
    "JdbcConnectionError",
    "JdbcError",
    "JdbcOutputOperator",
    "JdbcSettings",
    "JdbcSink",
    "JdbcSinkSettings",
    "JdbcStore",
    "JdbcStreamWriter",
    "JdbcTargetConflictError",
    "WindowContentMismatchError",
    "WindowRegressionError",
    "register",
]


def __getattr__(name: str) -> Any:  # the Spark sink imports pyspark's data source API: lazily
    if name in ("JdbcSink", "JdbcStreamWriter", "register", "SINK_NAME"):
        from malhar.io.jdbc import spark_sink

        return getattr(spark_sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
