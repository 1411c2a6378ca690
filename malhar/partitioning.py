"""Dynamic partitioning: partitioners, partition keys and the built-in partitioners.

The partitioning guide's protocol (Apex's ``Partitioner``), in Python:

- :class:`PartitionKeys` (a mask on the stream codec's hash and the masked values a
  partition receives) say which tuples of a keyed stream reach a partition;
- a :class:`Partitioner` (the operator itself, or an object set as the operator's
  ``PARTITIONER`` attribute) answers ``define_partitions(existing, context)`` with
  the new list of :class:`Partition` and hears ``partitioned(mapping)`` once the new
  set runs. The engine calls it when a stats listener's response says
  ``repartition_required`` (or ``RunningApplication.repartition`` is called);
- the new partition set takes over at the next window after the current one is
  checkpointed: keyed state moves to the partition that owns its key
  (``malhar/engine/repartition.py``, ``malhar/engine/state_moves.py``,
  ``docs/partitioning.md``).

Built-ins: :class:`StatelessPartitioner` (a fixed count) and
:class:`StatelessThroughputBasedPartitioner` (split a partition above a tuples/s
bound, merge adjacent partitions below one, with a cooldown), as in the guide.

Example:
    >>> keys = spread(3)                     # 3 partitions over a mask of 3 (4 values)
    >>> [sorted(k.keys) for k in keys], keys[0].mask
    ([[0, 3], [1], [2]], 3)
    >>> [sorted(k.keys) for k in split(keys[1])]   # one value: the mask doubles
    [[1], [5]]
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from malhar.errors import ConfigError
from malhar.stats import OperatorStats, Response

__all__ = [
    "Partition",
    "PartitionKeys",
    "Partitioner",
    "PartitioningContext",
    "StatelessPartitioner",
    "StatelessThroughputBasedPartitioner",
    "merge",
    "routing_table",
    "split",
    "spread",
]


@dataclass(frozen=True)
class PartitionKeys:
    """The tuples a partition receives: those whose codec hash ``& mask`` is in ``keys``."""

    mask: int
    keys: frozenset[int]

    def __post_init__(self) -> None:
        if self.mask < 0 or self.mask & (self.mask + 1):
            raise ConfigError(f"PartitionKeys mask must be 2**k - 1, got {self.mask}")
        bad = [k for k in self.keys if not 0 <= k <= self.mask]
        if bad or not self.keys:
            raise ConfigError(f"PartitionKeys {sorted(self.keys)} do not fit mask {self.mask}")

    def with_mask(self, mask: int) -> PartitionKeys:
        """The same tuples under a wider mask (every key repeated in the new bits)."""
        if mask < self.mask:
            raise ConfigError("a mask can only widen")
        step = self.mask + 1
        return PartitionKeys(
            mask, frozenset(k + i * step for k in self.keys for i in range((mask + 1) // step))
        )


@dataclass
class Partition:
    """One partition: its operator instance (with its state) and its partition keys.

    A partitioner returns existing :class:`Partition` objects unchanged (they keep
    running as they are) or new ones; ``stats`` holds the partition's recent windows.
    """

    operator: Any
    keys: PartitionKeys | None = None
    stats: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class PartitioningContext:
    """What ``define_partitions`` may consult."""

    operator: str  #: the operator's name
    stats: OperatorStats | None = None  #: its recent windows, all partitions
    parallel_partitions: int = 0  #: upstream partitions it must follow (PARALLEL_PARTITION)
    #: the partition count asked for (``RunningApplication.repartition({name: n})`` on an
    #: operator that is its own partitioner, e.g. an input that moves its read positions)
    requested: int | None = None


@runtime_checkable
class Partitioner(Protocol):
    """Defines an operator's partitions (at launch and on every repartition)."""

    def define_partitions(
        self, existing: list[Partition], context: PartitioningContext
    ) -> list[Partition]: ...

    def partitioned(self, partitions: dict[int, Partition]) -> None: ...


# -- partition keys ---------------------------------------------------------------------------
def spread(n: int) -> list[PartitionKeys]:
    """Keys for ``n`` partitions: the smallest mask with at least ``n`` values, dealt
    round robin (Apex's default)."""
    if n < 1:
        raise ConfigError(f"a partition count must be >= 1, got {n}")
    mask = 1
    while mask + 1 < n:
        mask = mask * 2 + 1
    if n == 1:
        mask = 0
    return [PartitionKeys(mask, frozenset(range(i, mask + 1, n))) for i in range(n)]


def split(keys: PartitionKeys) -> list[PartitionKeys]:
    """Two halves of a partition's keys (the mask doubles when it has only one value)."""
    if len(keys.keys) == 1:
        keys = keys.with_mask(keys.mask * 2 + 1)
    ordered = sorted(keys.keys)
    half = len(ordered) // 2
    return [
        PartitionKeys(keys.mask, frozenset(ordered[:half])),
        PartitionKeys(keys.mask, frozenset(ordered[half:])),
    ]


