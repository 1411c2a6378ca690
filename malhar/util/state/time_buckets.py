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

from collections.abc import Iterator
from typing import Any

from malhar.util.state.codecs import INT, Codec, KeyCodec
from malhar.util.state.keys import TIME
from malhar.util.state.structure import Structure

_MIN = -(1 << 63)


class TimeBucketedState(Structure):
    """``put/get/delete`` by ``(key, time)``; ``expire_before(time)`` drops whole buckets.

    Times are ints in any unit (e.g. epoch milliseconds); ``bucket_span`` is in the
    same unit.
    """

    KIND = TIME
    META_DEFAULT = _MIN  # the horizon: buckets below it are expired

    def __init__(
        self,
        state: Any,
        name: str,
        bucket_span: int,
        key_codec: KeyCodec,
        value_codec: Codec,
    ) -> None:
        if not isinstance(bucket_span, int) or bucket_span <= 0:
            raise ValueError(f"bucket_span must be a positive int, got {bucket_span!r}")
        super().__init__(state, name, key_codec, value_codec)
        self.bucket_span = bucket_span

    def bucket_of(self, time: int) -> int:
        return int(time // self.bucket_span)

    def _ik(self, key: Any, bucket: int) -> bytes:
        return self._prefix + INT.encode(bucket) + self._ek(key)

    @property
    def horizon(self) -> int:
        """The first time that is not expired (``-2**63`` if nothing expired yet)."""
        h = self._meta
        return h if h == _MIN else h * self.bucket_span

    def is_expired(self, time: int) -> bool:
        return self.bucket_of(time) < self._meta

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

    def expire_before(self, time: int) -> int:
        """Drop every bucket that ends at or before ``time``; returns the new horizon bucket."""
        q = self.bucket_of(time)
        if q > self._meta:
            self._state.delete_range_raw(self._prefix, self._prefix + INT.encode(q))
            self._meta = q
        return self._meta

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


__all__ = ["TimeBucketedState"]
