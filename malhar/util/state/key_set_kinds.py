"""How the key sets (:mod:`malhar.util.state.key_sets`) hold int, str and bytes keys, and how
repartitioning splits and joins their runs.

- :class:`TimeBucketedIntSets`: 64-bit int keys; a run is int64 little-endian.
- :class:`TimeBucketedStrSets` and :class:`TimeBucketedBytesSets`: ``str`` (as UTF-8) and
  ``bytes`` keys of up to ``MAX_KEY_BYTES`` (64) bytes. A key is held as ``length u8 |
  bytes``, and a run is a width (u16) and the keys NUL-padded to it, a NumPy ``S`` array.
  NumPy ignores trailing NULs when it compares ``S`` values; the length in front makes two
  keys equal exactly when their bytes are, at any width. A run is as wide as its longest
  key, so longer keys are not held here (the caller keeps them one entry each): one long
  key would widen every key of its bucket.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from malhar.util.state.codecs import AUTO_KEY
from malhar.util.state.key_sets import TimeBucketedKeySets
from malhar.util.state.keys import BYTES_SETS, INT_SETS, STR_SETS

#: int run dtype: what the entries hold on every platform
RUN = np.dtype("<i8")
_U16 = struct.Struct(">H")
#: the longest str (UTF-8) or bytes key held in runs: a run is as wide as its longest key
MAX_KEY_BYTES = 64

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


class TimeBucketedIntSets(TimeBucketedKeySets):
    """:class:`TimeBucketedKeySets` of 64-bit int keys (``-2**63 <= key < 2**63``; not
    bool); ``add_many`` takes int64 arrays."""

    KIND = INT_SETS
    TAIL_KEY_BYTES = 96  # a set slot (~40 at its load factor) and an int object (28-36)

    def key(self, key: Any) -> int | None:
        return key if type(key) is int and I64_MIN <= key <= I64_MAX else None

    def _check(self, keys: np.ndarray) -> None:
        if not isinstance(keys, np.ndarray) or keys.dtype != np.int64:
            raise TypeError(
                f"{self._describe()}: add_many takes an int64 array of keys, "
                f"got {getattr(keys, 'dtype', type(keys).__name__)}"
            )

    @staticmethod
    def _load(raw: bytes) -> np.ndarray:
        return np.frombuffer(raw, RUN)

    @staticmethod
    def _dump(keys: np.ndarray) -> bytes:
        return np.ascontiguousarray(keys, RUN).tobytes()

    @staticmethod
    def _array(tail: set) -> np.ndarray:
        return np.fromiter(tail, np.int64, len(tail))


class TimeBucketedBytesSets(TimeBucketedKeySets):
    """:class:`TimeBucketedKeySets` of ``bytes`` keys of up to ``MAX_KEY_BYTES`` (64) bytes;
    ``add_many`` takes what :meth:`keys_of` makes of an Arrow binary column's buffers."""

    KIND = BYTES_SETS
    # a set slot and a bytes object of up to 65 bytes (33 + its length)
    TAIL_KEY_BYTES = 40 + 33 + 1 + MAX_KEY_BYTES

    def key(self, key: Any) -> bytes | None:
        if type(key) is not bytes:
            return None
        return self._held_of(key) if len(key) <= MAX_KEY_BYTES else None

    def _check(self, keys: np.ndarray) -> None:
        if (
            not isinstance(keys, np.ndarray)
            or keys.dtype.kind != "S"
            or keys.dtype.itemsize > 1 + MAX_KEY_BYTES
        ):
            raise TypeError(
                f"{self._describe()}: add_many takes the held keys that keys_of makes "
                f"(a NumPy S array of at most {1 + MAX_KEY_BYTES} bytes per key), "
                f"got {getattr(keys, 'dtype', type(keys).__name__)}"
            )

    @staticmethod
    def keys_of(offsets: np.ndarray, data: np.ndarray) -> np.ndarray | None:
        """The held keys of a column given as its value offsets (n + 1) and data bytes, as
        one ``S`` array; None if a key is longer than ``MAX_KEY_BYTES``."""
        starts = offsets[:-1].astype(np.int64)
        lengths = np.diff(offsets).astype(np.int64)
        n = len(lengths)
        longest = int(lengths.max()) if n else 0
        if longest > MAX_KEY_BYTES:
            return None
        width = 1 + longest
        out = np.zeros((n, width), np.uint8)
        out[:, 0] = lengths
        shortest = int(lengths.min()) if n else 0
        for j in range(longest):  # one gather per byte position
            if shortest > j:
                out[:, 1 + j] = data[starts + j]
            else:
                rows = np.flatnonzero(lengths > j)
                out[rows, 1 + j] = data[starts[rows] + j]
        return out.view(f"S{width}").ravel()

    @staticmethod
    def _held_of(raw: bytes) -> bytes:
        # without trailing NULs, as NumPy gives an S value back: one form per key
        return (bytes((len(raw),)) + raw).rstrip(b"\0")

    @staticmethod
    def _load(raw: bytes) -> np.ndarray:
        (width,) = _U16.unpack_from(raw, 0)
        return np.frombuffer(raw, f"S{width}", offset=2)

    @staticmethod
    def _dump(keys: np.ndarray) -> bytes:
        keys = np.ascontiguousarray(keys)
        return _U16.pack(keys.dtype.itemsize) + keys.tobytes()

    @staticmethod
    def _array(tail: set) -> np.ndarray:
        return np.array(list(tail), dtype=bytes)

    @staticmethod
    def _order(keys: np.ndarray) -> np.ndarray:
        # NumPy's argsort of S values compares through a function pointer: sorting their
        # bytes as big-endian 8-byte words gives the same order (NUL padding sorts first in
        # both) faster: one word (keys up to 7 bytes) 3.8 ms instead of ~18 for 100k keys,
        # two words 13 ms (lexsort)
        width = keys.dtype.itemsize
        words = -(-width // 8)
        padded = np.zeros((len(keys), words * 8), np.uint8)
        padded[:, :width] = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), width)
        cols = padded.view(">u8")
        if words == 1:
            return np.argsort(cols[:, 0])
        return np.lexsort([cols[:, i] for i in range(words - 1, -1, -1)])

    @classmethod
    def _item(cls, held: bytes) -> Any:
        # the NULs NumPy dropped (padding, and any the key ended with) come back from its length
        held = held.ljust(1, b"\0")
        return cls._decode(held[1:].ljust(held[0], b"\0"))

    @staticmethod
    def _decode(raw: bytes) -> Any:
        return raw


