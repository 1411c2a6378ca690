"""Watermarks from the data: bounded out-of-orderness, per upstream split."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.control import ControlSender, DeliveryType
from malhar.operator import Operator, OperatorContext
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.util.epoch_millis import epoch_millis
from malhar.window.errors import BadTupleError, WindowConfigError
from malhar.window.impl.fields import extractor, has_columns, named_fields, tuple_millis
from malhar.window.impl.settings import check_extractor, check_millis
from malhar.window.watermark import Watermark, WatermarkIdle
from malhar.window.windows import MAX_TIMESTAMP, to_millis

log = logging.getLogger("malhar.window")

__all__ = ["WatermarkGenerator"]


class WatermarkGenerator(Operator):
    """Passes tuples through and emits event-time watermarks (Flink's
    ``forBoundedOutOfOrderness``, Malhar's ``FixedDiffEventTimeWatermarkGen``).

    Put it right after an input operator, with the same partition count (it is then fused
    into the input's pass): each partition's watermark is the largest event time it has
    seen minus ``max_out_of_orderness``. With ``split_by`` (e.g. ``"partition"`` for Kafka
    records) the largest event time is kept per split value and the watermark is the
    minimum over them, so a slow Kafka partition holds it back. A watermark control tuple
    (END_WINDOW) goes out at the end of every streaming window in which tuples arrived; a
    partition that receives nothing stays silent, which a downstream operator's
    ``idle_timeout_windows`` treats as idle.

    An upstream partition with nothing to read may say so (``WatermarkIdle``: a file input
    out of files, a Kafka reader with no Kafka partition): in a window in which no tuple
    arrived and every upstream partition feeding this one said so, the generator sends
    ``WatermarkIdle`` itself, so that the windowed operators downstream leave it out of
    their minimum at once; it counts again with its next watermark. Watermarks from
    upstream (a Kafka input with ``event_time``) pass through with their senders, and so
    does the idleness of the senders of a stream whose watermarks passed through here; the
    idleness of a stream that never sent one (a file input) is this generator's, not passed
    on, since downstream holds no watermark of that stream to leave out.

    The end of a bounded input (``Watermark(MAX_TIMESTAMP)``, a file input's ``end_marker``)
    counts as idle until every upstream partition feeding this one has sent it; from then
    on the generator sends it itself at the end of every window without tuples, so that the
    windowed operators downstream fire every window. Streams that say nothing of their end
    (a Kafka or JDBC input merged into the same generator) are unknown to it: give each
    input its own generator, before any merge, as above.

    The output port is untyped; for a typed stream, subclass and redeclare ``output =
    OutputPort(<schema>, control_aware=True)`` so that batches keep their columns.

    Example:
        >>> from malhar.testing import OperatorHarness
        >>> h = OperatorHarness(WatermarkGenerator(timestamp="t", max_out_of_orderness=5))
        >>> h.run_window([("input", {"t": 100}), ("input", {"t": 90})])
        >>> h.sink("output").controls[-1].payload
        Watermark(timestamp=95)
    """

    input = InputPort(control_aware=True)
    output = OutputPort(control_aware=True)

    timestamp = Property(object, not_null=True, check=check_extractor, doc="event time (ms)")
    max_out_of_orderness = Property(
        object, default=0, check=check_millis, doc="how far behind the largest event time"
    )
    split_by = Property(
        object, default=None, check=check_extractor, doc="track the largest event time per value"
    )

    #: split value -> the largest event time seen
    highest = State(dict)
    #: upstream senders (stream, partition) whose watermarks passed through here
    _marking = State(set)

    def __init__(self, **properties: Any) -> None:
        self.configure(**properties)

    def fields_read(self, port: str) -> list[str]:
        """The columns named by ``timestamp`` and ``split_by``."""
        return named_fields(self.timestamp, self.split_by) if port == "input" else []

    def schema_follows(self, port: str) -> str | None:
        """Its output carries its input's tuples as they are."""
        return "input" if port == "output" else None

    def setup(self, context: OperatorContext) -> None:
        if self.timestamp is None:
            raise WindowConfigError(f"WatermarkGenerator {context.name!r}: set timestamp")
        who = f"WatermarkGenerator {context.name!r}"
        self._ts = extractor(self.timestamp, None, "timestamp", who)
        self._split = extractor(self.split_by, None, "split_by", who)
        self._bound = to_millis(self.max_out_of_orderness)
        self._name = context.name
        self._warned = False

    def begin_window(self, window_id: int) -> None:
        self._seen = False
        self._bad = 0
        #: stream -> (upstream partitions feeding this one, those that said idle this window)
        self._idle: dict[str, tuple[int, set[int]]] = {}
        #: stream -> (upstream partitions feeding this one, those that sent the end of input)
        self._ended: dict[str, tuple[int, set[int]]] = {}

    def process_control(self, payload: Any, sender: ControlSender | None) -> bool:
        """Take note of upstream idleness; True when the copy goes no further."""
        s = sender or ControlSender("", "", 0, 1)
        key = (s.stream, s.partition)
        if isinstance(payload, Watermark) and payload.timestamp == MAX_TIMESTAMP:
            # the end of an input (a file input's end_marker): this generator ends once every
            # upstream partition feeding it has ended; idle in the meantime, as those have
            self._idle.setdefault(s.stream, (s.partitions, set()))[1].add(s.partition)
            self._ended.setdefault(s.stream, (s.partitions, set()))[1].add(s.partition)
            return not any(stream == s.stream for stream, _ in self._marking)
        if isinstance(payload, Watermark):
            self._marking.add(key)
        elif isinstance(payload, WatermarkIdle):
            self._idle.setdefault(s.stream, (s.partitions, set()))[1].add(s.partition)
            # downstream tracks the watermarks of a stream some of whose senders sent them
            # (a Kafka input with event_time; a reader with no Kafka partition only ever
            # says idle): it must hear of their idleness; a stream that never sent one (a
            # file input) is known downstream only through this generator
            return not any(stream == s.stream for stream, _ in self._marking)
        return False  # passed on as it came, with its sender

    def _upstream_idle(self) -> bool:
        """Whether every upstream partition feeding this one said idle (or ended) in this
        window."""
        return _all_said(self._idle)

    def _upstream_ended(self) -> bool:
        """Whether every upstream partition feeding this one sent the end of its input."""
        return _all_said(self._ended)

    def process(self, value: Any) -> None:
        self.output.emit(value)
        self._track(value)

    def _track(self, t: Any) -> None:
        try:
            self._update(None if self._split is None else self._split(t), self._ts(t))  # type: ignore[misc]
        except BadTupleError as exc:
            # it goes on as it came: the windowed operator behind sends it to its error port
            # with the reason; here it moves no watermark
            self._bad += 1
            if not self._warned:  # once per partition: a wrong column name says so at once
                self._warned = True
                log.warning(
                    "%s; it moves no watermark (counted in the metric without_time; "
                    "this is said once per partition)",
                    exc,
                )

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(batch)
        if batch.num_rows == 0:
            return
        if (
            not isinstance(self.timestamp, str)
            or not (self.split_by is None or isinstance(self.split_by, str))
            or not has_columns(batch.schema, self.timestamp, self.split_by)
        ):
            self._rows(batch)
            return
        ts = batch.column(self.timestamp)
        if ts.null_count:  # rows without a time move no watermark (see process)
            self._rows(batch)
            return
        if pa.types.is_timestamp(ts.type):  # floored to the millisecond, as a tuple's time is
            ts = pa.array(epoch_millis(ts))
        elif not pa.types.is_integer(ts.type):  # strings, dates: row by row, as tuples
            self._rows(batch)
            return
        if self.split_by is None:
            self._update(None, pc.max(ts).as_py())
            return
        table = pa.table({"s": batch.column(self.split_by), "t": ts})
        grouped = table.group_by("s", use_threads=False).aggregate([("t", "max")])
        for split, high in zip(
            grouped.column("s").to_pylist(), grouped.column("t_max").to_pylist(), strict=True
        ):
            self._update(split, high)

    def _rows(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            self._track(row)

    def metrics(self) -> dict[str, float]:
        """``without_time``: tuples that moved no watermark (no time, or not a time)."""
        return {"without_time": float(self._bad)}

    def _update(self, split: Any, ts: Any) -> None:
        if not isinstance(ts, int):
            ts = tuple_millis(ts, f"WatermarkGenerator {self._name!r}")
        old = self.highest.get(split)
        if old is None or ts > old:
            self.highest[split] = ts
        self._seen = True

    def end_window(self) -> None:
        if self._upstream_ended() and not self._seen:
            # not in a window with tuples: they may come from a stream that says nothing of
            # its end (another input merged in), which the end would make late
            self.output.emit_control(Watermark(MAX_TIMESTAMP), DeliveryType.END_WINDOW)
        elif self._seen and self.highest:
            mark = min(self.highest.values()) - self._bound
            self.output.emit_control(Watermark(mark), DeliveryType.END_WINDOW)
        elif not self._seen and self._upstream_idle():
            self.output.emit_control(WatermarkIdle(), DeliveryType.END_WINDOW)


def _all_said(said: dict[str, tuple[int, set[int]]]) -> bool:
    """Whether, in every stream heard from, every upstream partition said so."""
    return bool(said) and all(len(who) >= n for n, who in said.values())
