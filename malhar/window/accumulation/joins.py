"""Merge accumulations for :class:`~malhar.window.WindowedMergeOperator`: joins of two
streams per window (and key, in the keyed merge operator)."""

from __future__ import annotations

from typing import Any

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


class InnerJoin(_TwoSides):
    """Every ``(left, right)`` pair of the window (and key), in order."""

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        return self._pairs(*accumulated)


class LeftOuterJoin(_TwoSides):
    """Inner pairs, or ``(left, None)`` for every left value when the right side is empty."""

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        left, right = accumulated
        return self._pairs(left, right or [None])


class RightOuterJoin(_TwoSides):
    """Inner pairs, or ``(None, right)`` for every right value when the left side is empty."""

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        left, right = accumulated
        return self._pairs(left or [None], right)


class FullOuterJoin(_TwoSides):
    """Inner pairs; a side that is empty is paired as None with the other side's values."""

    def output(self, accumulated: _Sides) -> list[tuple[Any, Any]]:
        left, right = accumulated
        return self._pairs(left or [None], right or [None]) if (left or right) else []


class Cogroup(_TwoSides):
    """``(left values, right values)`` of the window (and key), each in order."""

    def output(self, accumulated: _Sides) -> tuple[list[Any], list[Any]]:
        return ordered(accumulated[0]), ordered(accumulated[1])
