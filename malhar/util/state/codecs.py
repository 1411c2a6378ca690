"""Codecs: Python values <-> bytes for the keys and values of spillable structures.

Protocol (:class:`Codec`): ``encode(value) -> bytes`` and ``decode(bytes) -> value``,
plus a ``name`` (recorded nowhere on disk: the structure's owner supplies the same
codec on restore). A *key* codec must also be

- **order-preserving**: ``a < b`` iff ``encode(a) < encode(b)`` bytewise, since the
  structures iterate and range-scan in encoded byte order, and
- **prefix-free**: no encoding is a proper prefix of another one, so a key can be
  followed by more bytes (set-multimap values, tuple elements) and still be found
  by a prefix scan; ``decode_from(buf, pos) -> (value, end)`` splits it off.

Built-ins (fast, no pickle): :data:`INT` (signed 64-bit), :data:`FLOAT`, :data:`STR`,
:data:`BYTES`, :class:`TupleCodec` of those, :data:`AUTO_KEY` (any of None, bool, int,
float, str, bytes and tuples of them, tagged by type) and, for values only,
:data:`AUTO_VALUE` (the same fast encodings, pickle as the fallback for anything
else) and :data:`PICKLE`.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, Protocol, runtime_checkable

from malhar.util.state.errors import StateCodecError

_U64 = struct.Struct(">Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct(">d")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_TERM = b"\x00\x00"


@runtime_checkable
class Codec(Protocol):
    name: str

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


@runtime_checkable
class KeyCodec(Codec, Protocol):
    """An order-preserving, prefix-free codec (see the module docstring)."""

    def decode_from(self, data: bytes, pos: int) -> tuple[Any, int]: ...


# -- escaping: order-preserving, prefix-free bytes -------------------------------------------
def escape(raw: bytes) -> bytes:
    """``raw`` with ``00`` -> ``00 ff`` and a ``00 00`` terminator (FoundationDB's tuple layer)."""
    return raw.replace(b"\x00", b"\x00\xff") + _TERM


def unescape_from(data: bytes, pos: int) -> tuple[bytes, int]:
    """Inverse of :func:`escape` starting at ``pos``: (raw bytes, position after the terminator)."""
    i = pos
    while True:
        i = data.find(b"\x00", i)
        if i < 0 or i + 1 >= len(data):
            raise StateCodecError(f"unterminated escaped bytes at offset {pos}")
        if data[i + 1] == 0xFF:
            i += 2
            continue
        return data[pos:i].replace(b"\x00\xff", b"\x00"), i + 2


def _int_key(v: Any) -> bytes:
    if type(v) is not int and not isinstance(v, int):
        raise TypeError(f"expected int, got {type(v).__name__}")
    if not -_SIGN <= v < _SIGN:
        raise OverflowError(f"int {v} does not fit in 64 bits")
    return _U64.pack(v + _SIGN)


def _float_key(v: Any) -> bytes:
    if not isinstance(v, float | int) or isinstance(v, bool):
        raise TypeError(f"expected float, got {type(v).__name__}")
    (bits,) = _U64.unpack(_F64.pack(float(v)))
    # negative floats: invert all bits; positive: flip the sign bit -> byte order = numeric order
    return _U64.pack(bits ^ _MASK if bits & _SIGN else bits | _SIGN)


def _float_from(data: bytes, pos: int) -> tuple[float, int]:
    (bits,) = _U64.unpack_from(data, pos)
    bits = bits & ~_SIGN & _MASK if bits & _SIGN else bits ^ _MASK
    return _F64.unpack(_U64.pack(bits))[0], pos + 8


class IntCodec:
    """Signed 64-bit ints: 8 bytes big-endian with the sign bit flipped (order-preserving)."""

    name = "int"

    def encode(self, value: Any) -> bytes:
        return _int_key(value)

    def decode(self, data: bytes) -> int:
        return _U64.unpack(data)[0] - _SIGN

    def decode_from(self, data: bytes, pos: int) -> tuple[int, int]:
        return _U64.unpack_from(data, pos)[0] - _SIGN, pos + 8


class FloatCodec:
    """IEEE doubles in an order-preserving 8-byte form (-inf < ... < -0.0 < 0.0 < ... < inf)."""

    name = "float"

    def encode(self, value: Any) -> bytes:
        return _float_key(value)

    def decode(self, data: bytes) -> float:
        return _float_from(data, 0)[0]

    def decode_from(self, data: bytes, pos: int) -> tuple[float, int]:
        return _float_from(data, pos)


class StrCodec:
    """UTF-8, escaped and terminated: orders by code point, prefix-free."""

    name = "str"

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"expected str, got {type(value).__name__}")
        return escape(value.encode("utf-8", "surrogatepass"))

    def decode(self, data: bytes) -> str:
        return data[:-2].replace(b"\x00\xff", b"\x00").decode("utf-8", "surrogatepass")

    def decode_from(self, data: bytes, pos: int) -> tuple[str, int]:
        raw, end = unescape_from(data, pos)
        return raw.decode("utf-8", "surrogatepass"), end


