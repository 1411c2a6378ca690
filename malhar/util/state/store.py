"""The local spill store: an ordered bytes -> bytes store on local disk (RocksDB via rocksdict).

Chosen by measurement (``bench/state_stores.py``, ``docs/state.md``): bounded memory
(block cache + memtables are sized from the partition's budget), O(1) range deletes
(a time bucket expires with one range tombstone), compact files.

The local store is a *cache* of the checkpoint, never the durable copy: it runs
without RocksDB's WAL and without fsync. A batch is applied atomically, and
without a WAL a crash loses a suffix of batches, never part of one; the manager
keeps, in the same batch as the data, which checkpoint the store holds, so after
a crash the store is at *some* earlier checkpoint and is caught up (or rebuilt)
from the checkpoint filesystem.

An ingested table file is durable at once, unlike the batches before it. So that a
crash still loses only a suffix, :meth:`IngestBatch.ingest` first flushes the memtable
(everything before the file becomes durable), and the manager puts the marker of the
checkpoint the file completes *into* the file, not into a batch after it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator

from malhar.util.state.errors import StateError


class LocalStore:
    """RocksDB at ``path``; ``memory_bytes`` caps its block cache + memtables.

    Single-threaded use; one open instance per directory (RocksDB locks it:
    :class:`StateError` if another process holds it).
    """

    def __init__(self, path: str, *, memory_bytes: int = 16 << 20) -> None:
        from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict, WriteOptions

        self.path = path
        os.makedirs(path, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        memory_bytes = max(memory_bytes, 4 << 20)
        # half for two memtables, half for the block cache of data blocks. Index and bloom
        # filter blocks stay with the table readers (~1.5 bytes per key): inside a small block
        # cache, data blocks evict them and every miss of an absent key reads them again
        # (measured: 480 us instead of 6 us per get at 3M keys)
        opts.set_write_buffer_size(memory_bytes // 4)
        opts.set_max_write_buffer_number(2)
        opts.set_max_open_files(256)
        opts.set_keep_log_file_num(2)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(memory_bytes // 2))
        table.set_bloom_filter(10, False)
        table.set_cache_index_and_filter_blocks(False)
        opts.set_block_based_table_factory(table)
        self._opts = opts
        try:
            self._db = Rdict(path, opts, access_type=AccessType.read_write())
        except Exception as exc:  # rocksdict raises plain Exception with RocksDB's message
            raise StateError(f"cannot open the local state store: {exc}", path=path) from exc
        # table files a crashed process was writing for ingestion (this process holds the
        # store's lock now: nobody else writes them)
        shutil.rmtree(self.path.rstrip(os.sep) + ".ingest", ignore_errors=True)
        wo = WriteOptions()
        wo.disable_wal = True  # the checkpoint FS is the durable copy (module docstring)
        self._db.set_write_options(wo)
        self._closed = False

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    @property
    def getter(self) -> Callable[[bytes], bytes | None]:
        """``get`` without this wrapper's frame, for loops over many keys."""
        return self._db.get

    def write(
        self,
        puts: Iterable[tuple[bytes, bytes]] = (),
        deletes: Iterable[bytes] = (),
        ranges: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        """One atomic batch: range deletes first, then deletes and puts."""
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        for lo, hi in ranges:
            wb.delete_range(lo, hi)
        for k in deletes:
            wb.delete(k)
        for k, v in puts:
            wb.put(k, v)
        self._db.write(wb)

    def batch(self) -> _Batch:
        return _Batch(self)

    def ingest_batch(self, name: str) -> IngestBatch:
        """A sorted table file (RocksDB's ``SstFileWriter``), ingested into the store whole."""
        return IngestBatch(self, name)

    def items(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` with ``lo <= key < hi`` (``hi`` None: to the end), in key order.

        RocksDB's own items iterator (~175 ns per entry; stepping a ``RdictIter`` from
        Python with valid/key/value/next costs ~4x that), stopped here at ``hi``. Not
        with ``ReadOptions.set_iterate_upper_bound``: rocksdict 0.3.29 keeps a pointer
        to the bound's memory, and once the Python objects are freed the iteration ends
        early (seen: 1 of 3 entries). Reads the store as of its first step.
        """
        items = self._db.items(from_key=lo)
        if hi is None:
            yield from items
            return
        for kv in items:
            if kv[0] >= hi:
                return
            yield kv

    def keys(self, lo: bytes, hi: bytes) -> Iterator[bytes]:
        """The keys ``lo <= key < hi`` in key order (without reading values into Python)."""
        for k in self._db.keys(from_key=lo):
            if k >= hi:
                return
            yield k

    def scan_from(self, lo: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` from ``lo`` to the end of the store, in key order: the caller
        stops it (``items`` with one generator step less per entry)."""
        return self._db.items(from_key=lo)

    def any_in(self, lo: bytes, hi: bytes) -> bool:
        return next(self.items(lo, hi), None) is not None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()

    def destroy(self) -> None:
        """Close and delete the directory."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        shutil.rmtree(self.path.rstrip(os.sep) + ".ingest", ignore_errors=True)


class _Batch:
    """A write batch with a byte count, for applying big streams in bounded chunks."""

    def __init__(self, store: LocalStore) -> None:
        from rocksdict import WriteBatch

        self._store = store
        self._wb = WriteBatch(raw_mode=True)
        self.bytes = 0

    def put(self, k: bytes, v: bytes) -> None:
        self._wb.put(k, v)
        self.bytes += len(k) + len(v) + 16

    def delete(self, k: bytes) -> None:
        self._wb.delete(k)
        self.bytes += len(k) + 16

    def put_all(
        self, prefix: bytes, changes: Iterable[tuple[bytes, bytes | None]], commit_bytes: int
    ) -> None:
        """``put(prefix + key, value)`` (value None: ``delete``) for each change, committing
        whenever the batch reaches ``commit_bytes`` (the last part stays uncommitted)."""
        wb, nbytes = self._wb, self.bytes
        for k, v in changes:
            if v is None:
                wb.delete(prefix + k)
                nbytes += len(k) + 17
            else:
                wb.put(prefix + k, v)
                nbytes += len(k) + len(v) + 17
            if nbytes >= commit_bytes:
                self.bytes = nbytes
                self.commit()
                wb, nbytes = self._wb, 0
        self.bytes = nbytes

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        self._wb.delete_range(lo, hi)
        self.bytes += len(lo) + len(hi) + 16

    def commit(self) -> None:
        from rocksdict import WriteBatch

        self._store._db.write(self._wb)
        self._wb = WriteBatch(raw_mode=True)
        self.bytes = 0


class IngestBatch:
    """Puts and deletes in strictly increasing key order, written to a table file beside the
    store (``<path>.ingest/``) and ingested atomically by :meth:`ingest` (the file is moved
    into the store): for big sorted change sets, cheaper than write batches, which go
    through the memtable and are written again by its flush."""

    def __init__(self, store: LocalStore, name: str) -> None:
        from rocksdict import SstFileWriter

        self._store = store
        folder = store.path.rstrip(os.sep) + ".ingest"
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, f"{name}.sst")
        # the store's options: the same table format (bloom filters included)
        self._w = SstFileWriter(options=store._opts)
        self._w.open(self.path)
        self.count = 0

    def put(self, key: bytes, value: bytes) -> None:
        """One entry (keys increasing across calls)."""
        self._w[key] = value
        self.count += 1

    def put_all(self, prefix: bytes, changes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """``prefix + key -> value`` for each change (value None: a delete), keys increasing."""
        w, n = self._w, 0
        for k, v in changes:
            if v is None:
                del w[prefix + k]
            else:
                w[prefix + k] = v
            n += 1
        self.count += n

    def ingest(self) -> None:
        """Flush the memtable, then add the file to the store: durable together with every
        batch before it (a crash after this call cannot leave the file without them)."""
        from rocksdict import IngestExternalFileOptions

        if not self.count:
            self.abort()
            return
        self._w.finish()
        opts = IngestExternalFileOptions()
        opts.set_move_files(True)
        try:
            # without a WAL the batches before the file live only in the memtable: a kill
            # after the ingestion would keep the file and lose them (seen: replayed windows
            # counted twice). RocksDB flushes an overlapping memtable itself; explicit, it
            # does not depend on what the memtable holds
            self._store._db.flush(wait=True)
            self._store._db.ingest_external_file([self.path], opts)
        finally:
            self.abort()  # removed if it was copied instead of moved, or not ingested

    def abort(self) -> None:
        try:
            os.remove(self.path)
        except OSError:
            pass


__all__ = ["IngestBatch", "LocalStore"]
