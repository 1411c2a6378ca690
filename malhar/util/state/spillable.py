"""Spillable structures (Malhar's SpillableMapImpl, SpillableSetMultimapImpl, SpillableArrayListImpl).

They hold no data themselves: every read and write goes through their
:class:`~malhar.util.state.manager.ManagedState` (overlay -> cache -> local store),
so they can be far bigger than memory, and they are checkpointed with it.
Iteration is in encoded key order (for the built-in key codecs: natural order).
"""

from __future__ import annotations

import struct
from collections.abc import ItemsView, Iterable, Iterator, MutableMapping, Sequence, ValuesView
from typing import Any

from malhar.util.state.codecs import Codec
from malhar.util.state.keys import LIST, MAP, MULTIMAP, multimap_key, prefix_end
from malhar.util.state.structure import Structure

_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")


class SpillableMap(Structure, MutableMapping):
    """A ``MutableMapping`` in key order, with ``range(lo, hi)`` scans.

    ``len()`` is exact: a put checks whether the key exists (served by the cache for
    the usual read-modify-write).
    """

    KIND = MAP

    def _ik(self, key: Any) -> bytes:
        return self._prefix + self._ek(key)

    def __getitem__(self, key: Any) -> Any:
        v = self._state.get_raw(self._prefix + self._ek(key))
        if v is None:
            raise KeyError(key)
        return self._dvalue(v)

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._state.get_raw(self._prefix + self._ek(key))
        return default if v is None else self._dvalue(v)

    def __contains__(self, key: object) -> bool:
        return self._state.get_raw(self._prefix + self._ek(key)) is not None

    def __setitem__(self, key: Any, value: Any) -> None:
        ik = self._prefix + self._ek(key)
        ve = self._ev(value, key)
        st = self._state
        if st.get_raw(ik) is None:
            self._meta = self._meta + 1
        st.put_raw(ik, ve)

    def __delitem__(self, key: Any) -> None:
        ik = self._prefix + self._ek(key)
        st = self._state
        if st.get_raw(ik) is None:
            raise KeyError(key)
        self._meta = self._meta - 1
        st.put_raw(ik, None)

    # -- many keys at once: one pass per layer of the manager (docs/state.md §2) ---------------
    def _iks(self, keys: Sequence[Any], encoded: bool) -> list[bytes]:
        p = self._prefix
        if encoded:
            return [p + ek for ek in keys]
        ek = self._ek
        return [p + ek(k) for k in keys]

    def get_many(
        self, keys: Sequence[Any], default: Any = None, *, encoded: bool = False
    ) -> list[Any]:
        """``[m.get(k, default) for k in keys]``; ``encoded``: ``keys`` are already the key
        codec's bytes."""
        dv = self._dvalue
        return [
            default if v is None else dv(v)
            for v in self._state.get_many_raw(self._iks(keys, encoded))
        ]

    def contains_many(self, keys: Sequence[Any], *, encoded: bool = False) -> list[bool]:
        """``[k in m for k in keys]``, see :meth:`get_many`."""
        return [v is not None for v in self._state.get_many_raw(self._iks(keys, encoded))]

    def put_many(
        self, keys: Sequence[Any], values: Sequence[Any], *, encoded: bool = False
    ) -> None:
        """``m[k] = v`` for each pair, in order (``len`` stays exact: one existence read
        per key, in one pass). A key or value the codecs refuse raises before anything
        is written."""
        iks = self._iks(keys, encoded)
        if len(values) != len(iks):
            raise ValueError(f"{len(iks)} keys but {len(values)} values")
        items = [(ik, self._ev(v, k)) for ik, k, v in zip(iks, keys, values, strict=True)]
        new: set[bytes] = set()
        for ik, old in zip(iks, self._state.get_many_raw(iks), strict=True):
            if old is None:
                new.add(ik)
        if new:
            self._meta = self._meta + len(new)
        self._state.put_many_raw(items)

    def delete_many(self, keys: Sequence[Any], *, encoded: bool = False) -> int:
        """Remove the keys that are present (``del m[k]`` without the KeyError); how many
        were removed (a repeated key counts once)."""
        iks = self._iks(keys, encoded)
        gone = dict.fromkeys(
            ik
            for ik, old in zip(iks, self._state.get_many_raw(iks), strict=True)
            if old is not None
        )
        if gone:
            self._meta = self._meta - len(gone)
            self._state.put_many_raw([(ik, None) for ik in gone])
        return len(gone)

    def __len__(self) -> int:
        return self._meta

    def __iter__(self) -> Iterator[Any]:
        dk, n = self.key_codec.decode, self._plen
        for ik, _ in self._state.scan_raw(self._prefix, self._end):
            yield dk(ik[n:])

    def range(self, lo: Any = None, hi: Any = None) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` with ``lo <= key < hi`` (None: unbounded), in key order."""
        start = self._prefix if lo is None else self._prefix + self._ek(lo)
        end = self._end if hi is None else self._prefix + self._ek(hi)
        dk, dv, n = self.key_codec.decode, self._dvalue, self._plen
        for ik, v in self._state.scan_raw(start, end):
            yield dk(ik[n:]), dv(v)

    def items(self) -> ItemsView:
        return _Items(self)

    def values(self) -> ValuesView:
        return _Values(self)

    def clear(self) -> None:
        """Delete every entry: one range delete, not one per key."""
        self._state.delete_range_raw(self._prefix, self._end)
        self._meta = 0


class _Items(ItemsView):
    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self._mapping.range()  # type: ignore[attr-defined]


class _Values(ValuesView):
    def __iter__(self) -> Iterator[Any]:
        for _, v in self._mapping.range():  # type: ignore[attr-defined]
            yield v


class SpillableSetMultimap(Structure):
    """Key -> set of values. The value codec must be deterministic (equal values, equal bytes).

    ``len()`` counts (key, value) pairs; ``mm[key]`` is the set of values of ``key``.
    """

    KIND = MULTIMAP

    def _ik(self, key: Any, value: Any) -> bytes:
        try:
            return multimap_key(self._prefix, self._ek(key), self._ev(value, key))
        except ValueError as exc:
            from malhar.util.state.errors import StateCodecError

            raise StateCodecError(f"{self._describe()}: {exc}") from exc

    def add(self, key: Any, value: Any) -> bool:
        """Add ``value`` to the set of ``key``; True if it was not there."""
        ik = self._ik(key, value)
        st = self._state
        if st.get_raw(ik) is not None:
            return False
        st.put_raw(ik, b"")
        self._meta = self._meta + 1
        return True

    def discard(self, key: Any, value: Any) -> bool:
        """Remove ``value`` from the set of ``key``; True if it was there."""
        ik = self._ik(key, value)
        st = self._state
        if st.get_raw(ik) is None:
            return False
        st.put_raw(ik, None)
        self._meta = self._meta - 1
        return True

    def contains(self, key: Any, value: Any) -> bool:
        return self._state.get_raw(self._ik(key, value)) is not None

    def _key_range(self, key: Any) -> tuple[bytes, bytes | None]:
        start = self._prefix + self._ek(key)
        return start, prefix_end(start)

    def get(self, key: Any) -> set:
        """The values of ``key`` (an empty set if none)."""
        start, end = self._key_range(key)
        n, dv = len(start), self._dvalue
        return {dv(ik[n:-2]) for ik, _ in self._state.scan_raw(start, end)}

    __getitem__ = get

    def __contains__(self, key: Any) -> bool:
        start, end = self._key_range(key)
        return next(self._state.scan_raw(start, end), None) is not None

    def remove_all(self, key: Any) -> int:
        """Remove ``key`` with all its values; how many values it had."""
        start, end = self._key_range(key)
        n = sum(1 for _ in self._state.scan_raw(start, end))
        if n:
            self._state.delete_range_raw(start, end if end is not None else self._end)
            self._meta = self._meta - n
        return n

    def __len__(self) -> int:
        return self._meta

    def items(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs in key order."""
        dk, dv, p = self.key_codec.decode, self._dvalue, self._plen
        for ik, _ in self._state.scan_raw(self._prefix, self._end):
            (kl,) = _U16.unpack_from(ik, len(ik) - 2)
            yield dk(ik[p : p + kl]), dv(ik[p + kl : -2])

    def keys(self) -> Iterator[Any]:
        """Distinct keys in order."""
        dk, p = self.key_codec.decode, self._plen
        last = None
        for ik, _ in self._state.scan_raw(self._prefix, self._end):
            (kl,) = _U16.unpack_from(ik, len(ik) - 2)
            ek = ik[p : p + kl]
            if ek != last:
                last = ek
                yield dk(ek)

    __iter__ = keys

    def clear(self) -> None:
        self._state.delete_range_raw(self._prefix, self._end)
        self._meta = 0


class SpillableList(Structure):
    """An append-only list: ``append``, ``extend``, ``lst[i]`` (negative and slices), ``len``, iterate."""

    KIND = LIST

    def __init__(self, state: Any, name: str, value_codec: Codec) -> None:
        super().__init__(state, name, None, value_codec)

    def append(self, value: Any) -> None:
        n = self._meta
        self._state.put_raw(self._prefix + _U64.pack(n), self._ev(value, n))
        self._meta = n + 1

    def extend(self, values: Iterable[Any]) -> None:
        for v in values:
            self.append(v)

    def __len__(self) -> int:
        return self._meta

    def __getitem__(self, index: int | slice) -> Any:
        n = self._meta
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(n))]
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"{self._describe()}: index {index} out of range (len {n})")
        v = self._state.get_raw(self._prefix + _U64.pack(i))
        if v is None:  # cannot happen unless the checkpoint is inconsistent
            raise IndexError(f"{self._describe()}: element {i} is missing")
        return self._dvalue(v)

    def __iter__(self) -> Iterator[Any]:
        dv = self._dvalue
        end = self._prefix + _U64.pack(self._meta)
        for _, v in self._state.scan_raw(self._prefix, end):
            yield dv(v)

    def clear(self) -> None:
        self._state.delete_range_raw(self._prefix, self._end)
        self._meta = 0


__all__ = ["SpillableList", "SpillableMap", "SpillableSetMultimap"]
