"""The Spark sink base of a transactional output (``df.writeStream.format(...)``):
:class:`TransactionalStreamWriter` writes each task's partition of micro-batch ``N`` as
window ``N`` of its output partition through a
:class:`~malhar.io.base.committer.WindowCommitter`, on the same store as the operator.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from malhar.io.base.committer import WindowCommitter, WindowResult
from malhar.io.base.executions import checkpoint_option, first_execution
from malhar.io.base.output import (
    ERROR_FIELD,
    OutputError,
    TransactionalSettings,
    TransactionalStore,
    WindowContentMismatchError,
    WindowKey,
    batch_digest,
)
from malhar.properties import Property, PropertyError, properties_of

log = logging.getLogger("malhar.io.output")

T = TypeVar("T")
Txn = TypeVar("Txn")


# -- the Spark sink -------------------------------------------------------------------------------
#: Spark's task-local property holding the micro-batch id (internal to Spark: checked)
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: options Spark itself adds to a sink's options
SPARK_SINK_OPTIONS = frozenset({"checkpointlocation", "path"})


class TransactionalSinkSettings(TransactionalSettings):
    """Settings every transactional Spark sink has besides the connector's own."""

    name = Property(
        str, not_null=True, doc="the query's stable name: keys the committed batches (required)"
    )
    operator = Property(str, default="sink", not_null=True, doc="the operator part of the key")
    verify_reruns = Property(
        bool,
        default=True,
        doc="fingerprint each partition's batch and refuse a re-run with other rows",
    )

    def from_options(self, options: Mapping[str, Any]) -> TransactionalSinkSettings:
        """Set the properties from Spark's string options (names case-insensitive; Spark's
        own options are skipped; an unknown name fails with "did you mean")."""
        mine = {k: v for k, v in options.items() if str(k).lower() not in SPARK_SINK_OPTIONS}
        try:
            self.configure_from_strings(mine)
        except PropertyError as exc:
            raise self.config_error(str(exc)) from None
        return self


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did with its partition of a micro-batch."""

    partition: int
    batch: int
    written: int = 0
    rejected: int = 0
    skipped: bool = False  #: committed earlier: nothing written
    verified: bool = False  #: skipped, and its rows matched the committed fingerprint
    staged: str | None = None  #: the run whose staged rows the driver's commit applies
    digest: str | None = None


# Committers live as long as the Python worker (Spark reuses workers): one per partition key.
_COMMITTERS: OrderedDict[tuple, WindowCommitter[Any]] = OrderedDict()
_MAX_COMMITTERS = 32


class TransactionalStreamWriter(DataSourceStreamArrowWriter):
    """The Spark sink base of a transactional output: each task writes its partition of
    micro-batch ``N`` through a :class:`WindowCommitter` as window ``N`` of the output
    partition ``(name, operator, task partition)``.

    A connector author fills :meth:`create_store` (and :meth:`batch_rows` to check rows).

    **Re-runs.** Spark re-runs a micro-batch after a failure with the same ``batchId``;
    partitions that committed it skip. Exactly once needs every partition to get the
    same rows again. With ``verify_reruns`` (the default) each partition records a
    fingerprint of its rows (:func:`batch_digest`) with the committed batch:

    - a partition that committed the batch compares the re-run's rows and fails with
      :class:`WindowContentMismatchError` when they differ;
    - a partition that did not commit it, in a batch that other partitions committed in an
      earlier execution (a *partial* batch), does not write: it stages its rows, and the
      driver's :meth:`commit` applies them only when every partition that committed the
      batch earlier matched. Whatever the re-run's distribution, the rows not yet written
      are then exactly the staged ones.

    Args:
        settings: the sink's settings (shipped to the tasks).
        run: this execution's token (recorded with each committed batch); a new one by
            default: Spark builds a writer for every execution of a batch.
    """

    def __init__(self, settings: TransactionalSinkSettings, run: str | None = None) -> None:
        self.settings = settings
        self.run = run or uuid.uuid4().hex[:16]
        #: the batch this writer runs for the first time (None: a re-run, or unknown)
        self.first_of: int | None = None

    def planned(self, options: Mapping[str, Any]) -> Self:
        """Learn, where Spark builds this writer (the driver), whether its micro-batch runs
        for the first time (:mod:`malhar.io.base.executions`): its tasks then skip the
        search for a partly committed batch, which only a re-run can be."""
        sink = f"{self.settings.name}/{self.settings.operator}"
        self.first_of = first_execution(checkpoint_option(dict(options)), sink)
        return self

    # -- to fill ------------------------------------------------------------------------------
    def create_store(self, key: WindowKey) -> TransactionalStore[Any]:
        """The store of one sink partition (not opened yet)."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_store()")

    def batch_rows(
        self, store: TransactionalStore[Any], rows: pa.Table
    ) -> tuple[pa.Table, list[dict[str, Any]]]:
        """The rows to write and the rows refused before the store (by default all rows
        are written)."""
        return rows, []

    def on_rejected(self, txn: Any, window: int, rejected: list[dict[str, Any]]) -> None:
        """Called in the transaction with the batch's rejected rows when the store does not
        record them (a sink has no error port): by default the batch fails, naming the
        first reason."""
        raise OutputError(
            f"{type(self).__name__} {self.settings.name}: {len(rejected)} row(s) of batch "
            f"{window} cannot be written ({rejected[0].get(ERROR_FIELD)}), and the store "
            "keeps no rejected rows"
        )

    def before_commit(self, txn: Any, window: int) -> None:
        """Called inside the transaction just before commit."""

    # -- running ---------------------------------------------------------------------------
    def committer(self, key: WindowKey) -> WindowCommitter[Any]:
        """This process's opened committer of ``key`` (created on first use)."""
        cache_key = (type(self), self._settings_key(), key)
        found = _COMMITTERS.pop(cache_key, None)
        if found is None:
            found = WindowCommitter(
                self.create_store(key),
                retry=self.settings.retry_policy(),
                skip_older_windows=bool(self.settings.skip_older_windows),
            )
            found.open()
        _COMMITTERS[cache_key] = found
        while len(_COMMITTERS) > _MAX_COMMITTERS:
            _, old = _COMMITTERS.popitem(last=False)
            old.close()
        return found

    def _settings_key(self) -> tuple:
        props = properties_of(type(self.settings))
        return tuple((n, repr(getattr(self.settings, n))) for n in sorted(props))

    def key(self, partition: int) -> WindowKey:
        return WindowKey(self.settings.name, self.settings.operator, partition)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if batch_id is None:
            raise OutputError(
                f"{type(self).__name__}: no micro-batch id in the task (Spark property "
                f"{BATCH_ID_PROPERTY!r}); this sink works only in streaming queries"
            )
        batch, partition = int(batch_id), ctx.partitionId()
        key = self.key(partition)
        committer = self.committer(key)
        committer.refresh()
        verify = bool(self.settings.verify_reruns)
        if committer.committed >= batch and not verify:
            committer.is_committed(batch)  # raises for a regression
            for _ in iterator:  # the batch is replayed: its rows are already written
                pass
            return SinkCommit(partition, batch, skipped=True)
        batches = [b for b in iterator if b.num_rows]
        data = pa.Table.from_batches(batches) if batches else pa.table({})
        digest = batch_digest(data) if verify else None
        if committer.is_committed(batch):
            verified = committer.verify(batch, digest)
            return SinkCommit(partition, batch, skipped=True, verified=verified, digest=digest)
        store = committer.store
        if (
            verify
            and store.stages_batches
            and batch != self.first_of
            and self._partial(committer, batch, partition)
        ):
            committer.retrying(f"staging batch {batch}", lambda: store.stage(batch, self.run, data))
            return SinkCommit(partition, batch, staged=self.run, digest=digest)
        if not data.num_rows:
            return SinkCommit(partition, batch)
        result = self._apply(committer, batch, data, digest, self.run, staged=False)
        return SinkCommit(
            partition, batch, result.written, len(result.rejected), result.skipped, digest=digest
        )

    def _partial(self, committer: WindowCommitter[Any], batch: int, partition: int) -> bool:
        """True when other partitions committed ``batch`` in an earlier execution."""
        store = committer.store
        found = committer.retrying(
            f"reading the partitions of batch {batch}",
            lambda: store.committed_partitions(batch),
        )
        return any(p != partition and run != self.run for p, run in found.items())

    def _apply(
        self,
        committer: WindowCommitter[Any],
        batch: int,
        data: pa.Table,
        digest: str | None,
        run: str,
        *,
        staged: bool,
    ) -> WindowResult:
        store = committer.store
        rows, bad = self.batch_rows(store, data)

        def before(txn: Any, window: int) -> None:
            if staged:
                store.drop_staged(txn, window)
            self.before_commit(txn, window)

        return committer.commit_window(
            batch,
            rows,
            rejected=bad,
            digest=digest,
            run=run,
            on_rejected=None if store.records_rejected else self.on_rejected,
            before_commit=before,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        staged = [m for m in done if m.staged]
        if staged:
            self._apply_staged(batchId, done, staged)
        log.info(
            "%s %s: batch %d committed: %d rows written, %d rejected, %d partitions skipped, "
            "%d applied from staging",
            type(self).__name__,
            self.settings.name,
            batchId,
            sum(m.written for m in done),
            sum(m.rejected for m in done),
            sum(m.skipped for m in done),
            len(staged),
        )

    def _apply_staged(self, batch: int, done: list[SinkCommit], staged: list[SinkCommit]) -> None:
        """The driver's half of a partial batch: apply the staged partitions once every
        partition that committed the batch in an earlier execution has matched."""
        run = staged[0].staged
        assert run is not None
        first = self.committer(self.key(staged[0].partition))
        earlier = first.retrying(
            f"reading the partitions of batch {batch}",
            lambda: first.store.committed_partitions(batch),
        )
        matched = {m.partition for m in done if m.verified}
        unverified = sorted(p for p, r in earlier.items() if r != run and p not in matched)
        if unverified:
            raise WindowContentMismatchError(
                f"{self.settings.name}: batch {batch} was partly committed by an earlier "
                f"execution (partitions {sorted(earlier)}), and partitions {unverified} of it "
                "did not re-run with the same rows, so the rows still to write cannot be "
                f"known; the staged partitions {sorted(m.partition for m in staged)} are not "
                "applied. The re-run of a micro-batch must have the same partitions and rows"
            )
        for m in staged:
            committer = self.committer(self.key(m.partition))
            store = committer.store
            data = committer.retrying(
                f"reading the staged rows of batch {batch}",
                functools.partial(store.staged, batch, run),
            )
            if data is None:
                raise OutputError(
                    f"{self.key(m.partition)}: the staged rows of batch {batch} (run {run}) are "
                    f"missing from {store.describe()}"
                )
            m.digest = m.digest or (batch_digest(data) if self.settings.verify_reruns else None)
            result = self._apply(committer, batch, data, m.digest, run, staged=True)
            m.written, m.rejected, m.skipped = result.written, len(result.rejected), result.skipped

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Partitions that committed keep their rows: the re-run of batchId skips them.
        log.warning("%s %s: batch %d aborted", type(self).__name__, self.settings.name, batchId)


__all__ = ["SinkCommit", "TransactionalSinkSettings", "TransactionalStreamWriter"]
