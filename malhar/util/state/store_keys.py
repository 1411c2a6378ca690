"""The upkeep of the local store's key filter (:mod:`malhar.util.state.keyfilter`) within
its share of the memory budget.

The filter answers "certainly absent" for keys the local store (its base and its pending
area) never held, so a many-key read skips the store for them. It must never miss a key
the store holds: keys are added *before* they enter the store, and whatever the owner
cannot account for (a restore, a wipe) resets it. It is built by one scan of the store
at the first read that wants it; one that would outgrow its budget is not built, and
tried again only once as many keys were written again (a scan per that many writes at
most). Keys that left the store stay in it; past its budget it is dropped and rebuilt from
the live keys at the next use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

from malhar.util.state.keyfilter import BITS_PER_KEY, FIRST_CAPACITY, KeyFilter, key_hashes

__all__ = ["StoreKeyFilter"]

_CHUNK = 1 << 16  # keys per step of the build


class StoreKeyFilter:
    """The filter of one local store's keys, kept within ``budget`` bytes (0: disabled);
    builds are counted in ``stats["filter_builds"]``."""

    def __init__(self, budget: int, stats: dict[str, int]) -> None:
        self.budget = budget
        self.stats = stats
        #: the filter, or None: not built yet (built at the next ``get`` once ``due`` <= 0)
        #: or dropped over its budget
        self.filter: KeyFilter | None = None
        #: keys to write before the next attempt at a build that did not fit
        self.due = 0

    def reset(self) -> None:
        """The store's keys changed in a way not told by ``add`` (restored, wiped)."""
        self.filter = None
        self.due = 0

    def add(self, keys: list[bytes]) -> None:
        """``keys`` are about to enter the local store (base or pending area)."""
        f = self.filter
        if f is None:
            self.due -= len(keys)
            return
        f.add(keys)
        if f.nbytes > self.budget:
            self.reset()

    def get(self, scan: Callable[[], Iterator[bytes]]) -> KeyFilter | None:
        """The filter of the store's keys (``scan``: them all), built when missing; None when
        disabled or when the keys would not fit its budget."""
        if self.filter is not None or not self.budget or self.due > 0:
            return self.filter
        # room to grow: the first layer holds twice the keys, within half the budget
        limit = self.budget * 8 // (4 * BITS_PER_KEY)
        self.stats["filter_builds"] += 1
        hashes, n = [], 0
        keys = scan()
        while chunk := list(islice(keys, _CHUNK)):
            n += len(chunk)
            if n > limit:
                self.due = limit
                return None
            hashes.append(key_hashes(chunk))
        f = KeyFilter(max(FIRST_CAPACITY, 2 * n))
        for h in hashes:
            f.add_hashes(h)
        self.filter = f
        return f
