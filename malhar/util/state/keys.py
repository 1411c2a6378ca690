"""Layout of the internal keys every structure of one operator partition shares.

    internal key = escape(structure name) | kind u8 | rest

``escape`` (:mod:`malhar.util.state.codecs`) is prefix-free and order-preserving, so
every structure owns the contiguous key range ``[escape(name), escape(name) + ff)``.
Within it the kinds are::

    M  map            rest = key
    S  set-multimap   rest = key | value | len(key) u16 (big-endian; lets repartitioning
                      find the key without the codecs)
    L  list           rest = index u64 (big-endian)
    T  time buckets   rest = bucket (order-preserving i64) | key
    I  int-key sets   rest = bucket (order-preserving i64) | run id (order-preserving i64);
                      the value is a sorted run of int64 keys (repartitioning splits it)
    U  str-key sets   rest and value as I, the run's keys are NumPy S values (UTF-8)
    B  bytes-key sets as U, of bytes keys
    ~  metadata       the structure's kind u8 + its counters; sorts after the data
"""

from __future__ import annotations

import struct

from malhar.util.state.codecs import escape, unescape_from

MAP, MULTIMAP, LIST, TIME = b"M", b"S", b"L", b"T"
INT_SETS, STR_SETS, BYTES_SETS = b"I", b"U", b"B"
META = b"~"
KIND_NAMES = {MAP: "SpillableMap", MULTIMAP: "SpillableSetMultimap", LIST: "SpillableList"}
KIND_NAMES[TIME] = "TimeBucketedState"
KIND_NAMES[INT_SETS] = "TimeBucketedIntSets"
KIND_NAMES[STR_SETS] = "TimeBucketedStrSets"
KIND_NAMES[BYTES_SETS] = "TimeBucketedBytesSets"
_U16 = struct.Struct(">H")


def structure_prefix(name: str, kind: bytes) -> bytes:
    return escape(name.encode("utf-8")) + kind


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes((p[-1] + 1,))


def split(ik: bytes) -> tuple[bytes, bytes, bytes]:
    """``(escaped name, kind, rest)`` of an internal key."""
    _, pos = unescape_from(ik, 0)
    return ik[:pos], ik[pos : pos + 1], ik[pos + 1 :]


def user_key(kind: bytes, rest: bytes) -> bytes | None:
    """The encoded user key inside ``rest`` (what repartitioning routes by), None if keyless."""
    if kind == MAP:
        return rest
    if kind == MULTIMAP:
        (n,) = _U16.unpack(rest[-2:])
        return rest[:n]
    if kind == TIME:
        return rest[8:]
    return None


def multimap_key(prefix: bytes, key: bytes, value: bytes) -> bytes:
    if len(key) > 0xFFFF:
        raise ValueError(f"set-multimap keys are limited to 65535 encoded bytes, got {len(key)}")
    return prefix + key + value + _U16.pack(len(key))


__all__ = [
    "BYTES_SETS",
    "INT_SETS",
    "KIND_NAMES",
    "LIST",
    "MAP",
    "META",
    "MULTIMAP",
    "STR_SETS",
    "TIME",
    "multimap_key",
    "prefix_end",
    "split",
    "structure_prefix",
    "user_key",
]
