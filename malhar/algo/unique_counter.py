"""UniqueCounter: how often each key occurs per application window (Malhar's ``UniqueCounter``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.operator import Operator, Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property


class UniqueCountUnifier(Unifier):
    """Adds up the partial counts that every counter partition emitted for the window."""

    transient = ("_counts",)

    def begin_window(self, window_id: int) -> None:
        self._counts: Counter = Counter()
        self._names: tuple[str, str] | None = None

    def process(self, row: dict[str, Any]) -> None:
        key_name, count_name = self._names or _names_of(row)
        self._names = (key_name, count_name)
        self._counts[row[key_name]] += row[count_name]

    def end_window(self) -> None:
        if self._names is None:
            return
        key_name, count_name = self._names
        for key, n in self._counts.items():
            self.output.emit({key_name: key, count_name: n})


def _names_of(row: dict[str, Any]) -> tuple[str, str]:
    key_name, count_name = list(row)[:2]
    return key_name, count_name


class UniqueCounter(Operator):
    """Counts occurrences of each key per application window.

    Input: any hashable tuple (untyped port), or Arrow batches (``process_batch``)
    whose ``key_column`` (first column by default) is counted vectorized.
    Output ``count``: one ``{key_name: key, count_name: n}`` dict per key at the end of
    each application window. Partition it freely: the unifier adds the partial
    counts of all partitions, so the result does not depend on the partitioning
    (key-partition it with ``KeyCodec`` to keep each key's count in one partition).

    With ``cumulative=True`` the counts are not reset between application windows
    and every window emits the running totals of the keys seen so far.

    Example:
        >>> from malhar.algo import UniqueCounter
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(UniqueCounter(key_name="word"))
        >>> h.run_window([("data", "a"), ("data", "b"), ("data", "a")])
        >>> sorted(h.sink("count").tuples, key=lambda r: r["word"])
        [{'word': 'a', 'count': 2}, {'word': 'b', 'count': 1}]
    """

    data = InputPort()
    count = OutputPort(unifier=UniqueCountUnifier)

    key_name = Property(str, default="key", pattern=r"[A-Za-z_][A-Za-z0-9_]*")
    count_name = Property(str, default="count", pattern=r"[A-Za-z_][A-Za-z0-9_]*")
    key_column = Property(str, default=None, doc="column counted in Arrow batches; first if None")
    cumulative = Property(bool, default=False)

    def __init__(
        self,
        *,
        key_name: str = "key",
        count_name: str = "count",
        key_column: str | None = None,
        cumulative: bool = False,
    ) -> None:
        self.key_name = key_name
        self.count_name = count_name
        self.key_column = key_column
        self.cumulative = cumulative
        self.counts: Counter = Counter()

    def begin_window(self, window_id: int) -> None:
        if not self.cumulative:
            self.counts = Counter()

    def process(self, value: Any) -> None:
        if isinstance(value, dict):
            value = value[self.key_column] if self.key_column else next(iter(value.values()))
        self.counts[value] += 1

    def process_batch(self, batch: pa.RecordBatch) -> None:
        column = batch.column(self.key_column) if self.key_column else batch.column(0)
        counted = pc.value_counts(column)
        keys = counted.field("values").to_pylist()
        ns = counted.field("counts").to_pylist()
        for key, n in zip(keys, ns, strict=True):
            self.counts[key] += n

    def end_window(self) -> None:
        key_name, count_name = self.key_name, self.count_name
        for key, n in self.counts.items():
            self.count.emit({key_name: key, count_name: n})
