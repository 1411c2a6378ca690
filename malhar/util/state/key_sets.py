"""Time-bucketed key sets kept as sorted runs (issue 17: a deduplicator's state).

A :class:`~malhar.util.state.time_buckets.TimeBucketedState` holds one entry per key, so
every new key costs a few Python steps in each layer (overlay, spill, checkpoint file,
local store). A deduplicator that sees mostly new keys spends most of its time there. Here
a bucket's keys are a few *runs*: sorted, distinct numpy arrays, each one entry of the
managed state::

    internal key = prefix | bucket (order-preserving i64) | run id (order-preserving i64)
    value        = the run (how a kind encodes it: :mod:`malhar.util.state.key_set_kinds`)

The overlay, spills, checkpoint files, restore, expiry (one range delete per
``expire_before``, as for time buckets) and purges are the manager's, unchanged: a run is
an ordinary entry. What is columnar is the work per key: membership is ``searchsorted``
over the bucket's runs and a batch's new keys become one new run, both in numpy.

- Keys added one at a time collect in a per-bucket *tail* (a Python set) that becomes a
  run when it reaches ``TAIL_KEYS`` keys or before the checkpoint; so do the new keys of a
  small batch. A new run merges into the one before it while that one is not larger (a
  binary counter), so a key is rewritten about log2(bucket size / run size) times over the
  bucket's life, and a bucket keeps about that many runs (``MAX_RUNS`` at most).
- The runs of recently used buckets stay decoded in memory (views over the entries'
  bytes) in one pool per managed state, :class:`KeySetViews`, shared by all its key sets and
  bounded by a quarter of the state's budget (taken from the overlay's and read cache's
  share): past it the least recently used buckets are dropped (tails written as runs first)
  and read again (one range scan) when used. The bucket in use stays, so a single bucket
  larger than the bound is still exact, only held whole while used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from malhar.util.state.codecs import INT, INT_VALUE
from malhar.util.state.keys import prefix_end
from malhar.util.state.time_buckets import Bucketed

TAIL_KEYS = 4096  # a tail this large becomes a run at once
SMALL_BATCH = 1024  # fewer new keys than this from add_many go to the tail
MAX_RUNS = 8  # a bucket with more runs merges its newest two


class _Bucket:
    """A bucket's decoded runs (with their ids), its tail and its next run id."""

    __slots__ = ("_array", "_tail_arr", "ids", "nbytes", "next_id", "runs", "tail")

    def __init__(self, array: Callable[[set], np.ndarray]) -> None:
        self.ids: list[int] = []
        self.runs: list[np.ndarray] = []
        self.tail: set = set()
        self.next_id = 0
        self.nbytes = 0
        self._array = array
        self._tail_arr: np.ndarray | None = None

    def tail_array(self) -> np.ndarray:
        if self._tail_arr is None or len(self._tail_arr) != len(self.tail):
            self._tail_arr = self._array(self.tail)
        return self._tail_arr

    def contains(self, key: Any) -> bool:
        if key in self.tail:
            return True
        for r in self.runs:
            i = int(r.searchsorted(key))
            if i < len(r) and r[i] == key:
                return True
        return False

    def members_sorted(self, keys: np.ndarray) -> np.ndarray:
        """``keys[i] in self`` for ascending ``keys`` (a vectorized :meth:`contains`; sorted
        needles make ``searchsorted`` walk each run once: ~7x faster than in any order)."""
        found = np.zeros(len(keys), bool)
        for r in self.runs:
            if not len(r):
                continue
            pos = r.searchsorted(keys)
            pos[pos == len(r)] = len(r) - 1
            found |= r[pos] == keys
        if self.tail:
            found |= np.isin(keys, self.tail_array())
        return found


