"""Epoch milliseconds of an event time: a tuple's (:func:`event_millis`) and an Arrow
column's (:func:`epoch_millis`), computed alike.

Spark's timestamps are microseconds: a cast to ``timestamp("ms")`` refuses one with a
sub-millisecond part ("would lose data"), which failed every batch of such rows, while a
tuple's ``datetime`` is floored to its millisecond. Here timestamps of any unit are
floored (before 1970 too, as ``datetime // timedelta`` does), dates are midnight UTC,
integers are milliseconds already and floats are truncated like ``int()``.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["epoch_millis", "event_millis"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: the event times an int64 holds (Arrow's timestamps, the state's time buckets)
_MIN, _MAX = -(2**63), 2**63 - 1

#: a timestamp unit -> (multiply, floor-divide) to milliseconds
_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


def event_millis(value: Any) -> int:
    """Epoch milliseconds of a tuple's event time: an int (ms), a float (truncated), a
    datetime (naive = UTC; floored to the millisecond), a date (midnight UTC) or a numpy
    integer or datetime64. Raises TypeError for anything else, a bool, NaN, infinity or
    a time outside the int64 range."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not an event time")
    if isinstance(value, int):
        if not _MIN <= value <= _MAX:
            raise TypeError(f"{value!r} ms is outside the 64-bit range of event times")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{value!r} is not an event time")
        return event_millis(int(value))
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        ms = (value - _EPOCH) // dt.timedelta(milliseconds=1)
        if not isinstance(ms, int):  # pandas' NaT is a datetime whose arithmetic gives NaN
            raise TypeError(f"{value!r} is not an event time")
        return ms
    if isinstance(value, dt.date):
        return (value - _EPOCH.date()).days * 86_400_000
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            raise TypeError(f"{value!r} is not an event time")
        return int(value.astype("datetime64[ms]").astype(np.int64))
    raise TypeError(f"{type(value).__name__} {value!r} is not an event time")


def epoch_millis(values: Any) -> np.ndarray:
    """An int64 array of the epoch milliseconds of ``values`` (an Arrow array or chunked
    array of timestamps, dates, integers or floats, without nulls). Raises ValueError for a
    NaN or infinite float, TypeError for another type: strings (``"5"`` too), booleans,
    decimals ... are no more an event time in a column than in a tuple
    (:func:`event_millis`), though Arrow would cast them; pyarrow's error for an integer
    beyond the int64 range."""
    kind = values.type
    if not (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_date(kind)
    ):
        raise TypeError(f"a column of {kind} is not an event time")
    if pa.types.is_timestamp(kind):
        mul, div = _TO_MS[kind.unit]
        raw = pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False)
        return raw * mul if div == 1 else raw // div
    if pa.types.is_date(kind):
        values = pc.cast(values, pa.timestamp("ms"))
    elif pa.types.is_floating(kind):
        if not pc.all(pc.is_finite(values)).as_py():
            raise ValueError("a NaN or infinite time is not a time")
        values = pc.trunc(values)
        return pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False)
    return pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
