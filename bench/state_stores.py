"""Embedded ordered key-value stores compared for managed state's local spill store.

    python bench/state_stores.py                # 1M keys per store
    python bench/state_stores.py --keys 200000  # quicker

Each candidate runs in its own child process (so its peak RSS is its own) the
workload managed state gives its local store: write batches of 10k random puts
(the end-of-window apply), random point gets (cache misses), a full ordered scan,
a range delete of 10% of the keys (a time bucket expiring), and reports
throughput, the child's peak RSS and the bytes on disk. Keys are 8-byte
big-endian ints in random order, values 16 bytes. Durability settings are the
ones managed state needs locally: none (the checkpoint FS is the durable copy;
a crash is repaired from it), so RocksDB runs without its WAL, LMDB without
sync, SQLite with ``synchronous=OFF``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

BATCH = 10_000
KEY = struct.Struct(">Q")


class _Rocks:
    name = "rocksdb (rocksdict)"

    def __init__(self, path: str, cache_bytes: int) -> None:
        from rocksdict import (
            AccessType,
            BlockBasedOptions,
            Cache,
            Options,
            Rdict,
            WriteOptions,
        )

        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(cache_bytes // 4)
        opts.set_max_write_buffer_number(2)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(cache_bytes // 2))
        table.set_bloom_filter(10, False)
        opts.set_block_based_table_factory(table)
        self.db = Rdict(path, opts, access_type=AccessType.read_write())
        wo = WriteOptions()
        wo.disable_wal = True
        self.db.set_write_options(wo)

    def write(self, puts: list[tuple[bytes, bytes]]) -> None:
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        for k, v in puts:
            wb.put(k, v)
        self.db.write(wb)

    def get(self, k: bytes) -> bytes | None:
        return self.db.get(k)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return self.db.items()

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        wb.delete_range(lo, hi)
        self.db.write(wb)

    def close(self) -> None:
        self.db.close()


class _Lmdb:
    name = "lmdb"

    def __init__(self, path: str, cache_bytes: int) -> None:
        import lmdb

        self.env = lmdb.open(
            path, map_size=64 << 30, sync=False, metasync=False, writemap=True, readahead=False
        )

    def write(self, puts: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True) as txn:
            cur = txn.cursor()
            cur.putmulti(puts)

    def get(self, k: bytes) -> bytes | None:
        with self.env.begin(buffers=False) as txn:
            return txn.get(k)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        with self.env.begin() as txn:
            yield from txn.cursor().iternext()

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        with self.env.begin(write=True) as txn:
            cur = txn.cursor()
            if cur.set_range(lo):
                while cur.key() < hi and cur.delete():
                    pass

    def close(self) -> None:
        self.env.close()


class _Sqlite:
    name = "sqlite"

    def __init__(self, path: str, cache_bytes: int) -> None:
        import sqlite3

        os.makedirs(path, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(path, "kv.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute(f"PRAGMA cache_size=-{cache_bytes // 1024}")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def write(self, puts: list[tuple[bytes, bytes]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", puts)
        self.db.execute("COMMIT")

    def get(self, k: bytes) -> bytes | None:
        row = self.db.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
        return None if row is None else row[0]

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.execute("SELECT k, v FROM kv ORDER BY k"))

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        self.db.execute("DELETE FROM kv WHERE k >= ? AND k < ?", (lo, hi))

    def close(self) -> None:
        self.db.close()


STORES: dict[str, Callable[[str, int], Any]] = {
    "rocksdb": _Rocks,
    "lmdb": _Lmdb,
    "sqlite": _Sqlite,
}


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:  # allocated blocks: LMDB's map file is sparse
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


def run_one(store: str, keys: int, gets: int, cache_bytes: int) -> dict[str, Any]:
    """The workload on one store, in this process; returns the figures."""
    rng = random.Random(7)
    order = list(range(keys))
    rng.shuffle(order)
    values = [rng.randbytes(16) for _ in range(1024)]  # incompressible, like hashes/counters
    tmp = tempfile.mkdtemp(prefix=f"malhar-bench-{store}-")
    try:
        db = STORES[store](os.path.join(tmp, "db"), cache_bytes)
        t0 = time.perf_counter()
        for i in range(0, keys, BATCH):
            db.write([(KEY.pack(k), values[k & 1023]) for k in order[i : i + BATCH]])
        t_write = time.perf_counter() - t0
        probes = [KEY.pack(rng.randrange(keys * 2)) for _ in range(gets)]  # half are misses
        t0 = time.perf_counter()
        hits = sum(1 for k in probes if db.get(k) is not None)
        t_get = time.perf_counter() - t0
        t0 = time.perf_counter()
        scanned = sum(1 for _ in db.scan())
        t_scan = time.perf_counter() - t0
        t0 = time.perf_counter()
        db.delete_range(KEY.pack(0), KEY.pack(keys // 10))
        t_del = time.perf_counter() - t0
        db.close()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        assert scanned == keys, (store, scanned)
        return {
            "store": STORES[store].name,
            "keys": keys,
            "put_per_s": keys / t_write,
            "get_per_s": gets / t_get,
            "hit_ratio": hits / gets,
            "scan_per_s": scanned / t_scan,
            "range_delete_s": t_del,
            "peak_rss_mib": rss / (1 << 20),
            "disk_mib": _du(tmp) / (1 << 20),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare(keys: int, gets: int = 200_000, cache_bytes: int = 64 << 20) -> list[dict[str, Any]]:
    """Run every candidate in a child process; one dict of figures per store."""
    out = []
    for store in STORES:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", store, "--keys", str(keys), "--gets", str(gets)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            out.append({"store": store, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    head = f"{'store':<20} {'keys':>9} {'put/s':>10} {'get/s':>10} {'scan/s':>11} {'rdel 10%':>9} {'RSS MiB':>8} {'disk MiB':>9}"
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['store']:<20} failed: {r['error']}")
            continue
        print(
            f"{r['store']:<20} {r['keys']:>9,} {r['put_per_s']:>10,.0f} {r['get_per_s']:>10,.0f} "
            f"{r['scan_per_s']:>11,.0f} {r['range_delete_s'] * 1000:>7.1f}ms "
            f"{r['peak_rss_mib']:>8.0f} {r['disk_mib']:>9.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--gets", type=int, default=200_000)
    ap.add_argument("--child", choices=sorted(STORES))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.keys, args.gets, 64 << 20)))
        return
    print_table(compare(args.keys, args.gets))


if __name__ == "__main__":
    main()
