"""The commit groups of a Kafka output: where each partition's committed window lives.

In ``exactly_once`` delivery the committed window of output partition ``p`` is the
committed offset (minus one) of topic partition ``<topic>[0]`` in the group
``<commit_group_prefix>.<application>.<operator>.<p>``, with the Spark sink's batch
fingerprint and run as JSON in the offset's metadata
(:meth:`~malhar.io.kafka.producer.KafkaOutputStore.store_committed`). One partition reads
its own group; :func:`committed_partitions` reads every partition's, which the Spark sink
needs to recognise a micro-batch that other partitions committed in an earlier execution.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from malhar.io.base.output import CommitMark

__all__ = ["commit_mark", "committed_partitions"]


def commit_mark(offset: int, metadata: str | None) -> CommitMark:
    """The commit mark a group's committed ``offset`` and its ``metadata`` stand for (an
    offset below zero: nothing committed)."""
    if offset < 0:
        return CommitMark()
    extra: dict[str, Any] = {}
    if metadata:
        try:
            extra = json.loads(metadata)
        except ValueError:
            extra = {}
    return CommitMark(offset - 1, extra.get("digest"), extra.get("run"))


def committed_partitions(
    admin: Any, group_prefix: str, topic: str, window: int, timeout: float
) -> dict[int, CommitMark]:
    """The output partitions whose group is ``<group_prefix><partition>`` and whose
    committed window is ``window`` or later, with their marks.

    Offsets are read stable (``require_stable``): a transaction in flight is waited for, not
    read half done. Raises :class:`KafkaException` when a broker did not answer the listing
    (a partition could be missing from it): the caller retries.
    """
    listed = admin.list_consumer_groups(request_timeout=timeout).result()
    if listed.errors:
        raise listed.errors[0]
    groups: dict[int, str] = {}
    for found in listed.valid:
        tail = found.group_id[len(group_prefix) :]
        if found.group_id.startswith(group_prefix) and tail.isdigit():
            groups[int(tail)] = found.group_id
    # one group per request (confluent-kafka's limit), all requests in flight at once
    pending: dict[int, Future] = {}
    for partition, group in groups.items():
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
        futures = admin.list_consumer_group_offsets(
            [request], require_stable=True, request_timeout=timeout
        )
        pending[partition] = futures[group]
    out: dict[int, CommitMark] = {}
    for partition, future in pending.items():
        (tp,) = future.result().topic_partitions
        if tp.error is not None:
            raise KafkaException(tp.error)
        mark = commit_mark(tp.offset, tp.metadata)
        if mark.window >= window:
            out[partition] = mark
    return out
