"""Input record formats of the file connectors: decoding complete lines into tuples.

Input decoders take the bytes of complete lines (``\\n``-terminated, ``\\r\\n`` too) that
start at byte ``start`` of a file and return a :class:`Decoded`: an Arrow batch (typed
ports) or a list of tuples (untyped ports), plus one error row per line that cannot be
decoded (``{"file", "offset", "error", "text"}``) and how many items the bytes held
(records and errors: the count a window records and a replay checks). A chunk that fails
as a whole is bisected down to the failing lines, so every other line is still emitted and
the semantics of a line do not depend on its neighbours.

The output's encoders are in :mod:`malhar.io.fs.encoders`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from malhar.io.fs.errors import FileConfigError, FileReadError
from malhar.io.fs.refusals import (
    csv_column,
    json_kind_change,
    kind_reason,
    not_an_object,
    parser_reason,
    value_reason,
)
from malhar.util.arrow_types import is_text

__all__ = [
    "ERROR_DDL",
    "CsvDecoder",
    "Decoded",
    "JsonLinesDecoder",
    "LinesDecoder",
    "codec_for",
    "error_row",
]

#: the schema of the input's error port
ERROR_DDL = "file string, offset bigint, error string, text string"
#: characters of a bad line kept in its error row
ERROR_TEXT_CHARS = 1024
#: file name suffix -> pyarrow codec (compressed text input)
SUFFIX_CODECS = {
    ".gz": "gzip",
    ".gzip": "gzip",
    ".bz2": "bz2",
    ".zst": "zstd",
    ".zstd": "zstd",
    ".lz4": "lz4",
    ".br": "brotli",
}
#: decode_errors policies
DECODE_POLICIES = ("error", "replace", "ignore", "fail")

_PARSE_EXCEPTIONS = (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError)


def codec_for(name: str, compression: str) -> str | None:
    """The pyarrow codec of a file: ``compression`` unless it is ``"infer"`` (then the file
    name's suffix decides); None for uncompressed."""
    if compression == "none":
        return None
    if compression != "infer":
        return compression
    lower = name.lower()
    return next((c for s, c in SUFFIX_CODECS.items() if lower.endswith(s)), None)


def error_row(file: str, offset: int, reason: str, text: bytes | str | None) -> dict[str, Any]:
    """An error-port row: where (file URL, byte offset), why, and the start of the text."""
    if isinstance(text, bytes):
        text = text[: ERROR_TEXT_CHARS * 4].decode("utf-8", "replace")
    if text is not None and len(text) > ERROR_TEXT_CHARS:
        text = text[:ERROR_TEXT_CHARS]
    return {"file": file, "offset": int(offset), "error": reason, "text": text}


@dataclass
class Decoded:
    """What a run of complete lines decoded to."""

    batch: pa.RecordBatch | None = None  #: typed output
    rows: list[Any] = field(default_factory=list)  #: untyped output
    errors: list[dict[str, Any]] = field(default_factory=list)  #: error-port rows
    items: int = 0  #: records + errors (blank lines of CSV / JSON are not items)


def split_lines(data: bytes) -> list[tuple[int, bytes]]:
    """``(offset in data, line without its \\n and a \\r before it)`` for every line."""
    out = []
    pos = 0
    end = len(data)
    while pos < end:
        nl = data.find(b"\n", pos)
        stop = end if nl < 0 else nl
        line = data[pos:stop]
        if line.endswith(b"\r"):
            line = line[:-1]
        out.append((pos, line))
        pos = stop + 1
    return out


_BOM = "\ufeff".encode()


class LineDecoder(ABC):
    """Decodes complete lines (see the module doc)."""

    def __init__(self, encoding: str = "utf-8", decode_errors: str = "error") -> None:
        if decode_errors not in DECODE_POLICIES:
            raise FileConfigError(f"decode_errors must be one of {DECODE_POLICIES}")
        if "\n".encode(encoding) != b"\n" or "a".encode(encoding) != b"a":
            raise FileConfigError(
                f"encoding {encoding!r} is not ASCII-compatible: lines are found by their "
                "newline byte, so the file connectors read UTF-8, Latin-1 and the like"
            )
        self.encoding = encoding
        self.decode_errors = decode_errors
        self.utf8 = encoding.lower().replace("_", "-") in ("utf-8", "utf8")

    @abstractmethod
    def decode(self, data: bytes, start: int, file: str) -> Decoded:
        """Decode ``data`` (complete lines starting at byte ``start`` of ``file``)."""

    def without_bom(self, data: bytes, start: int) -> tuple[bytes, int]:
        """``data`` read at byte ``start`` without a UTF-8 file's byte order mark, and where
        it now starts: the mark is no text of the first line (Hadoop's and so Spark's line
        reader drop it too, as pyarrow's CSV and JSON readers do)."""
        if start == 0 and self.utf8 and data.startswith(_BOM):
            return data[len(_BOM) :], len(_BOM)
        return data, start

    def text(self, raw: bytes) -> str:
        """One line's text under the decode_errors policy (raises UnicodeDecodeError for
        "error" and "fail")."""
        policy = self.decode_errors if self.decode_errors in ("replace", "ignore") else "strict"
        return raw.decode(self.encoding, policy)

    def bad_encoding(self, file: str, offset: int, exc: UnicodeDecodeError) -> str:
        """The reason for a line at byte ``offset`` of ``file`` that does not decode (raises
        :class:`FileReadError` under decode_errors="fail")."""
        reason = f"not valid {self.encoding} at byte {offset + exc.start}: {exc.reason}"
        if self.decode_errors == "fail":
            raise FileReadError(f"{file}: {reason} (decode_errors='fail')")
        return reason


class LinesDecoder(LineDecoder):
    """Each line is a string (without its newline), typed ``line string``."""

    schema = pa.schema([pa.field("line", pa.string())])

    def decode(self, data: bytes, start: int, file: str) -> Decoded:
        if not data:
            return Decoded()
        data, start = self.without_bom(data, start)
        if data.endswith(b"\n"):
            data = data[:-1]
        try:
            text = self.text(data)
        except UnicodeDecodeError:
            return self._per_line(data, start, file)
        lines = text.split("\n")
        if "\r" in text:
            lines = [x[:-1] if x.endswith("\r") else x for x in lines]
        batch = pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], schema=self.schema)
        return Decoded(batch=batch, items=len(lines))

    def _per_line(self, data: bytes, start: int, file: str) -> Decoded:
        good: list[str] = []
        errors = []
        lines = split_lines(data + b"\n")
        for off, raw in lines:
            try:
                good.append(self.text(raw))
            except UnicodeDecodeError as exc:
                errors.append(
                    error_row(file, start + off, self.bad_encoding(file, start + off, exc), raw)
                )
        batch = pa.RecordBatch.from_arrays([pa.array(good, pa.string())], schema=self.schema)
        return Decoded(batch=batch, errors=errors, items=len(lines))


