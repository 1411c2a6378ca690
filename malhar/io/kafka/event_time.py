"""Event-time watermarks of a Kafka input: bounded out-of-orderness, per Kafka partition.

A Kafka input configured with ``event_time`` tracks, for every Kafka partition it reads,
the largest event time of the records it emitted (Flink's per-partition watermarking in
its Kafka source). At the end of a streaming window in which it emitted records, it sends
``Watermark(min over its Kafka partitions of (largest event time) - max_out_of_orderness)``
downstream as an END_WINDOW control tuple. A Kafka partition that has sent nothing holds the
watermark back; with ``watermark_idle_windows`` a partition silent for that many streaming
windows stops counting (Flink's ``withIdleness``) until it sends again.

Everything here is a function of the records emitted and the window ids, both the same when
a window is replayed, so a replayed window sends the same watermark.

Once it has a watermark, a reader sends it at the end of every streaming window, advanced or
not, so that a windowed operator downstream never takes a reader held back by a quiet Kafka
partition for an idle one (its ``idle_timeout_windows`` counts silent windows). A reader
that reads no Kafka partition (more readers than partitions), or whose every partition is
idle, sends :class:`~malhar.window.watermark.WatermarkIdle` instead: it is left out of the
minimum at once, and holds the watermark again with its next watermark (a partition gained
later, a partition heard from again). A watermark that leaves the minimum alone
(``MAX_TIMESTAMP``) would not do: the windowed operator keeps each sender's largest
watermark, so that reader could never hold the watermark back again (docs/window.md §6).

Example:
    >>> marks = PartitionWatermarks()
    >>> marks.observe(("t", 0), 1_000, window=0)
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=0, idle_windows=None) is None
    True
    >>> marks.observe(("t", 1), 700, window=1)
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=1, idle_windows=None)
    600
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=2, idle_windows=None)  # again
    600
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=5, idle_windows=3)  # both idle
    'idle'
    >>> marks.observe(("t", 0), 2_000, window=6)
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=6, idle_windows=3)  # 1 idle
    1900
    >>> marks.watermark([], bound=100, window=7, idle_windows=None)  # no partition to read
    'idle'

The input operator's side of it is :class:`EventTimeInput`, a mixin of
:class:`~malhar.io.kafka.input_operator.KafkaInputOperator`: the ``event_time`` setting read
at setup (:func:`check_event_time`, :func:`extractor`), the event time of every record it
emits (records whose event time is not a time go to the error port), and the watermark a
window sends (saved with the window's record, sent again by its replay).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.control import DeliveryType
from malhar.io.kafka.errors import KafkaConfigError
from malhar.io.kafka.records import error_row, record_schema
from malhar.util.epoch_millis import event_millis

__all__ = [
    "EventTimeInput",
    "PartitionWatermarks",
    "batch_highs",
    "check_event_time",
    "extractor",
    "row_highs",
    "row_times",
    "to_event_millis",
]

TP = tuple[str, int]

log = logging.getLogger("malhar.io.kafka")


def to_event_millis(value: Any, where: str) -> int | None:
    """An event time as epoch milliseconds (:func:`~malhar.util.epoch_millis.event_millis`:
    int/float milliseconds, a datetime or a date); None as is."""
    if value is None:
        return None
    try:
        return event_millis(value)
    except TypeError as exc:
        raise TypeError(
            f"{where}: event time {value!r} is not a time ({exc}); the event_time extractor "
            "must give epoch milliseconds (int), a datetime or a date"
        ) from None


def batch_highs(batch: pa.RecordBatch, column: str, topic: str | None) -> Iterator[tuple[TP, int]]:
    """The largest event time per Kafka partition of an Arrow batch (vectorized)."""
    ts = batch.column(column)
    if pa.types.is_timestamp(ts.type):
        ts = pc.cast(ts, pa.timestamp("ms", ts.type.tz)).cast(pa.int64())
    elif not pa.types.is_integer(ts.type):
        raise TypeError(
            f"event_time column {column!r} is {ts.type}; it must be a timestamp or epoch "
            "milliseconds (an integer)"
        )
    keys = {"p": batch.column("partition"), "t": ts}
    if topic is None:
        keys["topic"] = batch.column("topic")
    grouped = pa.table(keys).group_by([k for k in keys if k != "t"], use_threads=False)
    maxima = grouped.aggregate([("t", "max")])
    topics = maxima.column("topic").to_pylist() if topic is None else None
    for i, (part, high) in enumerate(
        zip(maxima.column("p").to_pylist(), maxima.column("t_max").to_pylist(), strict=True)
    ):
        if high is not None:  # a partition whose records all lack a time says nothing
            yield ((topics[i] if topics else topic), part), high  # type: ignore[misc]


def row_highs(
    rows: Iterable[dict[str, Any]], extract: Callable[[Any], Any], where: str
) -> dict[TP, int]:
    """The largest event time per Kafka partition of dict tuples."""
    highs: dict[TP, int] = {}
    for row in rows:
        ms = to_event_millis(extract(row), where)
        if ms is None:
            continue
        tp = (row["topic"], row["partition"])
        if ms > highs.get(tp, ms - 1):
            highs[tp] = ms
    return highs


#: what an extractor raises for a record whose event time is not there or not a time
_BAD_TIME = (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError)


def row_times(
    rows: Iterable[dict[str, Any]], extract: Callable[[Any], Any]
) -> tuple[dict[TP, int], dict[int, str]]:
    """``(highs, bad)``: the largest event time per Kafka partition of dict tuples, and the
    rows (index -> reason) whose event time could not be read or is not a time (a string, a
    JSON value that is not an object ...). The input sends those to its error port and
    leaves them out of the output and the watermark; a function of the records only, so a
    replay decides the same. A row whose event time is ``None`` (a missing field) has none:
    it is emitted and says nothing about the watermark."""
    highs: dict[TP, int] = {}
    bad: dict[int, str] = {}
    for i, row in enumerate(rows):
        try:
            value = extract(row)
            if value is None:
                continue
            ms = event_millis(value)
        except _BAD_TIME as exc:
            bad[i] = (
                f"no event time: {exc} (event_time must give epoch milliseconds, a datetime "
                "or a date)"
            )
            continue
        tp = (row["topic"], row["partition"])
        if ms > highs.get(tp, ms - 1):
            highs[tp] = ms
    return highs, bad


#: what a reader with nothing to read sends instead of a watermark (WatermarkIdle), and keeps
#: in its window's record
IDLE = "idle"


class PartitionWatermarks:
    """Per Kafka partition: the largest event time emitted and the window it last came in.

    Plain dicts keyed ``"topic/partition"``, checkpointed with the operator.
    """

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}
        self.heard: dict[str, int] = {}
        #: the first window asked about (a partition never heard from is silent since then)
        self.since: int | None = None
        #: the last watermark sent: it never goes backwards
        self.sent: int | None = None

    @staticmethod
    def _key(tp: TP) -> str:
        return f"{tp[0]}/{tp[1]}"

    def observe(self, tp: TP, event_ms: int, window: int) -> None:
        key = self._key(tp)
        if event_ms > self.highest.get(key, event_ms - 1):
            self.highest[key] = event_ms
        self.heard[key] = window
        if self.since is None:
            self.since = window

    def watermark(
        self, tps: Iterable[TP], bound: int, window: int, idle_windows: int | None
    ) -> int | str | None:
        """What the reader sends at the end of ``window``: :data:`IDLE` when it reads no
        partition or every one is idle; else its watermark, advanced when every partition
        that counts allows it, the last one sent otherwise (None before the first)."""
        if self.since is None:
            self.since = window
        counted: list[int] = []
        for tp in tps:
            key = self._key(tp)
            last = self.heard.get(key, self.since)
            idle = idle_windows is not None and window - last >= idle_windows
            if idle:
                continue
            high = self.highest.get(key)
            if high is None:
                return self.sent  # never sent a record and not idle yet: it holds the watermark
            counted.append(high - bound)
        if not counted:
            return IDLE
        mark = min(counted)
        if self.sent is None or mark > self.sent:
            self.sent = mark
        return self.sent


# -- the event_time setting ----------------------------------------------------------------------
def check_event_time(value: Any) -> str | None:
    """The ``event_time`` property's check: a column name, a callable or None."""
    if value is None or isinstance(value, str) or callable(value):
        return None
    return "expected a column name ('timestamp': the Kafka record timestamp), a callable, or None"


