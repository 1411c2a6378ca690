"""A total order over values of any type, the same in every process (ties and emission
order that must not depend on arrival order or on a process's hash seed): used by the
catalogue's operators (``malhar.algo``) and the windowed accumulations."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

__all__ = ["order_key", "sorted_items"]


def sorted_items(d: dict) -> list[tuple[Any, Any]]:
    return sorted(d.items(), key=lambda kv: order_key(kv[0]))


def order_key(value: Any) -> tuple:
    """A key that orders any mix of values totally and the same way in every process:
    None first, then numbers, strings, bytes, dates, sequences, dicts (by their items in
    key order), anything else by its repr."""
    if value is None:
        return (0,)
    if isinstance(value, bool | int | float | decimal.Decimal):
        if value != value:  # a float or Decimal NaN (a Decimal NaN raises when ordered)
            return (1, math.inf, 1)
        return (1, value, 0)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, bytes):
        return (3, value)
    if isinstance(value, dt.datetime):
        return (4, value.timestamp() if value.tzinfo else value.replace(tzinfo=dt.UTC).timestamp())
    if isinstance(value, dt.date):
        return (5, value.toordinal())
    if isinstance(value, tuple | list):
        return (6, tuple(order_key(v) for v in value))
    if isinstance(value, dict):
        return (7, tuple((order_key(k), order_key(v)) for k, v in sorted_items(value)))
    return (8, repr(value))
