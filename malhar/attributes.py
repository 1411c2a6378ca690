"""Attributes of applications, operators and ports (Apex's ``Context.DAGContext`` ...).

Set them with the typed constants or their names, whichever reads better::

    from malhar import attributes as A
    dag.set_operator_attribute("count", A.PARTITIONS, 4)
    dag.add_operator("count", UniqueCounter(), PARTITIONS=4)       # the same

A value is checked (and an enum member named by a string converted) when it is set.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from malhar.errors import ConfigError
from malhar.suggest import did_you_mean


class ProcessingMode(enum.Enum):
    """What a failure costs an operator (Apex's ``Operator.ProcessingMode``)."""

    #: the in-flight window is replayed; outputs may see it twice unless they are idempotent
    AT_LEAST_ONCE = "at_least_once"
    #: the in-flight window is skipped after a failure: its tuples are lost, never repeated
    AT_MOST_ONCE = "at_most_once"
    #: state checkpointed every window and replayed exactly (outputs must be transactional)
    EXACTLY_ONCE = "exactly_once"


class InvalidAttributeError(ConfigError, KeyError):
    """An unknown attribute name, or a value of the wrong type."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Attribute:
    """One attribute: its name, default, accepted type and a line of documentation."""

    name: str
    default: Any
    kind: type | tuple[type, ...]
    doc: str

    def coerce(self, value: Any) -> Any:
        """``value`` checked against the attribute's type (an enum member may be named)."""
        kind = self.kind
        if isinstance(kind, type) and issubclass(kind, enum.Enum) and not isinstance(value, kind):
            for member in kind:
                if str(value).lower() in (member.name.lower(), str(member.value).lower()):
                    return member
            raise InvalidAttributeError(
                f"attribute {self.name}: {value!r} is not one of {[m.name for m in kind]}"
            )
        if kind is object:
            return value
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
            from malhar.redaction import is_secret_key

            shown = "***" if is_secret_key(self.name) else repr(value)
            raise InvalidAttributeError(
                f"attribute {self.name} must be {names}, got {type(value).__name__} {shown}"
            )
        return value


def _attr(name: str, default: Any, kind: Any, doc: str) -> Attribute:
    return Attribute(name, default, kind, doc)


# -- application -----------------------------------------------------------------------
STREAMING_WINDOW_MS = _attr("STREAMING_WINDOW_MS", 500, int, "window period = trigger interval")
APPLICATION_NAME = _attr("APPLICATION_NAME", "app", str, "stable name; keys outputs' meta rows")
CHECKPOINT = _attr("CHECKPOINT", None, (str, type(None)), "checkpoint root: path or hdfs:// URL")
SLOT_CLAIMS = _attr(
    "SLOT_CLAIMS",
    True,
    bool,
    "level-0 tasks claim input slots, one task per core (False: one task per slot, no claims)",
)
IDLE_RUNTIME_TIMEOUT_MS = _attr(
    "IDLE_RUNTIME_TIMEOUT_MS",
    60_000,
    int,
    "a worker tears down a partition runtime it has not run for this long (its slot moved)",
)
CHECKPOINT_INTEGRITY_KEY = _attr(
    "CHECKPOINT_INTEGRITY_KEY",
    None,
    (str, bytes, type(None)),
    "HMAC key over state snapshots and write-ahead-log records: bytes, or '${env:NAME}' / "
    "'${file:/path}' (off when unset)",
)
# -- operator ---------------------------------------------------------------------------
PARTITIONS = _attr("PARTITIONS", 1, int, "static partition count")
APPLICATION_WINDOW_COUNT = _attr(
    "APPLICATION_WINDOW_COUNT", 1, int, "streaming windows per app window"
)
PROCESSING_MODE = _attr("PROCESSING_MODE", ProcessingMode.AT_LEAST_ONCE, ProcessingMode, "recovery")
MAX_TUPLES_PER_WINDOW = _attr("MAX_TUPLES_PER_WINDOW", 100_000, int, "input admission control")
UNIFIER_LIMIT = _attr(
    "UNIFIER_LIMIT", 0, int, "max upstream partitions per unifier (0: no cascade)"
)
PARTITIONER = _attr(
    "PARTITIONER",
    None,
    object,
    "defines the operator's partitions on a repartitioning (malhar.partitioning.Partitioner)",
)
STATS_LISTENERS = _attr(
    "STATS_LISTENERS",
    (),
    (list, tuple),
    "objects with process_stats(OperatorStats) -> Response, called about once per second",
)
# -- port -------------------------------------------------------------------------------
STREAM_CODEC = _attr("STREAM_CODEC", None, object, "partitions tuples of an input port")
PARALLEL_PARTITION = _attr("PARALLEL_PARTITION", False, bool, "replicate with upstream, no shuffle")

APPLICATION = {
    a.name: a
    for a in (
        STREAMING_WINDOW_MS,
        APPLICATION_NAME,
        CHECKPOINT,
        SLOT_CLAIMS,
        IDLE_RUNTIME_TIMEOUT_MS,
        CHECKPOINT_INTEGRITY_KEY,
    )
}
OPERATOR = {
    a.name: a
    for a in (
        PARTITIONS,
        APPLICATION_WINDOW_COUNT,
        PROCESSING_MODE,
        MAX_TUPLES_PER_WINDOW,
        UNIFIER_LIMIT,
        STATS_LISTENERS,
        PARTITIONER,
    )
}
PORT = {a.name: a for a in (STREAM_CODEC, PARALLEL_PARTITION)}


def lookup(scope: Mapping[str, Attribute], key: Attribute | str, what: str) -> Attribute:
    """The attribute ``key`` names in ``scope`` (``what``: "application", "operator", "port")."""
    name = key.name if isinstance(key, Attribute) else str(key)
    found = scope.get(name)
    if found is None:
        raise InvalidAttributeError(
            f"unknown {what} attribute {name!r}{did_you_mean(name, scope)} (known: {sorted(scope)})"
        )
    return found
