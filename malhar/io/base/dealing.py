"""Inputs that are their own partitioner: their read positions dealt to a new partition count.

Only an input knows its read positions, so the engine repartitions an input only through the
input's own ``define_partitions`` (Malhar's inputs implement ``Partitioner`` the same way).
The engine calls it on the driver after an orderly stop at window ``W``: every partition
ended ``W`` and ``W`` is complete in the window log, so everything read up to ``W`` is durable
downstream and no window up to ``W`` is replayed again. A connector fills :meth:`deal` (the new
partitions' state from the old partitions' state, restored from their snapshots of ``W``)
and may fill :meth:`count_wanted` (a count of its own, e.g. from its metrics).
"""

from __future__ import annotations

from typing import Any, ClassVar

from malhar.errors import ConfigError
from malhar.partitioning import Partition, PartitioningContext

__all__ = ["DealtPositions"]


class DealtPositions:
    """Mixin: ``define_partitions`` / ``partitioned`` of an input that moves its positions."""

    #: what the input calls its partitions in messages ("reader", "partition")
    partition_noun: ClassVar[str] = "partition"
    #: how else a count can be given, for the message when none was
    count_hint: ClassVar[str] = ""

    def deal(self, inputs: list[Any], count: int) -> list[Any]:
        """``count`` new partitions (operator copies) holding every position of ``inputs``."""
        raise NotImplementedError

    def count_wanted(self, context: PartitioningContext) -> int | None:
        """The partition count the input asks for itself (None: only a requested count)."""
        return None

    def define_partitions(
        self, existing: list[Partition], context: PartitioningContext
    ) -> list[Partition]:
        """``context.requested`` partitions (a count asked for with
        ``RunningApplication.repartition({name: n})``), else :meth:`count_wanted`; the
        positions move to them by :meth:`deal`; the same count keeps ``existing``."""
        count = context.requested or self.count_wanted(context)
        if count is None:
            raise ConfigError(
                f"input {context.operator!r}: ask for a {self.partition_noun} count "
                f"(RunningApplication.repartition({{name: n}})){self.count_hint}"
            )
        if count == len(existing):
            return existing
        return [Partition(op) for op in self.deal([p.operator for p in existing], count)]

    def partitioned(self, partitions: dict[int, Partition]) -> None:
        pass  # the positions are in the partitions' snapshots; nothing is kept here
