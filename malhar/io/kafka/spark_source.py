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
``kafka.auto.offset.reset`` ``error`` (default): a partition whose log no longer holds the
                          query's next offset (topic re-created, retention) fails the query
                          with a :class:`~malhar.io.kafka.errors.DataLossError`;
                          ``earliest`` / ``latest``: go on from its first offset / its end
========================  =====================================================================
"""

from __future__ import annotations

import gc
import logging
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
from malhar.io.kafka.errors import DataLossError, KafkaConfigError
from malhar.io.kafka.records import MessageColumns, build_batch, record_ddl, record_schema
from malhar.io.kafka.settings import KafkaSourceSettings

SOURCE_NAME = "malhar_kafka"

log = logging.getLogger("malhar.io.kafka")

#: librdkafka's ``auto.offset.reset`` values that go on from the earliest / latest offset
RESET_EARLIEST = frozenset({"smallest", "earliest", "beginning"})
RESET_LATEST = frozenset({"largest", "latest", "end"})


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
        marks = self.client.watermarks(known)
        # a position outside the log: fail, or (auto.offset.reset) move past the gap
        moved = self._out_of_range({tp: current[tp] for tp in known}, marks)
        high = {tp: h for tp, (_, h) in marks.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = allocate({tp: current[tp] for tp in known if tp not in moved}, high, max_rows)
        end.update(moved)
        end.update(added)
        for tp, off in current.items():  # a partition that vanished keeps its offset
            end.setdefault(tp, off)
        return encode_offsets(end)

    def _out_of_range(
        self, start: Mapping[TP, int], marks: Mapping[TP, tuple[int, int]]
    ) -> dict[TP, int]:
        """The partitions whose next offset is outside their log (``low <= start <= high``
        fails): records were lost (deleted by retention, a topic deleted and re-created, a
        truncated log). Like the input operators (and Spark's Kafka source with
        ``failOnDataLoss``), this is a :class:`DataLossError` unless the librdkafka setting
        ``auto.offset.reset`` (option ``kafka.auto.offset.reset``) says where to go on:
        ``earliest`` / ``latest`` move the partition to its low / high watermark (the
        returned end offsets; that micro-batch reads nothing of it: a range below the
        log's start finds nothing, the task's consumer resetting the same way)."""
        lost = {
            tp: (start[tp], low, high)
            for tp, (low, high) in marks.items()
            if tp in start and 0 <= low <= high and not low <= start[tp] <= high
        }
        if not lost:
            return {}
        policy = str(self.client.config.get("auto.offset.reset", "error")).lower()
        to = "low" if policy in RESET_EARLIEST else "high" if policy in RESET_LATEST else None
        if to is None:
            (t, p), (at, low, high) = sorted(lost.items())[0]
            raise DataLossError(
                f"{SOURCE_NAME}: topic {t!r} partition {p}: the query's next offset is {at} "
                f"but the partition's log now holds offsets {low} to {high} (exclusive): "
                + (
                    f"its log ends before {at} (the topic was deleted and re-created, or "
                    "the log was truncated)"
                    if high < at
                    else f"records {at} to {low - 1} were deleted (retention, DeleteRecords)"
                )
                + f"{_others(lost)}. Records were lost and the query cannot go on exactly. "
                "To go on: restart the query with a new checkpoint location (and "
                "startingOffsets), or set the option kafka.auto.offset.reset to 'earliest' "
                "(go on from the partition's first offset) or 'latest' (from its end), "
                "accepting the loss"
            )
        moved = {tp: (low if to == "low" else high) for tp, (_, low, high) in lost.items()}
        for (t, p), (at, low, high) in sorted(lost.items()):
            log.warning(
                "%s: topic %r partition %d: next offset %d is outside the log [%d, %d): "
                "records lost; going on from offset %d (auto.offset.reset=%s)",
                SOURCE_NAME,
                t,
                p,
                at,
                low,
                high,
                moved[(t, p)],
                policy,
            )
        return moved

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


def _others(lost: Mapping[TP, tuple[int, int, int]]) -> str:
    if len(lost) < 2:
        return ""
    rest = sorted(lost.items())[1:]
    return "; also " + ", ".join(
        f"{t}[{p}] (offset {at}, log [{lo}, {hi}))" for (t, p), (at, lo, hi) in rest
    )


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
