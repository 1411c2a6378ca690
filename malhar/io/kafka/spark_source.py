"""``spark.readStream.format("malhar_kafka")``: the Kafka connector as a PySpark data source.

Offsets are the next offset to read per Kafka partition, ``{"topic": {"0": 42, "1": 17}}``.
Spark writes a micro-batch's ``(start, end)`` to its offset log before reading it and
re-runs an unfinished batch with the same offsets after a restart, and :meth:`read` returns
exactly the records in ``[start, end)``: a replayed micro-batch has exactly the same
records. ``commit(end)`` commits ``end`` to the consumer group (when ``groupId`` is set).

Not run: the example needs a SparkSession and a broker (``docs/connectors/kafka.md``
has a runnable one, and ``tests/io`` covers the source).

>>> from malhar.io.kafka import KafkaSource
>>> spark.dataSource.register(KafkaSource)                       # doctest: +SKIP
>>> df = (spark.readStream.format("malhar_kafka")                # doctest: +SKIP
...       .option("bootstrap.servers", "localhost:9092")
...       .option("topics", "events")
...       .option("startingOffsets", "earliest")
...       .option("maxRecordsPerBatch", 100000)
...       .option("valueFormat", "text")
...       .load())

Options (names are case-insensitive; a name it does not know fails, naming the closest
ones): the settings of :class:`~malhar.io.kafka.settings.KafkaSourceSettings`, one
declaration each, shared with the input operators.

========================  =====================================================================
``bootstrap.servers``     brokers (also ``kafka.bootstrap.servers``); required
``topics``                ``a`` or ``a,b`` (also ``subscribe``); required
``startingOffsets``       ``earliest``, ``latest`` (default), ``application_or_earliest``,
                          ``application_or_latest`` (the group's committed offsets first), or
                          JSON ``{"topic": {"0": 5}}``; only for a query without checkpoint
``maxRecordsPerBatch``    records per micro-batch over all partitions (default: all available)
``valueFormat``           ``bytes`` (``value binary``), ``text`` or ``json`` (``value string``,
                          plus an ``error string`` column: for a record that cannot be decoded
                          ``value`` is null and ``error`` says why)
``groupId``               consumer group for ``commit`` and ``application_or_*`` (also
                          ``kafka.group.id``); without it nothing is committed
``kafka.<setting>``       any librdkafka setting (``kafka.security.protocol`` ...); secret ones
                          as ``${env:NAME}`` / ``${file:/path}`` references; never logged
``retryAttempts``, ``retryBackoffMs``, ``requestTimeoutMs``: bounded retries
``fetchBatch``            records per ``consume()`` call (default 10000)
========================  =====================================================================
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from malhar.io.kafka.client import TP, KafkaClient
from malhar.io.kafka.config import InitialOffset
from malhar.io.kafka.deserializers import TextDeserializer, parse_json
from malhar.io.kafka.errors import KafkaConfigError
from malhar.io.kafka.records import MessageColumns, build_batch, record_ddl, record_schema
from malhar.io.kafka.settings import KafkaSourceSettings

SOURCE_NAME = "malhar_kafka"


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

    def __init__(self, settings: KafkaSourceSettings) -> None:
        self.settings = settings
        self._client: KafkaClient | None = None
        self._tps: list[TP] = []
        self._tps_at = 0.0

    def __getstate__(self) -> dict[str, Any]:  # the driver's consumer stays on the driver
        return {"settings": self.settings, "_client": None, "_tps": [], "_tps_at": 0.0}

    def _partitions(self) -> list[TP]:
        now = time.monotonic()
        if not self._tps or now - self._tps_at > self.METADATA_TTL:
            self._tps = self.client.partitions(self.settings.topic_list())
            self._tps_at = now
        return self._tps

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            self._client = self.settings.client(f"{SOURCE_NAME} source (driver)")
        return self._client

    def initialOffset(self) -> dict:
        settings = self.settings
        start = InitialOffset.parse_start(settings.initial_offset)
        if isinstance(start, InitialOffset) and start.uses_group and not settings.group_id:
            raise KafkaConfigError(
                f"malhar_kafka: startingOffsets {start.value} needs the option 'groupId'"
            )
        every = self._partitions()
        settings.check_start_offsets(every, f"{SOURCE_NAME}: option 'startingOffsets'")
        return encode_offsets(settings.start_offsets(self.client, every))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.settings.max_records_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self.settings.group_id and self._client is not None:
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
        settings = self.settings
        schema = record_schema(settings.value_ddl, extra=settings.extra_ddl)
        tp = (partition.topic, partition.partition)
        client = settings.client(
            f"{SOURCE_NAME} source task for {partition.topic}[{partition.partition}]"
        )
        enabled = gc.isenabled()
        gc.disable()  # see KafkaInputOperator.emit_tuples: no cycles, much less GC work
        try:
            for chunk in client.iter_ranges(
                {tp: (partition.start, partition.end)}, settings.fetch_batch
            ):
                yield _to_batch(chunk, settings.value_format, schema, partition.topic)
        finally:
            client.close()
            if enabled:
                gc.enable()

    def commit(self, end: dict) -> None:
        if self.settings.group_id:
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
        # the same check as the JSON operator's (parse_json), the text stays as it is
        for i, value in enumerate(values):
            if value is not None and i not in errors:
                _, error = parse_json(value)
                if error is not None:
                    errors[i] = error
        if errors:
            column = pa.array(
                [None if i in errors else t for i, t in enumerate(column.to_pylist())],
                pa.string(),
            )
    error_col = [errors.get(i) for i in range(len(msgs))] if errors else [None] * len(msgs)
    return build_batch(msgs, column, schema, extra={"error": error_col}, cols=cols)


class KafkaSource(DataSource):
    """``spark.readStream.format("malhar_kafka")``: Kafka topics, exactly once; and
    ``df.writeStream.format("malhar_kafka")``: the transactional Kafka output."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        settings = KafkaSourceSettings.from_options(self.options)
        return record_ddl(settings.value_ddl, extra=settings.extra_ddl)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceSettings.from_options(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """``writeStream.format("malhar_kafka")``: the exactly-once Kafka output
        (:mod:`malhar.io.kafka.spark_sink`)."""
        from malhar.io.kafka.spark_sink import sink_writer

        return sink_writer(dict(self.options))


def register(spark: Any) -> None:
    """``spark.dataSource.register(KafkaSource)`` (per session)."""
    spark.dataSource.register(KafkaSource)
