"""Time-bucketed key sets kept as sorted runs (issue 17: a deduplicator's state).

A :class:`~malhar.util.state.time_buckets.TimeBucketedState` holds one entry per key, so
every new key costs a few Python steps in each layer (overlay, spill, checkpoint file,
local store). A deduplicator that sees mostly new keys spends most of its time there. Here
a bucket's keys are a few *runs*: sorted, distinct numpy arrays, each one entry of the
managed state::

    internal key = prefix | bucket (order-preserving i64) | run id (order-preserving i64)
    value        = the run (see the two kinds below)

- :class:`TimeBucketedIntSets`: 64-bit int keys; a run is int64 little-endian.
- :class:`TimeBucketedStrSets` and :class:`TimeBucketedBytesSets`: ``str`` (as UTF-8) and
  ``bytes`` keys of up to 65,535 bytes. A key is held as ``length | bytes`` (the length in
  one byte below 255, else ``ff`` and two bytes, big-endian), and a run is a width (u16)
  and the keys NUL-padded to it, a NumPy ``S`` array. NumPy ignores trailing NULs when it
  compares ``S`` values; the length in front makes two keys equal exactly when their bytes
  are, at any width.

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
  bytes), bounded by ``view_bytes`` (a quarter of the state's budget by default): the
  least recently used buckets are dropped first and read again (one range scan) when
  used; a bucket in use stays, so a single bucket larger than the bound is still exact,
  only held whole while used.
- Repartitioning splits every run by the partition of each key (routed as the
  ``AUTO_KEY`` encoding of the key, as a :class:`TimeBucketedState` key would be).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from malhar.util.state.codecs import AUTO_KEY, INT, INT_VALUE
from malhar.util.state.keys import BYTES_SETS, INT_SETS, STR_SETS
from malhar.util.state.time_buckets import Bucketed

#: int run dtype: what the entries hold on every platform
RUN = np.dtype("<i8")
_U16 = struct.Struct(">H")
MAX_KEY_BYTES = 0xFFFF  # longer str/bytes keys do not fit the length field
TAIL_KEYS = 4096  # a tail this large becomes a run at once
SMALL_BATCH = 1024  # fewer new keys than this from add_many go to the tail
TAIL_KEY_BYTES = 96  # what a key in a tail costs (the set's slot, the int or bytes object)
MAX_RUNS = 8  # a bucket with more runs merges its newest two

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


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

    def contains(self, key: int) -> bool:
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


class TimeBucketedKeySets(Bucketed):
    """Per time bucket, a set of keys: ``add``/``contains`` by ``(key, time)``, ``add_many``
    for arrays, ``expire_before(time)`` drops whole buckets. The subclasses say how a key
    and a run are held (:meth:`key`, :meth:`_load`, :meth:`_dump`, :meth:`_array`).

    Times and ``bucket_span`` as in :class:`TimeBucketedState`. Not thread-safe.
    """

    def __init__(
        self, state: Any, name: str, bucket_span: int, view_bytes: int | None = None
    ) -> None:
        super().__init__(state, name, bucket_span, None, INT_VALUE)
        self.view_bytes = state.budget_bytes // 4 if view_bytes is None else view_bytes
        self._reset_views()

    def _reset_views(self) -> None:
        self._views: OrderedDict[int, _Bucket] = OrderedDict()
        self._view_total = 0
        self._views_epoch = -1

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for k in ("_views", "_view_total", "_views_epoch"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_views()

    # -- the decoded buckets ------------------------------------------------------------------
    def _head(self, bucket: int) -> bytes:
        return self._prefix + INT.encode(bucket)

    def _bucket(self, b: int) -> _Bucket:
        """The bucket's view: loaded with one range scan unless held; the least recently used
        others are dropped (their tails written as runs first) past ``view_bytes``."""
        st = self._state
        if self._views_epoch != st.epoch:
            # a restore: what was held (and the tails, changes of an abandoned window) is gone
            self._views.clear()
            self._view_total = 0
            self._views_epoch = st.epoch
        v = self._views.get(b)
        if v is not None:
            self._views.move_to_end(b)
            return v
        v = _Bucket(self._array)
        head = self._head(b)
        p = len(head)
        for ik, raw in st.scan_raw(head, self._head(b + 1)):
            v.ids.append(INT.decode(ik[p:]))
            v.runs.append(self._load(raw))
            v.nbytes += v.runs[-1].nbytes
        v.next_id = v.ids[-1] + 1 if v.ids else 0
        self._views[b] = v
        self._view_total += v.nbytes
        while self._view_total > self.view_bytes and len(self._views) > 1:
            old_b, old = next(iter(self._views.items()))
            if old_b == b:
                break
            self._flush_tail(old_b, old)
            del self._views[old_b]
            self._view_total -= old.nbytes
        return v

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
        v.nbytes += v.runs[-1].nbytes
        self._view_total += v.runs[-1].nbytes

    def _merge_runs(self, b: int, v: _Bucket, which: list[int]) -> None:
        """Replace the runs at the indexes ``which`` by one run of their keys (written with
        the next run id, so it is the newest)."""
        head = self._head(b)
        # the runs of a bucket are disjoint (a key enters once): a stable sort of sorted
        # runs is a merge (np.unique hashes: ~5x slower here)
        merged = np.sort(np.concatenate([v.runs[i] for i in which]), kind="stable")
        for i in sorted(which, reverse=True):
            self._state.put_raw(head + INT.encode(v.ids[i]), None)
            v.nbytes -= v.runs[i].nbytes
            self._view_total -= v.runs[i].nbytes
            del v.ids[i], v.runs[i]
        self._store_run(b, v, merged)

    def _to_tail(self, v: _Bucket, keys: Any) -> None:
        before = len(v.tail)
        v.tail.update(keys)
        cost = (len(v.tail) - before) * TAIL_KEY_BYTES
        v.nbytes += cost
        self._view_total += cost

    def _flush_tail(self, b: int, v: _Bucket) -> None:
        if v.tail:
            keys = np.sort(v.tail_array())
            cost = len(v.tail) * TAIL_KEY_BYTES
            v.nbytes -= cost
            self._view_total -= cost
            v.tail = set()
            v._tail_arr = None
            self._write_run(b, v, keys)

    def _flush_meta(self) -> None:
        # called just before every checkpoint: the tails are this window's changes too
        if self._views_epoch == self._state.epoch:
            for b, v in list(self._views.items()):
                self._flush_tail(b, v)
        super()._flush_meta()

    # -- how a kind holds its keys and runs -----------------------------------------------------
    def key(self, key: Any) -> Any:
        """``key`` as this kind holds it (what :meth:`add` puts in a tail), or None if the
        kind cannot hold it."""
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
        self._to_tail(v, (key,))
        if len(v.tail) >= TAIL_KEYS:
            self._flush_tail(b, v)
        return True

    # -- many keys ----------------------------------------------------------------------------
    def add_many(self, keys: np.ndarray, buckets: np.ndarray) -> np.ndarray:
        """``[add(keys[i], buckets[i] * bucket_span) for i ...]``, in order, for arrays of
        held keys (:meth:`keys_of`) and int64 buckets: True where the key was new to its live
        bucket (a pair that repeats is new at its first row at most). Per bucket: one sort,
        one membership pass over its runs, one new run (or a tail update) in numpy."""
        buckets = np.asarray(buckets, np.int64)
        if keys.shape != buckets.shape:
            raise ValueError(f"{len(keys)} keys but {len(buckets)} buckets")
        added = np.zeros(len(keys), bool)
        if not len(keys):
            return added
        horizon = self._meta
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
                self._to_tail(v, fresh.tolist())
                if len(v.tail) >= TAIL_KEYS:
                    self._flush_tail(b, v)
            else:
                self._write_run(b, v, fresh)
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
        if self._views_epoch == self._state.epoch:
            for b, v in self._views.items():
                if v.tail:
                    seen.setdefault(b, []).append(v.tail_array())
        for b in sorted(seen):
            keys = np.unique(np.concatenate(seen[b]))
            out.extend((b * self.bucket_span, self._item(k)) for k in keys.tolist())
        return out

    def clear(self) -> None:
        """Delete every key (the horizon stays)."""
        self._state.delete_range_raw(self._prefix, self._end)
        self._views.clear()
        self._view_total = 0

    def expire_before(self, time: int) -> int:
        q = super().expire_before(time)
        for b in [b for b in self._views if b < q]:
            self._view_total -= self._views.pop(b).nbytes
        return q


class TimeBucketedIntSets(TimeBucketedKeySets):
    """:class:`TimeBucketedKeySets` of 64-bit int keys (``-2**63 <= key < 2**63``; not
    bool); ``add_many`` takes int64 arrays."""

    KIND = INT_SETS

    def key(self, key: Any) -> int | None:
        return key if type(key) is int and I64_MIN <= key <= I64_MAX else None

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
    """:class:`TimeBucketedKeySets` of ``bytes`` keys of up to 65,535 bytes; ``add_many``
    takes what :meth:`keys_of` makes of an Arrow binary column's buffers."""

    KIND = BYTES_SETS
    TYPE: type = bytes

    def key(self, key: Any) -> bytes | None:
        if type(key) is not self.TYPE:
            return None
        raw = key.encode("utf-8", "surrogatepass") if self.TYPE is str else key
        return self._held_of(raw) if len(raw) <= MAX_KEY_BYTES else None

    @classmethod
    def keys_of(cls, offsets: np.ndarray, data: np.ndarray) -> np.ndarray | None:
        """The held keys of a column given as its value offsets (n + 1) and data bytes, as
        one ``S`` array; None if a key is too long to hold."""
        starts = offsets[:-1].astype(np.int64)
        lengths = np.diff(offsets).astype(np.int64)
        n = len(lengths)
        longest = int(lengths.max()) if n else 0
        if longest > MAX_KEY_BYTES:
            return None
        if longest >= 0xFF:  # long keys have a 3-byte head: rare, built one by one
            raw = data.tobytes()
            return np.array(
                [
                    cls._held_of(raw[a : a + m])
                    for a, m in zip(starts.tolist(), lengths.tolist(), strict=True)
                ],
                dtype=bytes,
            )
        width = 1 + longest
        out = np.zeros((n, width), np.uint8)
        out[:, 0] = lengths
        for j in range(longest):  # one gather per byte position
            if int(lengths.min()) > j:
                out[:, 1 + j] = data[starts + j]
            else:
                rows = np.flatnonzero(lengths > j)
                out[rows, 1 + j] = data[starts[rows] + j]
        return out.view(f"S{width}").ravel()

    @staticmethod
    def _held_of(raw: bytes) -> bytes:
        head = bytes((len(raw),)) if len(raw) < 0xFF else b"\xff" + _U16.pack(len(raw))
        # without trailing NULs, as NumPy gives an S value back: one form per key
        return (head + raw).rstrip(b"\0")

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
        if held[0] == 0xFF:
            held = held.ljust(3, b"\0")
            (n,) = _U16.unpack_from(held, 1)
            raw = held[3:].ljust(n, b"\0")
        else:
            raw = held[1:].ljust(held[0], b"\0")
        return raw.decode("utf-8", "surrogatepass") if cls.TYPE is str else raw


class TimeBucketedStrSets(TimeBucketedBytesSets):
    """:class:`TimeBucketedKeySets` of ``str`` keys of up to 65,535 UTF-8 bytes; ``add_many``
    takes what :meth:`keys_of` makes of an Arrow string column's buffers."""

    KIND = STR_SETS
    TYPE = str


def join_runs(kind: bytes, runs: list[np.ndarray]) -> bytes:
    """One run (an entry's value) of the keys of several runs of ``kind``."""
    return _KINDS[kind]._dump(np.unique(np.concatenate(runs)))


def split_run(kind: bytes, raw: bytes, key_partition: Any, partitions: int) -> list[np.ndarray]:
    """A run's keys by new partition (repartitioning): ``key_partition`` gets each key as
    ``AUTO_KEY`` encodes it, as for a :class:`TimeBucketedState` key."""
    cls = _KINDS[kind]
    keys = cls._load(raw)
    item = cls._item
    owner = np.fromiter(
        (key_partition(AUTO_KEY.encode(item(k))) for k in keys.tolist()), np.int64, len(keys)
    )
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
    "TimeBucketedKeySets",
    "TimeBucketedStrSets",
    "join_runs",
    "split_run",
]
