"""``spark.readStream.format("malhar_kafka")``: the Kafka connector as a PySpark data source.

Offsets are the next offset to read per Kafka partition, ``{"topic": {"0": 42, "1": 17}}``.
Spark writes a micro-batch's ``(start, end)`` to its offset log before reading it and
re-runs an unfinished batch with the same offsets after a restart, and :meth:`read` returns
exactly the records in ``[start, end)``: a replayed micro-batch has exactly the same
records. ``commit(end)`` commits ``end`` to the consumer group (when ``groupId`` is set).

>>> from malhar.io.kafka import KafkaSource
>>> spark.dataSource.register(KafkaSource)                       # doctest: +SKIP
>>> df = (spark.readStream.format("malhar_kafka")                # doctest: +SKIP
...       .option("bootstrap.servers", "localhost:9092")
...       .option("topics", "events")
...       .option("startingOffsets", "earliest")
...       .option("maxRecordsPerBatch", 100000)
...       .option("valueFormat", "text")
...       .load())

Options (names are case-insensitive):

=====================  =====================================================================
``bootstrap.servers``  brokers (also ``kafka.bootstrap.servers``); required
``topics``             ``a`` or ``a,b`` (also ``subscribe``); required
``startingOffsets``    ``earliest``, ``latest`` (default), ``application_or_earliest``,
                       ``application_or_latest`` (the group's committed offsets first), or
                       JSON ``{"topic": {"0": 5}}``; only for a query without checkpoint
``maxRecordsPerBatch`` records per micro-batch over all partitions (default: all available)
``valueFormat``        ``bytes`` (``value binary``), ``text`` or ``json`` (``value string``,
                       plus an ``error string`` column: for a record that cannot be decoded
                       ``value`` is null and ``error`` says why)
``groupId``            consumer group for ``commit`` and ``application_or_*`` (also
                       ``kafka.group.id``); without it nothing is committed
``kafka.<setting>``    any librdkafka setting (``kafka.security.protocol``,
                       ``kafka.sasl.password`` ...); secrets are never logged
``retryAttempts``, ``retryBackoffMs``, ``requestTimeoutMs``: bounded retries
``fetchBatch``         records per ``consume()`` call (default 10000)
=====================  =====================================================================
"""

from __future__ import annotations

import gc
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from malhar.io.kafka.client import TP, KafkaClient
from malhar.io.kafka.config import InitialOffset, RetryPolicy, topic_list
from malhar.io.kafka.deserializers import TextDeserializer, get_deserializer
from malhar.io.kafka.errors import KafkaConfigError
from malhar.io.kafka.records import MessageColumns, build_batch, record_ddl, record_schema

SOURCE_NAME = "malhar_kafka"


