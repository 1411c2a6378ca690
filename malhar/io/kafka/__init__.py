"""Kafka connector: the input (confluent-kafka with manual assignment) and the
transactional output, exactly once.

- :class:`KafkaInputOperator` (``value binary``), :class:`KafkaTextInputOperator`
  (``value string``), :class:`KafkaJsonInputOperator` (dict tuples, parsed JSON values):
  malhar input operators built on :class:`malhar.io.base.ReplayableInput`; per window and
  partition the offset ranges go to the window data manager, so a replayed window has
  exactly the same records.
- :class:`KafkaSource`: the same reading core as a PySpark data source,
  ``spark.readStream.format("malhar_kafka")``.
- :class:`KafkaSettings`: the settings both are configured with, declared once.
- :class:`KafkaOutputOperator`: the output (Malhar's ``KafkaSinglePortExactlyOnceOutputOperator``),
  on :class:`malhar.io.base.TransactionalOutputOperator`: one Kafka transaction per window
  and partition, with the window id committed in it; ``delivery`` ``exactly_once``,
  ``at_least_once`` or ``scan``. The same store serves the Spark sink,
  ``df.writeStream.format("malhar_kafka")``. Settings: :class:`KafkaOutputSettings`.

See ``docs/connectors/kafka.md``. The building blocks (``client``, ``records``,
``deserializers``, ``assignment``) are importable from their modules.
"""

from malhar.io.kafka.config import InitialOffset
from malhar.io.kafka.errors import (
    DataLossError,
    KafkaAuthorizationError,
    KafkaConfigError,
    KafkaConnectorError,
    KafkaOutputError,
    KafkaReadError,
    KafkaUnavailableError,
    KafkaUnreachableError,
    OutputTopicNotFoundError,
    ReplayError,
    TopicNotFoundError,
)
from malhar.io.kafka.input_operator import (
    KafkaInputOperator,
    KafkaJsonInputOperator,
    KafkaTextInputOperator,
)
from malhar.io.kafka.output_operator import KafkaOutputOperator
from malhar.io.kafka.output_settings import KafkaOutputSettings, KafkaSinkSettings
from malhar.io.kafka.settings import KafkaSettings
from malhar.io.kafka.spark_source import KafkaSource

__all__ = [
    "DataLossError",
    "InitialOffset",
    "KafkaAuthorizationError",
    "KafkaConfigError",
    "KafkaConnectorError",
    "KafkaInputOperator",
    "KafkaJsonInputOperator",
    "KafkaOutputError",
    "KafkaOutputOperator",
    "KafkaOutputSettings",
    "KafkaReadError",
    "KafkaSettings",
    "KafkaSinkSettings",
    "KafkaSource",
    "KafkaTextInputOperator",
    "KafkaUnavailableError",
    "KafkaUnreachableError",
    "OutputTopicNotFoundError",
    "ReplayError",
    "TopicNotFoundError",
]
