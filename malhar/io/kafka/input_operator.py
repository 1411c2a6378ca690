"""The Kafka input operators (Malhar's ``KafkaSinglePortInputOperator``), exactly once.

Per window and operator partition the offset range read from each Kafka partition
(``start``, ``end`` exclusive, record count) is saved in the operator partition's window
data manager (local FS or HDFS, under the checkpoint) in ``end_window``. A window the
engine replays after a failure is read again from exactly those ranges, so it has exactly
the same records; a new window reads on from the operator's position (checkpointed state).

Classes (one per value format, since a port's schema belongs to the class):

- :class:`KafkaInputOperator`: ``value binary``
- :class:`KafkaTextInputOperator`: ``value string`` (UTF-8)
- :class:`KafkaJsonInputOperator`: an untyped port emitting dicts whose ``value`` is the
  parsed JSON document

Records that cannot be decoded go to the ``error`` port (counted per window).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from malhar import attributes as A
from malhar.io.kafka.assignment import assign
from malhar.io.kafka.client import TP, KafkaClient, format_tps
from malhar.io.kafka.config import InitialOffset, RetryPolicy, topic_list
from malhar.io.kafka.deserializers import Deserializer, get_deserializer
from malhar.io.kafka.errors import KafkaConfigError, ReplayError
from malhar.io.kafka.records import (
    ERROR_DDL,
    MessageColumns,
    build_batch,
    error_row,
    record_ddl,
    record_dicts,
    record_schema,
)
from malhar.operator import CheckpointListener, InputOperator, OperatorContext
from malhar.ports import OutputPort
from malhar.properties import Property
from malhar.state import State

log = logging.getLogger("malhar.io.kafka")

_MODES = tuple(m.value for m in InitialOffset)

#: seconds one consume() call waits once a window has its first records
_NEXT_WAIT = 0.01


def _check_topics(value: Any) -> str | None:
    try:
        topic_list(value)
    except KafkaConfigError as exc:
        return str(exc)
    return None


def _check_mode(value: Any) -> str | None:
    try:
        InitialOffset.parse(value)
    except KafkaConfigError as exc:
        return str(exc)
    return None


class KafkaInputOperator(InputOperator, CheckpointListener):
    """Reads Kafka topics with exactly-once replay (values as bytes).

    Example:
        >>> from malhar.io.kafka import KafkaInputOperator
        >>> op = KafkaInputOperator(
        ...     bootstrap_servers="localhost:9092",
        ...     topics="events",
        ...     initial_offset="APPLICATION_OR_EARLIEST",
        ...     max_records_per_window=50_000,
        ...     consumer_config={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
        ... )
    """

    output = OutputPort(record_ddl("binary"))
    error = OutputPort(ERROR_DDL, error=True)

    #: value format of this class: "bytes", "text" or "json" (see deserializers)
    value_format: ClassVar[str] = "bytes"

    bootstrap_servers = Property(str, not_null=True, doc="Kafka brokers, host:port[,host:port]")
    topics = Property(
        (str, list, tuple), not_null=True, check=_check_topics, doc="'a' or 'a,b' or ['a','b']"
    )
    initial_offset = Property(
        str,
        default=InitialOffset.APPLICATION_OR_LATEST.value,
        check=_check_mode,
        doc=f"where a partition starts without a position of its own: one of {list(_MODES)}",
    )
    group_id = Property(
        str, default=None, doc="consumer group; default 'malhar-<application>-<operator>'"
    )
    max_records_per_window = Property(
        int, default=None, min=1, doc="records per window and partition (and MAX_TUPLES_PER_WINDOW)"
    )
    max_bytes_per_window = Property(
        int, default=None, min=1, doc="key+value bytes per window and partition (>= 1 record)"
    )
    consumer_config = Property(
        dict,
        default=None,
        doc="any librdkafka setting (SASL, SSL, fetch.*); '${env:NAME}' / '${file:/path}' "
        "values are read in setup; secrets are never logged",
    )
    max_message_bytes = Property(
        int,
        default=None,
        min=1,
        doc="records whose key+value exceed this go to the error port instead of the output",
    )
    fetch_batch = Property(int, default=10_000, min=1, doc="records per consume() call")
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
    retry_attempts = Property(int, default=5, min=1, doc="requests to a silent cluster")
    retry_backoff_ms = Property(int, default=500, min=0, doc="first backoff, doubling")
    request_timeout_ms = Property(int, default=5_000, min=100, doc="one request's timeout")
    commit_offsets = Property(
        bool, default=True, doc="commit each committed window's offsets to the consumer group"
    )

    #: (topic, partition) -> next offset to read: the operator's position
    _next = State(dict)
    #: [(window, position after it)] since the last committed window
    _history = State(list)
    #: what was last committed to the consumer group, per partition
    _group_committed = State(dict)
    #: the partition count the checkpoint was written with
    _partitions = State(default=None)

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
        for name, value in properties.items():
            if not isinstance(getattr(type(self), name, None), Property):
                raise TypeError(f"{type(self).__name__} has no property {name!r}")
            setattr(self, name, value)

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._label = f"operator {context.name!r} partition {context.partition}"
        if self._partitions is not None and self._next and self._partitions != context.partitions:
            raise KafkaConfigError(
                f"{self._label}: the checkpoint was written with {self._partitions} partitions, "
                f"now {context.partitions}: a Kafka input keeps its partition count for the "
                "life of its checkpoint"
            )
        self._partitions = context.partitions
        self._deser: Deserializer = get_deserializer(self.value_format)
        self._schema = record_schema(self._deser.ddl) if self._deser.ddl else None
        mode = InitialOffset.parse(self.initial_offset)
        engine_limit = int(
            context.attributes.get(A.MAX_TUPLES_PER_WINDOW.name, A.MAX_TUPLES_PER_WINDOW.default)
        )
        self._limit = min(engine_limit, self.max_records_per_window or engine_limit)
        retry = RetryPolicy(
            attempts=self.retry_attempts,
            backoff_ms=self.retry_backoff_ms,
            max_backoff_ms=max(self.retry_backoff_ms, 8_000),
            request_timeout_ms=self.request_timeout_ms,
        )
        group = self.group_id or f"malhar-{context.application}-{context.name}"
        self._client = KafkaClient(
            self.bootstrap_servers, group, self.consumer_config, retry, label=self._label
        )
        self._wdm = context.window_data_manager(serializer="json")
        self._wdm.setup()
        self._tps: list[TP] = assign(
            self._client.partitions(topic_list(self.topics)), context.partition, context.partitions
        )
        topics = {t for t, _ in self._tps}
        #: the only topic this partition reads (its records need no topic() call), else None
        self._topic: str | None = topics.pop() if len(topics) == 1 else None
        missing = [tp for tp in self._tps if tp not in self._next]
        if missing:
            found = self._client.start_offsets(missing, mode.earliest, mode.uses_group)
            self._next.update(found)
            log.info(
                "%s: %s starts at %s (%s)", self._label, format_tps(missing), found, mode.value
            )
        self._live = False
        self._pending: list[Any] = []
        self._window = -1
        self._replay: dict[TP, tuple[int, int, int]] | None = None
        log.info(
            "%s reads %s; consumer config: %s",
            self._label,
            format_tps(self._tps),
            self._client.describe(),
        )

    def teardown(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
        wdm = getattr(self, "_wdm", None)
        if wdm is not None:
            wdm.teardown()

    # -- windows ---------------------------------------------------------------------------
    def begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._count = 0
        self._bytes = 0
        self._ranges: dict[TP, list[int]] = {}
        self._first_call = True
        self._began = 0.0
        self._eof_mark: dict[TP, int] = {}
        self._replay = None
        self._replayed = False
        if window_id <= self._wdm.partition_largest_window():
            saved = self._wdm.retrieve(window_id)
            if saved is None:
                raise ReplayError(
                    f"{self._label}: window {window_id} must be replayed but its offsets are not "
                    "in the window data manager (purged after it was committed?)"
                )
            self._replay = {
                (t, int(p)): (int(s), int(e), int(n)) for t, p, s, e, n in saved["ranges"]
            }
        else:
            self._go_live()  # fetching starts now, while the engine begins other partitions

    def _go_live(self) -> None:
        """Assign the partitions at the operator's position (once; a replay moves them)."""
        if not self._live and self._tps:
            self._client.assign({tp: self._next[tp] for tp in self._tps})
            self._pending.clear()
            self._live = True

    def emit_tuples(self) -> None:
        # Tens of thousands of fresh message objects per call make CPython's cyclic GC run
        # full collections over and over (measured: half the throughput); nothing here
        # creates reference cycles, so the collector waits until the call returns.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._emit_tuples()
        finally:
            if enabled:
                gc.enable()

    def _emit_tuples(self) -> None:
        if self._replay is not None:
            if not self._replayed:
                self._replayed = True
                self._emit_replay(self._replay)
            return
        remaining = self._limit - self._count
        max_bytes = self.max_bytes_per_window
        if not self._tps or remaining <= 0 or (max_bytes and self._bytes >= max_bytes):
            return
        self._go_live()
        msgs = self._take(min(remaining, self.fetch_batch))
        if not msgs:
            return
        cols = MessageColumns(msgs, self._topic)
        if max_bytes:
            kept = self._cut_bytes(msgs, cols, max_bytes)
            if not kept:
                return
            if kept < len(msgs):
                msgs = msgs[:kept]
                cols = MessageColumns(msgs, self._topic)
        self._advance(cols)
        self._emit(msgs, cols)

    def end_window(self) -> None:
        if self._replay is not None:
            for tp, (_, end, _) in self._replay.items():
                self._next[tp] = end
            self._live = False  # the consumer was moved for the replay
        else:
            ranges = sorted([t, p, s, e, n] for (t, p), (s, e, n) in self._ranges.items())
            self._wdm.save({"ranges": ranges}, self._window)
        if self._ranges or self._replay:
            position = dict(self._next)
            if not self._history or self._history[-1][1] != position:
                self._history.append((self._window, position))

    def committed(self, window_id: int) -> None:
        self._wdm.committed(window_id)
        position = None
        while self._history and self._history[0][0] <= window_id:
            position = self._history.pop(0)[1]
        if position is None or not self.commit_offsets:
            return
        if self._client.commit_failures:
            self._client.commit_failures = 0
            self._group_committed = {}  # commit everything again
        changed = {tp: o for tp, o in position.items() if self._group_committed.get(tp) != o}
        if changed:
            self._client.commit(changed)
            self._group_committed.update(changed)

    # -- reading ---------------------------------------------------------------------------
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
            msgs = client.fetch(n, self.poll_timeout_ms / 1000)
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
            if total + size > max_bytes and (keep or self._count):
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
        self._count += cols.n

    def _emit_replay(self, ranges: dict[TP, tuple[int, int, int]]) -> None:
        read = self._client.read_ranges({tp: (s, e) for tp, (s, e, _) in ranges.items()})
        for tp in sorted(read):
            msgs = read[tp]
            expected = ranges[tp][2]
            if len(msgs) != expected:
                raise ReplayError(
                    f"{self._label}: window {self._window} had {expected} records of "
                    f"{format_tps([tp])} in offsets [{ranges[tp][0]}, {ranges[tp][1]}), the log "
                    f"now has {len(msgs)} there (compacted or truncated): cannot replay exactly"
                )
            if msgs:
                self._emit(msgs)
        self._count = sum(len(v) for v in read.values())

    def _emit(self, msgs: list[Any], cols: MessageColumns | None = None) -> None:
        if cols is None:
            cols = MessageColumns(msgs, self._topic)
        column, errors = self._deser.decode(cols.values)
        if self.max_message_bytes:
            errors.update(self._oversized(msgs, cols, self.max_message_bytes))
        for i, reason in errors.items():
            self.error.emit(error_row(msgs[i], reason))
        if self._schema is None:
            for row in record_dicts(msgs, column, set(errors), cols=cols):
                self.output.emit(row)
            return
        keep = None
        if errors:
            keep = np.ones(len(msgs), dtype=bool)
            keep[list(errors)] = False
        batch = build_batch(msgs, column, self._schema, keep=keep, cols=cols)
        if batch.num_rows:
            self.output.emit_batch(batch)


class KafkaTextInputOperator(KafkaInputOperator):
    """Reads Kafka topics with exactly-once replay (values as UTF-8 text)."""

    output = OutputPort(record_ddl("string"))
    value_format: ClassVar[str] = "text"


class KafkaJsonInputOperator(KafkaInputOperator):
    """Reads Kafka topics with exactly-once replay (values parsed as JSON; dict tuples)."""

    output = OutputPort()
    value_format: ClassVar[str] = "json"
