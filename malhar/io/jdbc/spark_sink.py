"""``df.writeStream.format("malhar_jdbc")``: the transactional JDBC output as a Spark sink,
on :class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`.

Every task writes its partition's rows of micro-batch ``N`` in one transaction,
together with the meta row ``(name, operator, task partition) -> N`` (the same
meta table as the malhar operator). A batch that Spark re-runs after a failure
finds itself committed and is skipped; with ``verify_reruns`` (the default) its rows
must be the same as the first time, and a partly committed batch is completed
without writing any row twice (see the base class).

**The identity is the stable ``name`` option plus Spark's ``batchId``.** Spark
restarts ``batchId`` at 0 with a new checkpoint: keep the query's checkpoint for
as long as you keep its rows, or use a new ``name`` with a new checkpoint (the
malhar engine keeps its own window ids and has no such caveat). A batch id lower
than the committed one (a new checkpoint under an old name) fails the query with
:class:`~malhar.io.base.output.WindowRegressionError` rather than being skipped.

Options: the properties of :class:`~malhar.io.jdbc.config.JdbcSinkSettings` (names
are case-insensitive; an unknown name fails with "did you mean"). Without
``error_table`` a rejected row fails the batch. The password must be a reference,
``${env:NAME}`` / ``${file:/path}`` (option ``password``, or the whole ``url``), read where
the connection is made: a literal one (in ``password`` or in the URL) is refused, as it
would travel in clear in the writer Spark ships to every task.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from malhar.io.base.output import TransactionalStore, WindowKey
from malhar.io.base.spark_sink import TransactionalStreamWriter
from malhar.io.jdbc.config import JdbcSinkSettings
from malhar.io.jdbc.errors import JdbcConfigError, JdbcError
from malhar.io.jdbc.rows import window_table
from malhar.io.jdbc.store import JdbcStore

__all__ = ["SINK_NAME", "JdbcSink", "JdbcStreamWriter", "register"]

log = logging.getLogger("malhar.io.jdbc")

SINK_NAME = "malhar_jdbc"


def register(spark: Any) -> None:
    """Make ``format("malhar_jdbc")`` known to ``spark`` (once per session)."""
    spark.dataSource.register(JdbcSink)


class JdbcStreamWriter(TransactionalStreamWriter):
    """Writes each task's rows of a micro-batch in one transaction (see the module doc)."""

    settings: JdbcSinkSettings

    def create_store(self, key: WindowKey) -> JdbcStore:
        return JdbcStore(self.settings, key)

    def batch_rows(
        self, store: TransactionalStore[Any], rows: pa.Table
    ) -> tuple[pa.Table, list[dict[str, Any]]]:
        assert isinstance(store, JdbcStore)
        columns = store.info.columns
        return window_table(
            [rows] if rows.num_rows else [],
            columns=self.settings.column_names,
            default=columns,
            allowed=columns if store.target is not None else None,
            required=store.required_fields(),
        )

    def on_rejected(self, txn: Any, window: int, rejected: list[dict[str, Any]]) -> None:
        """Without ``error_table``, a row that cannot be written fails the batch."""
        raise JdbcError(
            f"{SINK_NAME} {self.settings.name}: {len(rejected)} row(s) of batch {window} "
            f"cannot be written ({rejected[0].get('error')}); set option error_table to "
            "keep them instead"
        )


class JdbcSink(DataSource):
    """``writeStream.format("malhar_jdbc")``: exactly-once rows in a database table."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> JdbcStreamWriter:
        settings = JdbcSinkSettings().from_options(dict(self.options))
        if not settings.name:
            raise JdbcConfigError(
                f"{SINK_NAME}: option 'name' is required: a stable name for this query, "
                "kept across restarts (it keys the meta rows with Spark's batchId)"
            )
        return JdbcStreamWriter(settings.check()).planned(self.options)
