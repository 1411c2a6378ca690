"""``df.writeStream.format("malhar_files")``: the exactly-once file output as a Spark sink, on
:class:`~malhar.io.base.spark_sink.TransactionalStreamWriter` and the operator's
:class:`~malhar.io.fs.store.FileStore`.

Every task stages its partition of micro-batch ``N`` as window ``N`` of the output partition
``(name, operator, task partition)``; files roll by the same rules as the operator's. The
driver's ``commit(N)`` runs after every task of the batch succeeded: it closes the groups
whose time (or batch count) is up and publishes every closed group up to ``N``. A batch that
Spark re-runs after a failure finds itself staged (or published) and is skipped, so a
reader of the directory sees every row once, in whole files, and never a file of a failed
batch (Spark's own file sink needs its ``_spark_metadata`` log for that, which plain
Parquet readers ignore).

Options: the properties of :class:`~malhar.io.fs.settings.FileSinkSettings` (names are
case-insensitive; an unknown one fails with "did you mean"); ``schema`` defaults to the
query's. ``name`` (required) keys the staged batches with Spark's ``batchId``: keep the
query's checkpoint for as long as its output, or use a new name with a new checkpoint.
A row that does not fit the schema fails the batch (a sink has no error port).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, WriterCommitMessage

from malhar.io.base.committer import WindowCommitter
from malhar.io.base.output import TransactionalStore, WindowKey
from malhar.io.base.spark_sink import TransactionalStreamWriter
from malhar.io.fs.conform import conform
from malhar.io.fs.paths import resolve
from malhar.io.fs.settings import FileSinkSettings
from malhar.io.fs.store import STAGING, FileStore
from malhar.schema import arrow_schema
from malhar.util.fs import StorageNotFoundError
from malhar.util.fs.names import encode_segment

__all__ = ["SINK_NAME", "FileSink", "FileStreamWriter", "register"]

log = logging.getLogger("malhar.io.fs")

SINK_NAME = "malhar_files"


def register(spark: Any) -> None:
    """Make ``format("malhar_files")`` known to ``spark`` (once per session)."""
    spark.dataSource.register(FileSink)


class FileStreamWriter(TransactionalStreamWriter):
    """Stages each task's rows of a micro-batch; the driver publishes rolled files."""

    settings: FileSinkSettings

    def __init__(self, settings: FileSinkSettings, schema: pa.Schema, run: str | None = None):
        super().__init__(settings, run)
        self.schema = schema
        self._driver: dict[int, WindowCommitter[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_driver"] = {}
        return state

    def create_store(self, key: WindowKey) -> FileStore:
        return FileStore(self.settings, key, schema=self.schema, keep_rejected=False)

    def committer(self, key: WindowKey) -> WindowCommitter[Any]:
        found = super().committer(key)
        found.store._stale = True  # the driver rolls and publishes between batches
        return found

    def batch_rows(
        self, store: TransactionalStore[Any], rows: pa.Table
    ) -> tuple[pa.Table, list[dict[str, Any]]]:
        return conform([rows] if rows.num_rows else [], self.schema, self.settings.format)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        super().commit(messages, batchId)
        for partition in self._partitions():
            committer = self._driver.get(partition)
            if committer is None:
                committer = WindowCommitter(
                    self.create_store(self.key(partition)),
                    retry=self.settings.retry_policy(),
                    skip_older_windows=True,
                )
                committer.open()
                self._driver[partition] = committer
            store: FileStore = committer.store
            store._stale = True
            committer.refresh()
            if committer.committed < batchId and store.roll_due(batchId):
                store.force_roll = True
                try:
                    committer.commit_window(batchId, pa.table({}))
                finally:
                    store.force_roll = False
            store.committed(batchId)

    def _partitions(self) -> list[int]:
        fs, root = resolve(self.settings.path)
        folder = "/".join(
            [
                root.rstrip("/"),
                STAGING,
                encode_segment(self.settings.name),
                encode_segment(self.settings.operator),
            ]
        )
        try:
            return sorted(int(e.name) for e in fs.list(folder) if e.is_dir and e.name.isdigit())
        except StorageNotFoundError:
            return []


class FileSink(DataSource):
    """``writeStream.format("malhar_files")``: exactly-once rolling files (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> FileStreamWriter:
        options = dict(self.options)
        settings = FileSinkSettings().from_options(options)
        # Spark keeps ``path`` (``.option("path", ...)`` or ``.start(path)``) for itself: the
        # transactional base skips it, and it is this sink's output directory
        path = next((v for k, v in options.items() if str(k).lower() == "path"), None)
        if path:
            settings.path = path
        settings.check_settings()
        arrow = settings.arrow_schema if settings.schema else arrow_schema(schema)
        if not settings.schema and settings.partition_by:
            # checked against the query's schema here: without this a typo failed the
            # first batch's publication with a KeyError
            problems = settings.partition_problems(arrow)
            if problems:
                raise settings.config_error(f"invalid {SINK_NAME} options: " + "; ".join(problems))
        return FileStreamWriter(settings, arrow).planned(options)
