"""The accumulation protocol: the business logic of a windowed operator.

An :class:`Accumulation` says what a window's state (per key, when keyed) is and how it
grows (Malhar's ``Accumulation<InputT, AccumT, OutputT>``):

- ``default_accumulated_value()``: the state of an empty window (a fresh object);
- ``accumulate(acc, value) -> acc``: one tuple in;
- ``merge(acc1, acc2) -> acc``: two states into one (session merges, and partial
  states of partitions in a unifier); must be associative and commutative, so that the
  result does not depend on arrival order;
- ``output(acc)``: the pane's value (a new object, never the state itself: the operator
  keeps the last output for retractions);
- ``retraction(output)``: the value of the tuple that takes back a pane
  (ACCUMULATING_AND_RETRACTING); numbers negate, others are emitted as they were (the
  pane info says ``is_retraction``).

Vectorized, for Arrow batches:

- ``accumulate_batch(acc, values: pyarrow.Array) -> acc``: many tuples of one window
  (and key) at once; the default calls ``accumulate`` per value;
- ``arrow_aggregations`` / ``from_aggregates(*results)``: when set, the operator computes
  one partial state per (window, key) for a whole batch with a single Arrow hash
  aggregation (``pyarrow.Table.group_by``) and merges it in (Count, Sum, Min, Max,
  Average do this: no Python per tuple).

A :class:`MergeAccumulation` (for :class:`~malhar.window.WindowedMergeOperator`) also has
``accumulate2(acc, value)`` for its second input.

Example:
    >>> class Longest(Accumulation):
    ...     def default_accumulated_value(self): return ""
    ...     def accumulate(self, acc, word): return word if len(word) > len(acc) else acc
    ...     def merge(self, a, b): return a if len(a) >= len(b) else b
    ...     def output(self, acc): return acc
    >>> a = Longest()
    >>> a.output(a.accumulate(a.accumulate(a.default_accumulated_value(), "ab"), "abc"))
    'abc'
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from malhar.window.errors import AccumulationError

__all__ = ["Accumulation", "MergeAccumulation"]

InputT = TypeVar("InputT")
AccumT = TypeVar("AccumT")
OutputT = TypeVar("OutputT")


class Accumulation(Generic[InputT, AccumT, OutputT]):
    """See the module docstring. Subclasses implement the first four methods."""

    #: Arrow hash aggregation functions over the value column (``"count_all"`` takes no
    #: column) whose results, per group, :meth:`from_aggregates` turns into a partial state
    arrow_aggregations: ClassVar[tuple[str, ...] | None] = None

    def default_accumulated_value(self) -> AccumT:
        raise NotImplementedError

    def accumulate(self, accumulated: AccumT, value: InputT) -> AccumT:
        raise NotImplementedError

    def merge(self, accumulated1: AccumT, accumulated2: AccumT) -> AccumT:
        raise AccumulationError(
            f"{type(self).__name__} cannot merge two states: it is needed for session windows "
            "and for unifying partitions; implement merge()"
        )

    def output(self, accumulated: AccumT) -> OutputT:
        raise NotImplementedError

    def retraction(self, value: OutputT) -> OutputT:
        """The value that retracts a pane whose value was ``value``."""
        return value

    def accumulate_batch(self, accumulated: AccumT, values: pa.Array) -> AccumT:
        """Many values of one window (and key) at once; override to vectorize."""
        accumulate = self.accumulate
        for v in values.to_pylist():
            accumulated = accumulate(accumulated, v)
        return accumulated

    def from_aggregates(self, *results: Any) -> AccumT:
        """A partial state from the results of :attr:`arrow_aggregations` for one group."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class MergeAccumulation(Accumulation[InputT, AccumT, OutputT]):
    """An accumulation over two inputs: ``accumulate`` takes the first, ``accumulate2``
    the second (Malhar's ``MergeAccumulation``)."""

    def accumulate2(self, accumulated: AccumT, value: Any) -> AccumT:
        raise NotImplementedError
