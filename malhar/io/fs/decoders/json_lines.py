"""JSON objects, one per line."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.json as pjson

from malhar.io.fs.decoders.base import _PARSE_EXCEPTIONS, _TabularDecoder
from malhar.io.fs.decoders.times import _finish, _zoned
from malhar.io.fs.refusals import (
    json_kind_change,
    json_text,
    kind_reason,
    not_an_object,
    value_reason,
)


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


def _reads_decimals() -> bool:
    """Whether pyarrow's JSON reader converts numbers and strings to decimal columns (else
    decimals are read as text and cast: numbers are refused then)."""
    try:
        pjson.read_json(
            pa.py_buffer(b'{"d": 1.5}\n{"d": "2.5"}\n'),
            parse_options=pjson.ParseOptions(
                explicit_schema=pa.schema([("d", pa.decimal128(3, 1))])
            ),
        )
    except pa.ArrowException:
        return False
    return True


_CAST_AFTER_JSON = (pa.types.is_date, pa.types.is_time, _zoned) + (
    () if _reads_decimals() else (pa.types.is_decimal,)
)


def _fields(kind: pa.DataType | pa.Schema) -> Iterator[pa.Field]:
    """The fields of a schema or a type that are keys of JSON objects: struct fields at any
    depth (in lists too; a list's item field is no key)."""
    if isinstance(kind, pa.Schema) or pa.types.is_struct(kind):
        for f in kind if isinstance(kind, pa.Schema) else kind.fields:
            yield f
            yield from _fields(f.type)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from _fields(kind.value_type)


def _kind(t: pa.DataType) -> str:
    """float, floats (a list of them, or of lists of them: what _LIST matches) or other."""
    if pa.types.is_floating(t):
        return "float"
    inner, depth = t, 0
    while pa.types.is_list(inner) or pa.types.is_large_list(inner):
        inner, depth = inner.value_type, depth + 1
    return "floats" if 1 <= depth <= 2 and pa.types.is_floating(inner) else "other"


#: the strings Spark's JSON reader takes for floating point values, as pyarrow's tokens
_SPECIALS = {
    b"NaN": b"NaN",
    b"Infinity": b"Infinity",
    b"+Infinity": b"Infinity",
    b"+INF": b"Infinity",
    b"-Infinity": b"-Infinity",
    b"-INF": b"-Infinity",
}
_VALUE = rb'"(NaN|\+?Infinity|-Infinity|[+-]INF)"'
#: a list (one level of lists in it), no objects
_LIST = rb"\[(?:[^\[\]{}]|\[[^\[\]{}]*\])*\]"  # one byte a step: no backtracking blow-up
_VALUE_RE = re.compile(_VALUE)


class _SpecialFloats:
    """Rewrites ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (and the other forms Spark's reader
    takes: ``"+Infinity"``, ``"+INF"``, ``"-INF"``) as the bare tokens pyarrow reads, in the
    fields that are floating point (or lists of it) wherever their name is used: Spark, and
    malhar's JSON output, write those values as strings."""

    def __init__(self, scalars: list[str], lists: list[str]) -> None:
        def keys(names: list[str]) -> bytes:
            # as written, and with non-ASCII characters escaped (\u00e9)
            spelled = {json.dumps(n, ensure_ascii=a)[1:-1].encode() for n in names for a in (0, 1)}
            return b"|".join(re.escape(k) for k in sorted(spelled))

        # patterns that start with the key's quote, which re finds fast; that it starts a
        # key (after { or ,: a quote inside a string is escaped) is checked per match
        self.scalar = (
            re.compile(rb'"(?:' + keys(scalars) + rb')"\s*:\s*' + _VALUE) if scalars else None
        )
        self.list = (
            re.compile(rb'"(?:' + keys(lists) + rb')"\s*:\s*(?P<open>' + _LIST + rb")")
            if lists
            else None
        )

    @classmethod
    def of(cls, schema: pa.Schema) -> _SpecialFloats | None:
        kinds: dict[str, set[str]] = {}
        for f in _fields(schema):
            kinds.setdefault(f.name, set()).add(_kind(f.type))
        scalars = sorted(n for n, k in kinds.items() if k == {"float"})
        lists = sorted(n for n, k in kinds.items() if k == {"floats"})
        return cls(scalars, lists) if scalars or lists else None

    def sub(self, data: bytes) -> bytes:
        # only the lines that hold a special value, found by three fast scans (none in the
        # common chunk), are tried: the patterns tried at every comma of a chunk took
        # twice its parse
        hits = sorted(i for tail in _TAILS for i in _finds(data, tail))
        if not hits:
            return data
        out, last = [], 0
        for i in hits:
            if i < last:
                continue  # in a line rewritten already
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i)
            end = len(data) if end < 0 else end
            out += (data[last:start], self._line(data[start:end]))
            last = end
        out.append(data[last:])
        return b"".join(out)

    def _line(self, line: bytes) -> bytes:
        if self.scalar is not None:
            line = self.scalar.sub(_bare_value, line)
        if self.list is not None:
            line = self.list.sub(_bare_items, line)
        return line


