"""One output partition's window transactions on a Kafka topic: the Kafka
:class:`~malhar.io.base.output.TransactionalStore`.

``delivery="exactly_once"`` (the default). The producer's ``transactional.id`` is
``<prefix>.<application>.<operator>.<partition>``: stable across restarts, so the
``init_transactions`` of a new producer (a restarted partition, a retried task) fences the
previous one and completes or aborts whatever transaction it left open. For window ``w``
the :class:`~malhar.io.base.committer.WindowCommitter` runs, through this store::

    begin_transaction()
      the committed window, re-read after a (re)initialisation      -- >= w: skip (a replay)
      produce(record) for every row                                 -- header malhar.window=w
      send_offsets_to_transaction([topic[0] @ w + 1], group <prefix>.<app>.<op>.<partition>)
    commit_transaction()

so the records and the window id become visible together (to ``isolation.level=
read_committed`` readers) or not at all, and a replayed window that is already committed
is skipped. The committed window is the group's committed offset minus one (its metadata
holds the Spark sink's batch fingerprint); reading it is one ``OffsetFetch`` request. A
failure inside the transaction aborts it and the whole window is tried again; a fenced or
broken producer is replaced (a new ``init_transactions``), after which the committed window
is read again: a commit whose reply was lost is found committed and not written twice.

``delivery="at_least_once"``: an idempotent producer; each window is flushed at its end and
a replayed window is written again (duplicates after a restart, never losses).

``delivery="scan"`` (brokers without transactions; Malhar's
``KafkaSinglePortExactlyOnceOutputOperator`` recovery): every record carries its window id
and writer in headers; at a restart the store reads the topic from where the partition's
last completed window ended (the operator's checkpoint keeps that position; without it,
``scan_back_records`` per partition), finds the largest window it had written, and when
that window is replayed writes only the records that are not already there (matched by key
and value). Readers may see a window's records before the window completes, and a second
writer of the same partition is not fenced.

In every mode each record has the header ``malhar.window`` (the window id, ASCII digits);
in scan mode also ``malhar.writer`` (``<application>/<operator>/<partition>``).

How a failure is classified (retry the window, or which clear error) is in
:mod:`malhar.io.kafka.producer_errors`; the topic checks and record-size limits of
:meth:`KafkaOutputStore.open` are in :mod:`malhar.io.kafka.topic_limits`; the restart scan
of scan mode is in :mod:`malhar.io.kafka.scan_recovery`.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from malhar.io.base.output import (
    NO_WINDOW,
    CommitMark,
    OutputError,
    TransactionalStore,
    WindowKey,
    checkpoint_run,
    rejected_row,
)
from malhar.io.base.rejected_log import RejectedLog
from malhar.io.base.staged_batches import StagedBatches
from malhar.io.kafka.client import RECHECK_TIMEOUT_S, kafka_error, task_attempt, unreachable_advice
from malhar.io.kafka.commit_groups import admin_client, commit_mark, committed_partitions
from malhar.io.kafka.encoding import (
    WINDOW_HEADER,
    WRITER_HEADER,
    EncodedRecords,
    RecordEncoder,
    Window,
    row_at,
)
from malhar.io.kafka.errors import KafkaOutputConfigError, KafkaOutputUnreachableError
from malhar.io.kafka.output_settings import KafkaOutputSettings
from malhar.io.kafka.producer_errors import (
    DENIED_CODES,
    RECORD_CODES,
    SETTING_CODES,  # noqa: F401 (importable from here, as before the move)
    RecordsRefused,
    describe_error,
    is_transient,
    needs_new_producer,
    output_failure,
)
from malhar.io.kafka.scan_recovery import ScanRecovery, checkpoint_tag, writer_header
from malhar.io.kafka.serializers import get_serializer
from malhar.io.kafka.topic_limits import (
    DEFAULT_MESSAGE_MAX,
    RECORD_OVERHEAD,  # noqa: F401 (importable from here, as before the move)
    RecordLimits,
    check_topic,
    limit_sizes,
)

__all__ = ["KafkaOutputStore", "KafkaTxn", "RecordsRefused"]

log = logging.getLogger("malhar.io.kafka.output")


@dataclass
class KafkaTxn:
    """One attempt at one window."""

    window: int
    producer: Producer
    #: the producer was (re)initialised for this attempt: the committed window is re-read
    fresh: bool
    mark: CommitMark | None = None
    #: row index -> reason, for records the cluster refused (delivery reports)
    refused: dict[int, str] = field(default_factory=dict)
    #: delivery errors that are not about one record
    errors: list[KafkaError] = field(default_factory=list)
    #: partition -> next offset after this writer's records (delivery reports)
    ends: dict[int, int] = field(default_factory=dict)
    #: (key, value) of the records delivered in this attempt (scan)
    delivered: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    produced: int = 0
    #: delivery reports received: one per record produced with a callback
    reported: int = 0


class KafkaOutputStore(TransactionalStore[KafkaTxn]):
    """The producer, the commit group and the topic of one output partition.

    Args:
        settings: the output's settings (checked here).
        key: the partition's identity (application, operator, partition).
        positions: scan mode: per topic partition, the offset where the records of windows
            after the last completed one may start (the operator keeps it in its
            checkpoint; :attr:`positions` is the current value to keep).
        rejected: where a window's rejected rows are kept until it is complete in the
            application, so that a replay of a committed window re-emits them (the
            operator's; None: not kept, as in the Spark sink, which fails the batch).
        staging: the Spark sink's place for the rows of a partly committed batch
            (exactly_once; None: such a batch is not staged, see :attr:`stages_batches`).
        run: the output operator's checkpoint run (:func:`~malhar.io.base.output.
            checkpoint_run`), which scan mode records in each record's writer header.
        first_contact: nothing says that the cluster was ever reached (the operator's
            checkpoint holds no earlier open): :meth:`open` first waits at most
            ``request_timeout_ms`` for a metadata answer (:data:`~malhar.io.kafka.client.
            RECHECK_TIMEOUT_S` in a retried Spark task attempt) and without one raises a
            :class:`KafkaOutputUnreachableError`, instead of the window retries (each
            waiting ``request_timeout_ms``) that ride out a restart of a cluster that was
            reached.
    """

    def __init__(
        self,
        settings: KafkaOutputSettings,
        key: WindowKey,
        *,
        positions: dict[int, int] | None = None,
        rejected: RejectedLog | None = None,
        staging: StagedBatches | None = None,
        run: str | None = None,
        first_contact: bool = False,
    ) -> None:
        super().__init__(key)
        self.first_contact = first_contact
        #: the cluster answered this store
        self.reached = False
        #: the operator's checkpoint run (scan mode writes its tag into the writer header)
        self.run = run
        self._rejected = rejected
        self.records_rejected = rejected is not None
        settings.check_settings()
        self.settings = settings
        self.delivery = settings.delivery
        self.staging = staging if self.delivery == "exactly_once" else None
        self.stages_batches = self.staging is not None
        self.timeout = settings.request_timeout_ms / 1000
        self.writer = f"{key.application}/{key.operator}/{key.partition}"
        #: scan: partition -> offset after this writer's last completed window
        self.positions: dict[int, int] = dict(positions or {})
        self._producer: Producer | None = None
        self._fresh = False
        self._consumer: Consumer | None = None
        self._group_metadata: Any = None
        self._mark = CommitMark()
        #: the committed window as of this producer's epoch (read after its init, then its
        #: own commits); a newer mark read from the group means another producer of this
        #: partition committed since, so this one is fenced: replaced before it writes
        self._epoch_mark: int | None = None
        self._config: dict[str, Any] = {}
        self._errors: list[KafkaError] = []
        #: window -> row indexes the cluster refused in an earlier attempt (reason)
        self._learned: dict[int, dict[int, str]] = {}
        #: windows whose next attempt reports each record's delivery (to find refused ones)
        self._diagnose: set[int] = set()
        #: scan: what of a window this writer already has in the topic
        self._recovery = ScanRecovery(settings, key, self.writer, self.timeout)
        self.partitions = 0
        self.max_record_bytes = settings.max_record_bytes or DEFAULT_MESSAGE_MAX
        self.encoder: RecordEncoder | None = None
        self._base_headers: list[tuple[str, bytes]] = []
        self._common_header_bytes = 0

    # -- lifecycle --------------------------------------------------------------------------
    def open(self) -> None:
        """Check (or create) the topic, build the serializers and the producer, and in
        exactly_once mode fence earlier producers of this partition (``init_transactions``);
        in scan mode, find what the previous run of this partition wrote."""
        s = self.settings
        self._config = s.producer_settings(self.key)
        self._config["error_cb"] = self._on_error
        key_ser = get_serializer(s.key_serializer) if s.key_column else None
        value_ser = get_serializer(s.value_serializer)
        if self.first_contact and not self.reached:
            self._reach()
        found = check_topic(s, self.key, self.timeout, self._raise_for)
        self.reached = True
        self.partitions = found.partitions
        self._limits: RecordLimits = limit_sizes(s, self._config, found.max_message_bytes)
        self.max_record_bytes = self._limits.max_record_bytes
        self.encoder = RecordEncoder(s, key_ser, value_ser, self.partitions)
        # the writer header only where the restart scan needs it: each header costs about
        # as much as the rest of a produce() call in confluent-kafka (docs/connectors/kafka.md)
        writer = (
            [(WRITER_HEADER, writer_header(self.writer, self.run))]
            if self.delivery == "scan"
            else []
        )
        self._base_headers = writer + [
            (k, v.encode() if isinstance(v, str) else v) for k, v in (s.headers or {}).items()
        ]
        self._common_header_bytes = sum(len(k) + len(v or b"") for k, v in self._base_headers)
        self._common_header_bytes += len(WINDOW_HEADER) + 20
        if self.delivery == "exactly_once":
            group = s.commit_group(self.key)
            self._consumer = Consumer(
                s.consumer_settings(group, **{"isolation.level": "read_committed"})
            )
            self._group_metadata = self._consumer.consumer_group_metadata()
        self._start_producer()
        if self.delivery == "scan":
            self._scan()

    def _reach(self) -> None:
        """The first contact with a cluster never reached: one metadata request (librdkafka
        reconnects meanwhile), no window retries; no answer is a clear error."""
        from confluent_kafka.admin import AdminClient

        s = self.settings
        retried = task_attempt()
        timeout = min(self.timeout, RECHECK_TIMEOUT_S) if retried else self.timeout
        began = time.monotonic()
        try:
            md = AdminClient(s.admin_settings()).list_topics(timeout=timeout)
            if md.brokers:
                self.reached = True
                return
            error: BaseException = KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        except KafkaException as exc:
            error = exc
        if not self.is_transient(error):
            raise self.failure("connecting", error, attempts=1)
        raise KafkaOutputUnreachableError(
            f"{self.key}: Kafka cluster {s.bootstrap_servers} (topic {s.topic!r}) was never "
            f"reached: no answer to a metadata request in {time.monotonic() - began:.1f}s"
            + (f" (Spark's attempt {retried + 1} of the task)" if retried else "")
            + f" ({describe_error(error)}); "
            + unreachable_advice(s.bootstrap_servers, f"request_timeout_ms={s.request_timeout_ms}")
        )

    def _start_producer(self) -> None:
        self._drop_producer()
        try:
            producer = Producer(self._config)
        except KafkaException as exc:
            raise KafkaOutputConfigError(
                f"{self.key}: cannot create a Kafka producer for {self.settings.target} "
                f"({self.settings.describe_producer(self.key)}): {describe_error(exc)}"
            ) from None
        if self.delivery == "exactly_once":
            try:
                producer.init_transactions(self.timeout)
            except BaseException:
                _destroy(producer)
                raise
        self._producer = producer
        self._fresh = True
        self._epoch_mark = None

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            _destroy(producer)

    def close(self) -> None:
        self._drop_producer()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass

    def _on_error(self, err: KafkaError) -> None:
        if len(self._errors) < 100:
            self._errors.append(err)

    def _raise_for(self, what: str, exc: BaseException) -> BaseException:
        if self.is_transient(exc):
            return exc  # the committer retries it
        return self.failure(what, exc, attempts=1)

    # -- the window protocol ------------------------------------------------------------------
    def read_committed(self) -> CommitMark:
        if self.delivery != "exactly_once":
            return self._mark
        assert self._consumer is not None
        tp = TopicPartition(self.settings.topic, 0)
        (found,) = self._consumer.committed([tp], timeout=self.timeout)
        if found.error is not None:
            raise KafkaException(found.error)
        mark = commit_mark(found.offset, found.metadata)
        self._mark = mark
        if self._epoch_mark is None and self._producer is not None:
            self._epoch_mark = mark.window
        return mark

    def begin(self, window: int) -> KafkaTxn:
        self._check_errors()
        if self._rejected is not None:
            self._rejected.begin()
        if (
            self._producer is not None
            and self._epoch_mark is not None
            and self._mark.window > self._epoch_mark
        ):
            # another process wrote this partition since this producer's init (Spark placed
            # the previous batch elsewhere): it is fenced, a new one is needed
            self._start_producer()
        if self._producer is None:
            self._start_producer()
        producer = self._producer
        assert producer is not None
        fresh, self._fresh = self._fresh, False
        if self.delivery == "exactly_once":
            try:
                producer.begin_transaction()
            except KafkaException:
                self._drop_producer()  # a fenced or broken producer: the retry starts anew
                raise
        return KafkaTxn(window, producer, fresh)

    def read_committed_locked(self, txn: KafkaTxn) -> CommitMark:
        if self.delivery == "exactly_once" and txn.fresh:
            # A new producer epoch: earlier producers of this partition are fenced and their
            # transactions completed, so the group now holds the truth. Until another
            # producer fences this one, nobody else can commit a window of this partition
            # (its commit would fail, and the retry would come back here).
            return self.read_committed()
        return self._mark

    def write(self, txn: KafkaTxn, rows: Window) -> list[dict[str, Any]]:
        assert self.encoder is not None
        records = self.encoder.encode(rows)
        rejected = dict(records.rejected)
        rejected.update(self._learned.get(txn.window, {}))
        self._limits.check(
            records,
            rejected,
            max_bytes=self.max_record_bytes,
            common_header_bytes=self._common_header_bytes,
        )
        skip = self._recovery.already_written(txn.window, records, rejected)
        report = self.delivery != "exactly_once" or txn.window in self._diagnose
        self._produce(txn, records, rejected, skip, report)
        if report:
            self._flush(txn)
            if self.delivery == "exactly_once" and txn.refused:
                # the transaction is poisoned by the refused records: try again without them
                self._learned.setdefault(txn.window, {}).update(txn.refused)
                raise RecordsRefused(
                    f"{self.key}: {len(txn.refused)} record(s) of window {txn.window} refused "
                    f"by {self.settings.target}; the window is written again without them"
                )
            rejected.update(txn.refused)
            if txn.errors:
                raise KafkaException(txn.errors[0])
        if not rejected:
            return []
        return [rejected_row(row_at(rows, i), why) for i, why in sorted(rejected.items())]

    def _produce(
        self,
        txn: KafkaTxn,
        records: EncodedRecords,
        rejected: dict[int, str],
        skip: set[int],
        report: bool,
    ) -> None:
        producer = txn.producer
        produce, poll = producer.produce, producer.poll
        topic = self.settings.topic
        headers = [(WINDOW_HEADER, str(txn.window).encode()), *self._base_headers]
        keys, values = records.keys, records.values
        parts, extra = records.partitions, records.headers
        if not (rejected or skip or report) and parts is None and extra is None:
            txn.produced = _produce_all(produce, poll, topic, keys, values, headers)
            return
        callback = functools.partial(self._delivered, txn) if report else None
        kwargs: dict[str, Any] = {}
        n = 0
        for i in range(len(values)):
            if i in rejected or i in skip:
                continue
            h = headers if extra is None or not extra[i] else headers + extra[i]
            if report:
                kwargs["on_delivery"] = functools.partial(callback, i)
            part = parts[i] if parts is not None else None
            while True:
                try:
                    if part is None:
                        produce(topic, values[i], keys[i], headers=h, **kwargs)
                    else:
                        produce(topic, values[i], keys[i], part, headers=h, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    poll(0.05)
                except KafkaException as exc:
                    err = kafka_error(exc)
                    if err is not None and err.code() in RECORD_CODES:
                        rejected[i] = self._limits.too_large(
                            records.size(i, self._common_header_bytes)
                        )
                        break
                    raise
            if i in rejected:
                continue  # refused by the client: no delivery report will come
            n += 1
            if not n & 1023:
                poll(0)
        txn.produced = n

    def _delivered(self, txn: KafkaTxn, i: int, err: KafkaError | None, msg: Any) -> None:
        txn.reported += 1
        if err is None:
            p = msg.partition()
            end = msg.offset() + 1
            if end > txn.ends.get(p, -1):
                txn.ends[p] = end
            if self.delivery == "scan":
                txn.delivered.append((msg.key(), msg.value()))
        elif err.code() in RECORD_CODES:
            txn.refused[i] = f"refused by {self.settings.target}: {err.name()}: {err.str()}"
        else:
            txn.errors.append(err)

    def _flush(self, txn: KafkaTxn) -> None:
        """Wait for every record's delivery report. In a transaction, a refused record
        poisons it and librdkafka may keep the others queued: once a refusal is known the
        wait stops (the window is written again without the refused records)."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = txn.producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
            if self.delivery == "exactly_once" and txn.refused:
                return
            # done when every record produced with a callback has reported, not only when
            # the queue looks empty: what the retry learns comes from those reports
            if not left and txn.reported >= txn.produced:
                return
            if time.monotonic() >= deadline:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def store_committed(self, txn: KafkaTxn, mark: CommitMark) -> None:
        txn.mark = mark
        if self._rejected is not None:
            self._rejected.settle(mark.window)
        if self.delivery != "exactly_once":
            return
        meta = {k: v for k, v in (("digest", mark.digest), ("run", mark.run)) if v}
        tp = TopicPartition(
            self.settings.topic, 0, mark.window + 1, json.dumps(meta) if meta else ""
        )
        txn.producer.send_offsets_to_transaction([tp], self._group_metadata, self.timeout)

    def commit(self, txn: KafkaTxn) -> None:
        if self.delivery == "exactly_once":
            try:
                txn.producer.commit_transaction(self.timeout)
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is not None and (
                    err.code() in RECORD_CODES
                    or err.txn_requires_abort()
                    or err.code() == KafkaError._TIMED_OUT
                ):
                    # a record may have been refused: the next attempt reports each record's
                    # delivery, to find it. A commit can also time out on it: the refusal
                    # poisons the transaction and librdkafka keeps the other records queued
                    # (seen in CI: every retry timed out the same way until the attempts ran out)
                    self._diagnose.add(txn.window)
                if err is not None and err.code() in RECORD_CODES:
                    raise RecordsRefused(
                        f"{self.key}: {self.settings.target} refused records of window "
                        f"{txn.window} ({err.name()}: {err.str()}); the window is written "
                        "again, each record reporting its delivery, to find them"
                    ) from None
                raise
        else:
            self._flush(txn)
            for p, end in txn.ends.items():
                self.positions[p] = max(end, self.positions.get(p, 0))
        self._learned.pop(txn.window, None)
        self._diagnose.discard(txn.window)
        self._recovery.completed(txn.window)
        if txn.mark is not None:
            self._mark = txn.mark
            if self._producer is txn.producer:
                self._epoch_mark = txn.mark.window

    def abort(self, txn: KafkaTxn, error: BaseException | None) -> None:
        if txn.producer is not self._producer:
            return  # already replaced
        if self.delivery != "exactly_once":
            try:
                txn.producer.purge(in_queue=True, in_flight=False, blocking=False)
            except (KafkaException, RuntimeError):
                pass
            if self.delivery == "scan":
                self._recovery.aborted(txn)
            return
        err = kafka_error(error) if error is not None else None
        if needs_new_producer(err):
            self._drop_producer()
            return
        try:
            txn.producer.abort_transaction(self.timeout)
        except Exception as exc:  # a commit in doubt, a broken producer: start afresh
            log.info(
                "%s: aborting window %d: %s; a new producer is made", self.key, txn.window, exc
            )
            self._drop_producer()

    def store_rejected(self, txn: KafkaTxn, window: int, rows: list[dict[str, Any]]) -> None:
        assert self._rejected is not None
        self._rejected.save(window, rows)

    def read_rejected(self, window: int) -> list[dict[str, Any]]:
        assert self._rejected is not None
        return self._rejected.load(window)

    def committed(self, window: int) -> None:
        if self._rejected is not None:
            self._rejected.purge(window)

    # -- the Spark sink's partly committed batches (TransactionalStreamWriter) ------------------
    def committed_partitions(self, window: int) -> dict[int, str | None]:
        """Partitions of this key's application and operator whose committed window is
        ``window`` or later, with the run that committed each: their commit groups, listed."""
        found = committed_partitions(
            admin_client(self.settings.admin_settings()),
            self.settings.commit_groups_of(self.key),
            self.settings.topic,
            window,
            self.timeout,
        )
        return {partition: mark.run for partition, mark in found.items()}

    def stage(self, window: int, run: str, rows: pa.Table) -> None:
        self._staging().stage(window, run, rows)

    def staged(self, window: int, run: str) -> pa.Table | None:
        return self._staging().staged(window, run)

    def drop_staged(self, txn: KafkaTxn, window: int) -> None:
        self._staging().drop(window)

    def _staging(self) -> StagedBatches:
        if self.staging is None:
            raise OutputError(f"{self.key}: this Kafka output stages no batches")
        return self.staging

    # -- errors ------------------------------------------------------------------------------
    def _check_errors(self) -> None:
        errors, self._errors = self._errors, []
        for err in errors:
            if err.code() in DENIED_CODES:
                raise self.failure("connecting", KafkaException(err), attempts=1)

    def is_transient(self, error: BaseException) -> bool:
        return is_transient(error)

    def describe(self) -> str:
        return self.settings.target

    def failure(self, what: str, error: BaseException, *, attempts: int) -> OutputError:
        return output_failure(
            self.settings,
            self.key,
            self.delivery,
            what,
            error,
            attempts=attempts,
            transient=self.is_transient(error),
        )

    # -- scan recovery ------------------------------------------------------------------------
    def _scan(self) -> None:
        """Find the newest window this writer wrote, and its records' (key, value)
        (:meth:`~malhar.io.kafka.scan_recovery.ScanRecovery.scan`)."""
        newest, ends = self._recovery.scan(self.partitions, self.positions)
        self.positions.update(ends)
        if newest == NO_WINDOW:
            return
        tag, own = self._recovery.newest_tag, checkpoint_tag(self.run)
        if tag is not None and own is not None and tag != own:
            # another checkpoint's window, not this writer's to complete: committed by it
            self._recovery.partial = None
            self._mark = CommitMark(newest, run=f"{checkpoint_run(tag)}...")
        else:
            self._mark = CommitMark(newest - 1)


def _produce_all(
    produce: Any,
    poll: Any,
    topic: str,
    keys: list[bytes | None],
    values: list[bytes | None],
    headers: list[tuple[str, bytes]],
) -> int:
    """Every record, in order (the common case: nothing refused, no explicit partitions)."""
    start, n = 0, len(values)
    while start < n:
        at = start
        try:
            for at in range(start, n):
                produce(topic, values[at], keys[at], headers=headers)
            start = n
        except BufferError:  # the local queue is full: let deliveries drain it, then go on
            start = at
            poll(0.05)
    return n


def _destroy(producer: Producer) -> None:
    """Let go of a producer without waiting for the cluster (purge, then close)."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
    except (KafkaException, RuntimeError, TypeError):
        pass
    try:
        producer.flush(0)
    except (KafkaException, RuntimeError):
        pass
