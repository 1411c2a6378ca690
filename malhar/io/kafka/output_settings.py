"""The Kafka output's settings, each declared once as a :class:`~malhar.properties.Property`.

:class:`KafkaOutputSettings` is what a Kafka writer is configured with: the cluster, the
topic, how windows reach it (``delivery``), how rows become records (key, value,
partition, headers), the topic's creation, and any librdkafka producer setting under its
own name (``producer_config``: ``compression.type``, ``linger.ms``, ``batch.size`` ...).
The operator inherits it (its properties), the Spark sink reads
:class:`KafkaSinkSettings` from its string options; the store takes a plain
:class:`KafkaOutputSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from malhar import secrets
from malhar.io.base.output import TransactionalSettings, WindowKey
from malhar.io.base.spark_sink import TransactionalSinkSettings
from malhar.io.kafka.config import CLIENT_LOG, describe, literal_secrets
from malhar.io.kafka.errors import KafkaOutputConfigError
from malhar.io.kafka.serializers import Serializer, check_spec
from malhar.properties import Property

__all__ = [
    "DELIVERY",
    "PARTITIONERS",
    "PRODUCER_DEFAULTS",
    "KafkaOutputSettings",
    "KafkaSinkSettings",
]

#: how windows reach the topic
DELIVERY = ("exactly_once", "at_least_once", "scan")
#: how a record's partition is chosen
PARTITIONERS = ("key", "column", "explicit")

#: librdkafka settings malhar sets unless ``producer_config`` names them (docs/connectors/kafka.md)
PRODUCER_DEFAULTS: dict[str, Any] = {
    # a window's records leave in few, large requests; commit_transaction / flush sends
    # whatever is left at the end of the window anyway
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "batch.size": 1_000_000,
    # the local queue holds a whole window of small records (produce() waits when it is full)
    "queue.buffering.max.messages": 1_000_000,
    # The transaction coordinator answers CONCURRENT_TRANSACTIONS while the previous
    # transaction's markers are written; librdkafka retries after retry.backoff.ms (100 ms by
    # default), which made send_offsets_to_transaction cost ~100 ms per window (measured:
    # ~18 ms with these two).
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 100,
    # keyed records land where Java clients (Kafka Streams, Connect) put them
    "partitioner": "murmur2_random",
    # a broker that restarts is found again quickly
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 2_000,
    "log.connection.close": False,
}
#: settings malhar owns
OWNED = ("transactional.id", "bootstrap.servers")
#: librdkafka settings a consumer takes too (to read the commit group with the same security)
#: the Spark sink's staging folder in the query's checkpointLocation (by default)
STAGING_FOLDER = "malhar-staged"

CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.", "api.")


def _check_producer_config(value: Any) -> str | None:
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        return f"librdkafka setting names must be strings, got {bad!r}"
    owned = [k for k in value if k in OWNED]
    if owned:
        return (
            f"{owned} are set by malhar (bootstrap_servers; the transactional id is "
            "'<transactional_id_prefix>.<application>.<operator>.<partition>')"
        )
    literal = literal_secrets(value)
    if literal:
        names = ", ".join(repr(k) for k in literal)
        return (
            f"{names} must be a secret reference, '${{env:NAME}}' or '${{file:/path}}': a "
            "literal secret would travel in clear in the application plan and Spark's tasks "
            "(the reference is read where the producer is created)"
        )
    return None


def _check_headers(value: Any) -> str | None:
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str | bytes | type(None)):
            return f"headers are str -> str/bytes/None, got {k!r}: {type(v).__name__}"
    return None


_SERIALIZER_TYPES = (str, Serializer)


class KafkaOutputSettings(TransactionalSettings):
    """What a Kafka writer is configured with (shared by the operator and the Spark sink),
    plus the retry settings of :class:`~malhar.io.base.output.TransactionalSettings`.

    Example:
        >>> s = KafkaOutputSettings().configure(
        ...     bootstrap_servers="b:9092", topic="counts", key_column="word",
        ...     producer_config={"compression.type": "lz4", "sasl.password": "${env:PW}"})
        >>> s.transactional_id(WindowKey("wc", "out", 3))
        'malhar.wc.out.3'
        >>> s
        KafkaOutputSettings(bootstrap_servers='b:9092', topic='counts', producer_config={'compression.type': 'lz4', 'sasl.password': '***'}, key_column='word')
    """

    config_error = KafkaOutputConfigError

    bootstrap_servers = Property(str, not_null=True, doc="Kafka brokers, host:port[,host:port]")
    topic = Property(str, not_null=True, doc="the topic written")
    delivery = Property(
        str,
        default="exactly_once",
        one_of=DELIVERY,
        doc="exactly_once (Kafka transactions, read_committed readers see each window once), "
        "at_least_once (idempotent producer: a replayed window is written again), scan "
        "(no transactions: a restart scans the topic for its window ids, Malhar's recovery)",
    )
    producer_config = Property(
        dict,
        default=None,
        check=_check_producer_config,
        doc="any librdkafka producer setting (compression.type, linger.ms, batch.size, "
        "message.max.bytes, security.protocol, sasl.*); secret ones as '${env:NAME}' or "
        "'${file:/path}', read where the producer is created; never logged",
    )
    key_column = Property(str, doc="the column whose value is the record key (None: no key)")
    key_serializer = Property(
        _SERIALIZER_TYPES,
        default="string",
        check=check_spec,
        doc="bytes, string, json, 'module:factory' or a Serializer",
    )
    value_column = Property(
        str,
        doc="the column whose value is the record value (default: the whole row for json, "
        "the column 'value' for bytes and string)",
    )
    value_serializer = Property(
        _SERIALIZER_TYPES,
        default="json",
        check=check_spec,
        doc="bytes, string, json, 'module:factory' (Avro, Protobuf ...) or a Serializer",
    )
    partitioner = Property(
        str,
        default="key",
        one_of=PARTITIONERS,
        doc="key (librdkafka's partitioner on the key), column (murmur2 of partition_column, "
        "like Kafka's Java partitioner), explicit (partition_column holds the partition)",
    )
    partition_column = Property(str, doc="the column of the column / explicit partitioners")
    headers = Property(
        dict, default=None, check=_check_headers, doc="headers added to every record"
    )
    headers_column = Property(
        str, doc="a column of per-row headers: a list of (key, value) pairs or a mapping"
    )
    create_topic = Property(
        bool,
        default=False,
        doc="create a missing topic at launch (else a missing topic fails the launch)",
    )
    topic_partitions = Property(int, default=None, min=1, doc="partitions of a created topic")
    topic_replication = Property(int, default=None, min=1, doc="replicas of a created topic")
    topic_config = Property(dict, default=None, doc="topic configs of a created topic")
    transactional_id_prefix = Property(
        str,
        default="malhar",
        not_null=True,
        doc="transactional.id is '<prefix>.<application>.<operator>.<partition>'",
    )
    commit_group_prefix = Property(
        str,
        default="malhar-out",
        not_null=True,
        doc="exactly_once: the group '<prefix>.<application>.<operator>.<partition>' holds "
        "the last committed window, written in the window's transaction",
    )
    request_timeout_ms = Property(
        int, default=30_000, min=100, doc="longest wait of one transaction or metadata call"
    )
    scan_back_records = Property(
        int,
        default=100_000,
        min=0,
        doc="scan: records read back from each partition's end at a restart without a "
        "known position (the operator knows it from its checkpoint)",
    )
    max_record_bytes = Property(
        int,
        default=None,
        min=1,
        doc="records larger than this go to the error port (default: the smaller of the "
        "producer's message.max.bytes and the topic's max.message.bytes)",
    )

    # -- derived -------------------------------------------------------------------------
    def transactional_id(self, key: WindowKey) -> str:
        """The producer's ``transactional.id`` for output partition ``key`` (stable across
        restarts: a new producer fences the previous one)."""
        return f"{self.transactional_id_prefix}.{key.application}.{key.operator}.{key.partition}"

    def commit_group(self, key: WindowKey) -> str:
        """The group whose committed offset is ``key``'s last window + 1 (exactly_once)."""
        return f"{self.commit_groups_of(key)}{key.partition}"

    def commit_groups_of(self, key: WindowKey) -> str:
        """What the commit groups of every partition of ``key``'s operator begin with."""
        return f"{self.commit_group_prefix}.{key.application}.{key.operator}."

    @property
    def value_source(self) -> str | None:
        """The value's column (None: the whole row)."""
        if self.value_column:
            return self.value_column
        spec = self.value_serializer
        whole = spec == "json" or (isinstance(spec, Serializer) and not spec.single_column)
        if isinstance(spec, str) and spec.strip().lower() not in ("bytes", "string"):
            whole = True
        return None if whole else "value"

    def producer_settings(self, key: WindowKey) -> dict[str, Any]:
        """The full librdkafka configuration of the producer of ``key``: defaults, the
        user's settings (secret references read now), and what the delivery mode needs."""
        config: dict[str, Any] = dict(PRODUCER_DEFAULTS)
        for name, value in (self.producer_config or {}).items():
            config[str(name)] = resolve(value, str(name))
        config["bootstrap.servers"] = self.bootstrap_servers
        config["enable.idempotence"] = True  # every mode: no duplicates from internal retries
        config["acks"] = "all"
        if self.delivery == "exactly_once":
            config["transactional.id"] = self.transactional_id(key)
        config["logger"] = CLIENT_LOG
        return config

    def admin_settings(self) -> dict[str, Any]:
        """An admin client with the producer's connection and security settings."""
        config = self.consumer_settings("unused")
        for k in ("group.id", "enable.auto.commit", "enable.partition.eof"):
            config.pop(k, None)
        return config

    def consumer_settings(self, group: str, **extra: Any) -> dict[str, Any]:
        """A consumer with the producer's connection and security settings."""
        config: dict[str, Any] = {
            str(k): resolve(v, str(k))
            for k, v in (self.producer_config or {}).items()
            if str(k).startswith(CONNECTION_PREFIXES)
        }
        config.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "logger": CLIENT_LOG,
                **extra,
            }
        )
        return config

    @property
    def target(self) -> str:
        """What errors name: the topic and the cluster."""
        return f"topic {self.topic!r} on Kafka cluster {self.bootstrap_servers}"

    def describe_producer(self, key: WindowKey) -> str:
        """The producer configuration as logs show it (secrets masked)."""
        shown = {k: v for k, v in (self.producer_config or {}).items()}
        return describe({**PRODUCER_DEFAULTS, **shown, "delivery": self.delivery})

    # -- checks ----------------------------------------------------------------------------
    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work (empty when they can)."""
        out = self.property_problems()
        if self.partitioner in ("column", "explicit") and not self.partition_column:
            out.append(f"partitioner {self.partitioner!r} needs partition_column")
        if self.partitioner == "key" and self.partition_column:
            out.append(
                "partition_column is set but partitioner is 'key': choose partitioner "
                "'column' (hash of the column) or 'explicit' (the column is the partition)"
            )
        creation = self.topic_partitions or self.topic_replication or self.topic_config
        if creation and not self.create_topic:
            out.append("topic_partitions / topic_replication / topic_config need create_topic")
        used = [c for c in (self.key_column, self.partition_column, self.headers_column) if c]
        if len(used) != len(set(used)):
            out.append(f"key_column, partition_column and headers_column must differ: {used}")
        return out


class KafkaSinkSettings(KafkaOutputSettings, TransactionalSinkSettings):
    """The Spark sink's options: :class:`KafkaOutputSettings` plus ``name`` (the query's
    stable name: it keys the transactional ids and commit groups with the task partition),
    ``operator`` and ``verify_reruns``. ``kafka.<setting>`` options go to
    ``producer_config``.

    Example:
        >>> s = KafkaSinkSettings().from_options({"bootstrap_servers": "b:9092",
        ...     "topic": "t", "name": "q", "kafka.compression.type": "zstd"})
        >>> (s.topic, s.producer_config, s.transactional_id(s.key(2)))
        ('t', {'compression.type': 'zstd'}, 'malhar.q.sink.2')
    """

    error_topic = Property(
        str,
        doc="rows that cannot be records go to this topic (JSON with the reason) in the "
        "batch's transaction, instead of failing the batch",
    )
    staging_path = Property(
        str,
        doc="exactly_once: where a partition of a partly committed batch keeps its rows until "
        "the driver writes them (local path or hdfs://, readable by the driver); by default "
        f"<checkpointLocation>/{STAGING_FOLDER} when that is a local folder or a WebHDFS URL",
    )

    def from_options(self, options: Mapping[str, Any]) -> KafkaSinkSettings:
        kafka = {
            str(k)[len("kafka.") :]: v
            for k, v in options.items()
            if str(k).lower().startswith("kafka.")
        }
        rest = {k: v for k, v in options.items() if not str(k).lower().startswith("kafka.")}
        super().from_options(rest)
        if kafka:
            if self.producer_config:
                raise self.config_error(
                    "give librdkafka settings as 'kafka.<setting>' options or as "
                    "'producer_config', not both"
                )
            why = _check_producer_config(kafka)
            if why:
                raise self.config_error(f"option kafka.*: {why}")
            self.producer_config = kafka
        return self

    def key(self, partition: int) -> WindowKey:
        """The output partition of Spark task partition ``partition``."""
        return WindowKey(self.name, self.operator, partition)


def resolve(value: Any, key: str) -> Any:
    """A secret reference's value (read in this process); other values unchanged."""
    try:
        return secrets.resolve(value, key)
    except secrets.SecretReferenceError as exc:
        raise KafkaOutputConfigError(str(exc)) from None