class KeySetViews:
    """The decoded buckets of every key-set structure of one managed state: one least
    recently used order, bounded by ``limit`` bytes (a tail key counts as its kind's
    ``TAIL_KEY_BYTES``). Dropped with everything else on a restore (``state.epoch``).

    One pool, not one per structure, so that an operator with several key sets (the dedup
    has one per key type) holds at most ``limit`` in all.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self.epoch = -1
        self.held: OrderedDict[tuple[bytes, int], tuple[TimeBucketedKeySets, _Bucket]] = (
            OrderedDict()
        )

    def check_epoch(self, epoch: int) -> None:
        if self.epoch != epoch:
            # a restore: what was held (and the tails: changes of an abandoned window) is gone
            self.held.clear()
            self.total = 0
            self.epoch = epoch

    def trim(self, keep: tuple[bytes, int]) -> None:
        """Drop the least recently used buckets but ``keep`` until within ``limit``; a
        dropped bucket's tail is written as a run first (it is this window's change)."""
        while self.total > self.limit and len(self.held) > 1:
            key = next(iter(self.held))
            if key == keep:
                self.held.move_to_end(key)
                key = next(iter(self.held))
            owner, v = self.held[key]
            owner._flush_tail(key[1], v)
            del self.held[key]
            self.total -= v.nbytes

    def drop(self, prefix: bytes, below: int | None = None) -> None:
        """Forget the buckets of one structure (those below bucket ``below`` only)."""
        for key in [k for k in self.held if k[0] == prefix and (below is None or k[1] < below)]:
            self.total -= self.held.pop(key)[1].nbytes

    def of(self, prefix: bytes) -> list[tuple[int, _Bucket]]:
        """The held buckets of one structure, least recently used first."""
        return [(k[1], v) for k, (_, v) in self.held.items() if k[0] == prefix]


class TimeBucketedKeySets(Bucketed):
    """Per time bucket, a set of keys: ``add``/``contains`` by ``(key, time)``, ``add_many``
    for arrays, ``expire_before(time)`` drops whole buckets. The subclasses
    (:mod:`malhar.util.state.key_set_kinds`) say how a key and a run are held (:meth:`key`,
    :meth:`_check`, :meth:`_load`, :meth:`_dump`, :meth:`_array`, :meth:`_order`,
    :meth:`_item`).

    Times and ``bucket_span`` as in :class:`TimeBucketedState`. Not thread-safe.
    """

    #: what a key in a tail costs against the views' bound (the set's slot, the key object)
    TAIL_KEY_BYTES = 96

    def __init__(self, state: Any, name: str, bucket_span: int) -> None:
        super().__init__(state, name, bucket_span, None, INT_VALUE)

    @property
    def view_bytes(self) -> int:
        """The bound of the decoded buckets of the state's key sets (shared by all of them)."""
        return self._state.key_set_views.limit

    @view_bytes.setter
    def view_bytes(self, n: int) -> None:
        self._state.key_set_views.limit = n

    # -- the decoded buckets ------------------------------------------------------------------
    def _head(self, bucket: int) -> bytes:
        return self._prefix + INT.encode(bucket)

    def _views(self) -> KeySetViews:
        pool = self._state.key_set_views
        pool.check_epoch(self._state.epoch)
        return pool

    def _bucket(self, b: int) -> _Bucket:
        """The bucket's view: loaded with one range scan unless held. Write to it before the
        next ``_bucket`` or ``trim``: either may drop it from the pool, and a tail added to a
        dropped view would never be written."""
        pool = self._views()
        key = (self._prefix, b)
        got = pool.held.get(key)
        if got is not None:
            pool.held.move_to_end(key)
            return got[1]
        v = _Bucket(self._array)
        head = self._head(b)
        p = len(head)
        for ik, raw in self._state.scan_raw(head, prefix_end(head)):
            v.ids.append(INT.decode(ik[p:]))
            v.runs.append(self._load(raw))
            v.nbytes += v.runs[-1].nbytes
        v.next_id = v.ids[-1] + 1 if v.ids else 0
        pool.held[key] = (self, v)
        pool.total += v.nbytes
        pool.trim(keep=key)
        return v

    def _grew(self, v: _Bucket, n: int) -> None:
        v.nbytes += n
        self._state.key_set_views.total += n

    def _write_run(self, b: int, v: _Bucket, keys: np.ndarray) -> None:
        """Store ``keys`` (sorted, distinct, none in the bucket yet) as the bucket's next run,
        then merge runs as the policy below says."""
        self._store_run(b, v, keys)
        # the newest run merges into the one before while that is not larger (a binary
        # counter): a key is rewritten about log2(bucket size / run size) times over the
        # bucket's life, and a bucket keeps about that many runs (at most MAX_RUNS)
        runs = v.runs
        while len(runs) > 1 and (len(runs[-2]) <= len(runs[-1]) or len(runs) > MAX_RUNS):
            self._merge_runs(b, v, [len(runs) - 2, len(runs) - 1])

    def _store_run(self, b: int, v: _Bucket, keys: np.ndarray) -> None:
        raw = self._dump(keys)
        self._state.put_raw(self._head(b) + INT.encode(v.next_id), raw)
        v.ids.append(v.next_id)
        v.runs.append(self._load(raw))
        v.next_id += 1
        self._grew(v, v.runs[-1].nbytes)

    def _merge_runs(self, b: int, v: _Bucket, which: list[int]) -> None:
        """Replace the runs at the indexes ``which`` by one run of their keys (written with
        the next run id, so it is the newest)."""
        head = self._head(b)
        # the runs of a bucket are disjoint (a key enters once): a stable sort of sorted
        # runs is a merge (np.unique hashes: ~5x slower here)
        merged = np.sort(np.concatenate([v.runs[i] for i in which]), kind="stable")
        for i in sorted(which, reverse=True):
            self._state.put_raw(head + INT.encode(v.ids[i]), None)
            self._grew(v, -v.runs[i].nbytes)
            del v.ids[i], v.runs[i]
        self._store_run(b, v, merged)

    def _to_tail(self, b: int, v: _Bucket, keys: Any) -> None:
        before = len(v.tail)
        v.tail.update(keys)
        self._grew(v, (len(v.tail) - before) * self.TAIL_KEY_BYTES)
        if len(v.tail) >= TAIL_KEYS:
            self._flush_tail(b, v)

    def _flush_tail(self, b: int, v: _Bucket) -> None:
        if v.tail:
            keys = np.sort(v.tail_array())
            self._grew(v, -len(v.tail) * self.TAIL_KEY_BYTES)
            v.tail = set()
            v._tail_arr = None
            self._write_run(b, v, keys)

    def _flush_meta(self) -> None:
        # called just before every checkpoint: the tails are this window's changes too
        pool = self._state.key_set_views
        if pool.epoch == self._state.epoch:
            for b, v in pool.of(self._prefix):
                self._flush_tail(b, v)
        super()._flush_meta()

    # -- how a kind holds its keys and runs (key_set_kinds.py) --------------------------------
    def key(self, key: Any) -> Any:
        """``key`` as this kind holds it (what :meth:`add` puts in a tail), or None if the
        kind cannot hold it."""
        raise NotImplementedError

    def _check(self, keys: np.ndarray) -> None:
        """Refuse an ``add_many`` array this kind does not hold (TypeError)."""
        raise NotImplementedError

    @staticmethod
    def _load(raw: bytes) -> np.ndarray:
        """A run's keys, decoded (a view over ``raw``)."""
        raise NotImplementedError

    @staticmethod
    def _dump(keys: np.ndarray) -> bytes:
        """The entry's value of a run of ``keys`` (sorted, distinct)."""
        raise NotImplementedError

    @staticmethod
    def _array(tail: set) -> np.ndarray:
        """A tail's keys as an array of the runs' kind."""
        raise NotImplementedError

    @staticmethod
    def _order(keys: np.ndarray) -> np.ndarray:
        """Indexes that sort ``keys`` (ties in any order)."""
        return np.argsort(keys)

    @classmethod
    def _item(cls, held: Any) -> Any:
        """The user's key of a held one."""
        return held

    def _held(self, key: Any) -> Any:
        held = self.key(key)
        if held is None:
            raise TypeError(f"{self._describe()} cannot hold the key {key!r}")
        return held

    # -- one key ------------------------------------------------------------------------------
    def contains(self, key: Any, time: int) -> bool:
        b = self.bucket_of(time)
        return b >= self._meta and self._bucket(b).contains(self._held(key))

    def add(self, key: Any, time: int) -> bool:
        """Put ``key`` into the bucket of ``time``; True if it was absent from a live bucket
        (False: present, or the bucket expired)."""
        return self.add_held(self._held(key), time)

    def add_held(self, key: Any, time: int) -> bool:
        """:meth:`add` of a key as :meth:`key` returned it."""
        b = self.bucket_of(time)
        if b < self._meta:
            return False
        v = self._bucket(b)
        if v.contains(key):
            return False
        self._to_tail(b, v, (key,))
        self._state.key_set_views.trim(keep=(self._prefix, b))
        return True

    # -- many keys ----------------------------------------------------------------------------
    def add_many(self, keys: np.ndarray, buckets: np.ndarray) -> np.ndarray:
        """``[add(keys[i], buckets[i] * bucket_span) for i ...]``, in order, for arrays of
        held keys (int64 for int keys; :meth:`keys_of` for str and bytes keys) and int64
        buckets: True where the key was new to its live bucket (a pair that repeats is new at
        its first row at most). Per bucket: one sort, one membership pass over its runs, one
        new run (or a tail update) in numpy."""
        self._check(keys)
        buckets = np.asarray(buckets, np.int64)
        if keys.shape != buckets.shape:
            raise ValueError(f"{len(keys)} keys but {len(buckets)} buckets")
        added = np.zeros(len(keys), bool)
        if not len(keys):
            return added
        horizon = self._meta
        pool = self._views()
        first = int(buckets[0])
        if (buckets == first).all():
            groups: Any = [(first, None)]
        else:
            groups = [(int(b), np.flatnonzero(buckets == b)) for b in np.unique(buckets)]
        for b, rows in groups:
            if b < horizon:
                continue
            q = keys if rows is None else keys[rows]
            v = self._bucket(b)
            order = self._order(q)
            sq = q[order]
            heads = np.ones(len(sq), bool)
            heads[1:] = sq[1:] != sq[:-1]
            starts = np.flatnonzero(heads)
            distinct = sq[starts]
            absent = ~v.members_sorted(distinct)
            fresh = distinct[absent]  # ascending
            if len(fresh) < SMALL_BATCH:
                self._to_tail(b, v, fresh.tolist())
            else:
                self._write_run(b, v, fresh)
            pool.trim(keep=(self._prefix, b))
            # a repeated key is new at its first row: the smallest row index of its run
            firsts = order[starts] if len(starts) == len(q) else np.minimum.reduceat(order, starts)
            new = np.zeros(len(q), bool)
            new[firsts[absent]] = True
            if rows is None:
                added = new
            else:
                added[rows] = new
        return added

    def items(self) -> list[tuple[int, Any]]:
        """``(bucket start time, key)`` of every live key, by bucket then key as held (for
        tests and inspection: it reads the whole state)."""
        out = []
        head_len = self._plen + 8
        seen: dict[int, list[np.ndarray]] = {}
        for ik, raw in self._state.scan_raw(self._prefix, self._end):
            b = INT.decode(ik[self._plen : head_len])
            seen.setdefault(b, []).append(self._load(raw))
        for b, v in self._views().of(self._prefix):
            if v.tail:
                seen.setdefault(b, []).append(v.tail_array())
        for b in sorted(seen):
            keys = np.unique(np.concatenate(seen[b]))
            out.extend((b * self.bucket_span, self._item(k)) for k in keys.tolist())
        return out

    def clear(self) -> None:
        """Delete every key (the horizon stays)."""
        self._state.delete_range_raw(self._prefix, self._end)
        self._views().drop(self._prefix)

    def expire_before(self, time: int) -> int:
        q = super().expire_before(time)
        self._views().drop(self._prefix, below=q)
        return q


__all__ = ["MAX_RUNS", "KeySetViews", "TimeBucketedKeySets"]
