"""Errors of the Kafka connector: each names what failed (topic, partition, brokers), never a
secret. All derive from :class:`malhar.errors.MalharError`."""

from __future__ import annotations

from malhar.errors import ConfigError, MalharError
from malhar.io.base.input import ReplayError as InputReplayError
from malhar.io.base.output import OutputConfigError, OutputError, OutputUnavailableError


class KafkaConnectorError(MalharError, RuntimeError):
    """Base class of the Kafka connector's errors."""


class KafkaConfigError(KafkaConnectorError, ConfigError):
    """A setting of the connector that cannot work (bad initial offset, no topics, ...)."""


class TopicNotFoundError(KafkaConnectorError):
    """A configured topic does not exist on the cluster."""


class KafkaUnavailableError(KafkaConnectorError, ConnectionError):
    """The cluster did not answer after the bounded retries; ``attempts`` and ``seconds`` say how long."""

    def __init__(
        self, message: str, *, attempts: int = 0, seconds: float = 0.0, last: str = ""
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.seconds = seconds
        #: the last error (``NAME: text``)
        self.last = last


class KafkaUnreachableError(KafkaUnavailableError):
    """A cluster that nothing shows was ever reached did not answer the first request:
    the message names the cluster, what to check (broker running, listener port, security
    protocol) and the settings of the wait."""


class KafkaReadError(KafkaConnectorError):
    """A non-retriable error while reading a partition (authorization, deleted topic, ...)."""


class DataLossError(KafkaReadError):
    """Records the connector must read are gone (retention, compaction, a truncated log)."""


class ReplayError(KafkaConnectorError, InputReplayError):
    """A window cannot be replayed with exactly the records it had."""


# -- the output --------------------------------------------------------------------------------
class KafkaOutputError(KafkaConnectorError, OutputError):
    """The Kafka output failed; the message names the topic, the cluster and what to change
    (a setting, an ACL), never a secret."""


class KafkaOutputConfigError(KafkaOutputError, OutputConfigError):
    """The output's settings cannot work (a serializer that does not exist, a column that
    the rows do not have, a transaction timeout the broker refuses ...)."""


class KafkaOutputUnavailableError(KafkaOutputError, OutputUnavailableError):
    """The cluster did not answer (or kept refusing the window's transaction) after the
    configured retries."""


class KafkaOutputUnreachableError(KafkaOutputUnavailableError):
    """The output's cluster, never reached by it before, did not answer its first request:
    the message names the cluster, what to check and the setting of the wait."""


class OutputTopicNotFoundError(TopicNotFoundError, KafkaOutputConfigError):
    """The output topic does not exist and ``create_topic`` is off."""


class KafkaAuthorizationError(KafkaOutputError):
    """The cluster refused the producer: authentication failed, or an ACL is missing on the
    topic, the transactional id or the commit group."""
