"""The Kafka connector's settings, each declared once as a :class:`~malhar.properties.Property`.

:class:`KafkaSettings` holds what every Kafka reader needs (brokers, topics, where to start,
the consumer group, librdkafka settings, fetch size, retries). The input operators inherit
it, so these are operator properties (``KafkaTextInputOperator(topics=...)``, ``malhar run
--config topics=...``); the Spark data source configures a :class:`KafkaSourceSettings` from
its options with :meth:`~KafkaSourceSettings.from_options`, so an option and a property
share their type, default, checks and documentation, and a mistyped option name fails with
the names it resembles.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

from malhar.io.kafka.client import TP, KafkaClient
from malhar.io.kafka.config import InitialOffset, RetryPolicy, literal_secrets, topic_list
from malhar.io.kafka.errors import KafkaConfigError
from malhar.properties import (
    Configurable,
    Property,
    PropertyError,
    properties_of,
    unknown_name,
)

__all__ = ["KafkaSettings", "KafkaSourceSettings"]

_MODES = [m.value for m in InitialOffset]


def _check_topics(value: Any) -> str | None:
    try:
        topic_list(value)
    except KafkaConfigError as exc:
        return str(exc)
    return None


def _check_start(value: Any) -> str | None:
    try:
        InitialOffset.parse_start(value)
    except KafkaConfigError as exc:
        return str(exc)
    return None


def _check_consumer_config(value: Any) -> str | None:
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        return f"librdkafka setting names must be strings, got {bad!r}"
    literal = literal_secrets(value)
    if literal:
        names = ", ".join(repr(k) for k in literal)
        return (
            f"{names} must be a secret reference, '${{env:NAME}}' or '${{file:/path}}': a "
            "literal secret would travel in clear in the application plan and Spark's tasks "
            "(the reference is read where the consumer is created)"
        )
    return None


class KafkaSettings(Configurable):
    """What a Kafka reader is configured with (shared by the operators and the data source)."""

    bootstrap_servers = Property(str, not_null=True, doc="Kafka brokers, host:port[,host:port]")
    topics = Property(
        (str, list, tuple), not_null=True, check=_check_topics, doc="'a' or 'a,b' or ['a','b']"
    )
    initial_offset = Property(
        str,
        default=InitialOffset.APPLICATION_OR_LATEST.value,
        check=_check_start,
        doc=f"where a partition starts without a position of its own: one of {_MODES}, or "
        'offsets as JSON {"topic": {"0": 42}} (other partitions start at their earliest)',
    )
    group_id = Property(
        str,
        default=None,
        doc="consumer group offsets are committed to (operators: default "
        "'malhar-<application>-<operator>')",
    )
    consumer_config = Property(
        dict,
        default=None,
        check=_check_consumer_config,
        references=True,
        doc="any librdkafka setting (SASL, SSL, fetch.*); secret ones as '${env:NAME}' or "
        "'${file:/path}', read where the consumer is created; never logged",
    )
    fetch_batch = Property(int, default=10_000, min=1, doc="records per consume() call")
    retry_attempts = Property(int, default=5, min=1, doc="requests to a silent cluster")
    retry_backoff_ms = Property(int, default=500, min=0, doc="first backoff, doubling")
    request_timeout_ms = Property(int, default=5_000, min=100, doc="one request's timeout")

    def topic_list(self) -> list[str]:
        """The configured topics, in order, without duplicates."""
        return topic_list(self.topics)

    def retry_policy(self) -> RetryPolicy:
        """Bounded retries for a cluster that does not answer (backoff doubling up to 8 s)."""
        return RetryPolicy(
            attempts=self.retry_attempts,
            backoff_ms=self.retry_backoff_ms,
            max_backoff_ms=max(self.retry_backoff_ms, 8_000),
            request_timeout_ms=self.request_timeout_ms,
        )

    def make_client(self, group_id: str, label: str) -> KafkaClient:
        """A consumer for ``group_id``; secret references are read now, in this process."""
        return KafkaClient(
            self.bootstrap_servers,
            group_id,
            self.consumer_config,
            self.retry_policy(),
            label=label,
        )

    def check_start_offsets(self, partitions: Iterable[TP], who: str) -> None:
        """Refuse offsets given as JSON in :attr:`initial_offset` for a topic or partition
        that is not among ``partitions`` (every Kafka partition of the configured topics): a
        misspelled topic would otherwise be ignored and its partitions read from the
        earliest offset."""
        start = InitialOffset.parse_start(self.initial_offset)
        if not isinstance(start, dict):
            return
        known = set(partitions)
        unknown = sorted(tp for tp in start if tp not in known)
        if not unknown:
            return
        topics = {t for t, _ in known}
        counts = {t: sum(1 for k, _ in known if k == t) for t in sorted(topics)}
        named = ", ".join(
            f"{t}[{p}] ({'no such configured topic' if t not in topics else 'no such partition'})"
            for t, p in unknown
        )
        configured = ", ".join(f"{t!r} (partitions 0-{n - 1})" for t, n in counts.items())
        raise KafkaConfigError(
            f"{who}: the initial offsets {self.initial_offset!r} name {named}; the configured "
            f"topics are {configured}. Name only those partitions (the ones not named start "
            "at their earliest offset), or add the topic to the topics"
        )

    def start_offsets(
        self, client: KafkaClient, tps: Iterable[TP], *, group: bool = True
    ) -> dict[TP, int]:
        """Where each of ``tps`` starts per :attr:`initial_offset` (``group``: the
        ``APPLICATION_*`` modes may read the group's committed offsets)."""
        tps = list(tps)
        if not tps:
            return {}
        start = InitialOffset.parse_start(self.initial_offset)
        if isinstance(start, dict):
            rest = [tp for tp in tps if tp not in start]
            found = client.start_offsets(rest, earliest=True, use_group=False)
            return {**found, **{tp: start[tp] for tp in tps if tp in start}}
        if start.uses_group and not group:
            raise KafkaConfigError(f"initial offset {start.value} needs a consumer group")
        return client.start_offsets(tps, start.earliest, start.uses_group)


class KafkaSourceSettings(KafkaSettings):
    """The settings of ``spark.readStream.format("malhar_kafka")``: :class:`KafkaSettings`
    plus what only a data source has. Its options are the property names or the Spark-style
    names of :attr:`OPTIONS`, case-insensitively; ``kafka.<setting>`` goes to
    :attr:`consumer_config`. The default of ``initial_offset`` is ``LATEST`` here."""

    max_records_per_batch = Property(
        int, default=None, min=1, doc="records per micro-batch over all partitions (default: all)"
    )
    value_format = Property(
        str,
        default="bytes",
        one_of=("bytes", "text", "json"),
        doc="bytes (value binary), text or json (value string, plus an error column)",
    )

    #: Spark-style option name -> property
    OPTIONS: ClassVar[dict[str, str]] = {
        "bootstrap.servers": "bootstrap_servers",
        "kafka.bootstrap.servers": "bootstrap_servers",
        "topics": "topics",
        "subscribe": "topics",
        "startingOffsets": "initial_offset",
        "groupId": "group_id",
        "kafka.group.id": "group_id",
        "maxRecordsPerBatch": "max_records_per_batch",
        "valueFormat": "value_format",
        "fetchBatch": "fetch_batch",
        "retryAttempts": "retry_attempts",
        "retryBackoffMs": "retry_backoff_ms",
        "requestTimeoutMs": "request_timeout_ms",
    }
    SOURCE: ClassVar[str] = "malhar_kafka"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Self:
        """Settings from the data source's options; unknown names, bad values and missing
        required options fail with a :class:`~malhar.errors.ConfigError`."""
        settings = cls()
        settings.initial_offset = InitialOffset.LATEST.value
        return settings.configure_from_strings(options)

    def configure_from_strings(self, options: Mapping[str, Any]) -> Self:
        # Spark hands Python data sources their options with lower-cased names
        names = {n.lower(): n for n in properties_of(type(self))}
        names.update((a.lower(), p) for a, p in self.OPTIONS.items())
        props: dict[str, Any] = {}
        given: dict[str, str] = {}
        kafka: dict[str, Any] = {}
        for key, value in options.items():
            key = str(key)
            name = names.get(key.lower())
            if name is None and key.lower().startswith("kafka."):
                kafka[key[len("kafka.") :]] = value
                continue
            if name is None:
                raise PropertyError(
                    unknown_name(self.SOURCE, "option", key, self.option_names())
                    + "; librdkafka settings go in 'kafka.<setting>' options"
                )
            if name in given:
                raise PropertyError(
                    f"{self.SOURCE}: options {given[name]!r} and {key!r} set the same thing"
                )
            # Spark lower-cases the names: show the documented spelling
            given[name] = next((a for a in self.OPTIONS if a.lower() == key.lower()), key)
            props[name] = value
        if kafka:
            if "consumer_config" in props:
                raise PropertyError(
                    f"{self.SOURCE}: give librdkafka settings as 'kafka.<setting>' options or "
                    "as 'consumer_config', not both"
                )
            props["consumer_config"] = kafka
        known = properties_of(type(self))
        for name, text in props.items():
            option = given.get(name, "kafka.*")
            try:
                value = known[name].parse(text)
            except PropertyError as exc:
                raise PropertyError(f"{self.SOURCE}: option {option!r}: {exc}") from None
            why = known[name].problem(value)
            if why:
                raise PropertyError(f"{self.SOURCE}: option {option!r}: {why}")
            setattr(self, name, value)
        missing = [
            self.option_name(n)
            for n, p in properties_of(type(self)).items()
            if p.not_null and getattr(self, n) is None
        ]
        if missing:
            raise PropertyError(f"{self.SOURCE}: set the option(s) {', '.join(map(repr, missing))}")
        return self

    @classmethod
    def option_name(cls, prop: str) -> str:
        """The documented option name of property ``prop`` (its first Spark-style alias)."""
        return next((a for a, p in cls.OPTIONS.items() if p == prop), prop)

    @classmethod
    def option_names(cls) -> list[str]:
        """The documented option names (``kafka.<setting>`` aside)."""
        return sorted(a for a in cls.OPTIONS if not a.startswith("kafka."))

    @property
    def value_ddl(self) -> str:
        return "binary" if self.value_format == "bytes" else "string"

    @property
    def extra_ddl(self) -> str:
        return "" if self.value_format == "bytes" else "error string"

    def client(self, label: str) -> KafkaClient:
        """A consumer of :attr:`group_id`, or of a group of its own when none is set."""
        return self.make_client(self.group_id or f"malhar-spark-{uuid.uuid4().hex[:12]}", label)
