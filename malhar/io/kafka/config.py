"""Settings of the Kafka connector: initial offset modes, retry policy, the librdkafka configuration.

Any librdkafka setting (``security.protocol``, ``sasl.*``, ``ssl.*``, ``fetch.*`` ...) is
passed through unchanged; a few are enforced because exactly-once replay depends on them
(:data:`ENFORCED`). :func:`describe` is what logs and error messages show: secret values
are masked with :func:`malhar.redaction.redact_config`. A secret setting (any key that
:func:`malhar.redaction.is_secret_key` names: ``sasl.password``, ``ssl.key.password``,
``sasl.oauthbearer.client.secret`` ...) must be a reference, ``${env:NAME}`` or
``${file:/path}``, read when the consumer is created (:func:`resolve`); a literal one is
refused (:func:`literal_secrets`), since the configuration travels with the application
plan and Spark's tasks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from malhar import secrets
from malhar.io.kafka.errors import KafkaConfigError
from malhar.redaction import is_secret_key, redact_config

#: librdkafka's own log lines go to this logger (instead of the process's stderr)
CLIENT_LOG = logging.getLogger("malhar.io.kafka.librdkafka")

#: librdkafka warnings of a transient state it retries by itself (a broker that has just
#: started loads its coordinator): logged at DEBUG, since they read as failures
_RETRIED = ("Coordinator load in progress",)


class _RetriedAtDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and any(t in record.getMessage() for t in _RETRIED):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return CLIENT_LOG.isEnabledFor(logging.DEBUG)
        return True


CLIENT_LOG.addFilter(_RetriedAtDebug())


class InitialOffset(StrEnum):
    """Where a partition starts when the application has no position of its own for it.

    A position of its own is the operator state restored from the checkpoint (a restart of
    the same application always continues exactly, whatever the mode).

    - ``EARLIEST`` / ``LATEST``: the partition's first / next offset; the consumer group's
      committed offsets are ignored.
    - ``APPLICATION_OR_EARLIEST`` / ``APPLICATION_OR_LATEST``: the offsets committed to the
      consumer group (by this or an earlier application with the same group), else the
      earliest / latest offset.
    """

    EARLIEST = "EARLIEST"
    LATEST = "LATEST"
    APPLICATION_OR_EARLIEST = "APPLICATION_OR_EARLIEST"
    APPLICATION_OR_LATEST = "APPLICATION_OR_LATEST"

    @classmethod
    def parse(cls, value: str | InitialOffset) -> InitialOffset:
        if isinstance(value, InitialOffset):
            return value
        try:
            return cls(str(value).strip().upper())
        except ValueError:
            raise KafkaConfigError(
                f"initial offset {value!r} is not one of {[m.value for m in cls]}"
            ) from None

    @classmethod
    def parse_start(cls, value: str) -> InitialOffset | dict[tuple[str, int], int]:
        """A mode, or explicit offsets from JSON ``{"topic": {"0": 42}}`` (partitions not
        named there start at their earliest offset)."""
        text = str(value).strip()
        if not text.startswith("{"):
            return cls.parse(text)
        try:
            given = json.loads(text)
            return {
                (str(t), int(p)): int(o)
                for t, parts in given.items()
                for p, o in dict(parts).items()
            }
        except (ValueError, TypeError, AttributeError) as exc:
            raise KafkaConfigError(
                f"initial offsets {text!r} are not JSON of the form "
                f'{{"topic": {{"0": 42, "1": 17}}}}: {exc}'
            ) from None

    @property
    def uses_group(self) -> bool:
        return self in (InitialOffset.APPLICATION_OR_EARLIEST, InitialOffset.APPLICATION_OR_LATEST)

    @property
    def earliest(self) -> bool:
        return self in (InitialOffset.EARLIEST, InitialOffset.APPLICATION_OR_EARLIEST)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff for a cluster that does not answer.

    ``attempts`` requests, each waiting at most ``request_timeout_ms``; between them
    ``backoff_ms``, doubling up to ``max_backoff_ms``. Defaults: 5 attempts in ~30 s.
    """

    attempts: int = 5
    backoff_ms: int = 500
    max_backoff_ms: int = 8_000
    request_timeout_ms: int = 5_000

    def delays(self) -> Iterable[float]:
        """Seconds to sleep after each failed attempt but the last."""
        delay = self.backoff_ms / 1000
        for _ in range(self.attempts - 1):
            yield delay
            delay = min(delay * 2, self.max_backoff_ms / 1000)

    @property
    def timeout(self) -> float:
        return self.request_timeout_ms / 1000


