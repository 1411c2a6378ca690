"""Key column values of the JDBC poll input, shared by the operator and the Spark data
source: as the user gives them (``start_after``), as positions, window records and offsets
keep them (JSON: :func:`encode_key` / :func:`decode_key`), and as messages show them.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa

from malhar.io.jdbc.errors import JdbcConfigError
from malhar.util.arrow_types import is_text

__all__ = [
    "decode_key",
    "encode_key",
    "parse_key_text",
    "show_key",
    "start_key",
]


def encode_key(value: Any) -> Any:
    """A key value as JSON (positions, window records and offsets go through a JSON round trip).

    Example:
        >>> encode_key(dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC))
        {'ts': '2024-05-01T12:00:00+00:00'}
        >>> decode_key(encode_key(Decimal("10.5"))), decode_key(7)
        (Decimal('10.5'), 7)
    """
    if value is None or (isinstance(value, int | float | str) and not isinstance(value, bool)):
        return value
    if isinstance(value, dt.datetime):
        return {"ts": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"dec": str(value)}
    raise JdbcConfigError(
        f"key values of type {type(value).__name__} cannot be polled: use an integer, "
        "decimal, text, date or timestamp column as key_column"
    )


def decode_key(value: Any) -> Any:
    """The inverse of :func:`encode_key`."""
    if isinstance(value, dict):
        if "ts" in value:
            return dt.datetime.fromisoformat(value["ts"])
        if "date" in value:
            return dt.date.fromisoformat(value["date"])
        if "dec" in value:
            return Decimal(value["dec"])
        raise ValueError(f"not an encoded key: {value!r}")
    return value


def start_key(value: Any, key_type: pa.DataType | None, where: str) -> Any:
    """``start_after`` as a value of the key column's Arrow type ``key_type`` (None: not
    known, see :func:`parse_key_text`). A Spark option is always text, so ``"100"`` must
    become 100 for an integer key (comparing it with the keys read failed), and a naive
    ISO time is UTC for a ``timestamptz`` key. Fails with a :class:`JdbcConfigError`
    naming ``where`` and the type when the value does not fit."""
    if key_type is None:
        return parse_key_text(value)
    text = value if isinstance(value, str) else None
    try:
        if pa.types.is_integer(key_type):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError("not a whole number")
            return int(text.strip()) if text is not None else int(value)
        if pa.types.is_floating(key_type):
            return float(value)
        if pa.types.is_decimal(key_type):
            return Decimal(str(value).strip())
        if pa.types.is_timestamp(key_type):
            moment = dt.datetime.fromisoformat(str(value).strip())
            if key_type.tz is not None and moment.tzinfo is None:
                return moment.replace(tzinfo=dt.UTC)
            if key_type.tz is None and moment.tzinfo is not None:
                return moment.astimezone(dt.UTC).replace(tzinfo=None)
            return moment
        if pa.types.is_date(key_type):
            return dt.date.fromisoformat(str(value).strip())
        if is_text(key_type):
            return str(value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise JdbcConfigError(
            f"{where}: start_after {value!r} is not a value of the key column's type "
            f"{key_type} ({exc}): give a number for a numeric key, ISO text "
            "(2026-11-27T08:00:00, UTC when it has no offset) for a timestamp or date key"
        ) from None
    return parse_key_text(value)


def parse_key_text(text: Any) -> Any:
    """``start_after`` as a key: numbers as they are, ISO text as a timestamp or a date."""
    if not isinstance(text, str):
        return text
    for parse in (dt.datetime.fromisoformat, dt.date.fromisoformat):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


def show_key(key: Any) -> str:
    """An encoded key as messages show it (None: the start of the key order)."""
    return "-∞" if key is None else str(decode_key(key))
