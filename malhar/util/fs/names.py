"""A name (an operator's, a group's) as one safe path segment, injectively and reversibly.

>>> encode_segment("kafka-in"), encode_segment("a b"), encode_segment(".."), encode_segment("")
('kafka-in', 'a%20b', '%2E.', '%')
>>> decode_segment("a%2Fb")
'a/b'

Rules (percent-encoding of the UTF-8 bytes, uppercase hex):

- ``A-Z a-z 0-9 - _ .`` are kept, except a leading ``.`` (no hidden files, no ``.``
  or ``..``): names that were already safe keep their directory;
- every other character, and ``%`` itself, becomes ``%XX`` per UTF-8 byte
  (so ``/``, ``\\``, ``:`` and spaces never reach the filesystem);
- the empty name is ``%`` alone (no other name encodes to it).

Each name has exactly one encoding and :func:`decode_segment` accepts only that
one, so two different names never share a directory and a segment never escapes
its parent. Encoded segments longer than 255 bytes (the local and HDFS limit of
one path component) are refused.
"""

from __future__ import annotations

import string

__all__ = ["MAX_SEGMENT_BYTES", "decode_segment", "encode_segment"]

MAX_SEGMENT_BYTES = 255
_KEPT = frozenset(string.ascii_letters + string.digits + "-_.")
_HEX = frozenset("0123456789ABCDEF")
_EMPTY = "%"


def encode_segment(name: str) -> str:
    """The one safe path segment that stands for ``name``."""
    if not isinstance(name, str):
        raise TypeError(f"a name must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        return _EMPTY
    out: list[str] = []
    for i, ch in enumerate(name):
        if ch in _KEPT and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            # surrogatepass: even a lone surrogate has an encoding (injective on all str)
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    segment = "".join(out)
    if len(segment) > MAX_SEGMENT_BYTES:
        raise ValueError(
            f"name {name[:40]!r}... is too long for one path segment: {len(segment)} bytes "
            f"once encoded, at most {MAX_SEGMENT_BYTES}; use a shorter name"
        )
    return segment


def decode_segment(segment: str) -> str:
    """The name :func:`encode_segment` turned into ``segment`` (ValueError if none did)."""
    if segment == _EMPTY:
        return ""
    raw = bytearray()
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "%":
            hexpart = segment[i + 1 : i + 3]
            if len(hexpart) != 2 or not set(hexpart) <= _HEX:
                raise ValueError(f"not an encoded path segment: {segment!r} (bad escape at {i})")
            raw.append(int(hexpart, 16))
            i += 3
        elif ch in _KEPT:
            raw += ch.encode("ascii")
            i += 1
        else:
            raise ValueError(f"not an encoded path segment: {segment!r} ({ch!r} at {i})")
    try:
        name = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise ValueError(f"not an encoded path segment: {segment!r} (not UTF-8)") from None
    if encode_segment(name) != segment:  # e.g. "%61" for "a", ".x" for ".x"
        raise ValueError(
            f"not the canonical encoded path segment of {name!r}: {segment!r} "
            f"(expected {encode_segment(name)!r})"
        )
    return name
