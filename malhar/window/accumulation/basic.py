"""The standard accumulations (Malhar's ``lib/window/accumulation``)."""

from __future__ import annotations

import copy
import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from malhar.util.nan_order import highest, lowest
from malhar.window.accumulation._rank import NAN, Rank, is_nan, nan_high, one_nan, sorted_nan_last
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
    """The ``n`` largest values (``key``: what to compare by), largest first.

    Values that are None (or whose ``key`` is None) are skipped, as Min and Max skip nulls.
    NaN ranks above every number (as Max ranks it), and equal values (or keys) are listed
    in value order, not arrival order: every replay, partitioning and merge gives the same
    list (``TopN(2, key=len)`` over ``"bb", "aa", "cc"`` gives ``["aa", "bb"]``).
    """

    def __init__(self, n: int = 10, key: Callable[[Any], Any] | None = None) -> None:
        if n < 1:
            raise WindowConfigError(f"TopN: n must be >= 1, got {n}")
        self.n, self.key = n, key

    def default_accumulated_value(self) -> list:
        return []

    def _rank(self, value: Any) -> Rank | None:
        """The rank of ``value``, None to skip it (a null value or key)."""
        if value is None:
            return None
        primary = value if self.key is None else self.key(value)
        return None if primary is None else Rank(primary, value)

    def _top(self, values: Iterable[Any]) -> list:
        """The best ``n`` of ``values``, best first (the state: a plain list of values)."""
        ranks = [r for r in map(self._rank, values) if r is not None]
        return [r.value for r in heapq.nlargest(self.n, ranks)]

    def accumulate(self, accumulated: list, value: Any) -> list:
        rank = self._rank(value)
        if rank is None:
            return accumulated
        if accumulated and self._stale(accumulated):
            accumulated = self._top(accumulated)
        if len(accumulated) >= self.n:
            # the state is best first: a value no better than the last one changes nothing
            last = self._rank(accumulated[-1])
            if last is not None and not last < rank:
                return accumulated
        # binary search for its place: O(log n) ranks, not a sort of the whole state
        lo, hi = 0, len(accumulated)
        while lo < hi:
            mid = (lo + hi) // 2
            held = self._rank(accumulated[mid])
            if held is None or held < rank:
                hi = mid
            else:
                lo = mid + 1
        out = [*accumulated[:lo], value, *accumulated[lo:]]
        return out[: self.n]

    def _stale(self, accumulated: list) -> bool:
        """A state saved before the total order: a NaN listed after a number (the old
        ``heapq.nlargest`` ranked NaN anywhere), which the new order ranks first."""
        last = accumulated[-1] if self.key is None else self.key(accumulated[-1])
        if not is_nan(last):
            return False
        first = accumulated[0] if self.key is None else self.key(accumulated[0])
        return not is_nan(first)

    def accumulate_batch(self, accumulated: list, values: pa.Array) -> list:
        return self._top([*accumulated, *self._candidates(values)])

    def _candidates(self, values: pa.Array) -> list:
        """The values of a batch that can be among the best ``n``: for a numeric column
        (no ``key``), its NaNs and the values from its ``n``-th largest up, ties included
        (ranking every row in Python cost ~1 us each); else all of them."""
        values = values.drop_null()
        kind = values.type
        numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
        if self.key is not None or not numeric or len(values) <= 4 * self.n:
            return values.to_pylist()
        nans: list = []
        if pa.types.is_floating(kind):
            is_nan_row = pc.is_nan(values)
            nans = values.filter(is_nan_row).to_pylist()
            values = values.filter(pc.invert(is_nan_row))
        if len(values) <= self.n:
            return nans + values.to_pylist()
        best = pc.select_k_unstable(values, k=self.n, sort_keys=[("value", "descending")])
        nth = pc.min(values.take(best))
        return nans + values.filter(pc.greater_equal(values, nth)).to_pylist()

    def merge(self, accumulated1: list, accumulated2: list) -> list:
        return self._top([*accumulated1, *accumulated2])

    def output(self, accumulated: list) -> list:
        return list(accumulated)


