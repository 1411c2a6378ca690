"""How the Kafka output store (:mod:`malhar.io.kafka.producer`) classifies a failure:
retry the window (a transient error), or raise a clear error that names what to change.

The store's :meth:`~malhar.io.base.output.TransactionalStore.is_transient` and
:meth:`~malhar.io.base.output.TransactionalStore.failure` delegate here, so the whole
classification reads in one place, apart from the window protocol.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from malhar.io.base.output import OutputError, WindowKey
from malhar.io.kafka.client import AUTH_CODES, TRANSIENT_CODES, UNKNOWN_CODES, kafka_error
from malhar.io.kafka.errors import (
    KafkaAuthorizationError,
    KafkaConnectorError,
    KafkaOutputConfigError,
    KafkaOutputError,
    KafkaOutputUnavailableError,
    OutputTopicNotFoundError,
)
from malhar.io.kafka.output_settings import KafkaOutputSettings

__all__ = [
    "DENIED_CODES",
    "FENCED_CODES",
    "RECORD_CODES",
    "SETTING_CODES",
    "RecordsRefused",
    "describe_error",
    "is_transient",
    "kafka_error",
    "needs_new_producer",
    "output_failure",
]

#: a new producer epoch fenced this one: replace it (the new init fences the other writer)
FENCED_CODES = frozenset(
    {KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED}
)
#: the cluster refused the records themselves
RECORD_CODES = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE}
)
#: who the producer is, or what it may do: retrying does not help
DENIED_CODES = AUTH_CODES | frozenset(
    {
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
#: settings the broker refuses
SETTING_CODES = frozenset(
    {KafkaError.INVALID_TRANSACTION_TIMEOUT, KafkaError.INVALID_REQUIRED_ACKS}
)


class RecordsRefused(KafkaConnectorError, ConnectionError):
    """Some records of the window were refused by the cluster inside the transaction (which
    must then abort); the window is tried again without them (transient, so not an
    :class:`~malhar.io.base.output.OutputError`, which the retry loop passes through)."""


def needs_new_producer(err: KafkaError | None) -> bool:
    """True when the producer cannot go on: fenced by a newer epoch, or failed fatally. A
    fatal failure may come back flagged (``fatal()``) or, from ``produce`` on a producer
    already failed, only as the code ``_FATAL`` with the flag unset."""
    return err is not None and (
        bool(err.fatal()) or err.code() in FENCED_CODES or err.code() == KafkaError._FATAL
    )


def describe_error(exc: BaseException) -> str:
    """``NAME: text`` of a Kafka error, ``Type: message`` of any other exception."""
    err = kafka_error(exc)
    return f"{err.name()}: {err.str()}" if err is not None else f"{type(exc).__name__}: {exc}"


def is_transient(error: BaseException) -> bool:
    """True when retrying the window can help: the cluster was unavailable, the
    transaction must abort, or the producer must be replaced (fenced, fatal)."""
    if isinstance(error, RecordsRefused):
        return True
    if isinstance(error, OutputError):
        return False
    err = kafka_error(error)
    if err is None:
        return isinstance(error, ConnectionError | TimeoutError)
    code = err.code()
    if code in DENIED_CODES or code in SETTING_CODES or code in UNKNOWN_CODES:
        return False
    if needs_new_producer(err):
        # a new producer (new epoch) fences the other writer, then reads the mark again
        return True
    return (
        bool(err.retriable())
        or bool(err.txn_requires_abort())
        or code in TRANSIENT_CODES
        or code == KafkaError._MSG_TIMED_OUT
    )


def output_failure(
    settings: KafkaOutputSettings,
    key: WindowKey,
    delivery: str,
    what: str,
    error: BaseException,
    *,
    attempts: int,
    transient: bool,
) -> OutputError:
    """The error to raise when ``what`` failed with ``error`` after ``attempts`` tries, for
    the output partition ``key`` writing with ``delivery``: it names the ACLs, the topic or
    the setting to fix. ``transient`` is the store's verdict on ``error`` (its
    ``is_transient``), taken as given so that a store that overrides it is heard."""
    s = settings
    text = describe_error(error)
    err = kafka_error(error)
    code = err.code() if err is not None else None
    if code in DENIED_CODES:
        needs = f"WRITE on topic {s.topic!r}"
        if delivery == "exactly_once":
            needs += (
                f", WRITE on transactional id {s.transactional_id(key)!r} and READ on "
                f"group {s.commit_group(key)!r}"
            )
        elif delivery == "scan":
            needs += f" and READ on topic {s.topic!r} (the restart scan)"
        return KafkaAuthorizationError(
            f"{what} for {key} into {s.target} failed: not authorized ({text}). The "
            f"producer needs {needs} (IDEMPOTENT_WRITE on the cluster for old brokers); "
            "check the ACLs and security.protocol / sasl.* / ssl.* in producer_config"
        )
    if code in UNKNOWN_CODES:
        return OutputTopicNotFoundError(
            f"{what} for {key}: {s.target} does not exist (deleted while running?); "
            "create it, or set create_topic=True"
        )
    if code in SETTING_CODES:
        return KafkaOutputConfigError(
            f"{what} for {key} into {s.target}: the broker refuses a producer setting "
            f"({text}); check transaction.timeout.ms (at most the broker's "
            "transaction.max.timeout.ms) and acks in producer_config"
        )
    if transient:
        return KafkaOutputUnavailableError(
            f"{what} for {key}: {s.target} still unavailable after {attempts} "
            f"attempts (delivery {delivery}): {text}"
        )
    return KafkaOutputError(f"{what} for {key} into {s.target} failed: {text}")
