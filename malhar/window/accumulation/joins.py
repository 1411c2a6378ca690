"""Merge accumulations for :class:`~malhar.window.WindowedMergeOperator`: joins of two
streams per window (and key, in the keyed merge operator).

Null keys match nothing, as in SQL: in the keyed merge operator, the values of a key that
is None (or a tuple with a None in it: a key of several columns) are never paired with
each other; the joins output them as unmatched (an inner join nothing, an outer join
each value of its outer side(s) paired with None), through :meth:`_Join.output_for_key`,
which the keyed operator calls instead of ``output``. ``null_keys_match=True`` pairs them
as any key's (Spark's ``eqNullSafe``; Malhar's ``PojoInnerJoin`` & co. did, comparing
keys with Java's ``equals``).
:class:`Cogroup` groups, as Spark's ``cogroup`` does: a None key is one group."""

from __future__ import annotations

from typing import Any

from malhar.util.null_keys import null_key
from malhar.window._order import ordered
from malhar.window.protocol import MergeAccumulation

__all__ = ["Cogroup", "FullOuterJoin", "InnerJoin", "LeftOuterJoin", "RightOuterJoin"]

_Sides = tuple[list[Any], list[Any]]


class _TwoSides(MergeAccumulation[Any, _Sides, Any]):
    """State: the values of each input, as two lists (duplicates kept)."""

    def default_accumulated_value(self) -> _Sides:
        return [], []

    def accumulate(self, accumulated: _Sides, value: Any) -> _Sides:
        accumulated[0].append(value)
        return accumulated

    def accumulate2(self, accumulated: _Sides, value: Any) -> _Sides:
        accumulated[1].append(value)
        return accumulated

    def merge(self, accumulated1: _Sides, accumulated2: _Sides) -> _Sides:
        return accumulated1[0] + accumulated2[0], accumulated1[1] + accumulated2[1]

    def _pairs(self, left: list[Any], right: list[Any]) -> list[tuple[Any, Any]]:
        return ordered((a, b) for a in left for b in right)


class _Join(_TwoSides):
    """A join: the values of a null key match nothing (unless ``null_keys_match``)."""

    null_keys_match = False  # (an instance pickled before the option unpickles without it)

    def __init__(self, null_keys_match: bool = False) -> None:
        self.null_keys_match = bool(null_keys_match)

    def output_for_key(self, key: Any, accumulated: _Sides) -> list[tuple[Any, Any]]:
        """The output of ``key``'s state (keyed merge operators call this, not
        ``output``): for a null key, the values as unmatched, both sides' at once."""
        if self.null_keys_match or not null_key(key):
            return self.output(accumulated)
        left, right = accumulated
        return self._unmatched(left, right)

    def _unmatched(self, left: list[Any], right: list[Any]) -> list[tuple[Any, Any]]:
        return []


class InnerJoin(_Join):
    """Every ``(left, right)`` pair of the window (and key), in order; none for a null
    key."""

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        return self._pairs(*accumulated)


class LeftOuterJoin(_Join):
    """Inner pairs, or ``(left, None)`` for every left value when the right side is empty
    or the key is null."""

    def _unmatched(self, left: list[Any], right: list[Any]) -> list[tuple[Any, Any]]:
        return self._pairs(left, [None])

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        left, right = accumulated
        return self._pairs(left, right or [None])


class RightOuterJoin(_Join):
    """Inner pairs, or ``(None, right)`` for every right value when the left side is empty
    or the key is null."""

    def _unmatched(self, left: list[Any], right: list[Any]) -> list[tuple[Any, Any]]:
        return self._pairs([None], right)

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        left, right = accumulated
        return self._pairs(left or [None], right)


class FullOuterJoin(_Join):
    """Inner pairs; a side that is empty is paired as None with the other side's values;
    for a null key, each side's values are paired with None (left ones first)."""

    def _unmatched(self, left: list[Any], right: list[Any]) -> list[tuple[Any, Any]]:
        return self._pairs(left, [None]) + self._pairs([None], right)

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        left, right = accumulated
        return self._pairs(left or [None], right or [None]) if (left or right) else []


class Cogroup(_TwoSides):
    """``(left values, right values)`` of the window (and key), each in order."""

    def output(self, accumulated: _Sides) -> tuple[list[Any], list[Any]]:
        return ordered(accumulated[0]), ordered(accumulated[1])
