"""Which Kafka partitions an operator partition reads (Malhar's one-to-one and one-to-many).

The configured topics are sorted; Kafka partition ``p`` of the ``k``-th topic goes to
operator partition ``(k + p) % n``. With as many operator partitions as Kafka partitions of
one topic that is one-to-one; with fewer, one-to-many; with more, the extra operator
partitions read nothing (they still complete their windows).

The owner of a partition depends only on its topic's rank, its number and ``n``, never on
how many partitions the topics have: when a topic gains partitions at runtime, the new ones
are dealt on and no existing partition changes its reader (whose checkpointed position it
is). Every process computes the same mapping.

The owner does depend on the topic's rank among the configured topics: a restart whose
``topics`` adds (or removes) a topic that sorts before existing ones moves their partitions
to readers with no position for them. Such a restore is refused
(:func:`moved_positions`, checked by the input's ``open``) with what changed and how to
proceed, rather than made to work with an owner independent of the other topics (a stable
hash of topic and partition): that other owner would differ from this one for the existing
checkpoints of every multi-reader input, so they would have to be refused or migrated
anyway, and a refusal is one check of the positions a reader restored, exact (it refuses
precisely when a saved position would be lost and a partition read again from its earliest
offset), and needs no extra state. Adding a topic whose name sorts after the configured
ones moves nothing and is accepted (its partitions are read from their earliest offset).
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
    partitions: Iterable[TopicPartitionKey], count: int, topics: Iterable[str] | None = None
) -> dict[int, list[TopicPartitionKey]]:
    """Operator partition -> its Kafka partitions, for all ``count`` operator partitions.

    ``topics``: the configured topics, whose sorted order gives the ranks (default: the
    topics of ``partitions``)."""
    ordered = sorted(set(partitions))
    names = {t for t, _ in ordered} if topics is None else {*topics, *(t for t, _ in ordered)}
    rank = {t: k for k, t in enumerate(sorted(names))}
    out: dict[int, list[TopicPartitionKey]] = {i: [] for i in range(count)}
    for topic, part in ordered:
        out[(rank[topic] + part) % count].append((topic, part))
    return out


def moved_positions(
    positions: Iterable[TopicPartitionKey], mine: Iterable[TopicPartitionKey], topics: Iterable[str]
) -> list[TopicPartitionKey]:
    """The partitions of the configured ``topics`` that a restored reader holds a position for
    but no longer owns (``mine``): the assignment changed under its checkpoint, so another
    reader would read them again from their earliest offset. Positions of topics no longer
    configured are not counted (a topic removed from ``topics`` is simply no longer read)."""
    configured, owned = set(topics), set(mine)
    return sorted(tp for tp in positions if tp[0] in configured and tp not in owned)
