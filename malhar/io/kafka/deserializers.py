"""Value deserializers: raw bytes, UTF-8 text, JSON.

A deserializer turns the values of a list of records into one column and reports the
records it cannot decode (index -> reason); the operator routes those to its error port,
the data source to its ``error`` column. ``None`` values (tombstones) stay ``None`` in every
format.

JSON documents nested deeper than :data:`MAX_JSON_DEPTH` arrays/objects are errors too: a
deeper document makes ``json.loads`` raise ``RecursionError`` (from about 1,000 levels,
depending on the stack in use), and a parsed one that deep breaks pickling and copying
downstream. A fixed bound makes the outcome the same in a replay as in the first run.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, ClassVar

import pyarrow as pa

from malhar.io.kafka.errors import KafkaConfigError


class Deserializer:
    """Decodes record values in bulk."""

    #: the name used in properties and data source options
    name: ClassVar[str] = "?"
    #: Spark DDL type of the value column; None for Python objects (an untyped port)
    ddl: ClassVar[str | None] = None

    def decode(self, values: list[bytes | None]) -> tuple[Any, dict[int, str]]:
        """``(column, errors)``: an Arrow array (or a list of objects), and reasons by index.

        The column has one entry per value; entries at error indexes are ``None``.
        """
        raise NotImplementedError


class BytesDeserializer(Deserializer):
    """Values as they are (``binary``)."""

    name = "bytes"
    ddl = "binary"

    def decode(self, values: list[bytes | None]) -> tuple[Any, dict[int, str]]:
        return pa.array(values, pa.binary()), {}


class TextDeserializer(Deserializer):
    """UTF-8 text (``string``); a value that is not valid UTF-8 is an error."""

    name = "text"
    ddl = "string"

    def decode(self, values: list[bytes | None]) -> tuple[Any, dict[int, str]]:
        raw = pa.array(values, pa.binary())
        try:
            return raw.cast(pa.string()), {}  # validates UTF-8 in C: the common, fast path
        except pa.ArrowInvalid:
            pass
        out: list[str | None] = []
        errors: dict[int, str] = {}
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            try:
                out.append(v.decode("utf-8"))
            except UnicodeDecodeError as exc:
                out.append(None)
                errors[i] = f"value is not valid UTF-8: {exc}"
        return pa.array(out, pa.string()), errors


#: arrays/objects a JSON value may nest (deeper ones go to the error port)
MAX_JSON_DEPTH = 256
#: a JSON string (brackets inside it do not nest)
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(value: bytes) -> int:
    """How deeply arrays and objects nest in the JSON text ``value`` (0 for a scalar)."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub(b'""', value)):
        if m.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"number {text} is out of the range of a double")
    return number


#: RFC 8259 JSON: no NaN/Infinity constants; numbers that overflow a double are errors too
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_DECODER_EXP = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)
#: an exponent: the only way a JSON number can overflow a double (1e999)
_EXPONENT = re.compile(rb"[0-9][eE]")


def parse_json(value: bytes) -> tuple[Any, str | None]:
    """``(document, None)``, or ``(None, reason)`` for a value that is not valid JSON, not
    UTF-8, or nested deeper than :data:`MAX_JSON_DEPTH`.

    The bytes are decoded as UTF-8, strictly (``json.loads`` on bytes would also take
    UTF-16/32 and lone surrogates); ``NaN``, ``Infinity`` and numbers beyond a double's
    range (``1e999``) are errors, not ``nan``/``inf``: they are not JSON (RFC 8259)."""
    # cheap bound first (two C scans): only a value with that many brackets can be too deep
    if value.count(b"[") + value.count(b"{") > MAX_JSON_DEPTH:
        depth = json_depth(value)
        if depth > MAX_JSON_DEPTH:
            return None, (
                f"value is nested {depth} arrays/objects deep, more than the {MAX_JSON_DEPTH} "
                "a JSON value may have"
            )
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"value is not valid UTF-8 JSON: {exc}"
    decoder = _DECODER_EXP if _EXPONENT.search(value) else _DECODER
    try:
        return decoder.decode(text), None
    except ValueError as exc:
        return None, f"value is not valid JSON: {exc}"
    except RecursionError:  # not reached with the bound above; never fail the window on it
        return None, "value is nested too deeply to parse"


class JsonDeserializer(Deserializer):
    """JSON documents (UTF-8) as Python objects (dict, list, str, number, bool, None)."""

    name = "json"
    ddl = None

    def decode(self, values: list[bytes | None]) -> tuple[Any, dict[int, str]]:
        out: list[Any] = []
        errors: dict[int, str] = {}
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            doc, error = parse_json(v)
            out.append(doc)
            if error is not None:
                errors[i] = error
        return out, errors


_BY_NAME: dict[str, type[Deserializer]] = {
    d.name: d for d in (BytesDeserializer, TextDeserializer, JsonDeserializer)
}


def get_deserializer(name: str | Deserializer) -> Deserializer:
    """The deserializer named ``bytes``, ``text`` or ``json`` (or the instance itself)."""
    if isinstance(name, Deserializer):
        return name
    cls = _BY_NAME.get(str(name).strip().lower())
    if cls is None:
        raise KafkaConfigError(f"value format {name!r} is not one of {sorted(_BY_NAME)}")
    return cls()
