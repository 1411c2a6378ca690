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

Example:
    >>> marks = PartitionWatermarks()
    >>> marks.observe(("t", 0), 1_000, window=0)
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=0, idle_windows=None) is None
    True
    >>> marks.observe(("t", 1), 700, window=1)
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=1, idle_windows=None)
    600
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=5, idle_windows=3)  # both idle
    >>> marks.observe(("t", 0), 2_000, window=6)
    >>> marks.watermark([("t", 0), ("t", 1)], bound=100, window=6, idle_windows=3)  # 1 idle
    1900
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.util.epoch_millis import event_millis

__all__ = ["PartitionWatermarks", "batch_highs", "row_highs", "row_times", "to_event_millis"]

TP = tuple[str, int]


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
    ) -> int | None:
        """The watermark to send at the end of ``window``, or None (held back, or no advance)."""
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
                return None  # never sent a record and not idle yet: it holds the watermark
            counted.append(high - bound)
        if not counted:
            return None
        mark = min(counted)
        if self.sent is not None and mark <= self.sent:
            return None
        self.sent = mark
        return mark