class TopNByKey(Accumulation[tuple[Any, Any], dict, list]):
    """Input ``(key, value)`` pairs: each key's largest value, then the ``n`` keys with the
    largest values as ``[(key, value), ...]``, largest first (ties by key). A None value is
    skipped; NaN ranks above every number (as in Max), and NaN keys are one key."""

    def __init__(self, n: int = 10) -> None:
        if n < 1:
            raise WindowConfigError(f"TopNByKey: n must be >= 1, got {n}")
        self.n = n

    def default_accumulated_value(self) -> dict:
        return {}

    def accumulate(self, accumulated: dict, value: tuple[Any, Any]) -> dict:
        k, v = value
        if v is None:
            return accumulated
        k = one_nan(k)
        old = accumulated.get(k)
        accumulated[k] = v if old is None else highest(old, v)
        return accumulated

    def merge(self, accumulated1: dict, accumulated2: dict) -> dict:
        out = dict(accumulated1)
        for kv in accumulated2.items():
            self.accumulate(out, kv)
        return out

    def output(self, accumulated: dict) -> list:
        # NaN keys as one (a restored state holds copies of NaN, each a key of its own)
        kept = list(self.merge({}, accumulated).items())
        by_key = sorted_nan_last(kept, key=lambda kv: kv[0])
        return sorted(by_key, key=lambda kv: nan_high(kv[1]), reverse=True)[: self.n]


class RemoveDuplicates(Accumulation[Any, set, list]):
    """The distinct values, sorted (NaN values are one value, listed last)."""

    def default_accumulated_value(self) -> set:
        return set()

    def accumulate(self, accumulated: set, value: Any) -> set:
        accumulated.add(one_nan(value))
        return accumulated

    def accumulate_batch(self, accumulated: set, values: pa.Array) -> set:
        accumulated.update(map(one_nan, pc.unique(values).to_pylist()))
        return accumulated

    def merge(self, accumulated1: set, accumulated2: set) -> set:
        return accumulated1 | accumulated2

    def output(self, accumulated: set) -> list:
        # a restored state's NaN is a copy of NAN: collapse them here
        values = [v for v in accumulated if not is_nan(v)]
        if len(values) < len(accumulated):
            values.append(NAN)
        return sorted_nan_last(values)


class SequenceCount(Accumulation[Any, Counter, dict]):
    """How many times each distinct value occurs in the window: ``{value: count}``, in
    value order (the frequency table of the window's sequence of values); NaN values are
    one value, listed last."""

    def default_accumulated_value(self) -> Counter:
        return Counter()

    def accumulate(self, accumulated: Counter, value: Any) -> Counter:
        accumulated[one_nan(value)] += 1
        return accumulated

    def accumulate_batch(self, accumulated: Counter, values: pa.Array) -> Counter:
        counted = pc.value_counts(values)
        for v, n in zip(
            counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True
        ):
            accumulated[one_nan(v)] += n
        return accumulated

    def merge(self, accumulated1: Counter, accumulated2: Counter) -> Counter:
        return accumulated1 + accumulated2

    def output(self, accumulated: Counter) -> dict:
        # a restored state's NaN is a copy of NAN: add up every NaN's count here
        out: dict[Any, int] = {}
        for v in sorted_nan_last(accumulated):
            key = NAN if is_nan(v) else v
            out[key] = out.get(key, 0) + accumulated[v]
        return out


class ToList(Accumulation[Any, list, list]):
    """All values; in arrival order, or sorted with ``sort=True`` (NaN last; arrival order
    across upstream partitions is not fixed, sorted output is the same on every replay)."""

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
        return sorted_nan_last(accumulated) if self.sort else list(accumulated)


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