class BytesCodec:
    """Bytes, escaped and terminated: orders bytewise, prefix-free."""

    name = "bytes"

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"expected bytes, got {type(value).__name__}")
        return escape(bytes(value))

    def decode(self, data: bytes) -> bytes:
        return data[:-2].replace(b"\x00\xff", b"\x00")

    def decode_from(self, data: bytes, pos: int) -> tuple[bytes, int]:
        return unescape_from(data, pos)


class TupleCodec:
    """Fixed-arity tuples, one key codec per element (concatenated: order is lexicographic)."""

    def __init__(self, *codecs: KeyCodec) -> None:
        if not codecs:
            raise ValueError("TupleCodec needs at least one element codec")
        self.codecs = codecs
        self.name = "tuple(" + ",".join(c.name for c in codecs) + ")"

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, tuple) or len(value) != len(self.codecs):
            raise TypeError(f"expected a tuple of {len(self.codecs)}, got {type(value).__name__}")
        return b"".join(c.encode(v) for c, v in zip(self.codecs, value, strict=True))

    def decode(self, data: bytes) -> tuple:
        return self.decode_from(data, 0)[0]

    def decode_from(self, data: bytes, pos: int) -> tuple[tuple, int]:
        out = []
        for c in self.codecs:
            v, pos = c.decode_from(data, pos)
            out.append(v)
        return tuple(out), pos


# Type tags of the self-describing codecs; their numeric order is the order across types.
_T_NONE, _T_FALSE, _T_TRUE, _T_INT, _T_FLOAT, _T_BYTES, _T_STR, _T_TUPLE, _T_END = (
    b"\x01",
    b"\x02",
    b"\x03",
    b"\x04",
    b"\x05",
    b"\x06",
    b"\x07",
    b"\x08",
    b"\x00",
)


class AutoKeyCodec:
    """Self-describing key codec: None < bool < int < float < bytes < str < tuple.

    Values of one type order naturally (ints 64-bit; tuples lexicographically,
    element by element). Anything else raises (keys must be stable and ordered; pickle
    is neither, so it is never a key fallback).
    """

    name = "auto"

    def encode(self, value: Any) -> bytes:
        t = type(value)
        if t is str:
            return _T_STR + escape(value.encode("utf-8", "surrogatepass"))
        if t is int:
            return _T_INT + _int_key(value)
        if t is bytes:
            return _T_BYTES + escape(value)
        if t is tuple:
            return _T_TUPLE + b"".join(self.encode(v) for v in value) + _T_END
        if value is None:
            return _T_NONE
        if t is bool:
            return _T_TRUE if value else _T_FALSE
        if t is float:
            return _T_FLOAT + _float_key(value)
        raise TypeError(
            f"no order-preserving key encoding for {t.__name__} (auto keys: None, bool, int, "
            "float, str, bytes and tuples of them; pass a key_codec for other types)"
        )

    def decode(self, data: bytes) -> Any:
        return self.decode_from(data, 0)[0]

    def decode_from(self, data: bytes, pos: int) -> tuple[Any, int]:
        tag = data[pos : pos + 1]
        pos += 1
        if tag == _T_STR:
            raw, pos = unescape_from(data, pos)
            return raw.decode("utf-8", "surrogatepass"), pos
        if tag == _T_INT:
            return _U64.unpack_from(data, pos)[0] - _SIGN, pos + 8
        if tag == _T_BYTES:
            return unescape_from(data, pos)
        if tag == _T_TUPLE:
            out = []
            while data[pos : pos + 1] != _T_END:
                v, pos = self.decode_from(data, pos)
                out.append(v)
            return tuple(out), pos + 1
        if tag == _T_NONE:
            return None, pos
        if tag == _T_FALSE:
            return False, pos
        if tag == _T_TRUE:
            return True, pos
        if tag == _T_FLOAT:
            return _float_from(data, pos)
        raise StateCodecError(f"unknown auto key tag {tag!r} at offset {pos - 1}")


