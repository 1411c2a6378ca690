"""A Kafka input's readers dealt again: its positions pooled and handed to a new reader count.

Malhar's ``AbstractKafkaInputOperator`` is its own ``Partitioner``; ours too. The engine calls
it only after an orderly stop at window ``W`` (every reader ended ``W``, ``W`` is complete in
the window log, so everything read up to ``W`` is durable downstream). Then:

- each Kafka partition's next offset, group-committed offset and event-time mark go to the
  reader that the stable assignment (:mod:`malhar.io.kafka.assignment`) gives it among the new
  readers, so no offset is read twice or skipped;
- the released position is the read position (``W`` is complete), and no window up to ``W``
  is replayed again, so the new readers carry no unreleased windows.

Kafka partitions nobody held a position for (added to the topic since) are taken by their
reader at its ``open``, from their earliest offset, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from malhar.io.kafka.assignment import mapping
from malhar.io.kafka.event_time import PartitionWatermarks

if TYPE_CHECKING:
    from malhar.io.kafka.input_operator import KafkaInputOperator


def readers_for(kafka_partitions: int, per_reader: int) -> int:
    """Readers for ``kafka_partitions`` at ``per_reader`` each (one-to-one: ``per_reader=1``)."""
    return max(1, -(-kafka_partitions // per_reader))


def deal(readers: list[KafkaInputOperator], count: int) -> list[KafkaInputOperator]:
    """``count`` readers holding every position of ``readers`` (see the module doc)."""
    positions: dict = {}
    group: dict = {}
    released = -1
    for r in readers:
        positions.update(r._next)
        group.update(r._group_committed)
        released = max([released, r._released, *r._unreleased])
    # ranks among the configured topics, as the readers' open() assigns them; positions of
    # topics no longer configured are not read any more (and would shift the ranks)
    topics = readers[0].topic_list()
    positions = {tp: o for tp, o in positions.items() if tp[0] in topics}
    owners = mapping(positions, count, topics)
    out = []
    for index in range(count):
        reader = readers[0].clone()
        mine = owners[index]
        reader._next = {tp: positions[tp] for tp in mine}
        reader._released_position = dict(reader._next)
        reader._group_committed = {tp: group[tp] for tp in mine if tp in group}
        reader._event_marks = _marks([r._event_marks for r in readers], mine)
        reader._partitions = count
        reader._unreleased = []
        reader._released = released
        out.append(reader)
    return out


def _marks(old: list[PartitionWatermarks], mine: list[tuple[str, int]]) -> PartitionWatermarks:
    """The event-time marks of ``mine``; the new reader's watermark starts no later than the
    slowest old reader's (the operator downstream already holds the minimum)."""
    marks = PartitionWatermarks()
    keys = {PartitionWatermarks._key(tp) for tp in mine}
    for m in old:
        marks.highest.update({k: v for k, v in m.highest.items() if k in keys})
        marks.heard.update({k: v for k, v in m.heard.items() if k in keys})
    since = [m.since for m in old if m.since is not None]
    sent = [m.sent for m in old if m.sent is not None]
    marks.since = min(since) if since else None
    marks.sent = min(sent) if sent else None
    return marks