def extractor(spec: Any, schema: pa.Schema | None, label: str) -> Any:
    """The event time of a record for the ``event_time`` setting ``spec`` (None: none; a
    callable as is), for records of ``schema`` (None: the JSON operator's dicts, value
    untyped). An ``event_time`` column that cannot hold one (not a column, not a timestamp
    or an integer, a JSON field without ``value.``) is refused here, at setup, rather than
    failing every window."""
    if spec is None or callable(spec):
        return spec
    json_value = schema is None
    if schema is None:
        schema = record_schema("binary")
    names = schema.names
    head = spec.split(".", 1)[0]
    fix = (
        "use 'timestamp' for the Kafka record timestamp, 'value.<field>' for a field of "
        "the JSON value, or a callable giving epoch ms or a datetime"
        if json_value
        else "use 'timestamp' for the Kafka record timestamp, a callable giving epoch ms "
        "or a datetime, or KafkaJsonInputOperator with 'value.<field>' for a JSON field"
    )
    where = f"{label}: event_time={spec!r}"
    if json_value and "." in spec and head == "value":
        return _path(spec)
    if spec not in names:
        hint = f" (a field of the JSON value is 'value.{spec}')" if json_value else ""
        raise KafkaConfigError(
            f"{where} is not a column of its records ({', '.join(names)}){hint}; {fix}"
        )
    kind = schema.field(spec).type
    if not (json_value and spec == "value") and not _time_type(kind):
        raise KafkaConfigError(
            f"{where}: the column is {kind}, and an event time must be a timestamp or "
            f"epoch milliseconds (an integer); {fix}"
        )
    return _path(spec)