class IntValueCodec:
    """Signed 64-bit ints as 8 little-endian bytes (values: not order-preserving)."""

    name = "int-value"

    def encode(self, value: Any) -> bytes:
        return _I64.pack(value)

    def decode(self, data: bytes) -> int:
        return _I64.unpack(data)[0]


class PickleCodec:
    """Pickle (protocol 5): any picklable value. Values only: slow and not order-preserving."""

    name = "pickle"

    def encode(self, value: Any) -> bytes:
        try:
            return pickle.dumps(value, protocol=5)
        except Exception as exc:
            raise TypeError(f"cannot pickle {type(value).__name__}: {exc}") from exc

    def decode(self, data: bytes) -> Any:
        return pickle.loads(data)


_V_PICKLE = 0xFF
_VI = struct.Struct("<Bq")
_VF = struct.Struct("<Bd")


class AutoValueCodec:
    """Self-describing value codec: fast tagged encodings, pickle as the fallback."""

    name = "auto-value"

    def encode(self, value: Any) -> bytes:
        t = type(value)
        if t is int and -_SIGN <= value < _SIGN:
            return _VI.pack(4, value)
        if t is str:
            return b"\x07" + value.encode("utf-8", "surrogatepass")
        if t is bytes:
            return b"\x06" + value
        if t is float:
            return _VF.pack(5, value)
        if value is None:
            return b"\x01"
        if t is bool:
            return b"\x03" if value else b"\x02"
        if t is tuple:
            try:
                return b"\x08" + _AUTO_KEY.encode(value)
            except (TypeError, OverflowError):
                pass
        return bytes((_V_PICKLE,)) + PICKLE.encode(value)

    def decode(self, data: bytes) -> Any:
        tag = data[0]
        if tag == 4:
            return _VI.unpack(data)[1]
        if tag == 7:
            return data[1:].decode("utf-8", "surrogatepass")
        if tag == 6:
            return data[1:]
        if tag == 5:
            return _VF.unpack(data)[1]
        if tag == 1:
            return None
        if tag in (2, 3):
            return tag == 3
        if tag == 8:
            return _AUTO_KEY.decode_from(data, 1)[0]
        if tag == _V_PICKLE:
            return pickle.loads(data[1:])
        raise StateCodecError(f"unknown auto value tag {tag}")


INT = IntCodec()
FLOAT = FloatCodec()
STR = StrCodec()
BYTES = BytesCodec()
AUTO_KEY = _AUTO_KEY = AutoKeyCodec()
INT_VALUE = IntValueCodec()
PICKLE = PickleCodec()
AUTO_VALUE = AutoValueCodec()

__all__ = [
    "AUTO_KEY",
    "AUTO_VALUE",
    "BYTES",
    "FLOAT",
    "INT",
    "INT_VALUE",
    "PICKLE",
    "STR",
    "AutoKeyCodec",
    "AutoValueCodec",
    "BytesCodec",
    "Codec",
    "FloatCodec",
    "IntCodec",
    "IntValueCodec",
    "KeyCodec",
    "PickleCodec",
    "StrCodec",
    "TupleCodec",
    "escape",
    "unescape_from",
]
