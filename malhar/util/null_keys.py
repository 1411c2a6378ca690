"""Null join keys: as in SQL, a null key equals no key, itself included (``eqNullSafe`` is
the opt-in of the joins that take ``null_keys_match``)."""

from __future__ import annotations

from typing import Any

__all__ = ["null_key"]


def null_key(key: Any) -> bool:
    """Whether ``key`` is a null join key: None, or a tuple (a key of several fields) with
    a null component.

    Example:
        >>> null_key(None), null_key(("a", None)), null_key(("a", 1)), null_key(0)
        (True, True, False, False)
    """
    if key is None:
        return True
    return type(key) is tuple and any(null_key(k) for k in key)
