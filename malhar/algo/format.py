"""Formatters (Malhar's ``lib/formatter``): rows to CSV or JSON text records.

Input: dict tuples or Arrow batches. Output ``out``: one ``str`` per row. A tuple that
cannot be formatted (not a dict, a value JSON cannot hold) goes to ``error``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.csv as pacsv

from malhar.algo._base import AlgoOperator, one_character
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property

__all__ = ["CsvFormatter", "JsonFormatter"]


class _Formatter(AlgoOperator):
    PARTITIONING: ClassVar[str] = "stateless"

    input = InputPort()
    out = OutputPort()
    error = OutputPort(error=True)

    fields = Property(list, default=None, doc="the fields written, in order (default: all)")

    def _select(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.select(self.fields) if self.fields else batch

    def format_batch(self, batch: pa.RecordBatch) -> list[str]:
        raise NotImplementedError

    def process(self, t: Any) -> None:
        if not isinstance(t, dict):
            self._error(t, f"expected a dict tuple, got {type(t).__name__}")
            return
        try:
            row = {f: t[f] for f in self.fields} if self.fields else t
            line = self.format_row(row)
        except KeyError as exc:
            self._error(t, f"no field {exc.args[0]!r}")
            return
        except (TypeError, ValueError, pa.ArrowException) as exc:
            self._error(t, str(exc).splitlines()[0])
            return
        self.out.emit(line)

    def format_row(self, row: dict[str, Any]) -> str:
        return self.format_batch(pa.RecordBatch.from_pylist([row]))[0]

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            lines = self.format_batch(self._select(batch))
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            for row in batch.to_pylist():
                self.process(row)
            return
        for line in lines:
            self.out.emit(line)


class CsvFormatter(_Formatter):
    """Writes each row as one delimited line, no header (Malhar's ``CsvFormatter``).

    Strings are quoted when they need it; null is an empty field, an empty string ``""``
    (CsvParser reads them back so). A value holding a line break (a newline or a carriage
    return) goes to ``error``. Rows and batches are written by ``pyarrow.csv``, so both
    give the same text.

    Example:
        >>> from malhar.algo import CsvFormatter
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(CsvFormatter(fields=["id", "name"]))
        >>> h.run_window([("input", {"id": 1, "name": "a,b", "x": 0}), ("input", {"id": 2})])
        >>> h.sink("out").tuples, h.sink("error").tuples[0]["reason"]
        (['1,"a,b"'], "no field 'name'")
    """

    delimiter = Property(
        str, default=",", check=one_character, doc="the field separator (one character)"
    )

    def __init__(self, fields: list[str] | None = None, delimiter: str = ",") -> None:
        self.configure(fields=fields, delimiter=delimiter)

    def format_batch(self, batch: pa.RecordBatch) -> list[str]:
        sink = io.BytesIO()
        pacsv.write_csv(
            batch,
            sink,
            write_options=pacsv.WriteOptions(
                include_header=False, delimiter=self.delimiter, quoting_style="needed"
            ),
        )
        text = sink.getvalue().decode()
        if "\r" in text:  # (the writer ends lines with \n): CsvParser refuses it, as \n
            raise ValueError("a value holds a line break")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) != batch.num_rows:
            raise ValueError("a value holds a line break")
        return lines


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        raise TypeError("bytes cannot be written as JSON")
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")


class JsonFormatter(_Formatter):
    """Writes each row as one JSON object (Malhar's ``JsonFormatter``); dates and times in
    ISO 8601, decimals as strings.

    Example:
        >>> from malhar.algo import JsonFormatter
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(JsonFormatter())
        >>> h.run_window([("input", {"id": 1, "tags": ["x"]})])
        >>> h.sink("out").tuples
        ['{"id":1,"tags":["x"]}']
    """

    def __init__(self, fields: list[str] | None = None) -> None:
        self.configure(fields=fields)

    def format_row(self, row: dict[str, Any]) -> str:
        return json.dumps(row, default=_json_default, separators=(",", ":"), allow_nan=False)

    def format_batch(self, batch: pa.RecordBatch) -> list[str]:
        dumps = json.JSONEncoder(
            default=_json_default, separators=(",", ":"), allow_nan=False
        ).encode
        return [dumps(r) for r in batch.to_pylist()]
