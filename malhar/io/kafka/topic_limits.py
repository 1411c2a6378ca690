"""What the Kafka output store (:mod:`malhar.io.kafka.producer`) learns about its topic when
it opens, and the record-size limits that follow from it.

The topic must exist (or be created, when allowed) and its partition count is needed to
encode records. Its ``max.message.bytes`` may be below the producer's
``message.max.bytes``: a record the topic refuses inside a transaction poisons the whole
window, so records over the smaller limit go to the error port before they are sent, with a
reason that names both limits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException

from malhar.io.base.output import WindowKey
from malhar.io.kafka.client import UNKNOWN_CODES, kafka_error
from malhar.io.kafka.encoding import EncodedRecords
from malhar.io.kafka.errors import KafkaOutputUnavailableError, OutputTopicNotFoundError
from malhar.io.kafka.output_settings import KafkaOutputSettings

__all__ = [
    "DEFAULT_MESSAGE_MAX",
    "RECORD_OVERHEAD",
    "OutputTopic",
    "RecordLimits",
    "check_topic",
    "limit_sizes",
]

# the store's logger: these lines belong to the output's story, not to a module of its own
log = logging.getLogger("malhar.io.kafka.output")

#: bytes of a record batch and a record around key, value and headers (Kafka's v2 format)
RECORD_OVERHEAD = 100
#: librdkafka's default message.max.bytes
DEFAULT_MESSAGE_MAX = 1_000_000


class OutputTopic(NamedTuple):
    """What :func:`check_topic` found."""

    partitions: int
    #: the topic's ``max.message.bytes``, when the cluster tells it
    max_message_bytes: int | None


def check_topic(
    settings: KafkaOutputSettings,
    key: WindowKey,
    timeout: float,
    raise_for: Callable[[str, BaseException], BaseException],
) -> OutputTopic:
    """The topic's partition count (created if missing and allowed) and its
    ``max.message.bytes`` when the cluster tells it.

    ``raise_for(what, exc)`` is the store's verdict on a failed request: the exception to
    raise (``exc`` itself when the committer should retry it)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    s = settings
    admin = AdminClient(s.admin_settings())
    topic = s.topic
    try:
        md = admin.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise raise_for("reading the topic's metadata", exc) from None
    meta = md.topics.get(topic)
    err = meta.error if meta is not None else None
    if meta is None or (err is not None and err.code() in UNKNOWN_CODES):
        if not s.create_topic:
            raise OutputTopicNotFoundError(
                f"{key}: {s.target} does not exist; create it, or set create_topic=True "
                "(with topic_partitions, topic_replication, topic_config) to create it at "
                "launch"
            )
        new = NewTopic(
            topic,
            num_partitions=s.topic_partitions or -1,
            replication_factor=s.topic_replication or -1,
            config={str(k): str(v) for k, v in (s.topic_config or {}).items()},
        )
        future = admin.create_topics([new], operation_timeout=timeout)[topic]
        try:
            future.result(timeout=timeout + 5)
            log.info("%s: created %s", key, s.target)
        except KafkaException as exc:
            e = kafka_error(exc)
            if e is None or e.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a race: fine
                raise raise_for(f"creating {s.target}", exc) from None
        meta = _await_topic(admin, s, key, timeout)
    elif err is not None:
        raise KafkaException(err)
    partitions = len(meta.partitions)
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        found = admin.describe_configs([resource], request_timeout=timeout)[resource]
        entry = found.result(timeout=timeout + 5).get("max.message.bytes")
        limit = int(entry.value) if entry is not None and entry.value else None
        return OutputTopic(partitions, limit)
    except Exception as exc:  # not allowed to describe: the producer's limit stands
        log.info("%s: cannot read max.message.bytes of %s: %s", key, s.target, exc)
        return OutputTopic(partitions, None)


def _await_topic(admin: Any, settings: KafkaOutputSettings, key: WindowKey, timeout: float) -> Any:
    """The metadata of a topic just created, once every partition has a leader."""
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(settings.topic, timeout=timeout)
        meta = md.topics.get(settings.topic)
        if (
            meta is not None
            and meta.error is None
            and meta.partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return meta
        if time.monotonic() > deadline:
            raise KafkaOutputUnavailableError(
                f"{key}: the created {settings.target} has no leaders after {timeout:.0f}s"
            )
        time.sleep(0.1)


@dataclass(frozen=True)
class RecordLimits:
    """The size limits a record of the output must fit, as :func:`limit_sizes` found them."""

    #: what errors name (the settings' ``target``)
    target: str
    #: the producer's ``message.max.bytes`` as configured (before lowering to the topic's)
    producer: int
    #: the topic's ``max.message.bytes``, when the cluster told it
    topic: int | None
    #: the ``max_record_bytes`` setting (None: derived from the two above)
    given: int | None

    @property
    def message_max(self) -> int:
        """The smaller of the producer's and the topic's limit on a message."""
        return self.producer if self.topic is None else min(self.producer, self.topic)

    @property
    def max_record_bytes(self) -> int:
        """The largest record (key + value + headers) sent."""
        return self.given or max(1, self.message_max - RECORD_OVERHEAD)

    def too_large(self, size: int) -> str:
        """The reason a record of ``size`` bytes goes to the error port."""
        where = (
            f"max_record_bytes={self.given}"
            if self.given
            else f"message.max.bytes={self.producer}"
            + (f", topic max.message.bytes={self.topic}" if self.topic is not None else "")
        )
        return (
            f"record of {size} bytes (key + value + headers) is too large for "
            f"{self.target} ({where}, less ~{RECORD_OVERHEAD} bytes of record overhead)"
        )

    def check(
        self,
        records: EncodedRecords,
        rejected: dict[int, str],
        *,
        max_bytes: int,
        common_header_bytes: int,
    ) -> None:
        """Add to ``rejected`` each record over ``max_bytes`` (the store's
        ``max_record_bytes``) that is not rejected already, with :meth:`too_large`'s reason.
        ``common_header_bytes``: the headers every record has."""
        limit = max_bytes
        common = common_header_bytes
        keys, values = records.keys, records.values
        extra = records.headers
        for i in range(len(values)):
            n = len(keys[i] or b"") + len(values[i] or b"") + common
            big = n > limit or (extra is not None and records.size(i, common) > limit)
            if big and i not in rejected:
                rejected[i] = self.too_large(records.size(i, common))


def limit_sizes(
    settings: KafkaOutputSettings, config: dict[str, Any], topic_limit: int | None
) -> RecordLimits:
    """Records and batches must fit the topic's ``max.message.bytes`` too: lower the
    producer's ``message.max.bytes`` / ``batch.size`` in ``config`` (the producer's
    settings, changed in place) to it unless they were set."""
    given = settings.producer_config or {}
    producer_limit = int(config.get("message.max.bytes", DEFAULT_MESSAGE_MAX))
    limits = RecordLimits(settings.target, producer_limit, topic_limit, settings.max_record_bytes)
    if limits.message_max < producer_limit and "message.max.bytes" not in given:
        config["message.max.bytes"] = max(1000, limits.message_max)
    if "batch.size" not in given:
        config["batch.size"] = max(1, min(int(config["batch.size"]), limits.message_max))
    return limits
