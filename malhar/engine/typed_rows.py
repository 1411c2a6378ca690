"""Typed rows that do not fit their port's schema: the conversions a route (and the
operator harness) makes, and the :class:`~malhar.errors.OperatorError` naming the emitting
operator, its output port, the schema and the field when they fail. Nothing is checked in
advance: the detail is worked out after a failure only."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from malhar.errors import OperatorError
from malhar.ports import OutputPort
from malhar.util.arrow_values import altered_rows, field_checks, numbers_as_times, unfit_field

#: what converting emitted rows or batches to an Arrow schema raises when they do not fit
CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError)

#: ``fail(what, reason)``: the error for emitted ``what`` ("a tuple ...") that does not fit
Unfit = Callable[[str, str], OperatorError]


def schema_text(port: OutputPort) -> str:
    """A typed port's schema as DDL text: as declared, or written from its ``StructType``."""
    if isinstance(port.schema_spec, str):
        return " ".join(port.schema_spec.split())
    struct = port.schema
    if struct is None:
        return "untyped"
    return ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
        for f in struct.fields
    )


def arrow_text(schema: pa.Schema) -> str:
    """``name type, ...`` of an Arrow schema (Arrow's type names)."""
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def reason_of(exc: BaseException) -> str:
    """``Kind: message`` of a conversion error, on one line (the driver reports one line)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def unfit_error(
    operator: str, partition: int, window: int, port: str, ddl: str, what: str, reason: str
) -> OperatorError:
    """An OperatorError worded like the dispatcher's, for emitted rows that do not fit."""
    return OperatorError(
        f"operator {operator!r} partition {partition} failed in emit of window {window}: "
        f"output port {port!r} emitted {what} that does not fit its schema {ddl!r}: {reason}"
    )


def rows_to_batch(rows: list[Any], schema: pa.Schema, fail: Unfit) -> pa.RecordBatch:
    """``rows`` (dicts, or instances of a dataclass port's dataclass) as a batch of
    ``schema``; raises ``fail(...)`` if they do not fit."""
    if set(map(type, rows)) - {dict}:
        # Arrow reads any other row as all nulls, without a word
        rows = [_as_mapping(row, fail) for row in rows]
    try:
        batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    except CONVERSION_ERRORS as exc:
        what, detail = unfit_rows(rows, schema)
        raise fail(what, f"{detail}{reason_of(exc)}") from exc
    _refuse_silent_changes(rows, schema, fail)
    _refuse_undeclared_fields(rows, schema, fail)
    return batch


def _refuse_undeclared_fields(rows: list[dict[str, Any]], schema: pa.Schema, fail: Unfit) -> None:
    """Raises ``fail(...)`` for a row with a field the schema lacks: Arrow drops it without a
    word (a field the schema has and the row lacks is null, as a missing column is)."""
    names = frozenset(schema.names)
    if all(map(names.issuperset, rows)):  # the common case, ~60 ns a row
        return
    for row in rows:
        if not names.issuperset(row):
            extra = sorted(map(str, row.keys() - names))
            raise fail(
                "a tuple",
                f"field(s) {', '.join(map(repr, extra))} not in the schema (it would be dropped): "
                "declare them in the port's schema or leave them out of the tuple",
            )


def _refuse_silent_changes(rows: list[dict[str, Any]], schema: pa.Schema, fail: Unfit) -> None:
    """Raises ``fail(...)`` for the first value Arrow converted into another value without
    a word (``1.5`` into an integer as ``1``, ``time.time()`` into a timestamp as a time
    in 1970: :mod:`malhar.util.arrow_values`)."""
    checks = field_checks(schema)
    if checks and (altered := altered_rows(rows, checks)):
        field, why = altered[min(altered)]
        raise fail("a tuple", f"field {field.name!r} ({field.type}): {why}")


def _as_mapping(row: Any, fail: Unfit) -> dict[str, Any]:
    if isinstance(row, dict):
        return row
    if isinstance(row, Mapping):
        return dict(row)
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    raise fail(
        f"a tuple of type {type(row).__name__}",
        "a typed port emits dicts of the schema's fields (or instances of its dataclass)",
    )


def cast_batch(batch: pa.RecordBatch, schema: pa.Schema, fail: Unfit) -> pa.RecordBatch:
    """``batch`` cast to ``schema``; raises ``fail(...)`` if it does not cast."""
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        have = batch.schema.field(index).type if index >= 0 else None
        if have is not None and (why := numbers_as_times(have, field.type)) is not None:
            # Arrow casts int64 to a timestamp as microseconds since 1970, without a word
            raise fail("a batch", f"column {field.name!r} ({have}, not {field.type}): {why}")
    try:
        return batch.cast(schema)
    except CONVERSION_ERRORS as exc:
        raise fail("a batch", f"{unfit_batch(batch, schema)}{reason_of(exc)}") from exc


def unfit_rows(rows: list[Any], schema: pa.Schema) -> tuple[str, str]:
    """What in ``rows`` does not fit ``schema``: ``(what, "detail: ")`` for an error
    message (worked out after a failure only)."""
    for row in rows:
        if not isinstance(row, Mapping):
            return f"a tuple of type {type(row).__name__}", "not a dict of the schema's fields: "
    return "a tuple", unfit_field(rows, schema)


def unfit_batch(batch: pa.RecordBatch, schema: pa.Schema) -> str:
    """Which column of ``batch`` does not fit ``schema``: ``"detail: "`` for an error message."""
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            continue
        try:
            batch.column(index).cast(field.type)
        except CONVERSION_ERRORS:
            have = batch.schema.field(index).type
            return f"column {field.name!r} ({have}, not {field.type}): "
    return f"its columns are ({arrow_text(batch.schema)}): "
