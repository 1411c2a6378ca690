"""Why the file input refused a record, in the schema's words.

The text decoders (:mod:`malhar.io.fs.decoders`) find which column of a refused line does
not fit; this module words it for the error port: ``column 'qty' (bigint): cannot convert
'abc'`` (CSV), ``field 'ts' (string): expected a string, found a number (5)`` (JSON lines).
Where the parser's own message is kept, its row number is dropped: pyarrow counts rows
within the parsed chunk, which is no position in the file (the error row has the line's
byte offset).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = [
    "csv_column",
    "json_kind_change",
    "json_text",
    "kind_reason",
    "not_an_object",
    "parser_reason",
    "value_reason",
]

#: pyarrow's chunk-relative row numbers
_CHUNK_ROW = re.compile(r"\s*\bin row \d+\b|\bRow #\d+: ")
#: the column pyarrow's CSV conversion errors name (by position, from 0)
_CSV_COLUMN = re.compile(r"\bIn CSV column #(\d+)")
#: pyarrow's JSON error for a value of another kind: (pointer, expected kind, found kind)
_JSON_CHANGED = re.compile(r"Column\(([^)]*)\) changed from (\w+) to (\w+)")
#: characters of a bad value quoted in a reason
_VALUE_CHARS = 80


def parser_reason(exc: BaseException) -> str:
    """The parser's first line, without its chunk-relative row number."""
    text = str(exc).strip().splitlines()
    return _CHUNK_ROW.sub("", text[0] if text else type(exc).__name__).strip()[:500]


def csv_column(message: str) -> int | None:
    """The position of the column a pyarrow CSV conversion error names, if it names one."""
    found = _CSV_COLUMN.search(message)
    return int(found[1]) if found else None


def json_kind_change(message: str) -> tuple[str, str, str] | None:
    """``(JSON pointer, expected kind, found kind)`` of pyarrow's "changed from" error."""
    found = _JSON_CHANGED.search(message)
    return (found[1], found[2], found[3]) if found and found[1] else None


def json_text(value: Any) -> str:
    """A value parsed from JSON (numbers with a fraction as ``Decimal``, digits kept) as
    JSON text."""
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=float)


def value_reason(what: str, f: pa.Field, value: str) -> str:
    """``<what> 'name' (type): cannot convert <value>`` (``value`` as it is to be quoted)."""
    return f"{what} {f.name!r} ({_type_name(f.type)}): cannot convert {_shown(value)}"


def not_an_object(record: Any) -> str:
    """The reason for a JSON line that is no object."""
    return f"not a JSON object but {_a(_json_kind(record))}"


def kind_reason(schema: pa.Schema, record: Any, path: str, expected: str, found: str) -> str:
    """The reason for a value of another JSON kind than its field's type (at the JSON
    pointer ``path``; ``[]`` steps into a list's elements)."""
    name = ""
    kind: Any = schema
    value, known = record, True
    for step in path.strip("/").split("/"):
        if step == "[]":
            name += "[]"
            kind = kind.value_type if pa.types.is_list(kind) else None
            known = False  # which element pyarrow does not say
            continue
        step = step.replace("~1", "/").replace("~0", "~")
        name = f"{name}.{step}" if name else step
        fields = kind if isinstance(kind, pa.Schema) else None
        if isinstance(kind, pa.StructType):
            fields = kind.fields
        kind = next((f.type for f in fields if f.name == step), None) if fields else None
        known = known and isinstance(value, dict) and step in value
        value = value[step] if known else None
    typed = f" ({_type_name(kind)})" if kind is not None else ""
    shown = ""
    if known and not isinstance(value, (dict, list)):
        shown = f" ({_shown(json_text(value))})"
    expected = expected.replace("_or_", " or ")  # pyarrow's number_or_string (decimals)
    return f"field {name!r}{typed}: expected {_a(expected)}, found {_a(found)}{shown}"


def _type_name(kind: pa.DataType) -> str:
    """An Arrow type in the DDL words of the schema it came from (``bigint``, ``date``,
    ``decimal(10,2)``), else Arrow's name."""
    try:
        from pyspark.sql.pandas.types import from_arrow_type

        return str(from_arrow_type(kind).simpleString())
    except Exception:  # a type Spark has no name for: Arrow's
        return str(kind)


def _shown(text: str) -> str:
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


def _a(kind: str) -> str:
    return f"{'an' if kind[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {kind}"
