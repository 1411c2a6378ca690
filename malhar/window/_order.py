"""A total order for emitting things deterministically (keys, values of any type)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def _fallback(value: Any) -> tuple[str, str]:
    return type(value).__name__, repr(value)


def ordered(values: Iterable[T], key: Any = None) -> list[T]:
    """``values`` sorted naturally when they compare, else by (type name, repr)."""
    items = list(values)
    try:
        return sorted(items, key=key)
    except TypeError:
        if key is None:
            return sorted(items, key=_fallback)
        return sorted(items, key=lambda v: _fallback(key(v)))
