"""The smaller and the larger of two values with NaN above every number, as Spark orders
it: min ignores a NaN unless there is nothing else, max is NaN once one arrived, in any
order of arrival (Python's ``min``/``max`` and ``<`` depend on it with a NaN; Arrow's
aggregations skip NaN, so the vectorized paths leave NaN rows to these)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["highest", "lowest", "nan_mask"]


def lowest(a: Any, b: Any) -> Any:
    """The smaller of ``a`` and ``b``, NaN above every number."""
    if a != a:
        return b
    if b != b:
        return a
    return b if b < a else a


def highest(a: Any, b: Any) -> Any:
    """The larger of ``a`` and ``b``, NaN above every number."""
    if a != a or b != b:
        return a if a != a else b
    return b if b > a else a


def nan_mask(values: Any) -> Any:
    """The rows of an Arrow column that hold NaN (a boolean array), or None when none does
    (or the column is not floating): the rows a vectorized min, max or sort must leave to
    :func:`lowest` and :func:`highest`."""
    if not pa.types.is_floating(values.type):
        return None
    mask = pc.fill_null(pc.is_nan(values), False)
    return mask if pc.any(mask).as_py() else None
