"""Value deserializers: raw bytes, UTF-8 text, JSON.

A deserializer turns the values of a list of records into one column and reports the
records it cannot decode (index -> reason); the operator routes those to its error port.
``None`` values (tombstones) stay ``None`` in every format.
"""

from __future__ import annotations

import json
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


class JsonDeserializer(Deserializer):
    """JSON documents (UTF-8) as Python objects (dict, list, str, number, bool, None)."""

    name = "json"
    ddl = None

    def decode(self, values: list[bytes | None]) -> tuple[Any, dict[int, str]]:
        out: list[Any] = []
        errors: dict[int, str] = {}
        loads = json.loads
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            try:
                out.append(loads(v))
            except UnicodeDecodeError as exc:
                out.append(None)
                errors[i] = f"value is not valid UTF-8 JSON: {exc}"
            except ValueError as exc:
                out.append(None)
                errors[i] = f"value is not valid JSON: {exc}"
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
