"""Attributes of applications, operators and ports (Apex's ``Context.DAGContext`` ...)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class ProcessingMode(enum.Enum):
    """What a failure costs an operator (Apex's ``Operator.ProcessingMode``)."""

    #: the in-flight window is replayed; outputs may see it twice unless they are idempotent
    AT_LEAST_ONCE = "at_least_once"
    #: the in-flight window is skipped after a failure: its tuples are lost, never repeated
    AT_MOST_ONCE = "at_most_once"
    #: state checkpointed every window and replayed exactly (outputs must be transactional)
    EXACTLY_ONCE = "exactly_once"


@dataclass(frozen=True)
class Attribute:
    name: str
    default: Any
    kind: type | tuple[type, ...]
    doc: str


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
# -- port -------------------------------------------------------------------------------
STREAM_CODEC = _attr("STREAM_CODEC", None, object, "partitions tuples of an input port")
PARALLEL_PARTITION = _attr("PARALLEL_PARTITION", False, bool, "replicate with upstream, no shuffle")

APPLICATION = {a.name: a for a in (STREAMING_WINDOW_MS, APPLICATION_NAME, CHECKPOINT, SLOT_CLAIMS)}
OPERATOR = {
    a.name: a
    for a in (
        PARTITIONS,
        APPLICATION_WINDOW_COUNT,
        PROCESSING_MODE,
        MAX_TUPLES_PER_WINDOW,
        UNIFIER_LIMIT,
    )
}
PORT = {a.name: a for a in (STREAM_CODEC, PARALLEL_PARTITION)}
