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
import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from malhar.io.base.output import CommitMark

__all__ = ["admin_client", "commit_mark", "committed_partitions"]

#: admin clients by configuration: one per process and cluster, not one per sink partition
_ADMINS: dict[tuple[tuple[str, str], ...], Any] = {}


def admin_client(config: dict[str, Any]) -> Any:
    """This process's admin client for ``config`` (created on first use)."""
    key = tuple(sorted((str(k), repr(v)) for k, v in config.items()))
    found = _ADMINS.get(key)
    if found is None:
        from confluent_kafka.admin import AdminClient

        found = _ADMINS[key] = AdminClient(config)
    return found


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

    Offsets are read stable (``require_stable``): a group with offsets in a transaction
    still open (a task of this batch committing right now) answers
    ``UNSTABLE_OFFSET_COMMIT``, and is asked again until ``timeout``, as librdkafka's
    consumer does. Raises :class:`KafkaException` when a broker did not answer the listing
    (a partition could be missing from it) or the offsets stay unstable: the caller retries.
    """
    listed = admin.list_consumer_groups(request_timeout=timeout).result()
    if listed.errors:
        raise listed.errors[0]
    groups: dict[int, str] = {}
    for found in listed.valid:
        tail = found.group_id[len(group_prefix) :]
        if found.group_id.startswith(group_prefix) and _is_partition(tail):
            groups[int(tail)] = found.group_id
    deadline = time.monotonic() + timeout
    out: dict[int, CommitMark] = {}
    pause = 0.01
    while groups:
        unstable: dict[int, str] = {}
        for partition, tp in _offsets(admin, groups, topic, timeout).items():
            if tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
                unstable[partition] = groups[partition]
                continue
            if tp.error is not None:
                raise KafkaException(tp.error)
            mark = commit_mark(tp.offset, tp.metadata)
            if mark.window >= window:
                out[partition] = mark
        if unstable and time.monotonic() + pause > deadline:
            raise KafkaException(KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))
        if unstable:
            time.sleep(pause)  # a transaction's commit takes milliseconds
            pause = min(pause * 2, 0.5)
        groups = unstable
    return out


def _is_partition(tail: str) -> bool:
    """A partition number as the group names write it (ASCII digits, no leading zero)."""
    return tail.isascii() and tail.isdigit() and str(int(tail)) == tail


def _offsets(admin: Any, groups: dict[int, str], topic: str, timeout: float) -> dict[int, Any]:
    """The committed offset of ``topic[0]`` in each group: one request per group
    (confluent-kafka's limit), all in flight at once."""
    pending: dict[int, Future] = {}
    for partition, group in groups.items():
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
        futures = admin.list_consumer_group_offsets(
            [request], require_stable=True, request_timeout=timeout
        )
        pending[partition] = futures[group]
    out: dict[int, Any] = {}
    for partition, future in pending.items():
        (tp,) = future.result().topic_partitions
        out[partition] = tp
    return out
