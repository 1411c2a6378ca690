"""Transactional JDBC output: exactly-once rows in a database, one transaction per window.

- :class:`JdbcOutputOperator`: the malhar operator (entry point ``JdbcOutput``);
- :class:`JdbcSink`: the same as a Spark sink, ``df.writeStream.format("malhar_jdbc")``
  (call :func:`register` once per session);
- :class:`JdbcTransactionalStore`: the meta table (application, operator, partition)
  -> last committed window;
- :class:`TransactionalWriter`: one partition's window transactions, for other connectors;
- :class:`JdbcOptions`: the settings, shared by all of them.

See ``docs/connectors/jdbc.md``.
"""

from malhar.io.jdbc.config import MODES, JdbcOptions
from malhar.io.jdbc.errors import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcError,
    WindowRegressionError,
)
from malhar.io.jdbc.meta_store import JdbcTransactionalStore, WindowKey
from malhar.io.jdbc.output_operator import JdbcOutputOperator
from malhar.io.jdbc.transaction import TransactionalWriter, WindowResult


def __getattr__(name: str):  # the Spark sink imports pyspark's data source API: load it lazily
    if name in ("JdbcSink", "JdbcStreamWriter", "register", "SINK_NAME"):
        from malhar.io.jdbc import spark_sink

        return getattr(spark_sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MODES",
    "SINK_NAME",
    "JdbcConfigError",
    "JdbcConnectionError",
    "JdbcError",
    "JdbcOptions",
    "JdbcOutputOperator",
    "JdbcSink",
    "JdbcStreamWriter",
    "JdbcTransactionalStore",
    "TransactionalWriter",
    "WindowKey",
    "WindowRegressionError",
    "WindowResult",
    "register",
]
