"""A window's rows: tuples and Arrow batches gathered into one Arrow table, and its CSV form.

Tuples may be dicts (by column name), tuples or lists (positional, in ``columns``
order), named tuples, dataclass instances or Spark ``Row``\\ s. Arrow record
batches are kept as they are (no per-row work). At the end of the window
everything becomes one ``pyarrow.Table`` whose columns are the ones written
(:func:`window_table`); a tuple that cannot be a row of the table is refused with
the reason and never fails the window.

A field missing from a row is *not written* (the column's DEFAULT for a new row, left
as it is by an update), whatever the window's other rows have: a row's result never
depends on its neighbours. Rows without every column of the table carry the fields they
have in the hidden column :data:`FIELDS` (null for a row with every column), and the
store writes each set of fields with its own column list (:func:`split_by_fields`).
A window whose rows all have every column (Arrow batches of one schema, positional
tuples, complete dicts) has no :data:`FIELDS` column and no extra work.

The table may hold a tuple's values converted (a column mixing types, or holding a value
its Arrow type cannot, becomes text the database parses). So that the error port gets a
row the database rejects *as it was emitted*, the operator passes an :class:`Originals`:
the rows built from tuples then carry their index there in the hidden column :data:`ROW`.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from malhar.io.base.output import rejected_row
from malhar.util.arrow_types import is_text

#: The hidden column of the rows that lack some of the window's columns: the JSON list of
#: the fields they have (sorted); null for a row with every column.
FIELDS = "__malhar_fields"

#: The hidden column of the rows built from tuples when the caller keeps the tuples
#: (:class:`Originals`): the row's index there (null for the rows of an Arrow batch).
ROW = "__malhar_row"

#: the columns of a window's table that are not written
HIDDEN = (FIELDS, ROW)

_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    OverflowError,
    ValueError,
    TypeError,
    RecursionError,
)


def _as_mapping(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    as_dict = getattr(value, "asDict", None)  # pyspark Row
    if callable(as_dict):
        return as_dict()
    as_dict = getattr(value, "_asdict", None)  # namedtuple
    if callable(as_dict):
        return as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return None


class Originals:
    """The tuples a window's table was built from, by their :data:`ROW` index: a row the
    database rejects goes to the error port with its values as they were emitted (the
    table may hold them as text), not as they were converted for the database.

    Example:
        >>> kept = Originals()
        >>> table, bad = window_table([[{"k": "a", "n": 2**70}, {"k": "b", "n": "x"}]],
        ...                           originals=kept)
        >>> table.column("n").to_pylist()  # too big for int64, and mixed: text
        ['1180591620717411303424', 'x']
        >>> kept.rejected(table.column(ROW)[0].as_py(), "out of range")
        {'k': 'a', 'n': 1180591620717411303424, 'error': 'out of range'}
    """

    def __init__(self) -> None:
        self.rows: list[Any] = []  # mappings, or positional tuples in ``order``
        self.order: list[str] = []

    def add(self, rows: Sequence[Any]) -> pa.Array:
        """Keep ``rows``; the :data:`ROW` column of their table."""
        start = len(self.rows)
        self.rows.extend(rows)
        return pa.array(range(start, len(self.rows)), pa.int64())

    def row(self, index: int) -> Any:
        """The tuple kept at ``index`` (a positional one by column name)."""
        row = self.rows[index]
        if type(row) in (tuple, list):
            return dict(zip(self.order, row, strict=False))
        return row

    def rejected(self, index: int, reason: str) -> dict[str, Any]:
        """The error-port row of the tuple kept at ``index``."""
        return rejected_row(self.row(index), reason)


def text_value(value: Any) -> Any:
    """A value the database parses back from text (JSON for containers, hex for bytes)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | int | float):
        return str(value)
    return str(value)


def _column(values: Sequence[Any]) -> tuple[pa.Array, dict[int, str]]:
    """An Arrow array for one column of Python values, and the rows whose value cannot be
    converted at all (index -> why).

    Dicts and lists become JSON text (as they are: Arrow structs would add the keys of
    other rows); mixed types become text that the database parses.
    """
    sample = next((v for v in values if v is not None), None)
    if not isinstance(sample, dict | list | tuple):
        try:
            return pa.array(values), {}
        except _CONVERSION_ERRORS:
            pass
    texts: list[Any] = []
    bad: dict[int, str] = {}
    for i, v in enumerate(values):
        try:
            text = text_value(v)
            if isinstance(text, str):
                text.encode("utf-8")  # a lone surrogate has no UTF-8: Arrow would raise
            texts.append(text)
        except Exception as exc:  # a value with no text form: its row is refused
            texts.append(None)
            bad[i] = f"{type(exc).__name__}: {exc}"
    return pa.array(texts, pa.string()), bad


