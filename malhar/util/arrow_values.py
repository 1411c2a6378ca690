"""Values Arrow converts into other values without a word, and the checks that find them.

``pa.array([1.5], pa.int64())`` is ``[1]``; a float beyond float32's range becomes
infinity; a datetime loses its time of day in a date field; a number in a date, time or
timestamp field is taken as days or microseconds since 1970 (``time.time()`` becomes a
time in January 1970); a struct drops fields it does not have. The file output refuses
such rows to its error port (:mod:`malhar.io.fs.conform`); a typed route fails on them
(:mod:`malhar.engine.typed_rows`). A whole ``2.0`` into an integer is kept, as Arrow's
safe cast keeps it.

A column is looked at value by value only when a quick look at all its values (the set
of their types, mostly) finds one that may be refused: the usual rows cost a C-speed pass
per checked column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import numbers
import operator
import struct
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "Check",
    "altered_rows",
    "field_checks",
    "numbers_as_times",
    "unfit_field",
    "value_check",
]


def unfit_field(rows: list[Mapping[str, Any]], schema: pa.Schema) -> str:
    """``"field 'name' (type): "`` of the first field whose values in ``rows`` do not
    convert to its type, for an error message (worked out after a failure only), or
    ``""``."""
    for field in schema:
        try:
            pa.array([row.get(field.name) for row in rows], type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError):
            return f"field {field.name!r} ({field.type}): "
    return ""


def field_checks(schema: pa.Schema) -> list[tuple[pa.Field, Check]]:
    """The checks of ``schema``'s fields whose values Arrow may alter."""
    return [(f, c) for f in schema if (c := value_check(f.type)) is not None]


#: the largest finite float32 (a larger value would be stored as infinity)
_FLOAT32_MAX = 3.4028234663852886e38

#: a check of one (non-null) value of a column: why Arrow would store it altered, or None
Check = Callable[[Any], "str | None"]


def _altered(value: Mapping[str, Any], checks: list[tuple[str, Check]]) -> str | None:
    """Why a row's value would be stored altered (Arrow converts some values it should
    refuse: 2.7 into an integer column as 2), None if none would."""
    for name, check in checks:
        v = value.get(name)
        if v is not None and (why := check(v)) is not None:
            return f"{name}: {why}"
    return None


def altered_rows(
    rows: list[Mapping[str, Any]], checks: list[tuple[pa.Field, Check]]
) -> dict[int, tuple[pa.Field, str]]:
    """The rows (by position) that would be stored altered, with the field and why (the
    first such field of a row): a column's values are checked one by one only when a quick
    look at them all (:func:`_suspect`) finds one that may be."""
    out: dict[int, tuple[pa.Field, str]] = {}
    for field, check in checks:
        values = list(map(operator.methodcaller("get", field.name), rows))
        if not _suspect(field.type, values):
            continue
        for j, v in enumerate(values):
            if v is not None and j not in out and (why := check(v)) is not None:
                out[j] = (field, why)
    return out


def _suspect(kind: pa.DataType, values: list[Any]) -> bool:
    """Whether a column's values may hold one that :func:`value_check` refuses (False:
    none does), without a Python step per value for the common types: the set of their
    types for integers and dates, the float64 array for float32, the set of keys for a
    struct of plain fields."""
    if pa.types.is_integer(kind):
        return any(issubclass(t, float | decimal.Decimal) for t in set(map(type, values)))
    if pa.types.is_date(kind):
        return any(issubclass(t, dt.datetime | numbers.Number) for t in set(map(type, values)))
    if pa.types.is_timestamp(kind) or pa.types.is_time(kind):
        return any(issubclass(t, numbers.Number) for t in set(map(type, values)))
    if pa.types.is_float32(kind):
        try:
            wide = pc.abs(pa.array(values, pa.float64()))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return True
        return bool(pc.any(pc.greater(wide, _FLOAT32_MAX)).as_py())
    if pa.types.is_struct(kind) and all(
        value_check(kind.field(i).type) is None for i in range(kind.num_fields)
    ):
        known = {kind.field(i).name for i in range(kind.num_fields)}
        try:
            return not set(itertools.chain.from_iterable(filter(None, values))) <= known
        except TypeError:
            return True
    return True


def value_check(kind: pa.DataType) -> Check | None:
    """The check of a column's values that Arrow would alter when converting them (None
    for a type without such values): a fraction into an integer, a float32 overflowing to
    infinity, a datetime with a time of day into a date, an unknown struct field (dropped),
    in nested values too."""
    for applies, make in _CHECKS:
        if applies(kind):
            return make(kind)
    return None


