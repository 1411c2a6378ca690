"""The file input operators by format: lines, CSV, JSON lines and Parquet.

Each is :class:`~malhar.io.fs.input_operator.FileInputOperator` (files, splits, exact
replay, post actions) with the part only the format knows: the decoder that turns a chunk
of lines into tuples (:mod:`malhar.io.fs.decoders`), whether a file starts with a header,
where column names come from, or, for Parquet, that a split is rows of row groups.
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa

from malhar.io.fs.decoders import CsvDecoder, JsonLinesDecoder, LineDecoder, LinesDecoder
from malhar.io.fs.input_operator import FileInputOperator, log
from malhar.io.fs.settings import parse_schema
from malhar.io.fs.splits import SIZE
from malhar.ports import OutputPort
from malhar.properties import Property

__all__ = ["CsvFileInput", "JsonLinesFileInput", "LinesFileInput", "ParquetFileInput"]


class LinesFileInput(FileInputOperator):
    """Each line of the files as ``line string`` (Arrow batches), exactly once.

    Example:
        >>> import os, tempfile
        >>> from malhar import OperatorContext
        >>> from malhar.io.fs import LinesFileInput
        >>> from malhar.testing.harness import OperatorHarness
        >>> d = tempfile.mkdtemp()
        >>> _ = open(os.path.join(d, "a.txt"), "w").write("one\\ntwo\\n")
        >>> h = OperatorHarness(LinesFileInput(d), OperatorContext("in", checkpoint=tempfile.mkdtemp()))
        >>> h.run_window()
        >>> h.sink("output").tuples
        [{'line': 'one'}, {'line': 'two'}]
    """

    output = OutputPort("line string", control_aware=True)  # idleness: see idle_input
    typed_by_schema: ClassVar[bool] = False

    def make_decoder(self) -> LineDecoder:
        return LinesDecoder(self.encoding, self.decode_errors)


class CsvFileInput(FileInputOperator):
    """CSV records, one per line, exactly once (typed with ``schema``, else dicts).

    With ``schema``: typed Arrow batches, columns by position; without: dicts of strings
    named by the header (or ``columns``). Header names are made unique as Spark does
    (:func:`safe_header`): ``id,val,val`` gives ``id``, ``val1``, ``val2``, an empty name
    ``_c<index>``."""

    header = Property(bool, default=True, doc="the first line of every file names the columns")
    delimiter = Property(str, default=",", doc="field delimiter (one character)")
    quote_char = Property(str, default='"', doc="quote character ('' for none)")
    columns = Property((list, tuple, str), default=None, doc="column names when there is no header")
    null_values = Property(list, default=None, doc="texts read as null (pyarrow's default list)")

    def settings_problems(self) -> list[str]:
        out = super().settings_problems()
        delimiter, quote = self.delimiter, self.quote_char or ""
        if delimiter is not None and len(delimiter) != 1:
            out.append(f"delimiter must be one character, got {delimiter!r}")
        if len(quote) > 1:
            out.append(f"quote_char must be one character ('' for none), got {quote!r}")
        for name, value in (("delimiter", delimiter), ("quote_char", quote)):
            if value in ("\n", "\r"):
                out.append(f"{name} cannot be a line break ({value!r}): records are lines")
        if quote and delimiter == quote:
            out.append(f"delimiter and quote_char are both {quote!r}: give them different ones")
        if not self.schema and not self.header and not self.columns:
            out.append("a CSV input without header needs schema or columns")
        if self.columns and not self.schema:
            cols = self.names_for("")
            twice = sorted({c for c in cols if cols.count(c) > 1})
            if twice:
                out.append(f"columns names {twice} more than once: each must be unique")
        return out

    def make_decoder(self) -> LineDecoder:
        return CsvDecoder(
            parse_schema(self.schema) if self.schema else None,
            delimiter=self.delimiter,
            quote_char=self.quote_char or None,
            null_values=self.null_values,
            encoding=self.encoding,
            decode_errors=self.decode_errors,
        )

    def has_header(self) -> bool:
        return bool(self.header)

    def names_for(self, path: str) -> list[str] | None:
        if self.schema:
            if self.header and path not in self._headers:
                self._check_header(path, self._header(path))
            return None
        if self.columns:
            cols = self.columns
            return [c.strip() for c in cols.split(",")] if isinstance(cols, str) else list(cols)
        names = self._headers.get(path)
        if names is None:
            names = self._headers[path] = self._header(path)
        return names

    def _header(self, path: str) -> list[str]:
        import csv

        size = self._seen[path][SIZE] if path in self._seen else None
        line = self._first_line(path, size).decode(self.encoding, "replace").rstrip("\r\n")
        if self.encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
            line = line.removeprefix("\ufeff")  # a byte order mark names no column
        reader = csv.reader([line], delimiter=self.delimiter, quotechar=self.quote_char or None)
        return safe_header(next(reader, []))

    def _check_header(self, path: str, names: list[str]) -> None:
        """Says once per file when its header names other columns than the schema: the
        columns are taken by position (as Spark's ``enforceSchema``), so a header in
        another order would swap values without a word."""
        self._headers[path] = names
        wanted = self._arrow.names if self._arrow is not None else []
        if [n.lower() for n in names] != [n.lower() for n in wanted]:
            log.warning(
                "%s: the header of %s names the columns (%s), the schema (%s): columns are "
                "read by position, the header is not used; put the schema's columns in the "
                "file's order, or leave schema unset to read dicts named by the header",
                self.label,
                self._url(path),
                ", ".join(names),
                ", ".join(wanted),
            )


def _map_fields(schema: pa.Schema | None) -> list[tuple[str, pa.DataType]]:
    """(path, type) of the map fields in ``schema``, at any depth."""
    out: list[tuple[str, pa.DataType]] = []

    def visit(path: str, kind: pa.DataType) -> None:
        if pa.types.is_map(kind):
            out.append((path, kind))
        elif pa.types.is_struct(kind):
            for f in kind:
                visit(f"{path}.{f.name}", f.type)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            visit(f"{path}[]", kind.value_type)

    for f in schema or ():
        visit(f.name, f.type)
    return out


def safe_header(names: list[str]) -> list[str]:
    """Header names made unique as Spark's CSV reader makes them (``CSVUtils.makeSafeHeader``,
    case-insensitive as Spark by default): an empty name becomes ``_c<index>``, a repeated
    one ``<name><index>``; a dict would otherwise keep only the last of the repeated values.
    A name that still collides (``a,a,a1`` gives ``a0,a1,a1``) gets ``_<index>`` more.

    Example:
        >>> safe_header(["id", "val", "Val", ""])
        ['id', 'val1', 'Val2', '_c3']
    """
    lower = [n.lower() for n in names if n]
    repeated = {n for n in lower if lower.count(n) > 1}
    out = [
        f"_c{i}" if not n else f"{n}{i}" if n.lower() in repeated else n
        for i, n in enumerate(names)
    ]
    taken: set[str] = set()
    for i, n in enumerate(out):
        while n in taken:
            n = f"{n}_{i}"
        out[i] = n
        taken.add(n)
    return out


class JsonLinesFileInput(FileInputOperator):
    """JSON objects, one per line, exactly once (typed with ``schema``, else dicts).

    With ``schema``: typed Arrow batches (other fields ignored); without: the objects as
    dicts."""

    def settings_problems(self) -> list[str]:
        out = super().settings_problems()
        schema = parse_schema(self.schema) if self.schema else None
        for where, kind in _map_fields(schema):
            out.append(
                f"schema field {where!r} is a {kind}: pyarrow's JSON reader cannot read maps; "
                "declare it as a struct of its keys, or leave schema unset to read the "
                "objects as dicts"
            )
        return out

    def make_decoder(self) -> LineDecoder:
        return JsonLinesDecoder(
            parse_schema(self.schema) if self.schema else None, self.encoding, self.decode_errors
        )


class ParquetFileInput(FileInputOperator):
    """The rows of Parquet files, exactly once (large files by row group over partitions).

    With ``schema``: Arrow batches of those columns, cast (a file without them goes to the
    error port); without: dicts. Files larger than ``block_size`` are read by row group, by
    several partitions."""

    kind: ClassVar[str] = "parquet"

    def make_decoder(self) -> None:
        return None
