"""Deterministic orders for the ranking accumulations (TopN, TopNByKey, RemoveDuplicates,
SequenceCount, sorted ToList): NaN ranked above every number as :class:`~malhar.window.
accumulation.Max` ranks it, and ties broken by the value itself, never by arrival order, so a
replay, another interleaving of partitions or a merge of partial states gives the same
output as one accumulation over all the values."""

from __future__ import annotations

import decimal
from collections.abc import Iterable
from typing import Any

from malhar.util.total_order import order_key
from malhar.window._order import ordered

__all__ = ["NAN", "Rank", "is_nan", "nan_high", "one_nan", "sorted_nan_last"]

#: the one NaN every NaN value is replaced by (a set or a Counter finds a key by identity
#: or equality, and NaN equals nothing: each NaN object was a value of its own)
NAN = float("nan")


def is_nan(value: Any) -> bool:
    """Whether ``value`` is a float (or Decimal) NaN."""
    if isinstance(value, float):
        return value != value
    return isinstance(value, decimal.Decimal) and value.is_nan()


def one_nan(value: Any) -> Any:
    """``value``, with a float NaN replaced by :data:`NAN`."""
    return NAN if value.__class__ is float and value != value else value


def nan_high(value: Any) -> tuple:
    """A sort key ordering values naturally with NaN above every number (as Max ranks it)."""
    return (1, 0) if is_nan(value) else (0, value)


def _tie_key(value: Any) -> tuple:
    # equal total keys (1 and 1.0, 0.0 and -0.0): the type, then the repr
    return (order_key(value), type(value).__qualname__, repr(value))


class Rank:
    """The rank of ``value`` (compared by ``primary``) for a top-n: a larger primary ranks
    higher, NaN above every number; on equal primaries the *smaller* value by
    :func:`~malhar.util.total_order.order_key` ranks higher (ties listed in value order, like TopNByKey's keys)."""

    __slots__ = ("_tie", "primary", "value")

    def __init__(self, primary: Any, value: Any) -> None:
        self.primary = nan_high(primary)
        self.value = value
        self._tie: tuple | None = None

    def tie(self) -> tuple:
        if self._tie is None:
            self._tie = _tie_key(self.value)
        return self._tie

    def __lt__(self, other: Rank) -> bool:
        if self.primary < other.primary:
            return True
        if other.primary < self.primary:
            return False
        return other.tie() < self.tie()


def sorted_nan_last(values: Iterable[Any], key: Any = None) -> list:
    """``values`` in :func:`~malhar.window._order.ordered` order, the NaN ones (by ``key``)
    last: ``sorted`` with a NaN among numbers depends on the order it is given."""
    items = list(values)
    pick = (lambda v: v) if key is None else key
    nans = [v for v in items if is_nan(pick(v))]
    if not nans:
        return ordered(items, key=key)
    rest = [v for v in items if not is_nan(pick(v))]
    return ordered(rest, key=key) + nans
