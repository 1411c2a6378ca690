"""The standard accumulations (Malhar's ``lib/window/accumulation``)."""

from __future__ import annotations

import copy
import heapq
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from malhar.util.nan_order import highest, lowest
from malhar.window._order import ordered
from malhar.window.errors import AccumulationError, WindowConfigError
from malhar.window.protocol import Accumulation

__all__ = [
    "Average",
    "Count",
    "Fold",
    "Max",
    "Min",
    "Reduce",
    "RemoveDuplicates",
    "SequenceCount",
    "Sum",
    "ToList",
    "TopN",
    "TopNByKey",
]


class _Nothing:
    """The state of a Reduce that has seen no value (pickles as the singleton)."""

    def __reduce__(self) -> str:
        return "NOTHING"

    def __repr__(self) -> str:
        return "NOTHING"


NOTHING = _Nothing()


class Count(Accumulation[Any, int, int]):
    """How many tuples (vectorized: one ``count_all`` per batch)."""

    arrow_aggregations: ClassVar[tuple[str, ...]] = ("count_all",)

    def default_accumulated_value(self) -> int:
        return 0

    def accumulate(self, accumulated: int, value: Any) -> int:
        return accumulated + 1

    def accumulate_batch(self, accumulated: int, values: pa.Array) -> int:
        return accumulated + len(values)

    def from_aggregates(self, n: int) -> int:
        return n

    def merge(self, accumulated1: int, accumulated2: int) -> int:
        return accumulated1 + accumulated2

    def output(self, accumulated: int) -> int:
        return accumulated

    def retraction(self, value: int) -> int:
        return -value


class Sum(Accumulation[Any, Any, Any]):
    """The sum of the values (ints or floats; vectorized with ``sum``). Nulls are skipped."""

    arrow_aggregations: ClassVar[tuple[str, ...]] = ("sum",)

    def default_accumulated_value(self) -> Any:
        return 0

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return accumulated if value is None else accumulated + value

    def accumulate_batch(self, accumulated: Any, values: pa.Array) -> Any:
        total = pc.sum(values).as_py()
        return accumulated if total is None else accumulated + total

    def from_aggregates(self, total: Any) -> Any:
        return 0 if total is None else total

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return accumulated1 + accumulated2

    def output(self, accumulated: Any) -> Any:
        return accumulated

    def retraction(self, value: Any) -> Any:
        return -value


class _Extreme(Accumulation[Any, Any, Any]):
    _pick: ClassVar[Callable[..., Any]]

    def default_accumulated_value(self) -> Any:
        return None

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        if value is None:
            return accumulated
        return value if accumulated is None else type(self)._pick(accumulated, value)

    def from_aggregates(self, value: Any) -> Any:
        return value

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        return self.accumulate(accumulated1, accumulated2)

    def output(self, accumulated: Any) -> Any:
        return accumulated


class Min(_Extreme):
    """The smallest value (nulls skipped; vectorized with ``min``)."""

    arrow_aggregations: ClassVar[tuple[str, ...]] = ("min",)
    _pick = staticmethod(lowest)  # NaN above every number, in any order of arrival


class Max(_Extreme):
    """The largest value (nulls skipped; vectorized with ``max``)."""

    arrow_aggregations: ClassVar[tuple[str, ...]] = ("max",)
    _pick = staticmethod(highest)  # NaN above every number, in any order of arrival


class Average(Accumulation[Any, tuple[Any, int], Any]):
    """The mean of the values; the state is ``(sum, count)`` so partitions merge exactly."""

    arrow_aggregations: ClassVar[tuple[str, ...]] = ("sum", "count")

    def default_accumulated_value(self) -> tuple[Any, int]:
        return (0, 0)

    def accumulate(self, accumulated: tuple[Any, int], value: Any) -> tuple[Any, int]:
        if value is None:
            return accumulated
        return accumulated[0] + value, accumulated[1] + 1

    def from_aggregates(self, total: Any, n: int) -> tuple[Any, int]:
        return (0 if total is None else total), n

    def merge(self, accumulated1: tuple[Any, int], accumulated2: tuple[Any, int]) -> tuple:
        return accumulated1[0] + accumulated2[0], accumulated1[1] + accumulated2[1]

    def output(self, accumulated: tuple[Any, int]) -> float | None:
        total, n = accumulated
        return None if n == 0 else total / n


class TopN(Accumulation[Any, list, list]):
    """The ``n`` largest values (``key``: what to compare by), largest first."""

    def __init__(self, n: int = 10, key: Callable[[Any], Any] | None = None) -> None:
        if n < 1:
            raise WindowConfigError(f"TopN: n must be >= 1, got {n}")
        self.n, self.key = n, key

    def default_accumulated_value(self) -> list:
        return []

    def accumulate(self, accumulated: list, value: Any) -> list:
        return heapq.nlargest(self.n, [*accumulated, value], key=self.key)

    def accumulate_batch(self, accumulated: list, values: pa.Array) -> list:
        return heapq.nlargest(self.n, [*accumulated, *values.to_pylist()], key=self.key)

    def merge(self, accumulated1: list, accumulated2: list) -> list:
        return heapq.nlargest(self.n, [*accumulated1, *accumulated2], key=self.key)

    def output(self, accumulated: list) -> list:
        return list(accumulated)