def window_table(
    pieces: Sequence[Any],
    *,
    columns: Sequence[str] = (),
    default: Sequence[str] = (),
    allowed: Sequence[str] | None = None,
    required: Sequence[str] = (),
    originals: Originals | None = None,
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """A window's tuples and batches as one table, and the tuples that cannot be written.

    Args:
        pieces: the window's pieces (:attr:`~malhar.io.base.output_operator.WindowBuffer.pieces`):
            lists of tuples and Arrow batches, in arrival order.
        columns: the columns to write, in order (tuples are positional in it; other fields
            are ignored); empty: every field of the rows, in order of first appearance.
        default: the column order of positional tuples when ``columns`` is empty (the
            target table's columns).
        allowed: the fields a row may have when ``columns`` is empty (the table's
            columns); None: any.
        required: fields every row must have (the conflict key, the statement's binds).
        originals: keeps the tuples of the table's rows (their index in the hidden
            column :data:`ROW`), for the error port; None: no :data:`ROW` column.

    Returns:
        The table, and each refused tuple as an error-port row with the reason: a tuple
        with the wrong number of values, a field that is not a column, a missing key
        field, a value that cannot be converted, something that is not a row at all.
        One bad tuple never fails the window.

    Example:
        >>> table, bad = window_table([[{"k": "a", "n": 1}, ("b", 2, 3), {"k": "c", "x": 0}]],
        ...                           default=["k", "n"], allowed=["k", "n"])
        >>> table.to_pylist()
        [{'k': 'a', 'n': 1}]
        >>> [b["error"] for b in bad]  # doctest: +NORMALIZE_WHITESPACE
        ["3 value(s) for the 2 columns ['k', 'n']",
         "unknown column(s) ['x'] (the table's columns: ['k', 'n'])"]
    """
    tables: list[pa.Table] = []
    bad: list[dict[str, Any]] = []
    shape = _Shape(columns, default, allowed, required, originals)
    for piece in pieces:
        table = shape.rows(piece, bad) if isinstance(piece, list) else shape.batch(piece, bad)
        if table is not None and table.num_rows:
            tables.append(table)
    if not tables:
        return pa.table({c: pa.nulls(0) for c in columns}), bad
    wanted = list(columns) or list(
        dict.fromkeys(n for t in tables for n in t.column_names if n not in HIDDEN)
    )
    marked = any(FIELDS in t.column_names or _width(t) < len(wanted) for t in tables)
    tracked = any(ROW in t.column_names for t in tables)
    aligned = [
        _select(_marked(t, wanted) if marked else t, wanted, marked, tracked) for t in tables
    ]
    if len(aligned) == 1:
        return aligned[0], bad
    try:
        return pa.concat_tables(aligned, promote_options="permissive"), bad
    except _CONVERSION_ERRORS:
        return pa.concat_tables([_as_text(t) for t in aligned]), bad


class _Shape:
    """Checks and converts the pieces of a window (see :func:`window_table`)."""

    def __init__(
        self,
        columns: Sequence[str],
        default: Sequence[str],
        allowed: Sequence[str] | None,
        required: Sequence[str],
        originals: Originals | None = None,
    ) -> None:
        self.columns = list(columns)
        self.order = list(columns) or list(default)
        self.originals = originals
        if originals is not None:
            originals.order = self.order
        self.allowed = None if columns or allowed is None else frozenset(allowed)
        self.required = tuple(required)

    def _unknown(self, fields: Any) -> list[str]:
        if self.allowed is None:
            return []
        return [f for f in fields if f not in self.allowed]

    def _why_unknown(self, unknown: list[str]) -> str:
        return f"unknown column(s) {unknown} (the table's columns: {sorted(self.allowed or ())})"

    def rows(self, rows: list[Any], bad: list[dict[str, Any]]) -> pa.Table | None:
        width = len(self.order)
        if self.order and all(type(r) in (tuple, list) and len(r) == width for r in rows):
            return self._positional(rows, bad)  # the fast path of positional tuples
        kept: list[tuple[Any, dict[str, Any]]] = []
        for r in rows:
            m = _as_mapping(r)
            if m is None:
                if not isinstance(r, list | tuple):
                    why = f"expected a dict, a tuple or a record, got {type(r).__name__}"
                elif not self.order:
                    why = "a positional tuple needs the 'columns' setting (or a target table)"
                elif len(r) != width:
                    why = f"{len(r)} value(s) for the {width} columns {self.order}"
                else:
                    kept.append((r, dict(zip(self.order, r, strict=True))))
                    continue
                bad.append(rejected_row(r, why))
                continue
            kept.append((r, m))
        if self.allowed is not None or self.required:
            checked = []
            for r, m in kept:
                unknown = self._unknown(m)
                missing = [k for k in self.required if k not in m]
                if unknown:
                    bad.append(rejected_row(r, self._why_unknown(unknown)))
                elif missing:
                    bad.append(rejected_row(r, f"missing field(s) {missing}"))
                else:
                    checked.append((r, m))
            kept = checked
        if not kept:
            return None
        order = self.columns or list(dict.fromkeys(k for _, m in kept for k in m))
        return self._build(kept, order, bad)

    @staticmethod
    def _fields(kept: list[tuple[Any, dict[str, Any]]], order: list[str]) -> pa.Array | None:
        """The :data:`FIELDS` of dict rows lacking some of ``order``; None when none does."""
        width = len(order)
        if all(len(m) >= width and all(c in m for c in order) for _, m in kept):
            return None
        have = [
            None if all(c in m for c in order) else _fields_of(c for c in order if c in m)
            for _, m in kept
        ]
        return pa.array(have, pa.string())

    def _build(
        self, kept: list[tuple[Any, dict[str, Any]]], order: list[str], bad: list[dict[str, Any]]
    ) -> pa.Table | None:
        arrays = {}
        refused: dict[int, str] = {}
        for c in order:
            arrays[c], why = _column([m.get(c) for _, m in kept])
            for i, reason in why.items():
                refused.setdefault(i, f"column {c!r}: {reason}")
        if not refused:
            fields = self._fields(kept, order)
            if fields is not None:
                arrays[FIELDS] = fields
            if self.originals is not None:
                arrays[ROW] = self.originals.add([m for _, m in kept])
            return pa.table(arrays)
        for i, reason in sorted(refused.items()):
            bad.append(rejected_row(kept[i][0], f"cannot convert the value of {reason}"))
        rest = [k for i, k in enumerate(kept) if i not in refused]
        return self._build(rest, order, bad) if rest else None

    def _positional(self, rows: list[Any], bad: list[dict[str, Any]]) -> pa.Table | None:
        arrays = {}
        for c, values in zip(self.order, zip(*rows, strict=True), strict=True):
            arrays[c], why = _column(list(values))
            if why:  # rare: convert row by row to name the bad rows
                pairs = [(r, dict(zip(self.order, r, strict=True))) for r in rows]
                return self._build(pairs, self.order, bad)
        if self.originals is not None:
            arrays[ROW] = self.originals.add(rows)
        return pa.table(arrays)

    def batch(self, piece: pa.RecordBatch | pa.Table, bad: list[dict[str, Any]]) -> pa.Table | None:
        table = pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece
        names = table.column_names
        unknown = self._unknown(names)
        missing = [k for k in self.required if k not in names]
        if unknown or missing:
            why = self._why_unknown(unknown) if unknown else f"missing field(s) {missing}"
            bad.extend(rejected_row(r, why) for r in table.to_pylist())
            return None
        if not self.columns:
            return table
        table = _marked(table, self.columns)
        return _select(table, self.columns, FIELDS in table.column_names)


def _width(table: pa.Table) -> int:
    """The number of ``table``'s columns that are written (not :data:`HIDDEN`)."""
    return sum(1 for c in table.column_names if c not in HIDDEN)


def _fields_of(fields: Any) -> str:
    return json.dumps(sorted(fields))


def _marked(table: pa.Table, wanted: list[str]) -> pa.Table:
    """``table`` with a :data:`FIELDS` column when some of its rows lack some of ``wanted``."""
    have = [c for c in table.column_names if c != FIELDS and c in wanted]
    if len(have) == len(wanted):
        return table
    mine = _fields_of(have)
    if FIELDS in table.column_names:  # its complete rows have the table's columns only
        i = table.column_names.index(FIELDS)
        return table.set_column(i, FIELDS, table.column(FIELDS).fill_null(mine))
    return table.append_column(FIELDS, pa.array([mine] * table.num_rows, pa.string()))


_HIDDEN_TYPES = {FIELDS: pa.string(), ROW: pa.int64()}


def _select(
    table: pa.Table, wanted: list[str], marked: bool = False, tracked: bool = False
) -> pa.Table:
    """``table``'s columns ``wanted`` (nulls for the missing ones), then its
    :data:`FIELDS` when ``marked`` and its :data:`ROW` when ``tracked`` (nulls when it
    has none)."""
    names = [*wanted, *([FIELDS] if marked else []), *([ROW] if tracked else [])]
    if table.column_names == names:
        return table
    arrays = [
        table.column(c)
        if c in table.column_names
        else pa.nulls(table.num_rows, _HIDDEN_TYPES.get(c, pa.null()))
        for c in names
    ]
    return pa.table(arrays, names=names)


def split_by_fields(rows: pa.Table, *, in_order: bool) -> list[pa.Table]:
    """``rows`` as tables that each hold rows with the same fields, with only these
    columns (and no :data:`FIELDS`; a :data:`ROW` column is kept).

    Args:
        rows: a window's rows (:func:`window_table`).
        in_order: keep the arrival order across the parts (runs of consecutive rows with
            the same fields, for ``upsert``, where the last row of a key wins); else one
            part per set of fields, in order of first appearance (``insert``,
            ``merge_add``: the order of the parts does not change the result).

    Example:
        >>> t = pa.table({"k": ["a", "b", "c"], "n": [1, None, 3],
        ...               FIELDS: [None, '["k"]', None]})
        >>> [p.to_pylist() for p in split_by_fields(t, in_order=False)]
        [[{'k': 'a', 'n': 1}, {'k': 'c', 'n': 3}], [{'k': 'b'}]]
        >>> [p.num_rows for p in split_by_fields(t, in_order=True)]
        [1, 1, 1]
    """
    if FIELDS not in rows.column_names:
        return [rows]
    marks = rows.column(FIELDS).to_pylist()
    body = rows.drop_columns([FIELDS])
    names = body.column_names

    def columns(mark: str | None) -> list[str]:
        if mark is None:
            return names
        have = {*json.loads(mark), ROW}
        return [c for c in names if c in have]

    parts: list[pa.Table] = []
    if in_order:
        start = 0
        for i in range(1, len(marks) + 1):
            if i == len(marks) or marks[i] != marks[start]:
                parts.append(body.slice(start, i - start).select(columns(marks[start])))
                start = i
        return parts
    groups: dict[str | None, list[int]] = {}
    for i, mark in enumerate(marks):
        groups.setdefault(mark, []).append(i)
    for mark, indices in groups.items():
        part = body if len(indices) == len(marks) else body.take(pa.array(indices, pa.int64()))
        parts.append(part.select(columns(mark)))
    return parts


def _as_text(table: pa.Table) -> pa.Table:
    """``table``'s columns as text the database parses (the :data:`HIDDEN` ones as they are)."""
    return pa.table(
        {
            c: table.column(c)
            if c in HIDDEN
            else pa.array([text_value(v) for v in table.column(c).to_pylist()], pa.string())
            for c in table.column_names
        }
    )


# -- CSV for PostgreSQL's COPY ----------------------------------------------------------------
def _csv_native(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or is_text(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_null(t)
    )


def csv_ready(table: pa.Table) -> pa.Table:
    """``table`` with every column in a type the Arrow CSV writer renders as PostgreSQL
    reads it: bytes as ``\\x`` hex, lists/structs as JSON, dictionaries decoded."""
    if all(_csv_native(f.type) for f in table.schema):
        return table
    arrays = []
    for field, col in zip(table.schema, table.columns, strict=True):
        if pa.types.is_dictionary(field.type):
            col = col.cast(field.type.value_type)
        if _csv_native(col.type):
            arrays.append(col)
        else:
            arrays.append(pa.array([text_value(v) for v in col.to_pylist()], pa.string()))
    return pa.table(arrays, names=table.column_names)


_CSV_OPTIONS = pa_csv.WriteOptions(include_header=False, delimiter=",")


def to_csv(table: pa.Table) -> io.BytesIO:
    """CSV for ``COPY ... FROM STDIN WITH (FORMAT csv)``: strings quoted, NULL unquoted empty."""
    out = io.BytesIO()
    pa_csv.write_csv(csv_ready(table), out, _CSV_OPTIONS)
    out.seek(0)
    return out
