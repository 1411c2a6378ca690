"""Which Kafka partitions an operator partition reads (Malhar's one-to-one and one-to-many).

All ``(topic, partition)`` pairs of the configured topics are sorted and dealt round robin
over the operator's partitions: operator partition ``i`` of ``n`` reads pairs
``i, i + n, i + 2n, ...``. With as many operator partitions as Kafka partitions that is
one-to-one; with fewer, one-to-many; with more, the extra operator partitions read nothing
(they still complete their windows). The mapping depends only on the partition lists and
``n``, so every process computes the same one.
"""

from __future__ import annotations

from collections.abc import Iterable

TopicPartitionKey = tuple[str, int]


def assign(
    partitions: Iterable[TopicPartitionKey], index: int, count: int
) -> list[TopicPartitionKey]:
    """The Kafka partitions of operator partition ``index`` out of ``count``."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"operator partition {index} of {count} does not exist")
    ordered = sorted(set(partitions))
    return ordered[index::count]


def mapping(
    partitions: Iterable[TopicPartitionKey], count: int
) -> dict[int, list[TopicPartitionKey]]:
    """Operator partition -> its Kafka partitions, for all ``count`` operator partitions."""
    ordered = sorted(set(partitions))
    return {i: ordered[i::count] for i in range(count)}