def _path(spec: str) -> Any:
    """``"value.ts"`` reads ``row["value"]["ts"]`` (JSON records); ``"timestamp"`` a column.

    A missing field or a null on the way gives None (no event time); a JSON value that is
    not an object where the path needs one raises TypeError (the record goes to the error
    port, :func:`row_times`)."""
    names = spec.split(".")
    if len(names) == 1:
        return lambda row: row[spec]

    def get(row: Any) -> Any:
        walked = []
        for name in names:
            if row is None:
                return None
            if not isinstance(row, dict):
                raise TypeError(
                    f"event_time={spec!r}: {'.'.join(walked)} is {type(row).__name__} "
                    f"{_short(row)}, not a JSON object with a field {name!r}"
                )
            row = row.get(name)
            walked.append(name)
        return row

    return get


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _time_type(kind: Any) -> bool:
    """Whether a record column can hold an event time: a timestamp or epoch milliseconds."""
    return pa.types.is_timestamp(kind) or pa.types.is_integer(kind)


# -- the operator's side ---------------------------------------------------------------------------
class EventTimeInput:
    """The event-time part of a Kafka input (a mixin of
    :class:`~malhar.io.kafka.input_operator.KafkaInputOperator`, which declares the settings
    ``event_time``, ``max_out_of_orderness_ms``, ``watermark_idle_windows`` and the state
    ``_event_marks``, a :class:`PartitionWatermarks`).

    The operator calls :meth:`_event_time_extractor` in ``open`` (its result is
    ``_event_time``, None without ``event_time``), :meth:`_timed_rows` /
    :meth:`_timed_batch` on the records it emits, :meth:`_window_watermark` and
    :meth:`_send_watermark` around ``end_window``, and :meth:`_record_watermark` in
    ``window_record``.
    """

    # provided by the operator
    event_time: Any
    max_out_of_orderness_ms: int
    watermark_idle_windows: int | None
    _event_marks: PartitionWatermarks
    _event_time: Any
    _schema: pa.Schema | None
    _topic: str | None
    _tps: list[TP]
    _replay_record: Any
    label: str
    window_id: int
    output: Any
    error: Any

    def _event_time_extractor(self) -> Any:
        """The event time of a record (:func:`extractor`), or None without ``event_time``."""
        return extractor(self.event_time, self._schema, self.label)

    def _say_idle(self, kafka_partitions: int) -> None:
        """A reader with no Kafka partition declares itself idle every window (a watermark
        that does not hold the minimum back could not be taken back when the topic gains a
        partition for it: docs/window.md §6)."""
        log.info(
            "%s reads none of the %d Kafka partitions (more readers than partitions): it "
            "declares itself idle to the windowed operators downstream (WatermarkIdle) until "
            "it reads a partition added to the topics",
            self.label,
            kafka_partitions,
        )

    # -- the watermark of a window ---------------------------------------------------------------
    def _window_watermark(self) -> int | str | None:
        """The watermark this window sends (None: none; :data:`IDLE`: ``WatermarkIdle``): a
        replayed window's is the one saved in its record, a new window's is computed from
        its Kafka partitions' event times and kept for :meth:`_record_watermark`."""
        record = self._replay_record
        if record is not None and "watermark" in record:
            mark = self._replayed_watermark(record["watermark"])
        else:
            mark = self._event_marks.watermark(
                self._tps, self.max_out_of_orderness_ms, self.window_id, self.watermark_idle_windows
            )
        self._window_mark = mark  # saved with a new window's record (window_record)
        return mark

    def _record_watermark(self, record: dict[str, Any]) -> None:
        """Add the window's watermark to its record: what a replay of the window sends again."""
        if self._event_time is not None:
            record["watermark"] = self._window_mark

    def _send_watermark(self, mark: int | str | None) -> None:
        from malhar.window.watermark import Watermark, WatermarkIdle

        if mark == IDLE:
            self.output.emit_control(WatermarkIdle(), DeliveryType.END_WINDOW)
        elif mark is not None:
            self.output.emit_control(Watermark(int(mark)), DeliveryType.END_WINDOW)

    def _replayed_watermark(self, mark: int | str | None) -> int | str | None:
        """A replayed window sends the watermark its first run sent, saved in its record:
        recomputed, it could differ (partitions added to the topic since hold it back)."""
        marks = self._event_marks
        if marks.since is None:
            marks.since = self.window_id
        if mark is not None and mark != IDLE:
            marks.sent = mark if marks.sent is None else max(marks.sent, mark)  # type: ignore[type-var]
        return mark

    # -- the event times of the records emitted ------------------------------------------------
    def _observe_event_times(self, highs: Iterable[tuple[TP, int]]) -> None:
        marks, window = self._event_marks, self.window_id
        for tp, high in highs:
            marks.observe(tp, high, window)

    def _timed_rows(
        self, rows: list[dict[str, Any]], msgs: list[Any], skipped: Mapping
    ) -> list[dict[str, Any]]:
        """``rows`` (dict tuples of ``msgs`` less the ``skipped`` ones) whose event time could
        be read, observed for the watermark; the others went to the error port."""
        bad = self._event_times(rows, self._event_time, msgs, skipped)
        return [row for i, row in enumerate(rows) if i not in bad] if bad else rows

    def _timed_batch(
        self, batch: pa.RecordBatch, msgs: list[Any], skipped: Mapping
    ) -> pa.RecordBatch:
        """``batch`` (the records of ``msgs`` less the ``skipped`` ones) less the records
        whose event time could not be read (gone to the error port), observed for the
        watermark: a column's event times vectorized, a callable's per record."""
        if isinstance(self.event_time, str):
            self._observe_event_times(batch_highs(batch, self.event_time, self._topic))
            return batch
        bad = self._event_times(batch.to_pylist(), self._event_time, msgs, skipped)
        if not bad:
            return batch
        mask = np.ones(batch.num_rows, dtype=bool)
        mask[list(bad)] = False
        return batch.filter(pa.array(mask, pa.bool_()))

    def _event_times(
        self, rows: list[dict[str, Any]], extract: Any, msgs: list[Any], skipped: Mapping
    ) -> set[int]:
        """Observe the event times of ``rows`` (``msgs`` less the ``skipped`` ones); the rows
        whose event time is not a time go to the error port, with their record's topic,
        partition and offset, and are left out of the watermark; their indexes are returned
        for the caller to leave them out of the output."""
        highs, bad = row_times(rows, extract)
        self._observe_event_times(highs.items())
        if bad:
            kept = [i for i in range(len(msgs)) if i not in skipped] if skipped else None
            for i, reason in bad.items():
                self.error.emit(error_row(msgs[kept[i] if kept is not None else i], reason))
        return set(bad)
