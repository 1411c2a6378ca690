"""Stream plumbing (Malhar's ``lib/stream``): StreamMerger, StreamDuplicater, Counter, DevNull
and Throttle.

Batches pass through as batches on typed outputs (set ``schema``, Spark DDL, to type the
output ports like the input stream); an untyped output carries them as dict rows."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pyarrow as pa

from malhar.algo._base import AlgoOperator, Partitioning, SchemaProperty, TypedOutputs, emit_table
from malhar.operator import Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State

__all__ = ["Counter", "CounterUnifier", "DevNull", "StreamDuplicater", "StreamMerger", "Throttle"]


class StreamMerger(TypedOutputs, AlgoOperator):
    """Merges two streams into one (Malhar's ``StreamMerger``): ``data1`` and ``data2`` to
    ``out``, tuples and batches unchanged.

    Example:
        >>> from malhar.algo import StreamMerger
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(StreamMerger())
        >>> h.run_window([("data1", 1), ("data2", 2)])
        >>> h.sink("out").tuples
        [1, 2]
    """

    data1 = InputPort()
    data2 = InputPort()
    out = OutputPort()

    schema = SchemaProperty("out", doc="Spark DDL of the streams (types the output port)")

    def __init__(self, schema: str | None = None) -> None:
        self.schema = schema

    def process_data1(self, t: Any) -> None:
        self.out.emit(t)

    def process_data2(self, t: Any) -> None:
        self.out.emit(t)

    def process_batch_data1(self, batch: pa.RecordBatch) -> None:
        emit_table(self.out, batch)

    def process_batch_data2(self, batch: pa.RecordBatch) -> None:
        emit_table(self.out, batch)


class StreamDuplicater(TypedOutputs, AlgoOperator):
    """Sends every tuple of ``data`` to both ``out1`` and ``out2`` (Malhar's
    ``StreamDuplicater``).

    Example:
        >>> from malhar.algo import StreamDuplicater
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(StreamDuplicater())
        >>> h.run_window([("data", "x")])
        >>> h.sink("out1").tuples, h.sink("out2").tuples
        (['x'], ['x'])
    """

    data = InputPort()
    out1 = OutputPort()
    out2 = OutputPort()

    schema = SchemaProperty("out1", "out2", doc="Spark DDL of the stream (types both outputs)")

    def __init__(self, schema: str | None = None) -> None:
        self.schema = schema

    def process(self, t: Any) -> None:
        self.out1.emit(t)
        self.out2.emit(t)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        emit_table(self.out1, batch)
        emit_table(self.out2, batch)


class CounterUnifier(Unifier):
    """Adds the partitions' counts of the window."""

    def begin_window(self, window_id: int) -> None:
        self._n = 0
        self._seen = False

    def process(self, n: int) -> None:
        self._n += n
        self._seen = True

    def end_window(self) -> None:
        if self._seen:
            self.output.emit(self._n)


class Counter(AlgoOperator):
    """How many tuples arrived in each application window (Malhar's ``Counter``).

    Output ``output``: one int per application window (0 included); a batch counts its rows.

    Example:
        >>> from malhar.algo import Counter
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Counter())
        >>> h.run_window([("input", "a"), ("input", "b")])
        >>> h.sink("output").tuples
        [2]
    """

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; counts are added)"

    input = InputPort()
    output = OutputPort(unifier=CounterUnifier)

    #: tuples of the open application window
    count = State(default=0)

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def process(self, t: Any) -> None:
        self.count += 1

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.count += batch.num_rows

    def end_window(self) -> None:
        self.output.emit(self.count)
        self.count = 0


class DevNull(AlgoOperator):
    """Swallows every tuple (Malhar's ``DevNull``): a sink for benchmarks and unused streams.

    Example:
        >>> from malhar.algo import DevNull
        >>> from malhar.testing.harness import OperatorHarness
        >>> OperatorHarness(DevNull()).run_window([("data", 1)])
    """

    data = InputPort()

    def process(self, t: Any) -> None:
        pass

    def process_batch(self, batch: pa.RecordBatch) -> None:
        pass


class Throttle(TypedOutputs, AlgoOperator):
    """Passes tuples on at no more than ``rate`` tuples per second per partition.

    A token bucket of ``burst`` tuples (default: one second's worth) refills at ``rate``;
    a tuple (or a batch, by its rows) that finds it empty waits for its tokens, which slows
    down the window (back-pressure upstream). Nothing is dropped or reordered.

    Example:
        >>> from malhar.algo import Throttle
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Throttle(rate=1_000_000))
        >>> h.run_window([("data", 1), ("data", 2)])
        >>> h.sink("out").tuples
        [1, 2]
    """

    data = InputPort()
    out = OutputPort()

    rate = Property((int, float), default=1000, min=0.001, doc="tuples per second per partition")
    burst = Property(int, default=None, min=1, doc="bucket size in tuples (default: rate)")
    schema = SchemaProperty("out", doc="Spark DDL of the stream (types the output port)")

    def __init__(
        self, rate: float = 1000, burst: int | None = None, schema: str | None = None
    ) -> None:
        self.configure(rate=rate, burst=burst, schema=schema)

    def setup(self, context: Any) -> None:
        self.clock = time.monotonic  # runtime: replaced in tests by a fake clock
        self.sleep = time.sleep
        self._capacity = float(self.burst or max(1.0, self.rate))
        self._tokens = self._capacity
        self._last: float | None = None
        self.waited = 0.0

    def _take(self, n: int) -> None:
        now = self.clock()
        if self._last is not None:
            self._tokens = min(self._capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= n
        if self._tokens < 0:
            wait = -self._tokens / self.rate
            self.waited += wait
            self.sleep(wait)
            self._last = self.clock()
            self._tokens = 0.0

    def process(self, t: Any) -> None:
        self._take(1)
        self.out.emit(t)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self._take(batch.num_rows)
        emit_table(self.out, batch)

    def metrics(self) -> dict[str, float]:
        return {"throttled_seconds": self.waited}