@dataclass(frozen=True)
class SourceOptions:
    """The data source's options, parsed and checked once on the driver."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting: str = "LATEST"
    max_records: int | None = None
    value_format: str = "bytes"
    group_id: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    fetch_batch: int = 10_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): v for k, v in options.items()}
        config = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
        servers = opts.get("bootstrap.servers") or config.pop("bootstrap.servers", None)
        config.pop("bootstrap.servers", None)
        if not servers:
            raise KafkaConfigError("malhar_kafka: set the option 'bootstrap.servers'")
        topics = opts.get("topics") or opts.get("subscribe")
        if not topics:
            raise KafkaConfigError("malhar_kafka: set the option 'topics' ('a' or 'a,b')")
        group = opts.get("groupid") or config.pop("group.id", None)
        config.pop("group.id", None)
        starting = str(opts.get("startingoffsets", "latest")).strip()
        if not starting.startswith("{"):
            starting = InitialOffset.parse(starting).value
        fmt = str(opts.get("valueformat", "bytes")).lower()
        get_deserializer(fmt)  # checks the name

        def number(name: str, default: int | None) -> int | None:
            value = opts.get(name.lower())
            if value in (None, ""):
                return default
            try:
                n = int(value)
            except ValueError:
                raise KafkaConfigError(f"malhar_kafka: option {name!r} must be an int") from None
            if n < 1 and name != "retryBackoffMs":
                raise KafkaConfigError(f"malhar_kafka: option {name!r} must be >= 1")
            return n

        retry = RetryPolicy(
            attempts=number("retryAttempts", 5) or 5,
            backoff_ms=number("retryBackoffMs", 500) or 0,
            request_timeout_ms=number("requestTimeoutMs", 5_000) or 5_000,
        )
        return cls(
            bootstrap_servers=str(servers),
            topics=tuple(topic_list(topics)),
            starting=starting,
            max_records=number("maxRecordsPerBatch", None),
            value_format=fmt,
            group_id=group,
            config=config,
            retry=retry,
            fetch_batch=number("fetchBatch", 10_000) or 10_000,
        )

    @property
    def value_ddl(self) -> str:
        return "binary" if self.value_format == "bytes" else "string"

    @property
    def extra_ddl(self) -> str:
        return "" if self.value_format == "bytes" else "error string"

    def client(self, label: str) -> KafkaClient:
        group = self.group_id or f"malhar-spark-{uuid.uuid4().hex[:12]}"
        return KafkaClient(self.bootstrap_servers, group, self.config, self.retry, label=label)


def encode_offsets(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}`` with sorted keys (deterministic JSON)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def decode_offsets(offsets: Mapping[str, Mapping[str, Any]]) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def allocate(
    start: Mapping[TP, int], high: Mapping[TP, int], max_records: int | None
) -> dict[TP, int]:
    """End offsets: everything up to ``high``, or at most ``max_records`` spread evenly."""
    avail = {tp: max(0, high[tp] - start[tp]) for tp in start}
    if max_records is None or sum(avail.values()) <= max_records:
        return {tp: start[tp] + avail[tp] for tp in start}
    take = dict.fromkeys(start, 0)
    left = max_records
    active = sorted(tp for tp in start if avail[tp] > 0)
    while left > 0 and active:
        share = max(1, left // len(active))
        for tp in list(active):
            n = min(share, avail[tp] - take[tp], left)
            take[tp] += n
            left -= n
            if take[tp] >= avail[tp]:
                active.remove(tp)
            if left == 0:
                break
    return {tp: start[tp] + take[tp] for tp in start}


@dataclass
class KafkaRange(InputPartition):
    """One Spark task: records ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches as Kafka offset ranges on the driver; reads them on executors."""

    #: seconds the driver keeps the topics' partition list (new partitions show up after it)
    METADATA_TTL = 10.0

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: KafkaClient | None = None
        self._tps: list[TP] = []
        self._tps_at = 0.0

    def __getstate__(self) -> dict[str, Any]:  # the driver's consumer stays on the driver
        return {"options": self.options, "_client": None, "_tps": [], "_tps_at": 0.0}

    def _partitions(self) -> list[TP]:
        now = time.monotonic()
        if not self._tps or now - self._tps_at > self.METADATA_TTL:
            self._tps = self.client.partitions(self.options.topics)
            self._tps_at = now
        return self._tps

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            self._client = self.options.client(f"{SOURCE_NAME} source (driver)")
        return self._client

    def initialOffset(self) -> dict:
        opts = self.options
        tps = self._partitions()
        if opts.starting.startswith("{"):
            given = decode_offsets(json.loads(opts.starting))
            missing = [tp for tp in tps if tp not in given]
            found = self.client.start_offsets(missing, earliest=True, use_group=False)
            return encode_offsets({**found, **{tp: given[tp] for tp in tps if tp in given}})
        mode = InitialOffset(opts.starting)
        if mode.uses_group and not opts.group_id:
            raise KafkaConfigError(
                f"malhar_kafka: startingOffsets {mode.value} needs the option 'groupId'"
            )
        return encode_offsets(self.client.start_offsets(tps, mode.earliest, mode.uses_group))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_records
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self.options.group_id and self._client is not None:
            self.client.settle_commits()  # Spark polls this often, also while idle
        current = decode_offsets(start)
        tps = self._partitions()
        new = [tp for tp in tps if tp not in current]
        # a partition added to a topic starts at its earliest offset, read from the next batch on
        added = self.client.start_offsets(new, earliest=True, use_group=False) if new else {}
        known = [tp for tp in tps if tp in current]
        high = {tp: h for tp, (_, h) in self.client.watermarks(known).items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = allocate({tp: current[tp] for tp in known}, high, max_rows)
        end.update(added)
        for tp, off in current.items():  # a partition that vanished keeps its offset
            end.setdefault(tp, off)
        return encode_offsets(end)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = decode_offsets(start), decode_offsets(end)
        return [
            KafkaRange(t, p, first[(t, p)], o)
            for (t, p), o in sorted(last.items())
            if (t, p) in first and o > first[(t, p)]
        ]

    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:
        opts = self.options
        schema = record_schema(opts.value_ddl, extra=opts.extra_ddl)
        tp = (partition.topic, partition.partition)
        client = opts.client(
            f"{SOURCE_NAME} source task for {partition.topic}[{partition.partition}]"
        )
        enabled = gc.isenabled()
        gc.disable()  # see KafkaInputOperator.emit_tuples: no cycles, much less GC work
        try:
            for chunk in client.iter_ranges(
                {tp: (partition.start, partition.end)}, opts.fetch_batch
            ):
                yield _to_batch(chunk, opts.value_format, schema, partition.topic)
        finally:
            client.close()
            if enabled:
                gc.enable()

    def commit(self, end: dict) -> None:
        if self.options.group_id:
            self.client.commit(decode_offsets(end))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _to_batch(
    msgs: list[Any], value_format: str, schema: pa.Schema, topic: str | None = None
) -> pa.RecordBatch:
    cols = MessageColumns(msgs, topic)
    values = cols.values
    if value_format == "bytes":
        return build_batch(msgs, pa.array(values, pa.binary()), schema, cols=cols)
    column, errors = TextDeserializer().decode(values)
    if value_format == "json" and column.null_count < len(column):
        texts = column.to_pylist()
        for i, text in enumerate(texts):
            if text is None or i in errors:
                continue
            try:
                json.loads(text)
            except ValueError as exc:
                errors[i] = f"value is not valid JSON: {exc}"
        if errors:
            column = pa.array(
                [None if i in errors else t for i, t in enumerate(texts)], pa.string()
            )
    error_col = [errors.get(i) for i in range(len(msgs))] if errors else [None] * len(msgs)
    return build_batch(msgs, column, schema, extra={"error": error_col}, cols=cols)


class KafkaSource(DataSource):
    """``spark.readStream.format("malhar_kafka")``: Kafka topics, exactly once."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        opts = SourceOptions.parse(self.options)
        return record_ddl(opts.value_ddl, extra=opts.extra_ddl)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))


def register(spark: Any) -> None:
    """``spark.dataSource.register(KafkaSource)`` (per session)."""
    spark.dataSource.register(KafkaSource)