def _integer_check(kind: pa.DataType) -> Check:
    def integer(v: Any) -> str | None:
        if isinstance(v, float | decimal.Decimal) and not isinstance(v, bool):
            try:
                stored: int | None = int(v)
            except (ValueError, OverflowError, ArithmeticError):
                stored = None  # NaN, an infinity: no integer at all
            if stored is None:
                return f"{v!r} is not an integer: give None for a missing value, or declare the field double"
            if v != stored:
                return (
                    f"{v!r} is not an integer (Arrow would store {stored}): round it, "
                    "or declare the field double or decimal"
                )
        return None

    return integer


def _float32_check(kind: pa.DataType) -> Check:
    def float32(v: Any) -> str | None:
        if isinstance(v, int | float) and not isinstance(v, bool):
            try:
                if abs(v) > _FLOAT32_MAX:
                    struct.pack("<f", v)  # rounds to the largest float32, or raises
            except OverflowError:
                return f"{v!r} is out of the range of float (it would become infinity)"
        return None

    return float32


def _date_check(kind: pa.DataType) -> Check:
    numbers_as = _time_check(kind)

    def date(v: Any) -> str | None:
        if isinstance(v, dt.datetime) and (v.tzinfo is not None or v.time() != dt.time()):
            return f"{v!r} is not a date (it has a time of day or a time zone)"
        return numbers_as(v)

    return date


def _time_check(kind: pa.DataType) -> Check:
    """A number in a date, time or timestamp field."""
    taken = _numbers_as(kind)

    def time_(v: Any) -> str | None:
        return f"{v!r} is a number, {taken}" if isinstance(v, numbers.Number) else None

    return time_


def _numbers_as(kind: pa.DataType) -> str:
    """How Arrow takes a number as a ``kind`` (days for date32, milliseconds for date64,
    the type's unit since 1970 or midnight), and what to give instead."""
    if pa.types.is_timestamp(kind):
        give, since = "a datetime (datetime.fromtimestamp(seconds, timezone.utc))", "1970"
    elif pa.types.is_date(kind):
        give, since = "a datetime.date", "1970"
    else:
        give, since = "a datetime.time", "midnight"
    unit = "days" if pa.types.is_date32(kind) else _UNITS[getattr(kind, "unit", "ms")]
    return (
        f"which Arrow would take as {unit} since {since} (epoch seconds or milliseconds "
        f"become wrong times): emit {give}, or declare the field bigint"
    )


_UNITS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def numbers_as_times(source: pa.DataType, target: pa.DataType) -> str | None:
    """Why casting a column of ``source`` to ``target`` would take numbers as times
    (Arrow casts int64 to a timestamp as its unit since 1970), or None."""
    numeric = pa.types.is_integer(source) or pa.types.is_floating(source)
    temporal = pa.types.is_timestamp(target) or pa.types.is_date(target)
    if numeric and (temporal or pa.types.is_time(target)):
        return f"its values are numbers, {_numbers_as(target)}"
    return None


def _struct_check(kind: pa.DataType) -> Check:
    field_names = [kind.field(i).name for i in range(kind.num_fields)]
    known = set(field_names)
    inner = [
        (kind.field(i).name, c)
        for i in range(kind.num_fields)
        if (c := value_check(kind.field(i).type)) is not None
    ]

    def struct_(v: Any) -> str | None:
        if isinstance(v, Mapping):
            if extra := [k for k in v if k not in known]:
                return f"unknown struct field(s) {extra}; the struct has {field_names}"
            return _altered(v, inner)
        return None

    return struct_


def _map_check(kind: pa.DataType) -> Check | None:
    key_check, item_check = value_check(kind.key_type), value_check(kind.item_type)
    if key_check is None and item_check is None:
        return None

    def map_(v: Any) -> str | None:
        pairs = v.items() if isinstance(v, Mapping) else v if isinstance(v, list | tuple) else ()
        for pair in pairs:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                continue
            for x, c in zip(pair, (key_check, item_check), strict=True):
                if x is not None and c is not None and (why := c(x)) is not None:
                    return f"map entry: {why}"
        return None

    return map_


def _list_check(kind: pa.DataType) -> Check | None:
    element = value_check(kind.value_type)
    if element is None:
        return None

    def list_(v: Any) -> str | None:
        if isinstance(v, list | tuple):
            for x in v:
                if x is not None and (why := element(x)) is not None:
                    return f"element: {why}"
        return None

    return list_


def _is_list(kind: pa.DataType) -> bool:
    return (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


#: (the types a check is for, the function that makes it for one such type)
_CHECKS: tuple[tuple[Callable[[pa.DataType], bool], Callable[[pa.DataType], Check | None]], ...] = (
    (pa.types.is_integer, _integer_check),
    (pa.types.is_float32, _float32_check),
    (pa.types.is_date, _date_check),
    (lambda k: pa.types.is_timestamp(k) or pa.types.is_time(k), _time_check),
    (pa.types.is_struct, _struct_check),
    (pa.types.is_map, _map_check),
    (_is_list, _list_check),
)
