"""The Kafka connectors' checks before a launch (:meth:`malhar.Operator.preflight`): one
metadata request to the cluster, with the connector's connection and security settings;
the input's topics exist (and an ``initial_offset`` names only their partitions), the
output's topic exists or ``create_topic`` will create it. Nothing is created and no
offset is committed.
"""

from __future__ import annotations

from collections import Counter

from confluent_kafka import KafkaError, KafkaException

from malhar.io.kafka.client import UNKNOWN_CODES, unreachable_advice
from malhar.io.kafka.config import RetryPolicy
from malhar.io.kafka.errors import (
    KafkaOutputUnreachableError,
    KafkaUnreachableError,
    OutputTopicNotFoundError,
)
from malhar.io.kafka.output_settings import KafkaOutputSettings
from malhar.io.kafka.producer_errors import describe_error
from malhar.io.kafka.settings import KafkaSettings

__all__ = ["check_input", "check_output"]

#: what sets how long the check waits, for the advice of an unreachable cluster
WAIT = "the check's timeout (malhar validate --connect-timeout)"


def check_input(settings: KafkaSettings, group: str, label: str, timeout: float) -> str:
    """The input's topics and their partition counts."""
    client = settings.make_client(group, label)
    client.retry = RetryPolicy(attempts=1, request_timeout_ms=max(1, int(timeout * 1000)))
    client.first_contact = True
    try:
        partitions = client.partitions(settings.topic_list())
    except KafkaUnreachableError as exc:
        raise KafkaUnreachableError(
            _no_answer(label, settings.bootstrap_servers, exc.seconds, exc.last),
            attempts=exc.attempts,
            seconds=exc.seconds,
            last=exc.last,
        ) from None
    finally:
        client.close()
    settings.check_start_offsets(partitions, label)
    counts = Counter(topic for topic, _ in partitions)
    topics = ", ".join(f"topic {t!r} ({n} partition(s))" for t, n in counts.items())
    return f"Kafka cluster {settings.bootstrap_servers}: {topics}"


def check_output(settings: KafkaOutputSettings, label: str, timeout: float) -> str:
    """The output's topic and its partition count (or that it will be created)."""
    from confluent_kafka.admin import AdminClient

    s = settings
    error: KafkaException | None = None
    try:  # every topic's metadata: asking for one topic may create it on some brokers
        md = AdminClient(s.admin_settings()).list_topics(timeout=timeout)
    except KafkaException as exc:
        error, md = exc, None
    if md is None or not md.brokers:
        error = error or KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        raise KafkaOutputUnreachableError(
            _no_answer(label, s.bootstrap_servers, timeout, describe_error(error))
        )
    meta = md.topics.get(s.topic)
    err = meta.error if meta is not None else None
    if meta is None or (err is not None and err.code() in UNKNOWN_CODES):
        if s.create_topic:
            return f"{s.target}: does not exist yet, created at launch (create_topic)"
        raise OutputTopicNotFoundError(
            f"{label}: {s.target} does not exist; create it, or set create_topic=True "
            "(with topic_partitions, topic_replication, topic_config) to create it at launch"
        )
    if err is not None:
        raise KafkaOutputUnreachableError(
            f"{label}: {s.target}: the cluster answered with an error: {err.name()}: {err.str()}"
        )
    return f"{s.target}: {len(meta.partitions)} partition(s)"


def _no_answer(label: str, servers: str, seconds: float, last: str) -> str:
    return (
        f"{label}: Kafka cluster {servers} did not answer a metadata request in "
        f"{seconds:.1f}s ({last}); " + unreachable_advice(servers, WAIT)
    )
