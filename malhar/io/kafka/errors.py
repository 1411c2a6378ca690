"""Errors of the Kafka connector: each names what failed (topic, partition, brokers), never a
secret. All derive from :class:`malhar.errors.MalharError`."""

from __future__ import annotations

from malhar.errors import ConfigError, MalharError
from malhar.io.base.input import ReplayError as InputReplayError


class KafkaConnectorError(MalharError, RuntimeError):
    """Base class of the Kafka connector's errors."""


class KafkaConfigError(KafkaConnectorError, ConfigError):
    """A setting of the connector that cannot work (bad initial offset, no topics, ...)."""


class TopicNotFoundError(KafkaConnectorError):
    """A configured topic does not exist on the cluster."""


class KafkaUnavailableError(KafkaConnectorError, ConnectionError):
    """The cluster did not answer after the bounded retries; ``attempts`` and ``seconds`` say how long."""

    def __init__(self, message: str, *, attempts: int = 0, seconds: float = 0.0) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.seconds = seconds


class KafkaReadError(KafkaConnectorError):
    """A non-retriable error while reading a partition (authorization, deleted topic, ...)."""


class DataLossError(KafkaReadError):
    """Records the connector must read are gone (retention, compaction, a truncated log)."""


class ReplayError(KafkaConnectorError, InputReplayError):
    """A window cannot be replayed with exactly the records it had."""
