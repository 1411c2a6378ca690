"""The Kafka input operators (Malhar's ``KafkaSinglePortInputOperator``), exactly once.

A :class:`~malhar.io.base.ReplayableInput`: per window and operator partition the record
saved in the window data manager is the offset range read from each Kafka partition,
``{"ranges": [[topic, partition, start, end (exclusive), records], ...]}`` (with
``event_time``, also ``"watermark"``: the one the window sent, sent again by its replay); a
replayed window reads exactly those ranges again; ``committed`` commits the offsets to the
consumer group. The position (next offset per partition) is checkpointed state.

Classes (one per value format, since a port's schema belongs to the class):

- :class:`KafkaInputOperator`: ``value binary``
- :class:`KafkaTextInputOperator`: ``value string`` (UTF-8)
- :class:`KafkaJsonInputOperator`: an untyped port emitting dicts whose ``value`` is the
  parsed JSON document

Records that cannot be decoded go to the ``error`` port (counted per window), and so do,
with ``event_time``, records whose event time is not a time (a string, a JSON value that is
not an object): left out of the output and the watermark, on a replay too. The settings
are :class:`~malhar.io.kafka.settings.KafkaSettings` (shared with the Spark data source)
plus the window limits below.

With ``event_time`` set, the output port also carries event-time watermarks, per Kafka
partition with bounded out-of-orderness, for the windowed operators downstream
(docs/window.md): :mod:`malhar.io.kafka.event_time` holds that part of the operator (the
event time of every record, the records without one sent to the error port, the watermark
of a window); this module holds its lifecycle (assignment, reading, replay, commits).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from malhar.io.base.dealing import DealtPositions
from malhar.io.base.input import ReplayableInput, WindowRecord
from malhar.io.kafka.assignment import assign, moved_positions
from malhar.io.kafka.client import TP, KafkaClient, format_tps
from malhar.io.kafka.deserializers import Deserializer, get_deserializer
from malhar.io.kafka.errors import KafkaConfigError, ReplayError
from malhar.io.kafka.event_time import EventTimeInput, PartitionWatermarks, check_event_time
from malhar.io.kafka.readers import deal, readers_for
from malhar.io.kafka.records import (
    ERROR_DDL,
    MessageColumns,
    build_batch,
    error_row,
    record_ddl,
    record_dicts,
    record_schema,
)
from malhar.io.kafka.settings import KafkaSettings
from malhar.operator import OperatorContext
from malhar.partitioning import PartitioningContext
from malhar.ports import OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.stats import OperatorStats, Response

log = logging.getLogger("malhar.io.kafka")

#: seconds one consume() call waits once a window has its first records
_NEXT_WAIT = 0.01

#: the window record: {"ranges": [[topic, partition, start, end (exclusive), records], ...]},
#: plus "watermark" (int, None, or "idle": WatermarkIdle) with event_time
Ranges = dict[str, Any]


def _ranges(record: Ranges) -> dict[TP, tuple[int, int, int]]:
    return {(t, int(p)): (int(s), int(e), int(n)) for t, p, s, e, n in record["ranges"]}


class KafkaInputOperator(DealtPositions, EventTimeInput, ReplayableInput[Ranges], KafkaSettings):
    """Reads Kafka topics with exactly-once replay (values as bytes).

    Example:
        >>> from malhar.io.kafka import KafkaInputOperator
        >>> op = KafkaInputOperator(
        ...     bootstrap_servers="localhost:9092",
        ...     topics="events",
        ...     initial_offset="APPLICATION_OR_EARLIEST",
        ...     max_records_per_window=50_000,
        ...     consumer_config={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        ...                      "sasl.password": "${env:KAFKA_PASSWORD}"},
        ... )
    """

    output = OutputPort(record_ddl("binary"), control_aware=True)
    error = OutputPort(ERROR_DDL, error=True)

    #: value format of this class: "bytes", "text" or "json" (see deserializers)
    value_format: ClassVar[str] = "bytes"
    partition_noun: ClassVar[str] = "reader"
    count_hint: ClassVar[str] = " or set partitions_per_reader"

    max_bytes_per_window = Property(
        int, default=None, min=1, doc="key+value bytes per window and partition (>= 1 record)"
    )
    max_message_bytes = Property(
        int,
        default=None,
        min=1,
        doc="records whose key+value exceed this go to the error port instead of the output",
    )
    poll_timeout_ms = Property(
        int,
        default=100,
        min=0,
        doc="how long a window waits for its first records (an idle window ends then)",
    )
    max_window_ms = Property(
        int,
        default=2_000,
        min=1,
        doc="a window stops reading after this long even if partitions have more records "
        "and the caps are not reached (None: no time limit)",
    )
    commit_offsets = Property(
        bool, default=True, doc="commit each committed window's offsets to the consumer group"
    )
    partition_discovery_ms = Property(
        int,
        default=10_000,
        min=1,
        doc="how often a reader looks for partitions added to its topics (read from their "
        "earliest offset); None: never, the partitions of the launch only",
    )
    partitions_per_reader = Property(
        int,
        default=None,
        min=1,
        doc="readers follow the topics: one reader per this many Kafka partitions (1: one "
        "to one), repartitioned at a window boundary when the topics gain partitions; "
        "None: the operator's PARTITIONS readers",
    )
    event_time = Property(
        object,
        default=None,
        check=check_event_time,
        doc="emit event-time watermarks: the event time of a tuple, a column ('timestamp': the "
        "Kafka record timestamp; 'value.ts' a field of a JSON value) or a callable giving epoch "
        "ms or a datetime; None: no watermarks",
    )
    max_out_of_orderness_ms = Property(
        int, default=0, min=0, doc="watermark = largest event time per Kafka partition minus this"
    )
    watermark_idle_windows = Property(
        int,
        default=None,
        min=1,
        doc="a Kafka partition silent for this many streaming windows stops holding the "
        "watermark back (None: it always does)",
    )

    #: (topic, partition) -> next offset to read: the operator's position
    _next = State(dict)
    #: the position after the last released (committed) window: what the group should hold
    _released_position = State(dict)
    #: what was last committed to the consumer group, per partition
    _group_committed = State(dict)
    #: the partition count the checkpoint was written with
    _partitions = State(default=None)
    #: per Kafka partition: the largest event time emitted (event_time watermarks)
    _event_marks = State(PartitionWatermarks)
    #: the configured topics the checkpoint was written with (None: an older checkpoint)
    _topics = State(default=None)

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        topics: str | Iterable[str] | None = None,
        **properties: Any,
    ) -> None:
        if bootstrap_servers is not None:
            self.bootstrap_servers = bootstrap_servers
        if topics is not None:
            self.topics = topics if isinstance(topics, str) else list(topics)
        self.configure(**properties)

    def preflight(self, label: str, timeout: float) -> str:
        """The topics and their partition counts (see :mod:`malhar.io.kafka.preflight`)."""
        from malhar.io.kafka.preflight import check_input

        problems = self.property_problems()
        if problems:
            raise KafkaConfigError(f"{label}: " + "; ".join(problems))
        return check_input(self, self.group_id or "malhar-preflight", label, timeout)

    # -- ReplayableInput ---------------------------------------------------------------------
    def open(self, context: OperatorContext) -> None:
        restored = self._partitions is not None  # a checkpoint of an earlier run
        if self._partitions is not None and self._next and self._partitions != context.partitions:
            raise KafkaConfigError(
                f"{self.label}: the checkpoint was written with {self._partitions} partitions, "
                f"now {context.partitions}, and its positions were not dealt to the new count; "
                "change it on the running application (RunningApplication.repartition({name: "
                "n})) or with PARTITIONS at a launch after a clean stop, which deal them"
            )
        self._partitions = context.partitions
        self._deser: Deserializer = get_deserializer(self.value_format)
        self._schema = record_schema(self._deser.ddl) if self._deser.ddl else None
        self._event_time = self._event_time_extractor()
        group = self.group_id or f"malhar-{context.application}-{context.name}"
        self._client: KafkaClient = self.make_client(group, self.label)
        # without a checkpointed position nothing says the cluster was ever reached: one
        # retry policy, then a clear error (not the policy again in each Spark task retry)
        self._client.first_contact = not restored
        self._index = context.partition
        every = self._topic_partitions()
        self._tps: list[TP] = assign(every, context.partition, context.partitions)
        if restored:
            self._check_assignment(context.partitions)
        else:
            self.check_start_offsets(every, self.label)
        self._topics = self.topic_list()
        topics = {t for t, _ in self._tps}
        #: the only topic this partition reads (its records need no topic() call), else None
        self._topic: str | None = topics.pop() if len(topics) == 1 else None
        self._discovered_at = time.monotonic()
        self._adopt([tp for tp in self._tps if tp not in self._next], restored)
        self._live = False
        self._pending: list[Any] = []
        log.info(
            "%s reads %s; consumer config: %s",
            self.label,
            format_tps(self._tps),
            self._client.describe(),
        )
        if self._event_time is not None and not self._tps:
            self._say_idle(len(every))

    def _check_assignment(self, readers: int) -> None:
        """Refuse a checkpoint whose positions this reader no longer owns (see
        :mod:`malhar.io.kafka.assignment`): the owner of a Kafka partition depends on its
        topic's rank among the configured topics, so a topic added to (or removed from)
        ``topics`` that sorts before others moves their partitions to readers with no position
        for them, which would read them again from their earliest offset."""
        now = self.topic_list()
        moved = moved_positions(self._next, self._tps, now)
        if not moved:
            return
        before = self._topics
        changed = (
            f"the topics were {sorted(before)}, now {sorted(now)}"
            if before is not None and sorted(before) != sorted(now)
            else f"the topics are {sorted(now)}"
        )
        raise KafkaConfigError(
            f"{self.label}: its checkpoint holds the positions of {format_tps(moved)}, which "
            f"another of the {readers} readers reads now ({changed}; Kafka partition p of "
            "the k-th topic in sorted order goes to reader (k + p) % readers): restored, that "
            "reader would read them again from their earliest offset. Keep the configured "
            "topics; a topic may be added when its name sorts after them (it moves nothing), "
            "or read by another Kafka input operator; or start this operator on a new "
            "checkpoint with initial_offset='APPLICATION_OR_EARLIEST' to resume from the "
            "offsets committed to its consumer group (the last windows before the stop, "
            "not committed yet, are read again)"
        )

    def _adopt(self, missing: list[TP], restored: bool) -> None:
        """Start positions of Kafka partitions this reader has no position for.

        At the first launch they start per ``initial_offset``. Later (a restored checkpoint,
        or partitions found while running) they are partitions added to the topic after the
        application started: read from their earliest offset, so that nothing written to
        them before they were found is skipped.
        """
        if missing:
            if restored:
                found = self._client.start_offsets(missing, earliest=True, use_group=False)
            else:
                found = self.start_offsets(self._client, missing)
            self._next.update(found)
            for tp, offset in found.items():  # committed with the first released window
                self._released_position.setdefault(tp, offset)
            log.info(
                "%s: %s starts at %s (%s)",
                self.label,
                format_tps(missing),
                found,
                "new partitions: earliest" if restored else self.initial_offset,
            )
            if not restored and str(self.initial_offset).endswith("LATEST"):
                self._say_skipped(found)

    def _say_skipped(self, found: dict[TP, int]) -> None:
        """Warn that a first launch at the end skips the records already in the topic
        (Malhar's default, and a surprise to whoever expected to read them)."""
        try:
            marks = self._client.watermarks(found)
        except Exception as exc:  # advice only: a slow broker must not fail the launch
            log.debug("%s: cannot count the records skipped: %s", self.label, exc)
            return
        at_end = {tp: marks[tp][1] - marks[tp][0] for tp, at in found.items() if at == marks[tp][1]}
        skipped = sum(at_end.values())  # a partition started at the group's position is not
        if skipped:
            log.warning(
                "%s: starts at the end of %s (initial_offset=%s): the %d record(s) already "
                "there are not read; initial_offset='APPLICATION_OR_EARLIEST' reads them",
                self.label,
                format_tps([tp for tp, n in at_end.items() if n]),
                self.initial_offset,
                skipped,
            )

    def _discover(self) -> None:
        """Take on partitions added to the topics since the last look (new windows only: a
        replayed window reads the ranges it recorded, whatever the partitions are now)."""
        every = self.partition_discovery_ms
        now = time.monotonic()
        if every is None or (now - self._discovered_at) * 1000 < every:
            return
        self._discovered_at = now
        mine = assign(self._topic_partitions(), self._index, self._partitions or 1)
        new = [tp for tp in mine if tp not in self._tps]
        if new:
            self._adopt([tp for tp in new if tp not in self._next], restored=True)
            self._tps = sorted([*self._tps, *new])
            self._live = False  # assign the consumer again, with the new partitions
            log.info("%s: partitions added to the topics: now reads %s", self.label,
                     format_tps(self._tps))  # fmt: skip

    def _topic_partitions(self) -> list[TP]:
        """Every Kafka partition of the topics now; their count is the ``kafka_partitions``
        metric (what ``partitions_per_reader`` follows)."""
        every = self._client.partitions(self.topic_list())
        self._known = len(every)
        return every

    # -- dynamic partitioning: its own Partitioner (DealtPositions) and StatsListener -----------
    def metrics(self) -> Mapping[str, float]:
        # Kafka partitions of the topics at the last look (what partitions_per_reader follows)
        return {"kafka_partitions": self._known}

    def process_stats(self, stats: OperatorStats) -> Response:
        """With ``partitions_per_reader``: ask for a repartitioning when the topics' Kafka
        partitions need another reader count (called on the driver)."""
        wanted = self._readers_wanted(stats)
        if wanted is None or wanted == stats.partitions:
            return Response()
        return Response(
            True, f"{self.partitions_per_reader} Kafka partitions per reader: {wanted} readers"
        )

    def _readers_wanted(self, stats: OperatorStats | None) -> int | None:
        per = self.partitions_per_reader
        windows = stats.windows if stats is not None else ()
        known = max((int(w.metrics.get("kafka_partitions", 0)) for w in windows), default=0)
        return readers_for(known, per) if per is not None and known else None

    def count_wanted(self, context: PartitioningContext) -> int | None:
        """With ``partitions_per_reader``: the reader count the Kafka partitions the readers
        last saw need (each reader's position per Kafka partition moves to its new reader,
        :mod:`malhar.io.kafka.readers`)."""
        return self._readers_wanted(context.stats)

    def deal(self, inputs: list[Any], count: int) -> list[Any]:
        return deal(inputs, count)

    def end_window(self) -> None:
        if self._event_time is None:
            super().end_window()
            return
        mark = self._window_watermark()  # before the record is saved: it holds the watermark
        super().end_window()
        self._send_watermark(mark)

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def begin_new_window(self, window_id: int) -> None:
        self._bytes = 0
        self._ranges: dict[TP, list[int]] = {}
        self._first_call = True
        self._began = 0.0
        self._eof_mark: dict[TP, int] = {}
        self._discover()
        self._go_live()  # fetching starts now, while the engine begins other partitions

    def read(self, limit: int) -> int:
        # Tens of thousands of fresh message objects per call make CPython's cyclic GC run
        # full collections over and over (measured: half the throughput); nothing here
        # creates reference cycles, so the collector waits until the call returns.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._read(limit)
        finally:
            if enabled:
                gc.enable()

    def window_record(self) -> Ranges:
        record: Ranges = {
            "ranges": sorted([t, p, s, e, n] for (t, p), (s, e, n) in self._ranges.items())
        }
        self._record_watermark(record)  # with event_time: what a replay of the window sends
        return record

    def replay(self, record: Ranges) -> int:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._replay(_ranges(record))
        finally:
            if enabled:
                gc.enable()

    def advance_past(self, record: Ranges) -> None:
        for tp, (_, end, _) in _ranges(record).items():
            self._next[tp] = end
        self._live = False  # a replay moved the consumer; an at-most-once skip did not read

    def release(self, records: list[WindowRecord[Ranges]]) -> None:
        position = self._released_position
        for _, record in records:
            for tp, (_, end, _) in _ranges(record).items():
                position[tp] = end
        if not self.commit_offsets:
            return
        if self._client.commit_failures:
            self._client.commit_failures = 0
            self._group_committed = {}  # commit everything again
        changed = {tp: o for tp, o in position.items() if self._group_committed.get(tp) != o}
        if changed:
            self._client.commit(changed)
            self._group_committed.update(changed)

    # -- reading -------------------------------------------------------------------------------
    def _go_live(self) -> None:
        """Assign the partitions at the operator's position (once; a replay moves them)."""
        if not self._live and self._tps:
            self._client.assign({tp: self._next[tp] for tp in self._tps})
            self._pending.clear()
            self._live = True

    def _read(self, limit: int) -> int:
        max_bytes = self.max_bytes_per_window
        if not self._tps or (max_bytes and self._bytes >= max_bytes):
            return 0
        self._go_live()
        msgs = self._take(min(limit, self.fetch_batch))
        if not msgs:
            return 0
        cols = MessageColumns(msgs, self._topic)
        if max_bytes:
            kept = self._cut_bytes(msgs, cols, max_bytes)
            if not kept:
                return 0
            if kept < len(msgs):
                msgs = msgs[:kept]
                cols = MessageColumns(msgs, self._topic)
        self._advance(cols)
        self._emit(msgs, cols)
        return cols.n

    def _take(self, n: int) -> list[Any]:
        """The next records of this window; ``[]`` ends the window.

        The first call of a window waits up to ``poll_timeout_ms`` for records; an idle
        topic (every partition at its end) ends the window then. Later calls keep reading
        while some partition is behind its end, so a window on a backlog fills up to its
        caps even while librdkafka's prefetch queue refills between fetches (or waits out
        ``fetch.queue.backoff.ms``). They return ``[]`` when every partition has reached its
        end (:meth:`_at_end`) or when the window has been reading for ``max_window_ms``.
        """
        if self._pending:
            msgs, self._pending = self._pending[:n], self._pending[n:]
            return msgs
        client = self._client
        if self._first_call:
            self._first_call = False
            self._began = time.monotonic()
            self._eof_mark = dict(client.eof)
            # ``consume(n, timeout)`` returns only once ``n`` records came or ``timeout`` ran
            # out, so one call with ``poll_timeout_ms`` made every window of a live topic
            # (fewer records than ``n``) wait the whole timeout, per reader, one reader after
            # the other in a task (docs/performance-wordcount.md §7). Take what librdkafka
            # already holds at once; wait in short steps only while nothing has come.
            msgs = client.fetch(n, 0)
            deadline = self._began + self.poll_timeout_ms / 1000
            while not msgs and (left := deadline - time.monotonic()) > 0:
                msgs = client.fetch(n, min(left, _NEXT_WAIT))
            if msgs:
                return msgs
            # nothing yet: idle only if the broker said so (a watermark or an end reached);
            # a consumer made for this window may still be connecting, and ending now would
            # make the window empty although the topic has a backlog
        budget = self.max_window_ms / 1000 if self.max_window_ms else None
        while not self._at_end():
            if budget is not None and time.monotonic() - self._began >= budget:
                break
            msgs = client.fetch(n, _NEXT_WAIT)
            if msgs:
                return msgs
        return []

    def _at_end(self) -> bool:
        """Every partition has been read up to its end as the broker last reported it.

        A partition is at its end when the operator's position reached the high watermark
        of the last fetch response (cached by librdkafka, no request): on a live topic the
        window ends once it has read what had arrived, on a backlog it fills up to its caps.
        On a transactional topic the watermark lies past the commit marker that ends each
        transaction, a control record that is never delivered, so librdkafka's position
        (which steps over it) is compared too.
        librdkafka's end-of-partition events (``enable.partition.eof``) count too, for a
        partition whose watermark is not known yet: one reported during this window, or a
        last one at or after the position (an idle partition reports nothing new). Those
        events alone are not enough: a fetch that the broker answers with new records never
        reports an end, so on a steadily written topic they do not come at all.
        """
        client = self._client
        eof, mark, position = client.eof, self._eof_mark, self._next
        for tp in self._tps:
            high = client.fetched_high_watermark(tp)
            if high is not None and (
                position[tp] >= high or (client.consumed_position(tp) or -1) >= high
            ):
                continue
            at = eof.get(tp)
            if at is None or (at < position[tp] and at == mark.get(tp)):
                return False
        return True

    def _oversized(self, msgs: list[Any], cols: MessageColumns, limit: int) -> dict[int, str]:
        return {
            i: f"record of {size} bytes (key + value) exceeds max_message_bytes={limit}"
            for i, size in enumerate(cols.sizes(msgs))
            if size > limit
        }

    def _cut_bytes(self, msgs: list[Any], cols: MessageColumns, max_bytes: int) -> int:
        """How many of ``msgs`` fit under the byte cap; the rest wait in ``_pending``."""
        total = self._bytes
        keep = 0
        for size in cols.sizes(msgs):
            if total + size > max_bytes and (keep or self._ranges):
                break
            total += size
            keep += 1
        if keep < len(msgs):
            self._pending[:0] = msgs[keep:]
        self._bytes = total
        return keep

    def _advance(self, cols: MessageColumns) -> None:
        # offsets per run of one partition (first and last message), not per message
        ranges, position = self._ranges, self._next
        for topic, part, _, last, n in cols.runs():
            tp = (topic, part)
            r = ranges.get(tp)
            if r is None:
                r = ranges[tp] = [position[tp], 0, 0]
            r[1] = last + 1
            r[2] += n
            position[tp] = last + 1

    def _replay(self, ranges: dict[TP, tuple[int, int, int]]) -> int:
        read = self._client.read_ranges({tp: (s, e) for tp, (s, e, _) in ranges.items()})
        for tp in sorted(read):
            msgs = read[tp]
            start, end, expected = ranges[tp]
            if len(msgs) != expected:
                raise ReplayError(
                    f"{self.label}: window {self.window_id} had {expected} records of "
                    f"{format_tps([tp])} in offsets [{start}, {end}), the log now has "
                    f"{len(msgs)} there (compacted or truncated): cannot replay exactly"
                )
            if msgs:
                self._emit(msgs)
        return sum(len(v) for v in read.values())

    def _emit(self, msgs: list[Any], cols: MessageColumns | None = None) -> None:
        if cols is None:
            cols = MessageColumns(msgs, self._topic)
        column, errors = self._deser.decode(cols.values)
        if self.max_message_bytes:
            errors.update(self._oversized(msgs, cols, self.max_message_bytes))
        for i, reason in errors.items():
            self.error.emit(error_row(msgs[i], reason))
        if self._schema is None:
            rows = record_dicts(msgs, column, set(errors), cols=cols)
            if self._event_time is not None:
                rows = self._timed_rows(rows, msgs, errors)
            for row in rows:
                self.output.emit(row)
            return
        keep = None
        if errors:
            keep = np.ones(len(msgs), dtype=bool)
            keep[list(errors)] = False
        batch = build_batch(msgs, column, self._schema, keep=keep, cols=cols)
        if not batch.num_rows:
            return
        if self._event_time is not None:
            batch = self._timed_batch(batch, msgs, errors)
            if not batch.num_rows:
                return
        self.output.emit_batch(batch)


class KafkaTextInputOperator(KafkaInputOperator):
    """Reads Kafka topics with exactly-once replay (values as UTF-8 text)."""

    output = OutputPort(record_ddl("string"), control_aware=True)
    value_format: ClassVar[str] = "text"


class KafkaJsonInputOperator(KafkaInputOperator):
    """Reads Kafka topics with exactly-once replay (values parsed as JSON; dict tuples)."""

    output = OutputPort(control_aware=True)
    value_format: ClassVar[str] = "json"
