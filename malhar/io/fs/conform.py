"""How the file output makes a window's tuples and batches one table of its schema, and
which of them it refuses (to the ``error`` port, as ``{**row, "error": reason}``).

Dicts are converted by field name; a value Arrow would store altered (2.7 into an
integer, a float32 overflowing to infinity, a datetime with a time of day into a date, an
unknown struct field) is refused, as is one of another type or a null in a NOT NULL field
(inside a struct, list or map too: Parquet would refuse the whole window). Arrow batches whose types are
the schema's pass without per-row work; others are cast when the cast cannot change a
value, else converted as their rows would be. ``lines`` takes plain strings; CSV and lines
refuse a value that holds a newline or bytes that are not UTF-8.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.io.base.output import rejected_row
from malhar.io.fs.encoders import json_encoder
from malhar.util.arrow_types import is_binary, is_text
from malhar.util.arrow_values import altered_rows, field_checks, unfit_field

__all__ = ["JSON_COLUMN", "LINE_SCHEMA", "conform"]

#: the one column of a schemaless JSON-lines window (each row already JSON text)
JSON_COLUMN = "__json__"
LINE_SCHEMA = pa.schema([pa.field("line", pa.string())])


def conform(
    pieces: list[Any], schema: pa.Schema | None, fmt: str
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """The rows of ``pieces`` (lists of tuples and Arrow batches / tables) as one table of
    ``schema``, and the tuples that do not fit it (as :func:`rejected_row`)."""
    if schema is None:
        schema = LINE_SCHEMA if fmt == "lines" else pa.schema([pa.field(JSON_COLUMN, pa.string())])
        schemaless = fmt
    else:
        schemaless = None
    tables: list[pa.Table] = []
    bad: list[dict[str, Any]] = []
    line_column = schema.names[0] if fmt == "lines" and schemaless is None else None
    for piece in pieces:
        if isinstance(piece, list):
            rows = piece
            if line_column is not None:  # plain strings, as without a schema
                rows = [{line_column: v} if isinstance(v, str) else v for v in rows]
        else:
            table = pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece
            if schemaless is None:
                cast = _cast_batch(table, schema)
                if cast is not None:
                    tables.append(cast)
                    continue
            rows = table.to_pylist()
        good, refused = _rows(rows, schema, schemaless)
        bad.extend(refused)
        if good is not None and good.num_rows:
            tables.append(good)
    if not tables:
        return schema.empty_table(), bad
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if line_column is not None:
        table, refused = _refuse_bad_lines(table)
        bad.extend(refused)
    elif fmt == "csv":
        table, refused = _refuse_bad_csv(table)
        bad.extend(refused)
    elif fmt == "jsonl" and schemaless is None:
        table, refused = _refuse_bad_json(table)
        bad.extend(refused)
    return table, bad


def _newlines(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Whether each text value holds a newline (``\\r`` or ``\\n``); False for a null."""
    return pc.fill_null(pc.match_substring_regex(column, "[\\r\\n]"), False)


def _as_text(column: pa.ChunkedArray) -> tuple[pa.ChunkedArray, pa.ChunkedArray | None]:
    """A binary column as text, and which values are not UTF-8 (None: all are; those are
    null in the text). The values are checked one by one only when the cast fails."""
    try:
        return pc.cast(column, pa.string()), None
    except (pa.ArrowInvalid, UnicodeError):
        pass
    texts, invalid = [], []
    for value in column.to_pylist():
        try:
            texts.append(None if value is None else value.decode("utf-8"))
            invalid.append(False)
        except UnicodeDecodeError:
            texts.append(None)
            invalid.append(True)
    return pa.chunked_array([pa.array(texts, pa.string())]), pa.chunked_array([invalid])


