"""Chains of checkpoint files: which files make the state of a window, and how runs merge.

Every file is an edge from the state ``(lo, prev)`` to the state ``(hi, uid)``
(:mod:`malhar.util.state.fileformat`). The state after window ``W`` is the path
from the empty state ``(-1, ROOT)`` to the newest state at or before ``W``; when a
merge left both a merged run and its inputs (a crash between writing one and
deleting the others), both paths are valid and the shortest is taken.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence

from malhar.util.state.errors import StateError
from malhar.util.state.fileformat import ROOT, Node


def select_chain(nodes: Iterable[Node], target: int, *, where: str = "") -> list[Node]:
    """The shortest path of files from the empty state to the newest state ``<= target``.

    Raises :class:`StateError` if the newest file at or before ``target`` is not
    reachable (a file of the chain is missing): restoring an older state instead
    would silently lose windows.
    """
    usable = sorted((n for n in nodes if n.hi <= target and n.lo < n.hi), key=lambda n: n.hi)
    best: dict[tuple[int, str], tuple[int, Node | None]] = {(-1, ROOT): (0, None)}
    for n in usable:
        src = best.get((n.lo, n.prev))
        if src is None:
            continue
        cand = (src[0] + 1, n)
        cur = best.get((n.hi, n.uid))
        if cur is None or cand[0] < cur[0]:
            best[(n.hi, n.uid)] = cand
    if not usable:
        return []
    newest = usable[-1].hi
    ends = [k for k in best if k[0] == newest]
    if not ends:
        missing = sorted({n.name for n in usable if n.hi == newest})
        raise StateError(
            f"checkpoint chain is broken: {missing} cannot be reached from the empty state "
            "(a file of the chain is missing or was deleted)",
            path=where or None,
            operation="restore",
        )
    end = min(ends, key=lambda k: (best[k][0], k[1]))
    path: list[Node] = []
    while True:
        _, node = best[end]
        if node is None:
            break
        path.append(node)
        end = (node.lo, node.prev)
    path.reverse()
    return path


def plan_merge(sizes: Sequence[int], ratio: float) -> int | None:
    """Index of the first run of the tail to merge, or None.

    The tail ``runs[j:]`` (at least two) is merged when every run in it is at most
    ``ratio`` times the size of the runs after it: equal-size deltas merge like a
    binary counter, so each entry is rewritten O(log(total / delta)) times and the
    number of runs stays logarithmic.
    """
    n = len(sizes)
    j = n - 1
    after = sizes[-1] if n else 0
    while j > 0 and sizes[j - 1] <= ratio * max(after, 1):
        j -= 1
        after += sizes[j]
    return j if n - j >= 2 else None


def coalesce(ranges: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Sorted, disjoint union of half-open byte ranges."""
    out: list[tuple[bytes, bytes]] = []
    for lo, hi in sorted(r for r in ranges if r[0] < r[1]):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


class RangeSet:
    """Membership in a coalesced set of half-open ranges (bisect)."""

    def __init__(self, ranges: Iterable[tuple[bytes, bytes]]) -> None:
        self.ranges = coalesce(ranges)
        self._los = [lo for lo, _ in self.ranges]

    def __contains__(self, key: bytes) -> bool:
        i = bisect_right(self._los, key) - 1
        return i >= 0 and key < self.ranges[i][1]

    def __bool__(self) -> bool:
        return bool(self.ranges)


def merge_runs(
    ranges: Sequence[list[tuple[bytes, bytes]]],
    entries: Sequence[Iterator[tuple[bytes, bytes | None]]],
    *,
    bottom: bool,
) -> tuple[list[tuple[bytes, bytes]], Iterator[tuple[bytes, bytes | None]]]:
    """Merge runs given oldest first into one run with the same meaning.

    For each key the newest entry wins, unless a *newer* run's range delete covers
    it. ``bottom`` (the merged run starts from the empty state): deletes and range
    deletes have nothing left to delete and are dropped.
    """
    k = len(entries)
    # newer[i]: the range deletes of runs after i, which hide run i's older entries
    newer: list[RangeSet] = []
    acc: list[tuple[bytes, bytes]] = []
    for i in range(k - 1, -1, -1):
        newer.append(RangeSet(acc))
        acc.extend(ranges[i])
    newer.reverse()
    out_ranges = [] if bottom else coalesce(acc)

    def tagged(i: int) -> Iterator[tuple[bytes, int, bytes | None]]:
        for key, v in entries[i]:
            yield key, k - i, v  # the newest run sorts first among equal keys

    def gen() -> Iterator[tuple[bytes, bytes | None]]:
        last = None
        for key, rank, v in heapq.merge(*(tagged(i) for i in range(k))):
            if key == last:
                continue
            last = key
            i = k - rank
            hidden = key in newer[i] if newer[i] else False
            if hidden:
                # an older put under a newer range delete: gone; below the merge it is deleted
                # by the range itself, so nothing to write
                continue
            if v is None and bottom:
                continue
            yield key, v

    return out_ranges, gen()


__all__ = ["RangeSet", "coalesce", "merge_runs", "plan_merge", "select_chain"]
