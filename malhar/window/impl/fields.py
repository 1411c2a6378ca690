"""Reading fields of tuples for the windowed operators and the watermark generator: the
extractors of column-name properties, and event times as epoch milliseconds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from malhar.util.epoch_millis import event_millis
from malhar.window.errors import BadTupleError


# -- extractors ---------------------------------------------------------------------------------
def extractor(
    spec: Any, default: Callable[[Any], Any] | None, setting: str = "timestamp", owner: str = ""
) -> Callable[[Any], Any] | None:
    """A function from a tuple: a column name (``t[name]``), several (a tuple of them), a
    callable as is, or ``default`` for None. A tuple without a named field raises a
    :class:`BadTupleError` naming ``owner``, the field and ``setting`` (the property set)."""
    if spec is None:
        return default
    if isinstance(spec, str):
        name = spec

        def field(t: Any) -> Any:
            try:
                return t[name]
            except (KeyError, IndexError, TypeError):
                raise _missing(owner, setting, spec, name, t) from None

        return field
    if isinstance(spec, list | tuple):
        names = tuple(spec)

        def fields(t: Any) -> Any:
            try:
                return tuple(t[n] for n in names)
            except (KeyError, IndexError, TypeError):
                missing = next(n for n in names if not _has(t, n))
                raise _missing(owner, setting, spec, missing, t) from None

        return fields
    return spec


def named_fields(*specs: Any) -> list[str]:
    """The column names among extractor settings (a name, several names; a callable or
    None names none), in order, without repeats: what ``fields_read`` reports."""
    out: list[str] = []
    for spec in specs:
        names = [spec] if isinstance(spec, str) else spec if isinstance(spec, list | tuple) else []
        out += [n for n in names if isinstance(n, str) and n not in out]
    return out


def _has(t: Any, name: str) -> bool:
    try:
        t[name]
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _missing(owner: str, setting: str, spec: Any, name: str, t: Any) -> BadTupleError:
    shown = repr(t)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    where = f"{owner}: " if owner else ""
    return BadTupleError(
        f"{where}a tuple ({type(t).__name__}) has no field {name!r} ({setting}={spec!r}): "
        f"{shown}; send tuples with that field, or set {setting} to a field they have "
        "(or to a callable)"
    )


def tuple_millis(value: Any, owner: str) -> int:
    """A tuple's event time as epoch milliseconds (:func:`event_millis`), or a
    :class:`BadTupleError` naming ``owner`` and what to give."""
    try:
        return event_millis(value)
    except TypeError as exc:
        raise BadTupleError(
            f"{owner}: the tuple's timestamp {value!r} is not a time ({exc}); give epoch "
            "milliseconds (int), a datetime or a date"
        ) from None


def has_columns(schema: pa.Schema, *specs: Any) -> bool:
    """Whether ``schema`` has every column the extractor specs name (a batch that lacks one
    goes row by row, where the first row fails with the field's name and the setting)."""
    names = set(schema.names)
    return all(set(columns_of(spec) or ()) <= names for spec in specs)


def columns_of(spec: Any) -> list[str] | None:
    """The column names of an extractor spec, or None when it is not made of names."""
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, list | tuple) and all(isinstance(s, str) for s in spec):
        return list(spec)
    return None
