"""Kafka input connector: confluent-kafka with manual assignment, exactly once.

- :class:`KafkaInputOperator` (``value binary``), :class:`KafkaTextInputOperator`
  (``value string``), :class:`KafkaJsonInputOperator` (dict tuples, parsed JSON values):
  malhar input operators built on :class:`malhar.io.base.ReplayableInput`; per window and
  partition the offset ranges go to the window data manager, so a replayed window has
  exactly the same records.
- :class:`KafkaSource`: the same reading core as a PySpark data source,
  ``spark.readStream.format("malhar_kafka")``.
- :class:`KafkaSettings`: the settings both are configured with, declared once.

See ``docs/connectors/kafka.md``. The building blocks (``client``, ``records``,
``deserializers``, ``assignment``) are importable from their modules.
"""

from malhar.io.kafka.config import InitialOffset
from malhar.io.kafka.errors import (
    DataLossError,
    KafkaConfigError,
    KafkaConnectorError,
    KafkaReadError,
    KafkaUnavailableError,
    ReplayError,
    TopicNotFoundError,
)
from malhar.io.kafka.input_operator import (
    KafkaInputOperator,
    KafkaJsonInputOperator,
    KafkaTextInputOperator,
)
from malhar.io.kafka.settings import KafkaSettings
from malhar.io.kafka.spark_source import KafkaSource

__all__ = [
    "DataLossError",
    "InitialOffset",
    "KafkaConfigError",
    "KafkaConnectorError",
    "KafkaInputOperator",
    "KafkaJsonInputOperator",
    "KafkaReadError",
    "KafkaSettings",
    "KafkaSource",
    "KafkaTextInputOperator",
    "KafkaUnavailableError",
    "ReplayError",
    "TopicNotFoundError",
]