class _TabularDecoder(LineDecoder):
    """CSV and JSON lines: parse a whole chunk at once; bisect a chunk that fails."""

    def __init__(
        self, schema: pa.Schema | None, encoding: str = "utf-8", decode_errors: str = "error"
    ) -> None:
        super().__init__(encoding, decode_errors)
        self.schema = schema

    def decode(
        self, data: bytes, start: int, file: str, names: Sequence[str] | None = None
    ) -> Decoded:
        out = Decoded()
        tables: list[pa.Table] = []
        data, start = self.without_bom(data, start)
        try:
            table, bad = self.parse(self.transcode(data), names)
            if self.misaligned(data, table, len(bad)):
                raise _Misaligned
        except (*_PARSE_EXCEPTIONS, _Misaligned):
            lines = [(o, x) for o, x in split_lines(data) if x]
            self._bisect(lines, start, file, names, tables, out.errors)
        else:
            tables.append(table)
            if bad:
                lines = [(o, x) for o, x in split_lines(data) if x]
                for number, reason in bad:
                    off, raw = lines[number]
                    out.errors.append(self._line_error(file, start + off, reason, raw))
        rows = sum(t.num_rows for t in tables)
        out.items = rows + len(out.errors)
        if self.schema is not None:
            table = (
                (pa.concat_tables(tables) if len(tables) > 1 else tables[0])
                if tables
                else self.schema.empty_table()
            )
            batches = table.combine_chunks().to_batches()
            out.batch = batches[0] if batches else None
        else:
            for t in tables:
                out.rows.extend(self.untyped_rows(t))
        out.errors.sort(key=lambda e: e["offset"])
        return out

    def untyped_rows(self, table: pa.Table) -> list[Any]:
        return table.to_pylist()

    def transcode(self, data: bytes) -> bytes:
        if self.utf8 and self.decode_errors not in ("replace", "ignore"):
            return data  # pyarrow checks UTF-8 itself
        return self.text(data).encode("utf-8")

    def _bisect(
        self,
        lines: list[tuple[int, bytes]],
        start: int,
        file: str,
        names: Sequence[str] | None,
        tables: list[pa.Table],
        errors: list[dict[str, Any]],
    ) -> None:
        """Parse ``lines`` (non-blank), halving the runs that fail, in order."""
        if not lines:
            return
        data = b"\n".join(x for _, x in lines) + b"\n"
        try:
            table, bad = self.parse(self.transcode(data), names)
            why = self.misaligned(data, table, len(bad), len(lines))
            if why:
                raise _Misaligned(why)
        except UnicodeDecodeError as exc:
            if len(lines) == 1:
                off, raw = lines[0]
                errors.append(
                    error_row(file, start + off, self.bad_encoding(file, start + off, exc), raw)
                )
                return
        except (*_PARSE_EXCEPTIONS, _Misaligned) as exc:
            if len(lines) == 1:
                off, raw = lines[0]
                reason = (
                    parser_reason(exc) if isinstance(exc, _Misaligned) else self._explain(raw, exc)
                )
                errors.append(self._line_error(file, start + off, reason, raw))
                return
        else:
            tables.append(table)
            for number, reason in bad:
                off, raw = lines[number]
                errors.append(self._line_error(file, start + off, reason, raw))
            return
        half = len(lines) // 2
        self._bisect(lines[:half], start, file, names, tables, errors)
        self._bisect(lines[half:], start, file, names, tables, errors)

    def misaligned(self, data: bytes, table: Any, bad: int, lines: int | None = None) -> str | None:
        """Why the parse of ``data`` is not one record per non-blank line (``lines`` of
        them, when known), or None. A record's items and error offsets are its line's."""
        return None

    def _explain(self, raw: bytes, exc: BaseException) -> str:
        """The reason for one line the parser refused with ``exc``: in the schema's terms
        (:meth:`explain`) when it can say, else the parser's own first line without its
        chunk-relative row number. Error path only: a chunk that parses costs nothing."""
        if self.schema is not None:
            try:
                why = self.explain(self.transcode(raw + b"\n"), str(exc))
            except Exception:  # the parser's words then, rather than no error row
                why = None
            if why:
                return why
        return parser_reason(exc)

    def explain(self, line: bytes, message: str) -> str | None:
        """Which column of the one UTF-8 ``line`` (newline-terminated) does not fit the
        schema and why, for the parser's error ``message``; None when it cannot say."""
        return None

    def _line_error(self, file: str, offset: int, reason: str, raw: bytes) -> dict[str, Any]:
        """The error row of a line the parser refused: an encoding error is said as one
        (the parser's own words for it are a conversion error), and fails the read under
        decode_errors="fail"."""
        if self.decode_errors in ("error", "fail"):
            try:
                raw.decode(self.encoding)
            except UnicodeDecodeError as exc:
                reason = self.bad_encoding(file, offset, exc)
        return error_row(file, offset, reason, raw)

    @abstractmethod
    def parse(
        self, data: bytes, names: Sequence[str] | None
    ) -> tuple[pa.Table, list[tuple[int, str]]]:
        """Parse UTF-8 lines: the table, and ``(index among non-blank lines, reason)`` of the
        rows dropped as invalid. Raise for a chunk that cannot be parsed at all."""


