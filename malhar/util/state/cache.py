"""The in-memory read cache of the local store, bounded in bytes.

Approximate LRU: a hit moves the entry to the end of the (insertion-ordered) dict;
when the cache is over its budget the older half is dropped in one pass, so
eviction costs O(1) amortized per insert and needs no per-entry linked list.
Negative entries (``None``: the key is absent) are cached too, so the existence
checks of ``__setitem__``/``add`` on new keys do not read the disk twice.
"""

from __future__ import annotations

from collections.abc import Iterable

#: bytes counted per entry besides the key and value bytes: two bytes objects and a dict slot
ENTRY_OVERHEAD = 33 + 33 + 80

MISSING = object()


class ReadCache:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.bytes = 0
        self._d: dict[bytes, bytes | None] = {}

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: bytes) -> object:
        d = self._d
        v = d.pop(key, MISSING)
        if v is not MISSING:
            d[key] = v
        return v

    def put(self, key: bytes, value: bytes | None, limit: int | None = None) -> None:
        d = self._d
        old = d.pop(key, MISSING)
        if old is not MISSING:
            self.bytes -= len(key) + (len(old) if old is not None else 0) + ENTRY_OVERHEAD
        d[key] = value
        self.bytes += len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
        if self.bytes > (self.budget if limit is None else limit):
            self.shrink((self.budget if limit is None else limit) // 2)

    def put_many(
        self, items: Iterable[tuple[bytes, bytes | None]], limit: int | None = None
    ) -> None:
        """``put(key, value, limit)`` for each pair, in order."""
        cap = self.budget if limit is None else limit
        d = self._d
        nbytes = self.bytes
        for key, value in items:
            old = d.pop(key, MISSING)
            if old is not MISSING:
                nbytes -= len(key) + (len(old) if old is not None else 0) + ENTRY_OVERHEAD
            d[key] = value
            nbytes += len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
            if nbytes > cap:
                self.bytes = nbytes
                self.shrink(cap // 2)
                d, nbytes = self._d, self.bytes
        self.bytes = nbytes

    def discard(self, key: bytes) -> None:
        old = self._d.pop(key, MISSING)
        if old is not MISSING:
            self.bytes -= len(key) + (len(old) if old is not None else 0) + ENTRY_OVERHEAD

    def discard_many(self, keys: Iterable[bytes]) -> None:
        d, pop, nbytes = self._d, self._d.pop, self.bytes
        if not d:
            return
        if isinstance(keys, dict) and len(d) < len(keys):
            keys = [k for k in d if k in keys]  # the smaller side is walked
        for key in keys:
            old = pop(key, MISSING)
            if old is not MISSING:
                nbytes -= len(key) + (len(old) if old is not None else 0) + ENTRY_OVERHEAD
        self.bytes = nbytes

    def discard_range(self, lo: bytes, hi: bytes) -> None:
        for k in [k for k in self._d if lo <= k < hi]:
            self.discard(k)

    def shrink(self, target: int) -> None:
        """Drop the least recently used entries until at most ``target`` bytes remain."""
        if self.bytes <= target:
            return
        it = iter(self._d.items())
        freed = 0
        excess = self.bytes - target
        for k, v in it:  # oldest first; no list of all entries (that would be a memory spike)
            freed += len(k) + (len(v) if v is not None else 0) + ENTRY_OVERHEAD
            if freed >= excess:
                break
        self._d = dict(it)
        self.bytes -= freed

    def clear(self) -> None:
        self._d = {}
        self.bytes = 0


__all__ = ["ENTRY_OVERHEAD", "MISSING", "ReadCache"]
