"""Which Kafka partitions an operator partition reads (Malhar's one-to-one and one-to-many).

The configured topics are sorted; Kafka partition ``p`` of the ``k``-th topic goes to
operator partition ``(k + p) % n``. With as many operator partitions as Kafka partitions of
one topic that is one-to-one; with fewer, one-to-many; with more, the extra operator
partitions read nothing (they still complete their windows).

The owner of a partition depends only on its topic's rank, its number and ``n``, never on
how many partitions the topics have: when a topic gains partitions at runtime, the new ones
are dealt on and no existing partition changes its reader (whose checkpointed position it
is). Every process computes the same mapping.
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
    return mapping(partitions, count)[index]


def mapping(
    partitions: Iterable[TopicPartitionKey], count: int
) -> dict[int, list[TopicPartitionKey]]:
    """Operator partition -> its Kafka partitions, for all ``count`` operator partitions."""
    ordered = sorted(set(partitions))
    rank = {t: k for k, t in enumerate(sorted({t for t, _ in ordered}))}
    out: dict[int, list[TopicPartitionKey]] = {i: [] for i in range(count)}
    for topic, part in ordered:
        out[(rank[topic] + part) % count].append((topic, part))
    return out