#: settings exactly-once replay depends on; they win over the user's
ENFORCED: dict[str, Any] = {
    "enable.auto.commit": False,  # offsets are committed on committed(window) only
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,  # a replay knows when a partition has nothing more
}

#: defaults the user may override
DEFAULTS: dict[str, Any] = {
    # never skip records silently: a position outside the log is an error (DataLossError)
    "auto.offset.reset": "error",
    "log.connection.close": False,
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 2_000,
    # Steady throughput on a backlog (docs/connectors/kafka.md, "Fetching"): librdkafka's
    # own fetch.queue.backoff.ms (1 s) stalls fetching for a second whenever the prefetch
    # queue was full, which made consume rates bimodal (~0.2M or ~2M records/s); larger
    # fetches let a window fill up in a few consume() calls. Memory stays bounded by
    # queued.max.messages.kbytes (the whole consumer's prefetch queue, with assign()) plus
    # one fetch response (fetch.max.bytes).
    "fetch.queue.backoff.ms": 20,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.max.bytes": 32 * 1024 * 1024,
    "queued.min.messages": 500_000,
    "queued.max.messages.kbytes": 64 * 1024,
}


def topic_list(topics: str | Iterable[str]) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (order kept, duplicates dropped)."""
    items = topics.split(",") if isinstance(topics, str) else list(topics)
    out = [str(t).strip() for t in items if str(t).strip()]
    if not out:
        raise KafkaConfigError("no topics configured: set topics to 'name' or 'a,b'")
    return list(dict.fromkeys(out))


def resolve(value: Any, key: str = "?") -> Any:
    """``${env:NAME}`` -> the environment variable, ``${file:/path}`` -> the file's text.

    Secrets written this way never appear in the operator's state, the checkpoint or the
    plan Spark ships to its executors: they are read where the consumer is created.
    See :mod:`malhar.secrets`.
    """
    try:
        return secrets.resolve(value, key)
    except secrets.SecretReferenceError as exc:
        raise KafkaConfigError(str(exc)) from None


def literal_secrets(config: Mapping[str, Any]) -> list[str]:
    """The secret settings of ``config`` given as literal values instead of references."""
    return sorted(
        str(key)
        for key, value in config.items()
        if is_secret_key(str(key)) and value not in (None, "") and not secrets.is_reference(value)
    )


def consumer_config(
    bootstrap_servers: str,
    group_id: str,
    extra: Mapping[str, Any] | None = None,
    *,
    error_cb: Any = None,
) -> dict[str, Any]:
    """The full librdkafka configuration of a consumer: defaults, the user's settings, enforced ones."""
    config: dict[str, Any] = dict(DEFAULTS)
    for key, value in (extra or {}).items():
        config[str(key)] = resolve(value, str(key))
    config["bootstrap.servers"] = bootstrap_servers
    config["group.id"] = group_id
    config.update(ENFORCED)
    config["logger"] = CLIENT_LOG
    if error_cb is not None:
        config["error_cb"] = error_cb
    return config


def describe(config: Mapping[str, Any]) -> str:
    """The configuration as shown in logs and errors: secrets masked, callbacks left out."""
    shown = {k: v for k, v in config.items() if not callable(v) and k != "logger"}
    return ", ".join(f"{k}={v}" for k, v in sorted(redact_config(shown).items()))
