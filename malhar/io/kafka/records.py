"""Kafka records as tuples: the output and error schemas, and Arrow batches built in bulk.

Record schema (value type per deserializer)::

    topic string, partition int, offset bigint, timestamp timestamp, timestamp_type int,
    key binary, value <binary | string>, headers array<struct<key:string,value:binary>>

Headers are a list of ``{key, value}`` (as in Spark's own Kafka source), not a map: Kafka
allows the same header key several times and keeps their order. ``timestamp_type`` is
librdkafka's: 0 not available (``timestamp`` null), 1 create time, 2 log append time.

Error schema: ``topic string, partition int, offset bigint, error string, key binary,
value binary`` (the raw bytes that could not be decoded).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from itertools import chain
from operator import methodcaller
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Message

from malhar.schema import arrow_schema, to_struct_type

HEADERS_DDL = "array<struct<key:string,value:binary>>"
ERROR_DDL = "topic string, partition int, offset bigint, error string, key binary, value binary"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def record_ddl(value_ddl: str = "binary", *, extra: str = "") -> str:
    """The record schema as a Spark DDL string, with ``value`` of type ``value_ddl``."""
    ddl = (
        "topic string, partition int, offset bigint, timestamp timestamp, timestamp_type int, "
        f"key binary, value {value_ddl}, headers {HEADERS_DDL}"
    )
    return f"{ddl}, {extra}" if extra else ddl


def record_schema(value_ddl: str = "binary", *, extra: str = "") -> pa.Schema:
    """The Arrow schema Spark expects for :func:`record_ddl` (``timestamp[us, tz=UTC]`` ...)."""
    return arrow_schema(to_struct_type(record_ddl(value_ddl, extra=extra)))


def _reader(msgs: list[Any], name: str) -> Callable[[Any], Any]:
    """The accessor ``name`` as a function for ``map``: confluent-kafka's own method (a C
    call per message, no Python frame), or ``methodcaller`` for other message objects."""
    if msgs and type(msgs[0]) is Message:
        return getattr(Message, name)
    return methodcaller(name)


class MessageColumns:
    """The fields of a list of messages, each accessor called once per message.

    Every field is read in one ``map`` pass (C-level iteration, no Python loop per record);
    integers go straight into numpy arrays. ``topic`` names the only topic when every
    message comes from it (given by a caller that knows, or found), else ``topics`` lists
    each message's topic. Timestamps are librdkafka's ``(type, milliseconds)`` pairs split
    into ``kinds`` and ``millis``.
    """

    __slots__ = (
        "headers",
        "keys",
        "kinds",
        "millis",
        "n",
        "offsets",
        "partitions",
        "topic",
        "topics",
        "values",
    )

    def __init__(self, msgs: list[Any], topic: str | None = None) -> None:
        n = self.n = len(msgs)
        self.values: list[bytes | None] = list(map(_reader(msgs, "value"), msgs))
        self.partitions = np.fromiter(map(_reader(msgs, "partition"), msgs), np.int32, n)
        self.offsets = np.fromiter(map(_reader(msgs, "offset"), msgs), np.int64, n)
        stamps = np.fromiter(
            chain.from_iterable(map(_reader(msgs, "timestamp"), msgs)), np.int64, 2 * n
        )
        self.kinds = stamps[0::2]
        self.millis = stamps[1::2]
        self.keys: list[bytes | None] = list(map(_reader(msgs, "key"), msgs))
        self.headers: list[Any] = list(map(_reader(msgs, "headers"), msgs))
        self.topics: list[str] | None = None
        if topic is None and n:
            topics = list(map(_reader(msgs, "topic"), msgs))
            if topics.count(topics[0]) == n:
                topic = topics[0]
            else:
                self.topics = topics
        self.topic = topic

    def runs(self) -> list[tuple[str, int, int, int, int]]:
        """``(topic, partition, first offset, last offset, count)`` of each run of
        consecutive messages from one partition, in message order. A consume() batch holds
        a few such runs (one per fetched message set), so offsets are tracked per run, not
        per message."""
        n = self.n
        if not n:
            return []
        p = self.partitions
        change = p[1:] != p[:-1]
        if self.topics is not None:
            t = np.array(self.topics, dtype=object)
            change |= t[1:] != t[:-1]
        cuts = (np.flatnonzero(change) + 1).tolist()
        starts = [0, *cuts]
        ends = [*cuts, n]
        offs = self.offsets
        topics = self.topics
        return [
            (
                self.topic if topics is None else topics[s],  # type: ignore[misc]
                int(p[s]),
                int(offs[s]),
                int(offs[e - 1]),
                e - s,
            )
            for s, e in zip(starts, ends, strict=True)
        ]

    def sizes(self, msgs: list[Any]) -> list[int]:
        """Key + value size of each record."""
        sizes = list(map(len, msgs))
        if self.keys.count(None) != self.n:
            sizes = [s + len(k) if k else s for s, k in zip(sizes, self.keys, strict=True)]
        return sizes

    def arrow(self, name: str, typ: pa.DataType) -> pa.Array | None:
        """The column ``name`` of the record schema as an Arrow array (None: not a record field)."""
        n = self.n
        if name == "topic":
            if self.topics is None:
                return pa.repeat(pa.scalar(self.topic, typ), n)
            return pa.array(self.topics, typ)
        if name == "partition":
            return pa.array(self.partitions, typ)
        if name == "offset":
            return pa.array(self.offsets, typ)
        if name == "timestamp":
            missing = self.kinds == 0
            return pa.array(self.millis * 1000, typ, mask=missing if missing.any() else None)
        if name == "timestamp_type":
            return pa.array(self.kinds, typ)
        if name in ("key", "headers"):
            data = self.keys if name == "key" else self.headers
            if data.count(None) == n:
                return pa.nulls(n, typ)
            return pa.array(data, typ)
        return None


def columns(msgs: list[Any]) -> dict[str, list[Any]]:
    """Column lists of everything but the value, from confluent-kafka ``Message`` objects."""
    cols = MessageColumns(msgs)
    kinds = cols.kinds.tolist()
    millis = cols.millis.tolist()
    return {
        "topic": cols.topics if cols.topics is not None else [cols.topic] * cols.n,
        "partition": cols.partitions.tolist(),
        "offset": cols.offsets.tolist(),
        "timestamp": [ms * 1000 if kind else None for kind, ms in zip(kinds, millis, strict=True)],
        "timestamp_type": kinds,
        "key": cols.keys,
        "headers": cols.headers,
    }


def build_batch(
    msgs: list[Any],
    values: pa.Array,
    schema: pa.Schema,
    *,
    keep: list[bool] | np.ndarray | None = None,
    extra: dict[str, Any] | None = None,
    cols: MessageColumns | None = None,
) -> pa.RecordBatch:
    """One Arrow batch of ``msgs`` with the decoded ``values``; ``keep`` filters rows out.

    ``cols``: the messages' fields if the caller has read them already.
    """
    if cols is None:
        cols = MessageColumns(msgs)
    arrays = []
    for field in schema:
        if field.name == "value":
            data: Any = values
        elif extra and field.name in extra:
            data = extra[field.name]
        else:
            data = cols.arrow(field.name, field.type)
        if isinstance(data, pa.Array):
            arrays.append(data if data.type == field.type else data.cast(field.type))
        else:
            arrays.append(pa.array(data, type=field.type))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    if keep is not None:
        batch = batch.filter(pa.array(keep, pa.bool_()))
    return batch


def record_dicts(
    msgs: list[Any],
    values: list[Any],
    skip: set[int] | frozenset = frozenset(),
    *,
    cols: MessageColumns | None = None,
) -> list[dict]:
    """Records as dicts (untyped ports), the same fields as the Arrow record schema."""
    if cols is None:
        cols = MessageColumns(msgs)
    topics = cols.topics if cols.topics is not None else [cols.topic] * cols.n
    out = []
    for i, (topic, part, off, kind, ms, key, headers) in enumerate(
        zip(
            topics,
            cols.partitions.tolist(),
            cols.offsets.tolist(),
            cols.kinds.tolist(),
            cols.millis.tolist(),
            cols.keys,
            cols.headers,
            strict=True,
        )
    ):
        if i in skip:
            continue
        out.append(
            {
                "topic": topic,
                "partition": part,
                "offset": off,
                "timestamp": _EPOCH + dt.timedelta(milliseconds=ms) if kind else None,
                "timestamp_type": kind,
                "key": key,
                "value": values[i],
                "headers": None
                if headers is None
                else [{"key": k, "value": v} for k, v in headers],
            }
        )
    return out


def error_row(msg: Any, reason: str) -> dict[str, Any]:
    """An error-port tuple for a record that could not be decoded."""
    return {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "error": reason,
        "key": msg.key(),
        "value": msg.value(),
    }


def total_bytes(msgs: list[Any], cols: MessageColumns | None = None) -> list[int]:
    """Key + value size of each record (what the per-window byte limit counts)."""
    if cols is not None:
        return cols.sizes(msgs)
    sizes = list(map(len, msgs))
    keys = list(map(_reader(msgs, "key"), msgs))
    if keys.count(None) == len(keys):
        return sizes
    return [s + len(k) if k else s for s, k in zip(sizes, keys, strict=True)]


__all__ = [
    "ERROR_DDL",
    "HEADERS_DDL",
    "MessageColumns",
    "build_batch",
    "columns",
    "error_row",
    "record_ddl",
    "record_dicts",
    "record_schema",
    "total_bytes",
]
