"""The local store as :class:`~malhar.util.state.manager.ManagedState` lays it out: a
replica of the checkpoint files on local disk, plus the window's spilled changes.

Three key ranges of one :class:`~malhar.util.state.store.LocalStore`:

- the *marker* (``\\x00at``): which checkpoint the base holds, ``(window, uid)``, or
  ``dirty`` while one is being applied (a crash then leaves a store that is rebuilt);
- the *base* (``B`` + internal key): the state at that checkpoint;
- the *pending area* (``P`` + internal key): this window's changes that outgrew memory,
  a put as a flag byte and the value, a delete as its flag alone. Never durable state:
  dropped at every restore, moved into the base by the checkpoint.

Crash ordering (the store has no WAL, see its module docstring): the marker is written
in the same batch as the last entries it vouches for, or into the ingested table file
with them; a crash loses a suffix of batches, so the marker never names a checkpoint
whose entries are missing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from malhar.util.state.cache import MISSING
from malhar.util.state.fileformat import ROOT, FileReader, Node
from malhar.util.state.store import IngestBatch, LocalStore

_B = b"B"  # base: the state at the store's checkpoint
_P = b"P"  # pending: this window's changes spilled out of memory
_P_END = b"Q"  # the pending area is [_P, _P_END); nothing is stored after it
_META_AT = b"\x00at"  # which checkpoint the base holds: hi i64 | uid (16 ascii)
_DIRTY = b"dirty"
_P_PUT, _P_DEL = b"\x01", b"\x02"
_AT = struct.Struct("<q16s")
_APPLY_BATCH_BYTES = 8 << 20
_CHUNK = 1 << 16  # changes per chunk of the pending area read back at a checkpoint

Columns = tuple[list[bytes], list[bytes | None]]  # keys in order and their values (None: delete)


def _marker(window: int, uid: str) -> bytes:
    return _AT.pack(window, uid.encode("ascii"))


class Replica:
    """The base, the pending area and the marker in ``store`` (see the module docstring)."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        # RocksDB's own get: a read of the per-tuple path costs one Python frame, as before
        # this layer existed
        self._get = store.getter

    # -- the marker, and bringing the base to a checkpoint ------------------------------------------
    def at(self) -> tuple[int, str] | None:
        """The checkpoint the base holds, ``(window, uid)``; None: unknown (rebuild)."""
        raw = self.store.get(_META_AT)
        if raw is None or raw == _DIRTY:
            return None
        hi, uid = _AT.unpack(raw)
        return hi, uid.decode("ascii")

    def wipe(self) -> None:
        """Empty the store: the base then holds the empty state before any file."""
        self.store.write(ranges=[(b"", b"\xff")], puts=[(_META_AT, _marker(-1, ROOT))])

    def apply_file(self, reader: FileReader, node: Node) -> None:
        """Apply one checkpoint file to the base (which holds the file's predecessor)."""
        batch = self.store.batch()
        batch.put(_META_AT, _DIRTY)  # a crash mid-file leaves the store marked unusable
        for lo, hi in reader.ranges():
            batch.delete_range(_B + lo, _B + hi)
        for k, v in reader.entries():
            if v is None:
                batch.delete(_B + k)
            else:
                batch.put(_B + k, v)
            if batch.bytes >= _APPLY_BATCH_BYTES:
                batch.commit()
        batch.put(_META_AT, _marker(node.hi, node.uid))
        batch.commit()

    def begin_ingest(self, window: int, uid: str) -> IngestBatch:
        """A table file for the checkpoint ``(window, uid)``, its marker already in it: the
        marker travels with the changes, durable together or not at all (store docstring).
        The changes go in with :meth:`ingest_changes`."""
        ingest = self.store.ingest_batch(uid)
        ingest.put(_META_AT, _marker(window, uid))
        return ingest

    @staticmethod
    def ingest_changes(ingest: IngestBatch, keys: list[bytes], values: list[bytes | None]) -> None:
        """Changes (keys increasing across calls) into a checkpoint's table file."""
        ingest.put_all(_B, zip(keys, values, strict=True))

    def commit_checkpoint(
        self,
        node: Node,
        ranges: Sequence[tuple[bytes, bytes]],
        ingest: IngestBatch | None,
        changes: Columns | None,
    ) -> None:
        """The durable checkpoint ``node`` into the base: the dirty marker and its range
        deletes first (the file's semantics), then its changes and its marker. Either
        ``ingest`` holds both (from :meth:`begin_ingest` with the window and uid the file
        was written for); the pending area, read into it already, is dropped in the same
        batch as the range deletes, so the flush before the ingestion drops those writes
        instead of writing them. Or a write batch puts ``changes`` and the marker of
        ``node``."""
        batch = self.store.batch()
        batch.put(_META_AT, _DIRTY)
        for lo_k, hi_k in ranges:
            batch.delete_range(_B + lo_k, _B + hi_k)
        if ingest is not None:
            batch.delete_range(_P, _P_END)
            batch.commit()
            ingest.ingest()
        else:
            keys, values = changes or ((), ())
            batch.put_all(_B, zip(keys, values, strict=True), _APPLY_BATCH_BYTES)
            batch.put(_META_AT, _marker(node.hi, node.uid))
            batch.commit()

    # -- reads ----------------------------------------------------------------------------------
    def base_get(self, ik: bytes) -> bytes | None:
        return self._get(_B + ik)

    def base_many(self, iks: Iterable[bytes]) -> list[bytes | None]:
        get = self._get
        return [get(_B + ik) for ik in iks]

    def pending_get(self, ik: bytes) -> object:
        """The pending change of ``ik``: its value, None (deleted) or ``MISSING`` (none)."""
        pv = self._get(_P + ik)
        if pv is None:
            return MISSING
        return None if pv[:1] == _P_DEL else pv[1:]

    def pending_many(self, iks: Iterable[bytes]) -> list[object]:
        """:meth:`pending_get` of each key, without a method call per key."""
        get = self._get
        out: list[object] = []
        for ik in iks:
            pv = get(_P + ik)
            out.append(MISSING if pv is None else None if pv[:1] == _P_DEL else pv[1:])
        return out

    def base_items(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(internal key, value)`` of the base in ``[lo, hi)`` (None: to its end)."""
        for k, v in self.store.items(_B + lo, _B + hi if hi is not None else b"C"):
            yield k[1:], v

    def pending_items(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes | None]]:
        """``(internal key, value or None: deleted)`` of the pending area in ``[lo, hi)``."""
        for k, v in self.store.items(_P + lo, _P_END if hi is None else _P + hi):
            yield k[1:], (None if v[:1] == _P_DEL else v[1:])

    def keys(self) -> Iterator[bytes]:
        """Every internal key in the pending area and in the base (a key may be in both)."""
        for lo, hi in ((_P, _P_END), (_B, b"C")):
            for k in self.store.keys(lo, hi):
                yield k[1:]

    # -- the pending area -------------------------------------------------------------------------
    def spill(self, keys: list[bytes], values: list[bytes | None]) -> None:
        """Changes (keys in order, as RocksDB's memtable inserts sorted keys ~3x as fast as
        arrival order) into the pending area, over what it held."""
        batch = self.store.batch()
        batch.put_all(_P, _pending_entries(zip(keys, values, strict=True)), _APPLY_BATCH_BYTES)
        batch.commit()

    def delete_pending_range(self, lo: bytes, hi: bytes) -> None:
        self.store.write(ranges=[(_P + lo, _P + hi)])

    def drop_pending(self) -> None:
        """Forget the pending area (a crashed or replayed window's spilled changes)."""
        self.store.write(ranges=[(_P, _P_END)])

    def pending_columns(self) -> Iterator[Columns]:
        """The pending area as chunks of ``(keys, values or None)`` lists, in key order."""
        deleted = _P_DEL[0]
        keys: list[bytes] = []
        values: list[bytes | None] = []
        for k, v in self.store.scan_from(_P):
            if k >= _P_END:
                break
            keys.append(k[1:])
            values.append(None if v[0] == deleted else v[1:])
            if len(keys) == _CHUNK:
                yield keys, values
                keys, values = [], []
        if keys:
            yield keys, values


def _pending_entries(
    items: Iterable[tuple[bytes, bytes | None]],
) -> Iterator[tuple[bytes, bytes]]:
    """Changes as the pending area stores them (a put's value after a flag byte); a value
    shared by consecutive entries (a dedup's fill) is prefixed once."""
    last: bytes | None = None
    flagged = b""
    for k, v in items:
        if v is None:
            yield k, _P_DEL
        else:
            if v is not last:
                last, flagged = v, _P_PUT + v
            yield k, flagged


__all__ = ["Columns", "Replica"]