#: how the special values end (found by a fast scan)
_TAILS = (b'NaN"', b'Infinity"', b'INF"')


def _finds(data: bytes, tail: bytes) -> Iterator[int]:
    i = data.find(tail)
    while i >= 0:
        yield i
        i = data.find(tail, i + len(tail))


def _starts_key(m: re.Match[bytes]) -> bool:
    """Whether the match starts at a key: after ``{`` or ``,`` (and whitespace; a quote
    inside a string is escaped)."""
    text, j = m.string, m.start() - 1
    while j >= 0 and text[j] in b" \t\r\n":
        j -= 1
    return j >= 0 and text[j] in b"{,"


def _bare_value(m: re.Match[bytes]) -> bytes:
    if not _starts_key(m):
        return m[0]
    return m[0][: m.start(1) - 1 - m.start()] + _SPECIALS[m[1]]


def _bare_items(m: re.Match[bytes]) -> bytes:
    cut = m.start("open") - m.start()
    items = m[0][cut:]
    if b'"' not in items or not _starts_key(m):  # no special value in the list
        return m[0]
    return m[0][:cut] + _VALUE_RE.sub(_bare, items)


def _bare(m: re.Match[bytes]) -> bytes:
    return _SPECIALS[m[1]]


def _as_parsed(value: Any, kind: pa.DataType) -> Any:
    """A value parsed with ``Decimal`` numbers as pyarrow would take it for ``kind``: the
    digits as text for a decimal, else floats (JSON has no other)."""
    if isinstance(value, Decimal):
        return str(value) if pa.types.is_decimal(kind) else float(value)
    if isinstance(value, dict | list):
        return json.loads(json.dumps(value, default=float))
    return value


class JsonLinesDecoder(_TabularDecoder):
    """One JSON object per line. With a schema, typed columns (other fields ignored, dates
    and times parsed from strings, decimals from numbers or strings, Spark's "NaN" and
    "Infinity" strings in floating point fields); without, the parsed objects as dicts."""

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
            self._specials = _SpecialFloats.of(schema)

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
                    raise ValueError(not_an_object(value))
                rows.append(value)
            return _RowsTable(rows), []
        regular = self._regular = _regular_lines(data)  # for misaligned, next
        if not _objects_only(data, regular):
            # each line on its own, then (explain says what a line that parses is instead)
            raise ValueError("JSON parse error: a line does not start with an object ({)")
        data = self._bare_specials(data)
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

    def _bare_specials(self, data: bytes) -> bytes:
        """``data`` with the floating point fields' special values as pyarrow reads them."""
        specials = getattr(self, "_specials", None)  # None: pickled by an older release
        return data if specials is None else specials.sub(data)

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
            record = json.loads(line, parse_float=Decimal)  # the digits the file holds
        except ValueError:
            return None
        if not isinstance(record, dict):
            return not_an_object(record)
        changed = json_kind_change(message)
        if changed is not None:
            return kind_reason(self.schema, record, *changed)
        for f in self.schema:
            if f.name in record and not self._converts(f, record[f.name]):
                return value_reason("field", f, json_text(record[f.name]))
        return None

    def _converts(self, f: pa.Field, value: Any) -> bool:
        """Whether ``value`` (parsed from JSON) converts to field ``f``."""
        line = json.dumps({f.name: _as_parsed(value, f.type)}, ensure_ascii=False)
        data = self._bare_specials(line.encode() + b"\n")
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
