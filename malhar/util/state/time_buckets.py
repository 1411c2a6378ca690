"""Time-bucketed state (Malhar's ManagedTimeUnifiedStateImpl).

Entries are addressed by ``(key, time)``: ``time // bucket_span`` picks the bucket,
and within a bucket a key has one value. Buckets are contiguous key ranges
(``bucket | key``), so ``expire_before(t)`` drops every bucket that ends at or
before ``t`` with one range delete: O(1) in memory, in the local store (a RocksDB
range tombstone) and in the checkpoint (one record); the expired bytes leave the
checkpoint files at the next merge that covers them. Puts into expired buckets are
refused (``put`` returns False) and reads of them return None, as Malhar's
"expired" answer, so a late event is recognizable.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

from malhar.util.state.codecs import INT, Codec, KeyCodec
from malhar.util.state.errors import StateError
from malhar.util.state.keys import KIND_NAMES, TIME
from malhar.util.state.structure import Structure

_MIN = -(1 << 63)
_Q = struct.Struct("<q")
#: the metadata with the bucket span: kind u8 | horizon i64 | bucket_span i64 (a
#: checkpoint from before the span was kept has the first two only)
_WITH_SPAN = 1 + 2 * _Q.size


class Bucketed(Structure):
    """What the time-bucketed structures share: entries ``bucket | rest`` under the prefix, and
    the expiry horizon (the first live bucket) and the bucket span as the metadata.

    The entries and the horizon are bucket numbers, which mean something only with the span
    they were counted in: a restore with another ``bucket_span`` raises StateError (a
    checkpoint from before the span was kept is taken as it is, and gets the span with the
    next checkpoint that writes anything)."""

    META_DEFAULT = _MIN  # the horizon: buckets below it are expired

    def __init__(
        self,
        state: Any,
        name: str,
        bucket_span: int,
        key_codec: KeyCodec | None,
        value_codec: Codec,
    ) -> None:
        if not isinstance(bucket_span, int) or bucket_span <= 0:
            raise ValueError(f"bucket_span must be a positive int, got {bucket_span!r}")
        super().__init__(state, name, key_codec, value_codec)
        self.bucket_span = bucket_span
        self._span_kept = False  # whether the checkpointed metadata has the span

    # -- the metadata: the horizon, and the span checked and kept beside it -------------------
    @property
    def _meta(self) -> int:
        st = self._state
        if self._meta_epoch == st.epoch:
            return self._meta_value
        value = Structure._meta.fget(self)  # type: ignore[attr-defined]
        raw = st.get_raw(self._meta_key)
        self._span_kept = raw is not None and len(raw) >= _WITH_SPAN
        if self._span_kept:
            span = _Q.unpack_from(raw, 1 + _Q.size)[0]
            if span != self.bucket_span:
                raise StateError(
                    f"{st.where}: {KIND_NAMES[self.KIND]} {self.name!r} was checkpointed with "
                    f"bucket_span {span}, not {self.bucket_span}: its buckets and expiry "
                    f"horizon are counted in the old span, so the new one would misplace every "
                    f"key (expire new tuples, miss duplicates). Set the bucket span back to "
                    f"{span}, or start the operator from a new checkpoint location to change it"
                )
        return value

    @_meta.setter
    def _meta(self, value: int) -> None:
        Structure._meta.fset(self, value)  # type: ignore[attr-defined]

    def _flush_meta(self) -> None:
        # the span joins the metadata with the first checkpoint that writes anything (the
        # structure's entries among it, if any): a checkpoint without changes stays empty
        st = self._state
        if self._meta_epoch != st.epoch:
            return
        if self._meta_dirty or (not self._span_kept and st.has_changes):
            meta = self.KIND + _Q.pack(self._meta_value) + _Q.pack(self.bucket_span)
            st.put_raw(self._meta_key, meta)
            self._meta_dirty = False
            self._span_kept = True

    def check_restored(self) -> None:
        """Read the restored metadata now: a checkpoint of another span raises StateError
        here, when the operator sets up, rather than with the first tuple."""
        _ = self._meta

    def bucket_of(self, time: int) -> int:
        return int(time // self.bucket_span)

    @property
    def horizon(self) -> int:
        """The first time that is not expired (``-2**63`` if nothing expired yet)."""
        h = self._meta
        return h if h == _MIN else h * self.bucket_span

    def is_expired(self, time: int) -> bool:
        return self.bucket_of(time) < self._meta

    def expire_before(self, time: int) -> int:
        """Drop every bucket that ends at or before ``time``; returns the new horizon bucket."""
        q = self.bucket_of(time)
        if q > self._meta:
            self._state.delete_range_raw(self._prefix, self._prefix + INT.encode(q))
            self._meta = q
        return self._meta


class TimeBucketedState(Bucketed):
    """``put/get/delete`` by ``(key, time)``; ``expire_before(time)`` drops whole buckets.

    Times are ints in any unit (e.g. epoch milliseconds); ``bucket_span`` is in the
    same unit. ``get_many``/``contains_many``/``put_many`` do the same for many
    ``(key, time)`` pairs (in any buckets) with one pass per layer of the manager.
    """

    KIND = TIME

    def _ik(self, key: Any, bucket: int) -> bytes:
        return self._prefix + INT.encode(bucket) + self._ek(key)

    def put(self, key: Any, time: int, value: Any) -> bool:
        """Store ``value`` for ``key`` in the bucket of ``time``; False if that bucket expired."""
        b = self.bucket_of(time)
        if b < self._meta:
            return False
        self._state.put_raw(self._ik(key, b), self._ev(value, key))
        return True

    def get(self, key: Any, time: int, default: Any = None) -> Any:
        """The value of ``key`` in the bucket of ``time`` (``default`` if absent or expired)."""
        b = self.bucket_of(time)
        if b < self._meta:
            return default
        v = self._state.get_raw(self._ik(key, b))
        return default if v is None else self._dvalue(v)

    def contains(self, key: Any, time: int) -> bool:
        b = self.bucket_of(time)
        return b >= self._meta and self._state.get_raw(self._ik(key, b)) is not None

    # -- many keys at once: one pass per layer of the manager (docs/state.md §2) ---------------
    def _iks(
        self, keys: Sequence[Any], times: Sequence[int] | int, encoded: bool
    ) -> list[bytes | None]:
        """The internal keys of ``(keys[i], times[i])`` (one time: all keys), None where the
        bucket expired. Every key is encoded before anything is read or written."""
        eks = keys if encoded else [self._ek(k) for k in keys]
        span, meta, prefix = self.bucket_span, self._meta, self._prefix
        if isinstance(times, int):
            b = times // span
            if b < meta:
                return [None] * len(eks)
            head = prefix + INT.encode(b)
            return [head + ek for ek in eks]
        if len(times) != len(eks):
            raise ValueError(f"{len(eks)} keys but {len(times)} times")
        buckets = [t // span for t in times]
        heads = {b: None if b < meta else prefix + INT.encode(int(b)) for b in set(buckets)}
        return [
            None if (head := heads[b]) is None else head + ek
            for b, ek in zip(buckets, eks, strict=True)
        ]

    def get_many(
        self,
        keys: Sequence[Any],
        times: Sequence[int] | int,
        default: Any = None,
        *,
        encoded: bool = False,
    ) -> list[Any]:
        """``[get(k, t, default) for k, t in zip(keys, times)]`` (``times`` an int: one time for
        all keys). ``encoded``: ``keys`` are already the key codec's bytes."""
        iks = self._iks(keys, times, encoded)
        found = iter(self._state.get_many_raw([ik for ik in iks if ik is not None]))
        dv = self._dvalue
        out = []
        for ik in iks:
            v = None if ik is None else next(found)
            out.append(default if v is None else dv(v))
        return out

    def contains_many(
        self,
        keys: Sequence[Any],
        times: Sequence[int] | int,
        *,
        encoded: bool = False,
        cache_absent: bool = True,
    ) -> list[bool]:
        """``[contains(k, t) for k, t in zip(keys, times)]``, see :meth:`get_many`;
        ``cache_absent=False``: for a caller that puts the absent keys next (see
        ``ManagedState.get_many_raw``)."""
        iks = self._iks(keys, times, encoded)
        live = [ik for ik in iks if ik is not None]
        found = iter(self._state.get_many_raw(live, cache_absent=cache_absent))
        return [ik is not None and next(found) is not None for ik in iks]

    def put_many(
        self,
        keys: Sequence[Any],
        times: Sequence[int] | int,
        values: Sequence[Any] | None = None,
        *,
        fill: Any = None,
        encoded: bool = False,
    ) -> list[bool]:
        """``[put(k, t, v) for k, t, v in zip(keys, times, values)]`` (False: the bucket
        expired, nothing stored), in order. ``values`` None: every key gets ``fill``.
        A key or value the codecs refuse raises before anything is written."""
        iks = self._iks(keys, times, encoded)
        if values is None:
            live = [ik for ik in iks if ik is not None]
            ev = self._ev(fill, None) if live else b""
            items = [(ik, ev) for ik in live]
        else:
            if len(values) != len(iks):
                raise ValueError(f"{len(iks)} keys but {len(values)} values")
            items = [
                (ik, self._ev(v, k))
                for ik, k, v in zip(iks, keys, values, strict=True)
                if ik is not None
            ]
        self._state.put_many_raw(items)
        return [ik is not None for ik in iks]

    def add_many(
        self,
        keys: Sequence[Any],
        times: Sequence[int] | int,
        fill: Any,
        *,
        encoded: bool = False,
    ) -> list[bool]:
        """``[not contains(k, t) and put(k, t, fill) for k, t in zip(keys, times)]``, in order:
        True where ``key`` was absent from a live bucket and now holds ``fill``. One
        existence pass (absences are not cached: the keys are written next) and one write,
        with the internal keys built once."""
        iks = self._iks(keys, times, encoded)
        live = [ik for ik in iks if ik is not None]
        if not live:
            return [False] * len(iks)
        ev = self._ev(fill, None)
        found = self._state.get_many_raw(live, cache_absent=False)
        absent = [ik for ik, v in zip(live, found, strict=True) if v is None]
        todo = list(dict.fromkeys(absent))
        self._state.put_fill_many_raw(todo, ev)
        if len(todo) == len(absent) and len(live) == len(iks):  # no repeats, no expired bucket
            return [v is None for v in found]
        out, it, added = [], iter(found), set()
        for ik in iks:
            new = ik is not None and next(it) is None and ik not in added
            if new:
                added.add(ik)
            out.append(new)
        return out

    def delete(self, key: Any, time: int) -> bool:
        """Remove ``key`` from the bucket of ``time``; True if it was there."""
        b = self.bucket_of(time)
        if b < self._meta:
            return False
        ik = self._ik(key, b)
        if self._state.get_raw(ik) is None:
            return False
        self._state.put_raw(ik, None)
        return True

    def items(
        self, time_lo: int | None = None, time_hi: int | None = None
    ) -> Iterator[tuple[int, Any, Any]]:
        """``(bucket start time, key, value)`` for buckets overlapping ``[time_lo, time_hi)``,
        by bucket then key."""
        lo = self._prefix if time_lo is None else self._prefix + INT.encode(self.bucket_of(time_lo))
        if time_hi is None:
            hi = self._end
        else:
            hb = self.bucket_of(time_hi) + (1 if time_hi % self.bucket_span else 0)
            hi = self._prefix + INT.encode(hb)
        p, dk, dv, span = self._plen, self.key_codec.decode, self._dvalue, self.bucket_span
        for ik, v in self._state.scan_raw(lo, hi):
            b = INT.decode(ik[p : p + 8])
            yield b * span, dk(ik[p + 8 :]), dv(v)

    def clear(self) -> None:
        """Delete every entry (the horizon stays)."""
        self._state.delete_range_raw(self._prefix, self._end)


__all__ = ["Bucketed", "TimeBucketedState"]
