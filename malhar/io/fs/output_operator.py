"""The file output operators: exactly-once rolling files (lines, CSV, JSON lines, Parquet),
optionally in Hive-style partition directories, on
:class:`~malhar.io.base.output_operator.TransactionalOutputOperator` and :class:`~malhar.io.fs.store.FileStore`.

Each operator partition writes its own set of files, named
``<prefix>-<application>-<operator>-<partition>-<first window>-<last window>.<ext>``: two
partitions, two operators, two applications or two runs never write the same name. A
window's rows become visible when the file they belong to has rolled and every window of it
is committed in the whole application (see :mod:`malhar.io.fs.store`).

Input ``input``: dicts (by field name), Arrow record batches from a typed stream (written
without per-row work), and for ``lines`` plain strings. A tuple that does not fit the schema
(an unknown field, a missing required one, a value of another type) goes to ``error`` as
``{**row, "error": reason}`` and is counted; the other rows of the window are written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.io.base.output import WindowKey, rejected_row
from malhar.io.base.output_operator import TransactionalOutputOperator, WindowBuffer
from malhar.io.fs.encoders import json_default
from malhar.io.fs.settings import FileOutputSettings
from malhar.io.fs.store import FileStore
from malhar.operator import OperatorContext
from malhar.properties import Property, properties_of

__all__ = [
    "CsvFileOutput",
    "FileOutputOperator",
    "JsonLinesFileOutput",
    "LinesFileOutput",
    "ParquetFileOutput",
    "conform",
]

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
                extra = [n for n in table.column_names if n not in schema.names]
                if not extra:
                    try:
                        cast = table.select(schema.names).cast(schema)
                        if not _null_violations(cast, schema):
                            tables.append(cast)
                            continue
                    except (pa.ArrowException, ValueError, KeyError):
                        pass
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
    return table, bad


def _refuse_bad_lines(table: pa.Table) -> tuple[pa.Table, list[dict[str, Any]]]:
    """A line file's rows without the values that are no line: a null (it would be written
    as an empty line) or a text holding a newline (a reader would see two records)."""
    column = table.column(0)
    refuse = pc.is_null(column)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        newline = pc.fill_null(pc.match_substring_regex(column, "[\\r\\n]"), False)
        refuse = pc.or_(refuse, newline)
    if not pc.any(refuse).as_py():
        return table, []
    name = table.column_names[0]
    refused = [
        rejected_row(
            {name: v}, "a line cannot be null" if v is None else "a line cannot hold a newline"
        )
        for v in table.filter(refuse).column(0).to_pylist()
    ]
    return table.filter(pc.invert(refuse)), refused


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
    return any(not f.nullable and table.column(f.name).null_count for f in schema)


def _rows(
    rows: list[Any], schema: pa.Schema, schemaless: str | None
) -> tuple[pa.Table | None, list[dict[str, Any]]]:
    """Rows (Python objects) as a table, and the refused ones."""
    bad: list[dict[str, Any]] = []
    if schemaless == "lines":
        lines = []
        for value in rows:
            if isinstance(value, Mapping) and len(value) == 1:
                value = next(iter(value.values()))
            if not isinstance(value, str):
                bad.append(
                    rejected_row(value, f"expected a str (a line), got {type(value).__name__}")
                )
            elif "\n" in value or "\r" in value:
                bad.append(rejected_row(value, "a line cannot hold a newline"))
            else:
                lines.append(value)
        lines = _utf8_only(lines, bad)
        return pa.table([pa.array(lines, pa.string())], schema=schema), bad
    if schemaless == "jsonl":
        texts, written = [], []
        for value in rows:
            if not isinstance(value, Mapping):
                bad.append(rejected_row(value, f"expected a mapping, got {type(value).__name__}"))
                continue
            try:
                texts.append(json.dumps(dict(value), default=json_default, ensure_ascii=False))
                written.append(value)
            except (TypeError, ValueError) as exc:
                bad.append(rejected_row(value, f"not JSON: {exc}"))
        texts = _utf8_only(texts, bad, written)
        return pa.table([pa.array(texts, pa.string())], schema=schema), bad
    names = set(schema.names)
    required = [f.name for f in schema if not f.nullable]
    refused: list[tuple[int, dict[str, Any]]] = []  # (position, error row): in input order
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
    table = None
    if good:
        try:
            table = pa.Table.from_pylist([v for _, v in good], schema=schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            kept = []
            for i, value in good:  # find the rows that do not convert
                try:
                    pa.Table.from_pylist([value], schema=schema)
                    kept.append(value)
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    why = f"does not fit the schema: {_first_line(exc)}"
                    refused.append((i, rejected_row(value, why)))
            table = pa.Table.from_pylist(kept, schema=schema) if kept else None
    refused.sort(key=lambda x: x[0])
    return table, bad + [r for _, r in refused]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class FileOutputOperator(TransactionalOutputOperator, FileOutputSettings):
    """Rolling files exactly once: lines, CSV, JSON lines or Parquet (``format``).

    See the module doc. The properties are those of
    :class:`~malhar.io.fs.settings.FileOutputSettings` (and the retry settings).

    Example:
        >>> from malhar.io.fs import FileOutputOperator
        >>> out = FileOutputOperator("/data/out", format="parquet",
        ...                          schema="word string, count bigint", roll_windows=10)
        >>> out.roll_windows, out.codec
        (10, 'snappy')
    """

    def __init__(self, path: str | None = None, **properties: Any) -> None:
        if path is not None:
            self.path = path
        self.configure(**properties)

    def create_store(self, context: OperatorContext) -> FileStore:
        self.check_settings()
        return FileStore(
            self.output_settings(),
            WindowKey(context.application, context.name, context.partition),
            partitions=context.partitions,
        )

    def output_settings(self) -> FileOutputSettings:
        """This operator's configuration as the plain settings its store takes (the values
        in effect, a format subclass's default ``format`` included)."""
        settings = FileOutputSettings()
        for name in properties_of(FileOutputSettings):
            settings.__dict__[name] = getattr(self, name)
        return settings

    def window_rows(self, buffer: WindowBuffer) -> tuple[pa.Table, list[dict[str, Any]]]:
        return conform(buffer.pieces, self._store.schema, self.format)

    def end_window(self) -> None:
        buffer = self._buffer
        store: FileStore = self._store
        if not buffer.skip and not len(buffer) and store.roll_due(buffer.window):
            # a window without rows still closes a file whose time (or window count) is up
            window = buffer.window
            try:
                store.force_roll = True
                self._committer.commit_window(window, pa.table({}))
            finally:
                store.force_roll = False
                buffer.clear()
            return
        super().end_window()


class ParquetFileOutput(FileOutputOperator):
    """Rolling Parquet files exactly once (``schema`` required); see :class:`FileOutputOperator`."""

    format = Property(str, default="parquet", one_of=("parquet",), doc="parquet")


class CsvFileOutput(FileOutputOperator):
    """Rolling CSV files exactly once (``schema`` required); see :class:`FileOutputOperator`."""

    format = Property(str, default="csv", one_of=("csv",), doc="csv")


class JsonLinesFileOutput(FileOutputOperator):
    """Rolling JSON-lines files exactly once; see :class:`FileOutputOperator`.

    With ``schema``: those fields, checked; without: each dict as it is."""

    format = Property(str, default="jsonl", one_of=("jsonl",), doc="jsonl")


class LinesFileOutput(FileOutputOperator):
    """Rolling text files exactly once, a line per string; see :class:`FileOutputOperator`."""

    format = Property(str, default="lines", one_of=("lines",), doc="lines")