class TimeBucketedStrSets(TimeBucketedBytesSets):
    """:class:`TimeBucketedKeySets` of ``str`` keys of up to ``MAX_KEY_BYTES`` (64) UTF-8
    bytes; ``add_many`` takes what :meth:`keys_of` makes of an Arrow string column's
    buffers."""

    KIND = STR_SETS

    def key(self, key: Any) -> bytes | None:
        if type(key) is not str:
            return None
        raw = key.encode("utf-8", "surrogatepass")
        return self._held_of(raw) if len(raw) <= MAX_KEY_BYTES else None

    @staticmethod
    def _decode(raw: bytes) -> Any:
        return raw.decode("utf-8", "surrogatepass")


def join_runs(kind: bytes, runs: list[np.ndarray]) -> bytes:
    """One run (an entry's value) of the keys of several runs of ``kind``."""
    return _KINDS[kind]._dump(np.unique(np.concatenate(runs)))


def split_run(kind: bytes, raw: bytes, key_partition: Any, partitions: int) -> list[np.ndarray]:
    """A run's keys by new partition (repartitioning): ``key_partition`` gets each key as
    ``AUTO_KEY`` encodes it, as for a :class:`TimeBucketedState` key."""
    cls = _KINDS[kind]
    keys = cls._load(raw)
    item = cls._item
    encoded = [AUTO_KEY.encode(item(k)) for k in keys.tolist()]
    many = getattr(key_partition, "many", None)
    if many is not None:  # the whole run in one call (a codec hashes a batch at once)
        owner = np.asarray(many(encoded), dtype=np.int64)
    else:
        owner = np.fromiter((key_partition(e) for e in encoded), np.int64, len(keys))
    return [keys[owner == p] for p in range(partitions)]


_KINDS: dict[bytes, Any] = {
    INT_SETS: TimeBucketedIntSets,
    STR_SETS: TimeBucketedStrSets,
    BYTES_SETS: TimeBucketedBytesSets,
}

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "MAX_KEY_BYTES",
    "TimeBucketedBytesSets",
    "TimeBucketedIntSets",
    "TimeBucketedStrSets",
    "join_runs",
    "split_run",
]
