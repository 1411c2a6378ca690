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
from typing import Any

import pyarrow as pa

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


def columns(msgs: list[Any]) -> dict[str, list[Any]]:
    """Column lists of everything but the value, from confluent-kafka ``Message`` objects."""
    stamps = [m.timestamp() for m in msgs]
    return {
        "topic": [m.topic() for m in msgs],
        "partition": [m.partition() for m in msgs],
        "offset": [m.offset() for m in msgs],
        "timestamp": [ms * 1000 if kind else None for kind, ms in stamps],
        "timestamp_type": [kind for kind, _ in stamps],
        "key": [m.key() for m in msgs],
        "headers": [m.headers() for m in msgs],
    }


def build_batch(
    msgs: list[Any],
    values: pa.Array,
    schema: pa.Schema,
    *,
    keep: list[bool] | None = None,
    extra: dict[str, Any] | None = None,
) -> pa.RecordBatch:
    """One Arrow batch of ``msgs`` with the decoded ``values``; ``keep`` filters rows out."""
    cols = columns(msgs)
    cols["value"] = values
    if extra:
        cols.update(extra)
    arrays = []
    for field in schema:
        data = cols[field.name]
        if isinstance(data, pa.Array):
            arrays.append(data if data.type == field.type else data.cast(field.type))
        else:
            arrays.append(pa.array(data, type=field.type))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    if keep is not None:
        batch = batch.filter(pa.array(keep, pa.bool_()))
    return batch


def record_dicts(
    msgs: list[Any], values: list[Any], skip: set[int] | frozenset = frozenset()
) -> list[dict]:
    """Records as dicts (untyped ports), the same fields as the Arrow record schema."""
    out = []
    for i, m in enumerate(msgs):
        if i in skip:
            continue
        kind, ms = m.timestamp()
        headers = m.headers()
        out.append(
            {
                "topic": m.topic(),
                "partition": m.partition(),
                "offset": m.offset(),
                "timestamp": _EPOCH + dt.timedelta(milliseconds=ms) if kind else None,
                "timestamp_type": kind,
                "key": m.key(),
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


def total_bytes(msgs: list[Any]) -> list[int]:
    """Key + value size of each record (what the per-window byte limit counts)."""
    return [len(m) + len(m.key() or b"") for m in msgs]


__all__ = [
    "ERROR_DDL",
    "HEADERS_DDL",
    "build_batch",
    "columns",
    "error_row",
    "record_ddl",
    "record_dicts",
    "record_schema",
    "total_bytes",
]