class TopNByKey(Accumulation[tuple[Any, Any], dict, list]):
    """Input ``(key, value)`` pairs: each key's largest value, then the ``n`` keys with the
    largest values as ``[(key, value), ...]``, largest first (ties by key)."""

    def __init__(self, n: int = 10) -> None:
        if n < 1:
            raise WindowConfigError(f"TopNByKey: n must be >= 1, got {n}")
        self.n = n

    def default_accumulated_value(self) -> dict:
        return {}

    def accumulate(self, accumulated: dict, value: tuple[Any, Any]) -> dict:
        k, v = value
        old = accumulated.get(k)
        if old is None or v > old:
            accumulated[k] = v
        return accumulated

    def merge(self, accumulated1: dict, accumulated2: dict) -> dict:
        out = dict(accumulated1)
        for kv in accumulated2.items():
            self.accumulate(out, kv)
        return out

    def output(self, accumulated: dict) -> list:
        by_key = ordered(accumulated.items(), key=lambda kv: kv[0])
        return sorted(by_key, key=lambda kv: kv[1], reverse=True)[: self.n]


class RemoveDuplicates(Accumulation[Any, set, list]):
    """The distinct values, in order."""

    def default_accumulated_value(self) -> set:
        return set()

    def accumulate(self, accumulated: set, value: Any) -> set:
        accumulated.add(value)
        return accumulated

    def accumulate_batch(self, accumulated: set, values: pa.Array) -> set:
        accumulated.update(pc.unique(values).to_pylist())
        return accumulated

    def merge(self, accumulated1: set, accumulated2: set) -> set:
        return accumulated1 | accumulated2

    def output(self, accumulated: set) -> list:
        return ordered(accumulated)


class SequenceCount(Accumulation[Any, Counter, dict]):
    """How many times each distinct value occurs in the window: ``{value: count}``, in
    value order (the frequency table of the window's sequence of values)."""

    def default_accumulated_value(self) -> Counter:
        return Counter()

    def accumulate(self, accumulated: Counter, value: Any) -> Counter:
        accumulated[value] += 1
        return accumulated

    def accumulate_batch(self, accumulated: Counter, values: pa.Array) -> Counter:
        counted = pc.value_counts(values)
        for v, n in zip(
            counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True
        ):
            accumulated[v] += n
        return accumulated

    def merge(self, accumulated1: Counter, accumulated2: Counter) -> Counter:
        return accumulated1 + accumulated2

    def output(self, accumulated: Counter) -> dict:
        return {v: accumulated[v] for v in ordered(accumulated)}


class ToList(Accumulation[Any, list, list]):
    """All values; in arrival order, or sorted with ``sort=True`` (arrival order across
    upstream partitions is not fixed, sorted output is the same on every replay)."""

    def __init__(self, sort: bool = False) -> None:
        self.sort = sort

    def default_accumulated_value(self) -> list:
        return []

    def accumulate(self, accumulated: list, value: Any) -> list:
        accumulated.append(value)
        return accumulated

    def accumulate_batch(self, accumulated: list, values: pa.Array) -> list:
        accumulated.extend(values.to_pylist())
        return accumulated

    def merge(self, accumulated1: list, accumulated2: list) -> list:
        return accumulated1 + accumulated2

    def output(self, accumulated: list) -> list:
        return ordered(accumulated) if self.sort else list(accumulated)


class Fold(Accumulation[Any, Any, Any]):
    """``fold(acc, value)`` from a copy of ``initial``; ``merge(a, b)`` combines two states
    (needed for session windows and partitioned unifiers); ``output`` maps the state."""

    def __init__(
        self,
        initial: Any,
        fold: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any] | None = None,
        output: Callable[[Any], Any] | None = None,
    ) -> None:
        self.initial, self.fold, self.merge_fn, self.output_fn = initial, fold, merge, output

    def default_accumulated_value(self) -> Any:
        return copy.deepcopy(self.initial)

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return self.fold(accumulated, value)

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        if self.merge_fn is None:
            raise AccumulationError(
                "Fold without merge= cannot merge two states (session windows, partitioned "
                "unifiers): give Fold(initial, fold, merge=...)"
            )
        return self.merge_fn(accumulated1, accumulated2)

    def output(self, accumulated: Any) -> Any:
        return copy.deepcopy(accumulated) if self.output_fn is None else self.output_fn(accumulated)


class Reduce(Accumulation[Any, Any, Any]):
    """``fn(a, b)`` over the values (associative and commutative); None for no values."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def default_accumulated_value(self) -> Any:
        return NOTHING

    def accumulate(self, accumulated: Any, value: Any) -> Any:
        return value if accumulated is NOTHING else self.fn(accumulated, value)

    def merge(self, accumulated1: Any, accumulated2: Any) -> Any:
        if accumulated1 is NOTHING:
            return accumulated2
        if accumulated2 is NOTHING:
            return accumulated1
        return self.fn(accumulated1, accumulated2)

    def output(self, accumulated: Any) -> Any:
        return None if accumulated is NOTHING else copy.deepcopy(accumulated)
