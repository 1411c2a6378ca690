"""Helpers the math operators share: numbers, exact sums, key and output-row names."""

from __future__ import annotations

import decimal
from typing import Any

from malhar.algo._base import (
    FieldSpec,
)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
GLOBAL = ()  # the accumulator key of a global (unkeyed) aggregate


def is_number(v: Any) -> bool:
    return isinstance(v, int | float | decimal.Decimal) and not isinstance(v, bool)


#: adds Decimals exactly: the default context keeps 28 digits and rounds a larger sum
#: silently (a decimal128 column holds 38, and Python Decimals any number)
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_DECIMAL = decimal.Decimal


def _exact_add(a: Any, b: Any) -> Any:
    """``a + b``, exact when either is a Decimal (a float with a Decimal raises TypeError)."""
    if a.__class__ is _DECIMAL or b.__class__ is _DECIMAL:
        return _EXACT.add(a, b)
    return a + b


def _out_row(key_name: str | None, k: Any, fields: dict[str, Any]) -> dict[str, Any]:
    return {key_name: k, **fields} if key_name else fields


def _key_name(key: FieldSpec, key_name: str | None) -> str | None:
    if key is None:
        return None
    return key_name or (key if isinstance(key, str) else "key")


def _unmixable(value: Any) -> str:
    return (
        f"value {value!r} ({type(value).__name__}) cannot be combined with the values before "
        "it: give the field one numeric type (Decimal and float do not mix)"
    )
