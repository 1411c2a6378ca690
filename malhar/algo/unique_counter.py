"""UniqueCounter: how often each key occurs per application window (Malhar's ``UniqueCounter``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import NAN, Partitioning, one_nan, rekey_nan
from malhar.errors import MalharError
from malhar.operator import Operator, OperatorContext, Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


class UniqueCountUnifier(Unifier):
    """Adds up the partial counts that every counter partition emitted for the window."""

    key_name = Property(str, default="key", pattern=_NAME)
    count_name = Property(str, default="count", pattern=_NAME)

    def __init__(self, *, key_name: str = "key", count_name: str = "count") -> None:
        self.configure(key_name=key_name, count_name=count_name)

    def begin_window(self, window_id: int) -> None:
        self._counts: Counter = Counter()  # one streaming window's partial counts

    def process(self, row: dict[str, Any]) -> None:
        self._counts[one_nan(row[self.key_name])] += row[self.count_name]

    def end_window(self) -> None:
        key_name, count_name = self.key_name, self.count_name
        for key, n in self._counts.items():
            self.output.emit({key_name: key, count_name: n})


class UniqueCounter(Operator):
    """Counts occurrences of each key per application window.

    Input: any hashable tuple (untyped port), or Arrow batches (``process_batch``)
    whose ``key_column`` (first column by default) is counted vectorized.
    Output ``count``: one ``{key_name: key, count_name: n}`` dict per key at the end of
    each application window. Partition it freely: the unifier adds the partial
    counts of all partitions, so the result does not depend on the partitioning
    (key-partition it with ``KeyCodec`` to keep each key's count in one partition).

    It has no error port: every tuple counts, and a tuple (or batch) without the
    ``key_column`` fails the window, naming the fields it has.

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

    #: how it partitions (``docs/operators.md``): any way, the unifier adds partial counts
    PARTITIONING = "unifier (any partitioning; the unifier adds the partial counts)"

    data = InputPort()
    count = OutputPort(unifier=UniqueCountUnifier)

    key_name = Property(str, default="key", pattern=_NAME)
    count_name = Property(str, default="count", pattern=_NAME)
    FIELDS_READ = {"data": ("key_column",)}

    key_column = Property(str, default=None, doc="column counted in Arrow batches; first if None")
    cumulative = Property(bool, default=False)

    #: counts of the open application window (all windows so far when cumulative)
    counts = State(Counter)

    def __init__(
        self,
        *,
        key_name: str = "key",
        count_name: str = "count",
        key_column: str | None = None,
        cumulative: bool = False,
    ) -> None:
        self.configure(
            key_name=key_name, count_name=count_name, key_column=key_column, cumulative=cumulative
        )

    def partitioning(self) -> Partitioning:
        """Any partitioning: the unifier adds the partial counts."""
        return Partitioning("unifier")

    def setup(self, context: OperatorContext) -> None:
        rekey_nan(self.counts)  # restored: its NaN key is a copy

    def cannot_repartition(self) -> str | None:
        if self.cumulative:
            return (
                "cumulative counts are partial per partition (the unifier adds them) and "
                "cannot be split by key"
            )
        return None

    def get_unifier(self, port: str) -> UniqueCountUnifier:
        return UniqueCountUnifier(key_name=self.key_name, count_name=self.count_name)

    def process(self, value: Any) -> None:
        if isinstance(value, dict):
            try:
                value = value[self.key_column] if self.key_column else next(iter(value.values()))
            except (KeyError, StopIteration):
                raise self._no_key(sorted(value)) from None
        if value.__class__ is float and value != value:  # one_nan, inlined: per tuple
            value = NAN
        self.counts[value] += 1

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if self.key_column and self.key_column not in batch.schema.names:
            raise self._no_key(batch.schema.names)
        column = batch.column(self.key_column) if self.key_column else batch.column(0)
        counted = pc.value_counts(column)
        keys = counted.field("values").to_pylist()
        ns = counted.field("counts").to_pylist()
        for key, n in zip(keys, ns, strict=True):
            self.counts[one_nan(key)] += n

    def _no_key(self, fields: list[str]) -> MalharError:
        """A tuple without the key: UniqueCounter has no error port (every tuple counts)."""
        if not fields:
            return MalharError("UniqueCounter: an empty dict has no key to count")
        return MalharError(
            f"UniqueCounter: no field {self.key_column!r} to count in a tuple with fields "
            f"{fields}; set key_column to one of them"
        )

    def end_window(self) -> None:
        key_name, count_name = self.key_name, self.count_name
        for key, n in self.counts.items():
            self.count.emit({key_name: key, count_name: n})
        if not self.cumulative:
            # emitted: the next window's checkpoint must not carry these counts again
            self.counts = Counter()