class _Misaligned(ValueError):
    """A parse that is not one record per line (see ``misaligned``)."""


def non_blank_lines(data: bytes) -> int:
    """How many lines of ``data`` hold more than a ``\r`` (as :func:`split_lines` with the
    empty ones left out), counted without a Python loop."""
    if not data:
        return 0
    arr = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [len(data)]))
    lengths = ends - starts
    blank = (lengths == 0) | ((lengths == 1) & (arr[np.minimum(starts, len(data) - 1)] == 13))
    return int(len(lengths) - np.count_nonzero(blank))


def _regular_lines(data: bytes) -> int | None:
    """How many lines ``data`` has when each starts with ``{`` and ends with ``}`` (the
    common chunk: two fast scans), else None. No object spreads over such lines: ``}`` is
    never followed by ``{`` in JSON."""
    if not data.startswith(b"{"):
        return None
    end = b"}\n" if data.find(b"\r") < 0 else b"}\r\n"
    if not data.endswith(end):
        return None
    lines = data.count(b"\n")
    return lines if data.count(end + b"{") == lines - 1 else None


def _one_object_per_line(data: bytes, rows: int, regular: int | None) -> bool:
    """Whether ``rows`` records parsed from ``data`` are one per line that holds more than
    whitespace (``regular``: :func:`_regular_lines` of ``data``): every such line starts
    with ``{`` and ends with ``}``, and there are ``rows`` of them (more records: a line
    holds several)."""
    if regular is not None:
        return rows == regular
    texts = _texts(data)
    return len(texts) == rows and all(t[0] == _OPEN and t[-1] == _CLOSE for t in texts)


