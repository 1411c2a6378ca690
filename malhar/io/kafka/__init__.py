"""Kafka input connector: confluent-kafka with manual assignment, exactly once.

- :class:`KafkaInputOperator` (``value binary``), :class:`KafkaTextInputOperator`
  (``value string``), :class:`KafkaJsonInputOperator` (dict tuples, parsed JSON values):
  malhar input operators; per window and partition the offset ranges go to the window data
  manager, so a replayed window has exactly the same records.
- :class:`KafkaSource`: the same reading as a PySpark data source,
  ``spark.readStream.format("malhar_kafka")``.

See ``docs/connectors/kafka.md``.
"""

from malhar.io.kafka.assignment import assign, mapping
from malhar.io.kafka.client import KafkaClient
from malhar.io.kafka.config import InitialOffset, RetryPolicy
from malhar.io.kafka.deserializers import (
    BytesDeserializer,
    Deserializer,
    JsonDeserializer,
    TextDeserializer,
    get_deserializer,
)
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
from malhar.io.kafka.records import ERROR_DDL, record_ddl, record_schema
from malhar.io.kafka.spark_source import KafkaSource, KafkaStreamReader

__all__ = [
    "ERROR_DDL",
    "BytesDeserializer",
    "DataLossError",
    "Deserializer",
    "InitialOffset",
    "JsonDeserializer",
    "KafkaClient",
    "KafkaConfigError",
    "KafkaConnectorError",
    "KafkaInputOperator",
    "KafkaJsonInputOperator",
    "KafkaReadError",
    "KafkaSource",
    "KafkaStreamReader",
    "KafkaTextInputOperator",
    "KafkaUnavailableError",
    "ReplayError",
    "RetryPolicy",
    "TextDeserializer",
    "TopicNotFoundError",
    "assign",
    "get_deserializer",
    "mapping",
    "record_ddl",
    "record_schema",
]
