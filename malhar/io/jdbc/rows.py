"""A window's rows: tuples and Arrow batches gathered into one Arrow table, and its CSV form.

Tuples may be dicts (by column name), tuples or lists (positional, in ``columns``
order), named tuples, dataclass instances or Spark ``Row``\\ s. Arrow record
batches are kept as they are (no per-row work). At the end of the window
everything becomes one ``pyarrow.Table`` whose columns are the ones written.
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

from malhar.io.jdbc.errors import JdbcConfigError

_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError)


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


def column_array(values: Sequence[Any]) -> pa.Array:
    """An Arrow array for one column of Python values.

    Dicts and lists become JSON text (as they are: Arrow structs would add the keys of
    other rows); mixed types become text that the database parses.
    """
    sample = next((v for v in values if v is not None), None)
    if isinstance(sample, dict | list | tuple):
        return pa.array([text_value(v) for v in values], pa.string())
    try:
        return pa.array(values)
    except _CONVERSION_ERRORS:
        return pa.array([text_value(v) for v in values], pa.string())


class RowBuffer:
    """The tuples of one window, in arrival order."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.pieces: list[Any] = []  # (kind, payload) in arrival order: "rows" or a batch
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def clear(self) -> None:
        self.rows = []
        self.pieces = []
        self.count = 0

    def add(self, value: Any) -> None:
        if isinstance(value, pa.RecordBatch | pa.Table):
            self.add_batch(value)
            return
        if not self.pieces or self.pieces[-1] is not self.rows:
            self.rows = []
            self.pieces.append(self.rows)
        self.rows.append(value)
        self.count += 1

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows:
            self.pieces.append(batch)
            self.count += batch.num_rows

    # -- to Arrow --------------------------------------------------------------------------
    def to_table(self, columns: Sequence[str] = (), default: Sequence[str] = ()) -> pa.Table:
        """All rows as one table.

        Args:
            columns: the columns to write, in order (tuples are positional in it);
                empty: every field of the rows, in order of first appearance.
            default: the column order for positional tuples when ``columns`` is empty
                (the target table's columns).
        """
        tables: list[pa.Table] = []
        for piece in self.pieces:
            if isinstance(piece, list):
                tables.append(self._rows_table(piece, columns, default))
            elif isinstance(piece, pa.RecordBatch):
                tables.append(pa.Table.from_batches([piece]))
            else:
                tables.append(piece)
        if not tables:
            return pa.table({c: pa.nulls(0) for c in columns})
        wanted = list(columns) or list(dict.fromkeys(n for t in tables for n in t.column_names))
        aligned = [_select(t, wanted) for t in tables]
        if len(aligned) == 1:
            return aligned[0]
        try:
            return pa.concat_tables(aligned, promote_options="permissive")
        except _CONVERSION_ERRORS:
            return pa.concat_tables([_as_text(t) for t in aligned])

    @staticmethod
    def _rows_table(rows: list[Any], columns: Sequence[str], default: Sequence[str]) -> pa.Table:
        first = _as_mapping(rows[0])
        if first is None:
            order = list(columns) or list(default)
            return _positional(rows, order)
        mappings = [first] + [_as_mapping(r) for r in rows[1:]]
        if any(m is None for m in mappings):
            raise JdbcConfigError("a window mixes mapping tuples (dicts) with positional ones")
        order = list(columns) or list(dict.fromkeys(k for m in mappings for k in m))
        return pa.table({c: column_array([m.get(c) for m in mappings]) for c in order})


def _positional(rows: list[Any], order: list[str]) -> pa.Table:
    if not order:
        raise JdbcConfigError("positional tuples need the 'columns' setting (or a table)")
    width = len(order)
    for r in rows:
        if not isinstance(r, list | tuple) or len(r) != width:
            raise JdbcConfigError(
                f"tuple {r!r} does not match the {width} columns {order}: give dicts, or "
                "tuples with one value per column"
            )
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in order]
    return pa.table({c: column_array(list(v)) for c, v in zip(order, cols, strict=True)})


def _select(table: pa.Table, wanted: list[str]) -> pa.Table:
    if table.column_names == wanted:
        return table
    arrays = [
        table.column(c) if c in table.column_names else pa.nulls(table.num_rows) for c in wanted
    ]
    return pa.table(arrays, names=wanted)


def _as_text(table: pa.Table) -> pa.Table:
    return pa.table(
        {
            c: pa.array([text_value(v) for v in table.column(c).to_pylist()], pa.string())
            for c in table.column_names
        }
    )


# -- CSV for PostgreSQL's COPY ----------------------------------------------------------------
def _csv_native(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
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