def _objects_only(data: bytes, regular: int | None) -> bool:
    """Whether every line of ``data`` that holds more than whitespace starts with ``{``:
    pyarrow's JSON reader gets no other (a chunk starting with ``null`` crashes the
    process in pyarrow 26)."""
    return regular is not None or all(t[0] == _OPEN for t in _texts(data))


def _texts(data: bytes) -> list[bytes]:
    """The lines of ``data`` that hold more than whitespace, without it."""
    return [t for t in (line.strip() for line in data.split(b"\n")) if t]


_OPEN, _CLOSE = ord("{"), ord("}")


def _zoned(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is not None


def to_timestamps(column: Any, target: pa.DataType, *, empty_is_null: bool = True) -> Any:
    """Text -> a zoned timestamp column: values with an offset (``...Z``, ``+01:00``) as
    given, values without one in the target's zone (UTC for Spark's ``timestamp`` in a
    UTC session), as Spark's CSV and JSON readers do; digits of a second past the target's
    unit (``.123456789``) truncated, as Spark does. A column mixing both raises (the
    decoder then bisects down to lines, each of one kind). ``empty_is_null``: ``""`` is
    null (CSV, as Spark's ``nullValue``); otherwise it does not convert (JSON, as Spark)."""
    if empty_is_null:
        column = pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)
    try:
        return _text_to_time(column, target)
    except pa.ArrowInvalid:
        naive = _text_to_time(column, pa.timestamp(target.unit))
        return pc.assume_timezone(naive, target.tz)


def _text_to_time(column: Any, target: pa.DataType) -> Any:
    try:
        return pc.cast(column, target)
    except pa.ArrowInvalid:
        if target.unit == "ns":
            raise
        # more digits than the unit holds: read as nanoseconds, then cut the extra digits
        # as Spark does (toward earlier times, also before 1970)
        finer = pc.cast(column, pa.timestamp("ns", target.tz))
        unit = {"s": "second", "ms": "millisecond", "us": "microsecond"}[target.unit]
        return pc.floor_temporal(finer, unit=unit).cast(target)


def zone_naive(column: Any, target: pa.DataType) -> Any:
    """Naive timestamps (values written without an offset) -> ``target``'s zone, read as
    wall-clock times there (UTC: the same instants, a metadata-only cast)."""
    if target.tz in ("UTC", "+00:00", "Z"):
        return pc.cast(column, target)
    return pc.assume_timezone(column, target.tz).cast(target)


def _finish(table: pa.Table, schema: pa.Schema, *, empty_is_null: bool = True) -> pa.Table:
    """Convert the zoned timestamp columns read as text or as naive timestamps, then cast
    to ``schema`` (``empty_is_null``: see :func:`to_timestamps`)."""
    for i, f in enumerate(schema):
        if not _zoned(f.type):
            continue
        have = table.schema.field(f.name).type
        if pa.types.is_string(have):
            times = to_timestamps(table.column(f.name), f.type, empty_is_null=empty_is_null)
            table = table.set_column(i, f.name, times)
        elif pa.types.is_timestamp(have) and have.tz is None:
            table = table.set_column(i, f.name, zone_naive(table.column(f.name), f.type))
    return table.cast(schema) if table.schema != schema else table


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
_CAST_AFTER_JSON = (pa.types.is_date, pa.types.is_decimal, pa.types.is_time, _zoned)


