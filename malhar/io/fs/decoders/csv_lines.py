"""CSV rows, one per line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from malhar.io.fs.decoders.base import _TabularDecoder, non_blank_lines
from malhar.io.fs.decoders.times import _finish, _zoned, to_timestamps
from malhar.io.fs.errors import FileConfigError
from malhar.io.fs.refusals import (
    csv_column,
    value_reason,
)
from malhar.util.arrow_types import is_text


class CsvDecoder(_TabularDecoder):
    """CSV rows, one per line: a line that pyarrow reads as another number of records (a
    quoted value over its end, a lone ``\r``) is an error row. With a schema, columns by
    position, typed by pyarrow's CSV conversion; without, strings named by the header (or
    ``names``), emitted as dicts."""

    def __init__(
        self,
        schema: pa.Schema | None,
        *,
        delimiter: str = ",",
        quote_char: str | None = '"',
        null_values: Sequence[str] | None = None,
        encoding: str = "utf-8",
        decode_errors: str = "error",
    ) -> None:
        super().__init__(schema, encoding, decode_errors)
        self.delimiter = delimiter
        self.quote_char = quote_char
        self.null_values = list(null_values) if null_values is not None else None

    def misaligned(self, data: bytes, table: Any, bad: int, lines: int | None = None) -> str | None:
        # pyarrow ends a record at a lone \r too, and a quoted value may hold newlines:
        # only then can its records differ from the lines (two memchr scans otherwise)
        quoted = bool(self.quote_char) and data.find(self.quote_char.encode()) >= 0
        cr = data.find(b"\r") >= 0 and data.count(b"\r") != data.count(b"\r\n")
        if not (quoted or cr):
            return None
        if lines is None:
            lines = non_blank_lines(data)
        if table.num_rows + bad != lines:
            return (
                "the line is not one CSV record (a quoted value runs past the line's end, "
                "or a lone carriage return splits it): records must be one line each"
            )
        if quoted and table.num_rows and _last_row_holds_newline(table):
            return "a quoted value runs past the line's end: records must be one line each"
        return None

    def _read(
        self,
        data: bytes,
        names: Sequence[str],
        types: dict[str, pa.DataType],
        invalid: Any = None,
        include: Sequence[str] | None = None,
    ) -> pa.Table:
        return pcsv.read_csv(
            pa.py_buffer(data),
            # one block, one thread: the invalid-row handler then knows row numbers
            read_options=pcsv.ReadOptions(
                column_names=list(names),
                use_threads=False,
                block_size=max(1 << 20, len(data) + 1),
            ),
            parse_options=pcsv.ParseOptions(
                delimiter=self.delimiter,
                quote_char=self.quote_char if self.quote_char else False,
                invalid_row_handler=invalid,
            ),
            convert_options=pcsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=False,
                include_columns=list(include) if include else None,
                **({"null_values": self.null_values} if self.null_values is not None else {}),
            ),
        )

    def parse(
        self, data: bytes, names: Sequence[str] | None
    ) -> tuple[pa.Table, list[tuple[int, str]]]:
        if self.schema is not None:
            names = self.schema.names
        if not names:
            raise FileConfigError("CSV without a schema needs a header or column names")
        bad: list[tuple[int, str]] = []
        short = False  # a record has another number of fields than the columns

        def invalid(row: Any) -> str:
            bad.append(
                (
                    row.number - 1,
                    f"{row.actual_columns} field(s) where {row.expected_columns} are expected",
                )
            )
            return "skip"

        def read(types: dict[str, pa.DataType]) -> pa.Table:
            nonlocal short
            if not short:
                try:
                    return self._read(data, names, types)
                except pa.ArrowInvalid as exc:
                    if not str(exc).startswith("CSV parse error"):
                        raise
                short = True
            # read again, skipping the records with another number of fields and saying
            # which. pyarrow decodes such a record's text for the handler, and prints what
            # does not decode (the read then fails): bytes that are not UTF-8 are bisected
            # to their lines first (UnicodeDecodeError), so the handler sees only text
            data.decode("utf-8")
            bad.clear()  # a second attempt reports the invalid rows again
            return self._read(data, names, types, invalid)

        if self.schema is None:
            return read(dict.fromkeys(names, pa.string())), bad
        zoned = {f.name: f.type for f in self.schema if _zoned(f.type)}
        table = None
        if zoned:
            # Spark's `timestamp` is zoned; values are mostly written without an offset.
            # The CSV reader parses those as naive timestamps in C++ (about 7x faster
            # than text then a cast that first fails on the missing offset); a chunk
            # holding an offset (or any other bad value) takes the text path below,
            # which gives the same values and errors as before.
            naive = {f.name: pa.timestamp(f.type.unit) if f.name in zoned else f.type
                     for f in self.schema}  # fmt: skip
            try:
                table = read(naive)
            except pa.ArrowInvalid:
                table = None
        if table is None:
            table = read({f.name: pa.string() if f.name in zoned else f.type for f in self.schema})
        return _finish(table, self.schema), bad

    def explain(self, line: bytes, message: str) -> str | None:
        # the column: pyarrow's conversion errors number it, a zoned timestamp's cast
        # does not (each typed column is then converted alone); the value as read
        names = self.schema.names
        values = self._read(line, names, dict.fromkeys(names, pa.string()))
        if values.num_rows != 1:
            return None
        numbered = csv_column(message)
        if numbered is not None and numbered < len(names):
            culprit = numbered
        else:
            culprit = next(
                (
                    i
                    for i, f in enumerate(self.schema)
                    if not is_text(f.type) and not self._converts(line, f)
                ),
                -1,
            )
            if culprit < 0:
                return None
        f = self.schema.field(culprit)
        value = values.column(culprit)[0].as_py()
        return value_reason("column", f, repr(value))

    def _converts(self, line: bytes, f: pa.Field) -> bool:
        """Whether column ``f`` of the one ``line`` converts to its type."""
        try:
            read = pa.string() if _zoned(f.type) else f.type
            table = self._read(line, self.schema.names, {f.name: read}, include=[f.name])
            if _zoned(f.type):
                to_timestamps(table.column(0), f.type)
        except pa.ArrowInvalid:
            return False
        return True


def _last_row_holds_newline(table: pa.Table) -> bool:
    """Whether a text value of the table's last row holds a newline (an unterminated quote
    on the last line takes the newline that ends it)."""
    row = table.slice(table.num_rows - 1)
    return any(is_text(c.type) and pc.any(pc.match_substring(c, "\n")).as_py() for c in row.columns)


#: Arrow types pyarrow's JSON reader does not parse from strings: read as text, then cast
