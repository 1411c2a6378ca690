"""JDBC connectors: the transactional output (exactly-once rows in a database, one
transaction per window) and the replayable poll input (a table read incrementally).

- :class:`JdbcOutputOperator`: the malhar operator (entry point ``JdbcOutput``);
- :class:`JdbcSink`: the same as a Spark sink, ``df.writeStream.format("malhar_jdbc")``
  (call :func:`register` once per session);
- :class:`JdbcSettings` / :class:`JdbcSinkSettings`: the settings, declared once;
- :class:`JdbcStore`: one partition's window transactions (a
  :class:`~malhar.io.base.output.TransactionalStore`);
- :class:`JdbcPollInputOperator`: a table or query read incrementally by a growing key,
  partitioned by key ranges, exactly once (a :class:`~malhar.io.base.ReplayableInput`;
  entry point ``JdbcPollInput``); :class:`JdbcPollSettings`, its settings;
- :class:`JdbcPollSource`: the same as a Spark data source,
  ``spark.readStream.format("malhar_jdbc_poll")``.

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
from malhar.io.jdbc.poll_operator import JdbcPollInputOperator
from malhar.io.jdbc.poll_settings import JdbcPollSettings
from malhar.io.jdbc.store import JdbcStore

__all__ = [
    "MODES",
    "SINK_NAME",
    "JdbcConfigError",
    "JdbcConnectionError",
    "JdbcError",
    "JdbcOutputOperator",
    "JdbcPollInputOperator",
    "JdbcPollSettings",
    "JdbcPollSource",
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
    if name == "JdbcPollSource":
        from malhar.io.jdbc.poll_source import JdbcPollSource

        return JdbcPollSource
    if name in ("JdbcSink", "JdbcStreamWriter", "register", "SINK_NAME"):
        from malhar.io.jdbc import spark_sink

        return getattr(spark_sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