class JsonLinesDecoder(_TabularDecoder):
    """One JSON object per line. With a schema, typed columns (other fields ignored, dates
    and decimals parsed from strings); without, the parsed objects as dicts."""

    def __init__(
        self, schema: pa.Schema | None, encoding: str = "utf-8", decode_errors: str = "error"
    ) -> None:
        super().__init__(schema, encoding, decode_errors)
        if schema is not None:
            self.parse_schema = pa.schema(
                [
                    pa.field(f.name, pa.string()) if any(t(f.type) for t in _CAST_AFTER_JSON) else f
                    for f in schema
                ]
            )

    def parse(
        self, data: bytes, names: Sequence[str] | None
    ) -> tuple[pa.Table, list[tuple[int, str]]]:
        if self.schema is None:
            rows = []
            for line in data.split(b"\n"):
                if not line.strip():
                    continue
                value = json.loads(line)
                if not isinstance(value, dict):
                    raise ValueError(f"not a JSON object but a {type(value).__name__}")
                rows.append(value)
            return _RowsTable(rows), []
        regular = self._regular = _regular_lines(data)  # for misaligned, next
        if not _objects_only(data, regular):
            # each line on its own, then (explain says what a line that parses is instead)
            raise ValueError("JSON parse error: a line does not start with an object ({)")
        table = pjson.read_json(
            pa.py_buffer(data),
            read_options=pjson.ReadOptions(
                use_threads=False, block_size=max(1 << 20, len(data) + 1)
            ),
            parse_options=pjson.ParseOptions(
                explicit_schema=self.parse_schema, unexpected_field_behavior="ignore"
            ),
        )
        return _finish(table.select(self.schema.names), self.schema, empty_is_null=False), []

    def misaligned(self, data: bytes, table: Any, bad: int, lines: int | None = None) -> str | None:
        # pyarrow's reader takes an object spread over lines (or two on a line) as it comes:
        # a chunk cut between those lines would read them otherwise, and a replay, which
        # reads the window's range as one chunk, would not match. One record per line it is,
        # as without a schema. Whitespace lines hold none (pyarrow skips them).
        if self.schema is None:
            return None
        rows = table.num_rows + bad
        regular, self._regular = getattr(self, "_regular", None), None
        if _one_object_per_line(data, rows, regular):
            return None
        return (
            "the line is not one JSON object (an object spread over lines, or several on "
            "one line): JSON lines hold one object each"
        )

    def explain(self, line: bytes, message: str) -> str | None:
        # the field: pyarrow's kind errors give its path, a value of the right kind that
        # does not convert is found by converting each field alone
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not isinstance(record, dict):
            return not_an_object(record)
        changed = json_kind_change(message)
        if changed is not None:
            return kind_reason(self.schema, record, *changed)
        for f in self.schema:
            if f.name in record and not self._converts(f, record[f.name]):
                return value_reason("field", f, json.dumps(record[f.name], ensure_ascii=False))
        return None

    def _converts(self, f: pa.Field, value: Any) -> bool:
        """Whether ``value`` (parsed from JSON) converts to field ``f``."""
        data = json.dumps({f.name: value}).encode() + b"\n"
        try:
            table = pjson.read_json(
                pa.py_buffer(data),
                read_options=pjson.ReadOptions(use_threads=False),
                parse_options=pjson.ParseOptions(
                    explicit_schema=pa.schema([self.parse_schema.field(f.name)]),
                    unexpected_field_behavior="ignore",
                ),
            )
            _finish(table, pa.schema([f]), empty_is_null=False)
        except _PARSE_EXCEPTIONS:
            return False
        return True

    def transcode(self, data: bytes) -> bytes:
        if self.schema is not None and self.utf8 and self.decode_errors in ("error", "fail"):
            # pyarrow's JSON reader, unlike its CSV reader, takes bytes that are not UTF-8
            # into string columns: checked here (a failing chunk is bisected to its lines)
            data.decode("utf-8")
            return data
        return super().transcode(data)

    def untyped_rows(self, table: Any) -> list[Any]:
        return table.rows


class _RowsTable:
    """Parsed JSON objects standing in for a table (untyped JSON lines)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.num_rows = len(rows)