def _refuse_rows(
    table: pa.Table, problems: list[tuple[pa.ChunkedArray, str]]
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """``table`` without the rows of any problem mask, and those rows as error rows (the
    reason of the first mask that holds each)."""
    problems = [(m, why) for m, why in problems if pc.any(m).as_py()]
    if not problems:
        return table, []
    refuse = problems[0][0]
    for mask, _ in problems[1:]:
        refuse = pc.or_(refuse, mask)
    masks = [(m.to_pylist(), why) for m, why in problems]
    refused = []
    for i, row in enumerate(table.to_pylist()):  # only for a window with rows to refuse
        why = next((why for m, why in masks if m[i]), None)
        if why is not None:
            refused.append(rejected_row(row, why))
    return table.filter(pc.invert(refuse)), refused


def _refuse_bad_lines(table: pa.Table) -> tuple[pa.Table, list[dict[str, Any]]]:
    """A line file's rows without the values that are no line: a null (it would be written
    as an empty line), a text holding a newline (a reader would see two records) or bytes
    that are no UTF-8 text."""
    column = table.column(0)
    problems = [(pc.is_null(column), "a line cannot be null")]
    if is_binary(column.type):
        column, invalid = _as_text(column)
        if invalid is not None:
            problems.append((invalid, "a line must be UTF-8 text"))
    if is_text(column.type):
        problems.append((_newlines(column), "a line cannot hold a newline"))
    return _refuse_rows(table, problems)


def _refuse_bad_csv(table: pa.Table) -> tuple[pa.Table, list[dict[str, Any]]]:
    """A CSV file's rows without those that CSV cannot hold: a value with a newline (the
    record would span lines, and line readers see two) or bytes that are no UTF-8 text."""
    problems = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if is_binary(column.type):
            column, invalid = _as_text(column)
            if invalid is not None:
                problems.append((invalid, f"{name!r}: a CSV value must be UTF-8 text"))
        if is_text(column.type):
            problems.append((_newlines(column), f"{name!r}: a CSV value cannot hold a newline"))
    return _refuse_rows(table, problems)


def _refuse_bad_json(table: pa.Table) -> tuple[pa.Table, list[dict[str, Any]]]:
    """A JSON-lines file's rows without bytes that are no UTF-8 text (JSON has no bytes:
    they are written as text, never altered)."""
    problems = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if is_binary(column.type):
            invalid = _as_text(column)[1]
            if invalid is not None:
                problems.append((invalid, f"{name!r}: bytes in JSON must be UTF-8 text"))
        elif _holds_binary(column.type):  # in a struct, list or map: value by value
            dumps = json_encoder()
            invalid = pa.chunked_array([[not _encodes(dumps, v) for v in column.to_pylist()]])
            problems.append((invalid, f"{name!r}: bytes in JSON must be UTF-8 text"))
    return _refuse_rows(table, problems)


def _holds_binary(kind: pa.DataType) -> bool:
    return is_binary(kind) or any(_holds_binary(c.type) for c in _children(kind))


def _encodes(dumps: Any, value: Any) -> bool:
    try:
        dumps(value)
        return True
    except UnicodeDecodeError:
        return False


def _utf8_only(
    texts: list[str], bad: list[dict[str, Any]], tuples: list[Any] | None = None
) -> list[str]:
    """``texts`` without those that have no UTF-8 (a lone surrogate, as ``json.loads`` of
    ``"\\ud800"`` or ``surrogateescape`` decoding give); their tuples (``tuples``, the
    texts themselves by default) go to ``bad``."""
    try:
        pa.array(texts, pa.string())
        return texts
    except UnicodeError:
        pass
    kept = []
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
            kept.append(text)
        except UnicodeError as exc:
            bad.append(rejected_row(text if tuples is None else tuples[i], f"not UTF-8: {exc}"))
    return kept


def _null_violations(table: pa.Table, schema: pa.Schema) -> bool:
    if any(not f.nullable and table.column(f.name).null_count for f in schema):
        return True
    return _nested_requires(schema) and bool(_nested_nulls(table, schema))


def _nested_requires(schema: pa.Schema) -> bool:
    """Whether a field inside a struct, list or map of ``schema`` is declared NOT NULL
    (Arrow builds such columns with the nulls in them; Parquet then refuses the table)."""
    return any(_requires_inside(f.type) for f in schema)


def _requires_inside(kind: pa.DataType) -> bool:
    return any(not c.nullable or _requires_inside(c.type) for c in _children(kind))


def _children(kind: pa.DataType) -> list[pa.Field]:
    t = pa.types
    if t.is_struct(kind):
        return [kind.field(i) for i in range(kind.num_fields)]
    if t.is_map(kind):
        return [kind.item_field]  # keys are never null in Arrow
    if t.is_list(kind) or t.is_large_list(kind) or t.is_fixed_size_list(kind):
        return [kind.value_field]
    return []


def _nested_nulls(table: pa.Table, schema: pa.Schema) -> dict[int, str]:
    """The rows of ``table`` with a null in a NOT NULL field inside a struct, list or map
    (of a value that is not null itself), with that field's path (``x.a``, ``l.element``)."""
    found: dict[int, str] = {}

    def note(rows: np.ndarray | int, positions: np.ndarray, where: str) -> None:
        # rows: the table row of each element (an int: the elements are rows from there)
        for r in rows[positions] if isinstance(rows, np.ndarray) else positions + rows:
            found.setdefault(int(r), where)

    def walk(arr: pa.Array, fields: list[pa.Field], path: str, rows: np.ndarray | int) -> None:
        kind = arr.type
        # only where a NOT NULL field can hold a null, or one further down: the common
        # window has none, and mapping every list element to its row costs as much as
        # encoding the window
        if pa.types.is_struct(kind):
            for i, child in enumerate(fields):
                values = arr.field(i)
                where = f"{path}.{child.name}"
                if not child.nullable and values.null_count:
                    valid = np.asarray(arr.is_valid())
                    note(rows, np.flatnonzero(valid & np.asarray(values.is_null())), where)
                if _requires_inside(child.type):
                    walk(values, _children(child.type), where, rows)
        elif fields:  # a list or a map: its elements (null lists hold none)
            (child,) = fields
            where = f"{path}.{'value' if pa.types.is_map(kind) else 'element'}"
            if pa.types.is_map(kind):  # as the list of its values (no kernel takes maps)
                if arr.offset:  # a slice: from_arrays takes no sliced offsets with a mask
                    arr = pa.concat_arrays([arr])
                arr = pa.ListArray.from_arrays(arr.offsets, arr.items, mask=arr.is_null())
            deeper = _requires_inside(child.type)
            # the child array as a whole first: no null in it, none in the elements
            if not deeper and (child.nullable or not arr.values.null_count):
                return
            values = arr.flatten()
            here = not child.nullable and values.null_count
            if not (here or deeper):
                return
            parents = np.asarray(pc.list_parent_indices(arr))
            parents = rows[parents] if isinstance(rows, np.ndarray) else parents + rows
            if here:
                note(parents, np.flatnonzero(np.asarray(values.is_null())), where)
            if deeper:
                walk(values, _children(child.type), where, parents)

    for f in schema:
        kids = _children(f.type)
        if kids and _requires_inside(f.type):
            start = 0
            for chunk in table.column(f.name).chunks:  # not combined: that copies them
                walk(chunk, kids, f.name, start)
                start += len(chunk)
    return found


def _rows(
    rows: list[Any], schema: pa.Schema, schemaless: str | None
) -> tuple[pa.Table | None, list[dict[str, Any]]]:
    """Rows (Python objects) as a table, and the refused ones (in input order)."""
    if schemaless == "lines":
        return _line_rows(rows, schema)
    if schemaless == "jsonl":
        return _jsonl_rows(rows, schema)
    refused: list[tuple[int, dict[str, Any]]] = []  # (position, error row)
    good = _screened(rows, schema, refused)
    table, good = _converted(good, schema, refused)
    if table is not None and _nested_requires(schema):
        table = _without_nested_nulls(table, good, schema, refused)
    refused.sort(key=lambda x: x[0])
    return table, [r for _, r in refused]


def _line_rows(rows: list[Any], schema: pa.Schema) -> tuple[pa.Table, list[dict[str, Any]]]:
    bad: list[dict[str, Any]] = []
    lines = []
    for value in rows:
        if isinstance(value, Mapping) and len(value) == 1:
            value = next(iter(value.values()))
        if not isinstance(value, str):
            bad.append(rejected_row(value, f"expected a str (a line), got {type(value).__name__}"))
        elif "\n" in value or "\r" in value:
            bad.append(rejected_row(value, "a line cannot hold a newline"))
        else:
            lines.append(value)
    lines = _utf8_only(lines, bad)
    return pa.table([pa.array(lines, pa.string())], schema=schema), bad


def _jsonl_rows(rows: list[Any], schema: pa.Schema) -> tuple[pa.Table, list[dict[str, Any]]]:
    bad: list[dict[str, Any]] = []
    texts, written = [], []
    dumps = json_encoder()
    for value in rows:
        if not isinstance(value, Mapping):
            bad.append(rejected_row(value, f"expected a mapping, got {type(value).__name__}"))
            continue
        try:
            texts.append(dumps(dict(value)))
            written.append(value)
        except (TypeError, ValueError) as exc:
            bad.append(rejected_row(value, f"not JSON: {exc}"))
    texts = _utf8_only(texts, bad, written)
    return pa.table([pa.array(texts, pa.string())], schema=schema), bad


def _screened(
    rows: list[Any], schema: pa.Schema, refused: list[tuple[int, dict[str, Any]]]
) -> list[tuple[int, Any]]:
    """The (position, row) pairs whose fields fit the schema; the others to ``refused``."""
    names = set(schema.names)
    required = [f.name for f in schema if not f.nullable]
    good: list[tuple[int, Any]] = []
    for i, value in enumerate(rows):
        if not isinstance(value, Mapping):
            why = f"expected a mapping, got {type(value).__name__}"
        elif extra := [k for k in value if k not in names]:
            why = f"unknown field(s) {extra}; the schema has {schema.names}"
        elif missing := [n for n in required if value.get(n) is None]:
            why = f"required field(s) {missing} missing or null"
        else:
            good.append((i, value))
            continue
        refused.append((i, rejected_row(value, why)))
    checks = field_checks(schema)
    if checks and good:
        altered = altered_rows([v for _, v in good], checks)
        if altered:
            refused.extend(
                (good[j][0], rejected_row(good[j][1], f"does not fit the schema: {f.name}: {why}"))
                for j, (f, why) in altered.items()
            )
            good = [g for j, g in enumerate(good) if j not in altered]
    return good


def _converted(
    good: list[tuple[int, Any]], schema: pa.Schema, refused: list[tuple[int, dict[str, Any]]]
) -> tuple[pa.Table | None, list[tuple[int, Any]]]:
    """The rows as a table, and the rows in it: one that does not convert goes to
    ``refused`` (found one by one only when the whole list fails)."""
    if not good:
        return None, good
    try:
        return pa.Table.from_pylist([v for _, v in good], schema=schema), good
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    kept = []
    for i, value in good:
        try:
            pa.Table.from_pylist([value], schema=schema)
            kept.append((i, value))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            why = f"does not fit the schema: {unfit_field([value], schema)}{_first_line(exc)}"
            refused.append((i, rejected_row(value, why)))
    table = pa.Table.from_pylist([v for _, v in kept], schema=schema) if kept else None
    return table, kept


def _without_nested_nulls(
    table: pa.Table,
    good: list[tuple[int, Any]],
    schema: pa.Schema,
    refused: list[tuple[int, dict[str, Any]]],
) -> pa.Table | None:
    """``table`` without its rows holding a null in a NOT NULL field inside a struct, list
    or map (Parquet refuses the whole file); those go to ``refused``."""
    nulls = _nested_nulls(table, schema)
    if not nulls:
        return table
    refused.extend(
        (good[j][0], rejected_row(good[j][1], f"required field {where} is null"))
        for j, where in nulls.items()
    )
    keep = [j for j in range(len(good)) if j not in nulls]
    return table.take(pa.array(keep, pa.int64())) if keep else None


def _cast_batch(table: pa.Table, schema: pa.Schema) -> pa.Table | None:
    """A batch's table cast to ``schema`` without per-row work, or None when the rows must
    be converted one by one (as Python rows are): an unknown or a missing column, a column
    whose cast could alter values (:func:`_casts_exactly`), a value the cast refuses
    (out of range, a fraction into an integer), a float32 overflow, or a null in a required
    column."""
    if table.schema.equals(schema):
        return None if _null_violations(table, schema) else table
    if set(table.column_names) != set(schema.names):
        return None
    for field in schema:
        if not _casts_exactly(table.schema.field(field.name).type, field.type):
            return None
    try:
        cast = table.select(schema.names).cast(schema)
    except (pa.ArrowException, ValueError, KeyError):
        return None
    for field in schema:
        source = table.column(field.name)
        if pa.types.is_float32(field.type) and not pa.types.is_float32(source.type):
            # a float64 beyond float32's range is cast to infinity
            overflow = pc.and_(pc.is_inf(cast.column(field.name)), pc.invert(pc.is_inf(source)))
            if pc.any(overflow).as_py():
                return None
    return None if _null_violations(cast, schema) else cast


def _casts_exactly(source: pa.DataType, target: pa.DataType, top: bool = True) -> bool:
    """Whether Arrow's (safe) cast from ``source`` to ``target`` keeps every value or
    fails, and converts what the row path converts: numbers to numbers (integer overflow
    and fractions fail; a float64 to float32 overflow is checked after the cast, at the
    top level only), text and binary to each other, timestamps to timestamps, dates to
    dates, integers and decimals to decimals, and nested types field by field (a struct
    with an unknown field: no, the cast would drop it). Not: timestamps to dates (the
    time of day is dropped), floats to decimals (rounded), booleans to and from numbers,
    numbers to and from text (the row path refuses them)."""
    if source.equals(target) or pa.types.is_null(source):
        return True
    if pa.types.is_dictionary(source):
        return _casts_exactly(source.value_type, target, top)
    t = pa.types
    if t.is_integer(source) and (t.is_integer(target) or t.is_decimal(target)):
        return True
    if (t.is_integer(source) or t.is_floating(source)) and t.is_floating(target):
        return top or not (t.is_float32(target) and t.is_float64(source))
    if t.is_floating(source) and t.is_integer(target):
        return True
    if t.is_decimal(source) and t.is_decimal(target):
        return True
    if (is_text(source) or is_binary(source)) and (is_text(target) or is_binary(target)):
        return True
    if t.is_timestamp(source) and t.is_timestamp(target):
        return True
    if t.is_date(source) and t.is_date(target):
        return True
    lists = (t.is_list, t.is_large_list)
    if any(f(source) for f in lists) and any(f(target) for f in lists):
        return _casts_exactly(source.value_type, target.value_type, False)
    if t.is_map(source) and t.is_map(target):
        return _casts_exactly(source.key_type, target.key_type, False) and _casts_exactly(
            source.item_type, target.item_type, False
        )
    if t.is_struct(source) and t.is_struct(target):
        fields = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        for i in range(source.num_fields):
            field = source.field(i)
            if field.name not in fields:
                return False
            if not _casts_exactly(field.type, fields[field.name], False):
                return False
        return True
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
