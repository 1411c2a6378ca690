"""``df.writeStream.format("malhar_kafka")``: the Kafka output as a Spark sink, on
:class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`.

Every task writes its partition of micro-batch ``N`` in one Kafka transaction whose
producer's ``transactional.id`` is ``<prefix>.<name>.<operator>.<task partition>``, with
``N`` stored as the committed offset of the commit group of that partition (the same
store as the malhar operator, :class:`~malhar.io.kafka.producer.KafkaOutputStore`). A
batch that Spark re-runs after a failure finds itself committed and is skipped; with
``verify_reruns`` (the default) its rows must be the same as the first time (the
fingerprint is kept in the commit group's offset metadata). A partition that has not
committed a batch other partitions committed in an earlier execution stages its rows in
``staging_path`` (by default ``<checkpointLocation>/malhar-staged``), and the driver's commit
writes them in that partition's transaction once the earlier partitions re-ran alike
(:class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`).

The same format name reads (:class:`~malhar.io.kafka.spark_source.KafkaSource`) and writes:
``spark.dataSource.register(KafkaSource)`` once per session serves both.

Options: the properties of :class:`KafkaSinkSettings` (names case-insensitive; an unknown
name fails with "did you mean"); ``kafka.<setting>`` options are librdkafka producer
settings. ``name`` is required. Rows are encoded as by the operator: by default each row
as JSON; ``value_serializer=bytes`` (or ``string``) writes the column ``value`` as it is,
``key_column=key`` gives records keys (a DataFrame of Spark's Kafka sink shape, ``key``,
``value``, ``headers``, works with ``key_column=key, value_serializer=bytes,
headers_column=headers``). A row that cannot be a record fails the batch, naming the
reason, unless ``error_topic`` is set: such rows then go there as JSON (the row and the
reason) in the batch's transaction.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from pyspark.sql.datasource import DataSource

from malhar.io.base.executions import checkpoint_folder, checkpoint_option
from malhar.io.base.output import WindowKey
from malhar.io.base.spark_sink import TransactionalStreamWriter
from malhar.io.base.staged_batches import StagedBatches
from malhar.io.kafka.encoding import WINDOW_HEADER, WRITER_HEADER
from malhar.io.kafka.errors import KafkaOutputConfigError, KafkaOutputError
from malhar.io.kafka.output_settings import STAGING_FOLDER, KafkaSinkSettings
from malhar.io.kafka.producer import KafkaOutputStore, KafkaTxn
from malhar.util.fs import StorageConfigError, filesystem_for
from malhar.util.fs.names import encode_segment

__all__ = ["SINK_NAME", "KafkaStreamWriter", "register", "sink_writer"]

SINK_NAME = "malhar_kafka"

log = logging.getLogger("malhar.io.kafka.output")


def register(spark: Any) -> None:
    """Make ``format("malhar_kafka")`` known to ``spark`` for reading and writing."""
    from malhar.io.kafka.spark_source import KafkaSource

    spark.dataSource.register(KafkaSource)


class KafkaStreamWriter(TransactionalStreamWriter):
    """Writes each task's rows of a micro-batch in one Kafka transaction (module doc)."""

    settings: KafkaSinkSettings

    def create_store(self, key: WindowKey) -> KafkaOutputStore:
        return KafkaOutputStore(self.settings, key, staging=staged_batches(self.settings, key))

    def on_rejected(self, txn: Any, window: int, rejected: list[dict[str, Any]]) -> None:
        """Rows that cannot be records: to ``error_topic`` in the batch's transaction, or
        the batch fails."""
        topic = self.settings.error_topic
        if not topic:
            raise KafkaOutputError(
                f"{SINK_NAME} {self.settings.name}: {len(rejected)} row(s) of batch {window} "
                f"cannot be written to topic {self.settings.topic!r} "
                f"({rejected[0].get('error')}); fix them, or set option error_topic to send "
                "them there instead"
            )
        assert isinstance(txn, KafkaTxn)
        headers = [(WINDOW_HEADER, str(window).encode())]
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            key = self.key(ctx.partitionId())
            headers.append(
                (WRITER_HEADER, f"{key.application}/{key.operator}/{key.partition}".encode())
            )
        for row in rejected:
            value = json.dumps(row, default=_json_default, ensure_ascii=False).encode()
            txn.producer.produce(topic, value, headers=headers)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def staged_batches(settings: KafkaSinkSettings, key: WindowKey) -> StagedBatches | None:
    """Where partition ``key`` stages the rows of a partly committed batch (None: no
    ``staging_path``; the store keeps it only with transactions)."""
    if not settings.staging_path:
        return None
    fs, root = filesystem_for(settings.staging_path)
    parts = [encode_segment(key.application), encode_segment(key.operator), str(key.partition)]
    return StagedBatches(fs, "/".join([root.rstrip("/"), *parts]))


#: names of the queries already warned that they stage nothing (the writer is built per batch)
_WARNED: set[str] = set()


def sink_writer(options: dict[str, Any]) -> KafkaStreamWriter:
    """The writer for a ``writeStream.format("malhar_kafka")`` query's options."""
    settings = KafkaSinkSettings().from_options(options)
    if not settings.name:
        raise KafkaOutputConfigError(
            f"{SINK_NAME}: option 'name' is required: a stable name for this query, kept "
            "across restarts (it keys the transactional ids and commit groups with Spark's "
            "batchId)"
        )
    settings.check_settings()
    if settings.delivery == "exactly_once":
        _choose_staging(settings, options)
    return KafkaStreamWriter(settings).planned(options)


def _choose_staging(settings: KafkaSinkSettings, options: dict[str, Any]) -> None:
    """Check ``staging_path``, or default it to ``<checkpointLocation>/malhar-staged``
    where malhar reads the same folder as Spark (runs on the driver, before any task)."""
    if settings.staging_path:
        try:
            filesystem_for(settings.staging_path)
        except StorageConfigError as exc:
            raise KafkaOutputConfigError(
                f"{SINK_NAME} {settings.name}: option staging_path: {exc}"
            ) from None
        return
    checkpoint = checkpoint_option(options)
    why = "no checkpointLocation option"
    if checkpoint:
        found = checkpoint_folder(checkpoint)
        if not isinstance(found, str):
            settings.staging_path = f"{checkpoint.rstrip('/')}/{STAGING_FOLDER}"
            return
        why = found
    if settings.name not in _WARNED:
        _WARNED.add(settings.name)
        log.warning(
            "%s %s: %s and no staging_path: a batch whose driver died while some partitions "
            "had committed it is exact only when its re-run is split the same way; set option "
            "staging_path (a local folder or a webhdfs:// URL that the driver and the "
            "executors share) to stage such a batch",
            SINK_NAME,
            settings.name,
            why,
        )


class KafkaSink(DataSource):
    """``writeStream.format("malhar_kafka")`` alone (``KafkaSource`` also writes)."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> KafkaStreamWriter:
        return sink_writer(dict(self.options))
