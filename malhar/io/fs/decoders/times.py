"""Zoned timestamps read from text or as naive values, as Spark's CSV and JSON readers
read them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def _zoned(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is not None


def to_timestamps(column: Any, target: pa.DataType, *, empty_is_null: bool = True) -> Any:
    """Text -> a zoned timestamp column: values with an offset (``...Z``, ``+01:00``) as
    given, values without one in the target's zone (UTC for Spark's ``timestamp`` in a
    UTC session), as Spark's CSV and JSON readers do; digits of a second past the target's
    unit (``.123456789``) truncated, as Spark does. A column mixing both raises (the
    decoder then bisects down to lines, each of one kind). ``empty_is_null``: ``""`` is
    null (CSV, as Spark's ``nullValue``); otherwise it does not convert (JSON, as Spark)."""
    if empty_is_null:
        column = pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)
    try:
        return _text_to_time(column, target)
    except pa.ArrowInvalid:
        naive = _text_to_time(column, pa.timestamp(target.unit))
        return pc.assume_timezone(naive, target.tz)


def _text_to_time(column: Any, target: pa.DataType) -> Any:
    try:
        return pc.cast(column, target)
    except pa.ArrowInvalid:
        if target.unit == "ns":
            raise
        # more digits than the unit holds: read as nanoseconds, then cut the extra digits
        # as Spark does (toward earlier times, also before 1970)
        finer = pc.cast(column, pa.timestamp("ns", target.tz))
        unit = {"s": "second", "ms": "millisecond", "us": "microsecond"}[target.unit]
        return pc.floor_temporal(finer, unit=unit).cast(target)


def zone_naive(column: Any, target: pa.DataType) -> Any:
    """Naive timestamps (values written without an offset) -> ``target``'s zone, read as
    wall-clock times there (UTC: the same instants, a metadata-only cast)."""
    if target.tz in ("UTC", "+00:00", "Z"):
        return pc.cast(column, target)
    return pc.assume_timezone(column, target.tz).cast(target)


def _finish(table: pa.Table, schema: pa.Schema, *, empty_is_null: bool = True) -> pa.Table:
    """Convert the zoned timestamp columns read as text or as naive timestamps, then cast
    to ``schema`` (``empty_is_null``: see :func:`to_timestamps`)."""
    for i, f in enumerate(schema):
        if not _zoned(f.type):
            continue
        have = table.schema.field(f.name).type
        if pa.types.is_string(have):
            times = to_timestamps(table.column(f.name), f.type, empty_is_null=empty_is_null)
            table = table.set_column(i, f.name, times)
        elif pa.types.is_timestamp(have) and have.tz is None:
            table = table.set_column(i, f.name, zone_naive(table.column(f.name), f.type))
    return table.cast(schema) if table.schema != schema else table
