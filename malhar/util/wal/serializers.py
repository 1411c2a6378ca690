"""Pluggable artifact serialization for the window data managers.

A serializer has a ``name`` (stored in every segment header, so a log is never
decoded with the wrong serializer) and ``dumps``/``loads``. Built in:

- ``"pickle"`` (default): any picklable object, protocol 5.
- ``"json"``: JSON-compatible objects (dict/list/str/int/float/bool/None); compact,
  UTF-8, keys kept in insertion order. Readable by non-Python tools.

Idempotent re-save compares the *serialized bytes*: an artifact re-saved after a
crash must serialize to the same bytes (true for equal dicts/lists/tuples of
plain values; not guaranteed for sets across processes with hash randomization).
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Protocol, runtime_checkable

from malhar.util.fs.errors import StorageConfigError


@runtime_checkable
class Serializer(Protocol):
    name: str

    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class PickleSerializer:
    name = "pickle"

    def __init__(self, protocol: int = 5) -> None:
        self.protocol = protocol

    def dumps(self, obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=self.protocol)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)

    def __repr__(self) -> str:
        return "PickleSerializer()"


class JsonSerializer:
    name = "json"

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)

    def __repr__(self) -> str:
        return "JsonSerializer()"


SERIALIZERS: dict[str, type] = {"pickle": PickleSerializer, "json": JsonSerializer}


def get_serializer(spec: str | Serializer) -> Serializer:
    """``"pickle"``, ``"json"`` or an object with ``name``/``dumps``/``loads``."""
    if isinstance(spec, str):
        try:
            return SERIALIZERS[spec]()
        except KeyError:
            raise StorageConfigError(
                f"unknown serializer {spec!r}; known: {', '.join(SERIALIZERS)} "
                "(or pass an object with name/dumps/loads)"
            ) from None
    if isinstance(spec, Serializer) and isinstance(getattr(spec, "name", None), str):
        return spec
    raise StorageConfigError(f"not a serializer: {spec!r} (needs name, dumps, loads)")
