"""``df.writeStream.format("malhar_jdbc")``: the transactional JDBC output as a Spark sink.

Every task writes its partition's rows of micro-batch ``N`` in one transaction,
together with the meta row ``(name, operator, task partition) -> N`` (the same
meta table as the malhar operator). A batch that Spark re-runs after a failure
(same ``batchId``, same data) finds itself committed and is skipped.

**The identity is the stable ``name`` option plus Spark's ``batchId``.** Spark
restarts ``batchId`` at 0 with a new checkpoint: keep the query's checkpoint for
as long as you keep its rows, or use a new ``name`` with a new checkpoint (the
malhar engine keeps its own window ids and has no such caveat). A batch id lower
than the committed one (a new checkpoint under an old name) fails the query with
:class:`~malhar.io.jdbc.errors.WindowRegressionError` rather than being skipped.

Options: ``url`` (required), ``name`` (required), ``table`` + ``mode`` (``insert``,
``upsert``, ``merge_add``) + ``key_columns``, or ``statement``; ``columns``,
``password``, ``batch_size``, ``meta_table``, ``retry_attempts``,
``retry_backoff``, ``max_backoff``, ``connect_timeout``, ``skip_older_windows``,
``operator`` (default
``sink``), ``error_table`` (rows the database rejects are stored there, in the
same transaction; without it a rejected row fails the batch).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from malhar.io.jdbc.config import JdbcOptions, split_table
from malhar.io.jdbc.errors import JdbcConfigError, JdbcError
from malhar.io.jdbc.meta_store import WindowKey, create_if_missing
from malhar.io.jdbc.rows import text_value
from malhar.io.jdbc.transaction import TransactionalWriter

log = logging.getLogger("malhar.io.jdbc")

SINK_NAME = "malhar_jdbc"
#: Spark's task-local property holding the micro-batch id (internal to Spark: checked)
BATCH_ID_PROPERTY = "streaming.sql.batchId"
_SINK_KEYS = ("name", "operator", "error_table")


def register(spark: Any) -> None:
    """Make ``format("malhar_jdbc")`` known to ``spark`` (once per session)."""
    spark.dataSource.register(JdbcSink)


@dataclass
class JdbcCommit(WriterCommitMessage):
    """What one task did with its partition of a micro-batch."""

    partition: int
    batch: int
    written: int = 0
    rejected: int = 0
    skipped: bool = False


class ErrorTable:
    """Rows the database rejected, stored with the batch that carried them."""

    def __init__(self, name: str) -> None:
        schema, table = split_table(name)
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("app_id", sa.String(255), nullable=False),
            sa.Column("operator_id", sa.String(255), nullable=False),
            sa.Column("partition_id", sa.Integer, nullable=False),
            sa.Column("window_id", sa.BigInteger, nullable=False),
            sa.Column("row_json", sa.Text, nullable=False),
            sa.Column("error", sa.Text, nullable=False),
            sa.Column(
                "created_at",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.current_timestamp(),
            ),
            schema=schema,
        )

    def ensure(self, engine: sa.Engine) -> None:
        """Create the table unless it exists (once per table and process)."""
        key = (str(engine.url), self.table.schema, self.table.name)
        if key not in _ENSURED:
            create_if_missing(engine, self.table)
            _ENSURED.add(key)

    def insert(self, conn: sa.Connection, key: WindowKey, window: int, rows: list[dict]) -> None:
        conn.execute(
            self.table.insert(),
            [
                {
                    "app_id": key.application,
                    "operator_id": key.operator,
                    "partition_id": key.partition,
                    "window_id": window,
                    "row_json": json.dumps(
                        {k: v for k, v in r.items() if k != "error"}, default=text_value
                    ),
                    "error": r["error"],
                }
                for r in rows
            ],
        )


_ENSURED: set[tuple] = set()  # error tables known to exist, per process

# Writers live as long as the Python worker (Spark reuses workers): one per partition key.
_WRITERS: OrderedDict[tuple, TransactionalWriter] = OrderedDict()
_MAX_WRITERS = 32


def _writer(options: JdbcOptions, key: WindowKey) -> TransactionalWriter:
    cache_key = (repr(options), options.url, options.password, key)
    writer = _WRITERS.pop(cache_key, None)
    if writer is None:
        writer = TransactionalWriter(options, key).open()
    _WRITERS[cache_key] = writer
    while len(_WRITERS) > _MAX_WRITERS:
        _, old = _WRITERS.popitem(last=False)
        old.close()
    return writer


class JdbcStreamWriter(DataSourceStreamArrowWriter):
    """Writes each task's rows of a micro-batch in one transaction (see the module doc)."""

    def __init__(
        self, options: JdbcOptions, name: str, operator: str, error_table: str | None
    ) -> None:
        self.options = options
        self.name = name
        self.operator = operator
        self.error_table = error_table

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if batch_id is None:
            raise JdbcError(
                f"{SINK_NAME}: no micro-batch id in the task (Spark property "
                f"{BATCH_ID_PROPERTY!r}); this sink works only in streaming queries"
            )
        batch, partition = int(batch_id), ctx.partitionId()
        key = WindowKey(self.name, self.operator, partition)
        writer = _writer(self.options, key)
        writer.refresh()
        if writer.is_committed(batch):
            for _ in iterator:  # the batch is replayed: its rows are already in the table
                pass
            return JdbcCommit(partition, batch, skipped=True)
        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return JdbcCommit(partition, batch)
        rows = pa.Table.from_batches(batches)
        if self.options.columns:
            rows = rows.select(list(self.options.columns))
        errors = ErrorTable(self.error_table) if self.error_table else None
        if errors is not None:
            engine = writer.engine
            writer.retrying("creating the error table", lambda: errors.ensure(engine))

        def on_rejected(conn: sa.Connection, window: int, rejected: list[dict]) -> None:
            if errors is None:
                first = rejected[0]["error"]
                raise JdbcError(
                    f"{SINK_NAME} {key}: the database rejected {len(rejected)} row(s) of batch "
                    f"{window} ({first}); set option error_table to keep them instead"
                )
            errors.insert(conn, key, window, rejected)

        result = writer.write_window(batch, rows, on_rejected=on_rejected)
        return JdbcCommit(
            partition, batch, result.written, len(result.rejected), skipped=result.skipped
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, JdbcCommit)]
        log.info(
            "%s %s: batch %d committed: %d rows written, %d rejected, %d partitions skipped",
            SINK_NAME,
            self.name,
            batchId,
            sum(m.written for m in done),
            sum(m.rejected for m in done),
            sum(m.skipped for m in done),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Partitions that committed keep their rows: the re-run of batchId skips them.
        log.warning("%s %s: batch %d aborted", SINK_NAME, self.name, batchId)


class JdbcSink(DataSource):
    """``writeStream.format("malhar_jdbc")``: exactly-once rows in a database table."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> JdbcStreamWriter:
        opts = {str(k).lower(): v for k, v in self.options.items()}
        name = opts.get("name")
        if not name:
            raise JdbcConfigError(
                f"{SINK_NAME}: option 'name' is required: a stable name for this query, "
                "kept across restarts (it keys the meta rows with Spark's batchId)"
            )
        jdbc = {k: v for k, v in opts.items() if k not in _SINK_KEYS}
        options = JdbcOptions.from_mapping(jdbc).check()
        return JdbcStreamWriter(
            options, name, opts.get("operator") or "sink", opts.get("error_table") or None
        )
