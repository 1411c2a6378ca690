"""What every input decoder shares: the error rows, line splitting, the decoder
protocol (:class:`LineDecoder`), plain lines, and the bisecting table decoder that the CSV
and JSON-lines decoders fill in."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from malhar.io.fs.errors import FileConfigError, FileReadError
from malhar.io.fs.refusals import parser_reason

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


def error_row(
    file: str, offset: int, reason: str, text: bytes | str | None, encoding: str = "utf-8"
) -> dict[str, Any]:
    """An error-port row: where (file URL, byte offset), why, and the start of the text
    (bytes decoded with the file's ``encoding``)."""
    if isinstance(text, bytes):
        text = text[: ERROR_TEXT_CHARS * 4].decode(encoding, "replace")
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

    def undecodable(
        self, file: str, offset: int, raw: bytes, exc: UnicodeDecodeError
    ) -> dict[str, Any]:
        """The error row of the line ``raw`` at byte ``offset`` that does not decode."""
        return error_row(file, offset, self.bad_encoding(file, offset, exc), raw, self.encoding)


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
                errors.append(self.undecodable(file, start + off, raw, exc))
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
                errors.append(self.undecodable(file, start + off, raw, exc))
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
        return error_row(file, offset, reason, raw, self.encoding)

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
