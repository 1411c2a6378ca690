"""A membership filter of the keys the local store holds, for many-key reads (issue 17).

Most keys a batch looks up are often in no layer at all (a deduplicator's new keys): without
a filter each one costs a RocksDB ``get`` in the spilled area and one in the base (~0.5 us
each from Python). :class:`KeyFilter` answers "certainly absent" for most of them with a few
numpy operations per batch.

A blocked Bloom filter: a key's 64-bit hash (Python's ``hash`` of the bytes, randomized per
process, which is fine: the filter lives in memory only) picks one 64-bit word by its high
bits and sets ``PROBES`` bits in it chosen by its low bits. ``may_contain`` is False only
for a key never added: no false negatives, by construction; false positives (a few percent
at ``BITS_PER_KEY``) cost the lookup the filter would have saved. Keys cannot be removed
(a deleted or expired key stays a possible positive until the owner rebuilds the filter).

Growth without rescanning: when the newest layer holds its capacity, a layer twice as big
is added (a scalable Bloom filter); a key may be in any layer, so a query ANDs the
negatives of all layers. ``nbytes`` tells the owner when to rebuild from its live keys.

Kept within its share of the memory budget by :mod:`malhar.util.state.store_keys`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BITS_PER_KEY = 14
PROBES = 6
FIRST_CAPACITY = 1 << 16
_MAX_WORD_BITS = 64 - 6 * PROBES  # the word index takes high bits the probes do not use


def key_hashes(keys: Sequence[bytes]) -> np.ndarray:
    """The 64-bit hashes (uint64) the filter uses for ``keys``."""
    return np.fromiter(map(hash, keys), np.int64, len(keys)).view(np.uint64)


def _masks(h: np.ndarray) -> np.ndarray:
    mask = np.zeros(len(h), np.uint64)
    one, six = np.uint64(1), np.uint64(63)
    for i in range(PROBES):
        mask |= one << ((h >> np.uint64(6 * i)) & six)
    return mask


class _Layer:
    def __init__(self, capacity: int) -> None:
        words = 1
        while words * 64 < capacity * BITS_PER_KEY:
            words *= 2
        bits = words.bit_length() - 1
        if bits > _MAX_WORD_BITS:
            raise ValueError(f"a filter layer of {capacity} keys is too big")
        self.words = np.zeros(words, np.uint64)
        self.shift = np.uint64(64 - bits)
        self.capacity = words * 64 // BITS_PER_KEY
        self.count = 0

    def index(self, h: np.ndarray) -> np.ndarray:
        if self.shift == 64:  # one word: numpy's shift by 64 is not 0
            return np.zeros(len(h), np.intp)
        return (h >> self.shift).astype(np.intp)


class KeyFilter:
    """A set of byte strings with false positives and no false negatives (module docstring)."""

    def __init__(self, capacity: int = FIRST_CAPACITY) -> None:
        self._layers = [_Layer(max(capacity, 64))]

    def __len__(self) -> int:
        """Keys added (a key added twice counts twice)."""
        return sum(layer.count for layer in self._layers)

    @property
    def nbytes(self) -> int:
        return sum(layer.words.nbytes for layer in self._layers)

    @property
    def layers(self) -> int:
        return len(self._layers)

    def add(self, keys: Sequence[bytes]) -> None:
        self.add_hashes(key_hashes(keys))

    def add_hashes(self, h: np.ndarray) -> None:
        while len(h):
            layer = self._layers[-1]
            room = layer.capacity - layer.count
            if room <= 0:
                layer = _Layer(layer.capacity * 2)
                self._layers.append(layer)
                room = layer.capacity
            part, h = h[:room], h[room:]
            np.bitwise_or.at(layer.words, layer.index(part), _masks(part))
            layer.count += len(part)

    def may_contain(self, keys: Sequence[bytes]) -> np.ndarray:
        """A bool per key: False means the key was certainly never added."""
        return self.may_contain_hashes(key_hashes(keys))

    def may_contain_hashes(self, h: np.ndarray) -> np.ndarray:
        mask = _masks(h)
        out = np.zeros(len(h), bool)
        for layer in self._layers:
            if layer.count:
                out |= (layer.words[layer.index(h)] & mask) == mask
        return out


__all__ = ["BITS_PER_KEY", "KeyFilter", "key_hashes"]