def merge(parts: Sequence[PartitionKeys]) -> PartitionKeys:
    """One partition holding all of ``parts``' keys (under the widest mask)."""
    mask = max(p.mask for p in parts)
    return PartitionKeys(mask, frozenset(k for p in parts for k in p.with_mask(mask).keys))


def routing_table(keys: Sequence[PartitionKeys]) -> tuple[int, list[int]]:
    """``(mask, table)``: ``table[hash & mask]`` is the partition of a tuple. Every
    masked value must belong to exactly one partition."""
    mask = max(k.mask for k in keys)
    table = [-1] * (mask + 1)
    for p, k in enumerate(keys):
        for value in k.with_mask(mask).keys:
            if table[value] != -1:
                raise ConfigError(
                    f"partition keys overlap: {value} is in partitions {table[value]} and {p}"
                )
            table[value] = p
    missing = [v for v, p in enumerate(table) if p == -1]
    if missing:
        raise ConfigError(f"partition keys leave masked values {missing[:8]} without a partition")
    return mask, table


# -- built-in partitioners --------------------------------------------------------------------
def _fresh(existing: list[Partition]) -> Any:
    return existing[0].operator.clone()


class StatelessPartitioner:
    """Always ``count`` partitions; new ones are fresh copies of the configured operator
    (Apex's ``StatelessPartitioner``). State of keyed fields still moves with its keys."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ConfigError(f"StatelessPartitioner count must be >= 1, got {count}")
        self.count = count

    def define_partitions(
        self, existing: list[Partition], context: PartitioningContext
    ) -> list[Partition]:
        if len(existing) == self.count:
            return existing
        return [Partition(_fresh(existing), keys) for keys in spread(self.count)]

    def partitioned(self, partitions: dict[int, Partition]) -> None:
        pass


class StatelessThroughputBasedPartitioner:
    """Keeps each partition's throughput between ``minimum`` and ``maximum`` tuples/s.

    Also a stats listener (set it as the operator's ``PARTITIONER`` and in its
    ``STATS_LISTENERS``): a partition above ``maximum`` is split in two, adjacent
    partitions all below ``minimum`` are merged into one, and after a repartition
    nothing changes for ``cooldown_ms`` (the observation interval of the guide).
    Throughput is tuples in per second over the windows reported since the last call.
    """

    def __init__(self, maximum: float, minimum: float, cooldown_ms: int = 10_000) -> None:
        if not 0 <= minimum < maximum:
            raise ConfigError(f"need 0 <= minimum < maximum, got {minimum} and {maximum}")
        self.maximum = maximum
        self.minimum = minimum
        self.cooldown_ms = cooldown_ms
        self._last_change = 0.0
        #: the rates that made the last repartition_required response (define_partitions
        #: acts on them, not on whatever arrived while the repartitioning started)
        self._rates: dict[int, float] = {}

    def process_stats(self, stats: OperatorStats) -> Response:
        rates = {p: stats.tuples_in_per_second(p) for p in stats.by_partition()}
        if (time.monotonic() - self._last_change) * 1000 < self.cooldown_ms:
            return Response()
        low = [p for p, r in sorted(rates.items()) if r < self.minimum]
        if any(r > self.maximum for r in rates.values()):
            self._rates = rates
            return Response(True, f"a partition is above {self.maximum:g} tuples/s")
        if any(b - a == 1 for a, b in itertools.pairwise(low)):
            self._rates = rates
            return Response(True, f"adjacent partitions are below {self.minimum:g} tuples/s")
        return Response()

    def define_partitions(
        self, existing: list[Partition], context: PartitioningContext
    ) -> list[Partition]:
        keys = [p.keys for p in existing]
        if any(k is None for k in keys):
            keys = spread(len(existing))
        rates = [self._rates.get(p, self.minimum) for p in range(len(existing))]
        out: list[Partition] = []
        i = 0
        while i < len(existing):
            if rates[i] > self.maximum:  # too busy: two halves
                out += [Partition(_fresh(existing), half) for half in split(keys[i])]
                i += 1
                continue
            j = i
            while rates[i] < self.minimum and j + 1 < len(existing) and rates[j + 1] < self.minimum:
                j += 1
            if j > i:  # adjacent idle partitions: one
                out.append(Partition(_fresh(existing), merge(keys[i : j + 1])))
            else:
                out.append(Partition(existing[i].operator, keys[i], existing[i].stats))
            i = j + 1
        return out

    def partitioned(self, partitions: dict[int, Partition]) -> None:
        self._last_change = time.monotonic()
