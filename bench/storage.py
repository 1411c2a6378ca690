"""Benchmark of the window data manager (malhar.util): local FS and HDFS.

    python bench/storage.py                 # local FS + HDFS (starts a real HDFS)
    python bench/storage.py --no-hdfs       # local FS only
    python bench/storage.py --windows 50000 --hdfs-windows 200

For each backend it prints save and retrieve latency (p50/p99), saves/s and MB/s
for 1 KB artifacts, next to a baseline measured in the same run: the same record
bytes appended to a plain file (local: ``write(2)`` per record, optionally with
``fdatasync``; HDFS: one WebHDFS append per record with the ``hdfs`` client).
It measures saves with ``durability="fsync"`` (the default) and ``"flush"`` in the
same invocation and prints their ratio (the cost of the default).
It also prints what level 0's slot claims (``malhar.engine.slot_claims``) cost per
window on a checkpoint on that backend, against one window-data-manager save.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from malhar.util import FSWindowDataManager, filesystem_for
from malhar.util.fs.resolve import WEBHDFS_ENV
from malhar.util.wal import framing

ARTIFACT_BYTES = 1024


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Result:
    def __init__(self, name: str, latencies_s: list[float], total_s: float, nbytes: int) -> None:
        self.name = name
        self.n = len(latencies_s)
        self.p50 = pct(latencies_s, 0.50) * 1e6
        self.p99 = pct(latencies_s, 0.99) * 1e6
        self.rate = self.n / total_s
        self.mbps = nbytes / total_s / 1e6

    def row(self, baseline: Result | None = None) -> str:
        ratio = f"{self.rate / baseline.rate:6.2f}x" if baseline else "      -"
        return (
            f"  {self.name:<44} {self.n:>7} {self.p50:>10.1f} {self.p99:>10.1f} "
            f"{self.rate:>11,.0f} {self.mbps:>8.3f}  {ratio}"
        )


HEADER = (
    f"  {'operation':<44} {'n':>7} {'p50 us':>10} {'p99 us':>10} {'ops/s':>11} {'MB/s':>8}  vs base"
)


def timed(name: str, n: int, op: Callable[[int], object], nbytes: int) -> Result:
    lat = []
    clock = time.perf_counter
    start = clock()
    for i in range(n):
        t = clock()
        op(i)
        lat.append(clock() - t)
    return Result(name, lat, clock() - start, nbytes)


def claims(checkpoint: str, windows: int, slots: int = 4, tasks: int = 2) -> Result:
    """Level 0's slot claims per window as the flagship makes them: ``tasks`` tasks claim
    ``slots`` slots (the first claimer of slot 0 also purges the previous window)."""
    from malhar.engine.slot_claims import claim_slots

    def window(w: int) -> None:
        got = [s for t in range(tasks) for s in claim_slots(checkpoint, "L", w, slots, t, tasks)]
        assert sorted(got) == list(range(slots)), got

    return timed(f"slot claims, {tasks} tasks x {slots} slots, per window", windows, window, 0)


def artifact(i: int, blob: bytes) -> bytes:
    return blob  # 1 KB of random bytes; the window id travels in the record header


def local_bench(windows: int, fsync_windows: int) -> list[str]:
    blob = os.urandom(ARTIFACT_BYTES)
    record = framing.encode_record(1, __import__("pickle").dumps(blob, 5))
    out = [f"local FS ({tempfile.gettempdir()}), {ARTIFACT_BYTES} B artifacts", HEADER]
    work = Path(tempfile.mkdtemp(prefix="malhar-bench-"))
    try:
        # -- baselines: the same record bytes, straight to a file ----------------------------
        def raw(name: str, n: int, sync: bool) -> Result:
            fd = os.open(work / f"raw-{name}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:

                def op(_: int) -> None:
                    os.write(fd, record)
                    if sync:
                        os.fdatasync(fd)

                return timed(name, n, op, n * len(blob))
            finally:
                os.close(fd)

        base = raw("baseline: write(2) per record", windows, False)
        base_sync = raw("baseline: write(2)+fdatasync per record", fsync_windows, True)

        # -- the manager ------------------------------------------------------------------------
        m = FSWindowDataManager(str(work / "wal"), "bench", durability="flush")
        m.setup()
        save = timed(
            "save (durability='flush')",
            windows,
            lambda i: m.save(blob, i),
            windows * len(blob),
        )
        m.teardown()
        mf = FSWindowDataManager(str(work / "wal-flush2"), "bench", durability="flush")
        mf.setup()
        save_flush = timed(  # the same number of saves as with fsync, for the ratio
            "save (durability='flush'), as many as fsync",
            fsync_windows,
            lambda i: mf.save(blob, i),
            fsync_windows * len(blob),
        )
        mf.teardown()

        ms = FSWindowDataManager(str(work / "wal-sync"), "bench")  # the default: fsync
        ms.setup()
        save_sync = timed(
            "save (durability='fsync', default)",
            fsync_windows,
            lambda i: ms.save(blob, i),
            fsync_windows * len(blob),
        )
        ms.teardown()

        t = time.perf_counter()
        r = FSWindowDataManager(str(work / "wal"), "bench", durability="flush")
        r.setup()
        setup_s = time.perf_counter() - t
        retrieve = timed(
            "retrieve (replay in window order)", windows, r.retrieve, windows * len(blob)
        )
        largest = timed(
            "largest_completed_window()", 200, lambda i: r.largest_completed_window(), 0
        )
        r.teardown()

        # 4 partitions: replay every window of every partition
        parts = [
            FSWindowDataManager(str(work / "wal4"), "bench", partition=p, durability="flush")
            for p in range(4)
        ]
        n4 = max(1, windows // 4)
        for p in parts:
            p.setup()
            for i in range(n4):
                p.save(blob, i)
            p.teardown()
        reader = FSWindowDataManager(str(work / "wal4"), "bench")
        all4 = timed(
            "retrieve_all_partitions (4 partitions)",
            n4,
            reader.retrieve_all_partitions,
            n4 * 4 * len(blob),
        )
        reader.teardown()
        claimed = claims(str(work / "ckpt"), windows // 10)

        out += [
            base.row(),
            save.row(base),
            claimed.row(save),
            retrieve.row(base),
            all4.row(),
            largest.row(),
            base_sync.row(),
            save_flush.row(base_sync),
            save_sync.row(base_sync),
            f"  durability cost, local FS: fsync {save_sync.rate:,.0f} saves/s vs flush "
            f"{save_flush.rate:,.0f} saves/s: fsync/flush = {save_sync.rate / save_flush.rate:.3f}",
            f"  setup() of a partition log with {windows} windows "
            f"({sum(f.stat().st_size for f in (work / 'wal' / 'bench' / '0').iterdir()) / 1e6:.1f} MB): "
            f"{setup_s * 1e3:.1f} ms",
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def hdfs_bench(windows: int) -> list[str]:
    from malhar.testing.services import acquire

    t = time.perf_counter()
    service = acquire("hdfs")
    started = time.perf_counter() - t
    try:
        conn = service.connection()
        opts = {"webhdfs_url": conn["webhdfs_url"], "user": conn["user"]}
        root = f"{conn['url']}/malhar-bench/{uuid.uuid4().hex[:8]}"
        fs, path = filesystem_for(root, **opts)
        blob = os.urandom(ARTIFACT_BYTES)
        record = framing.encode_record(1, __import__("pickle").dumps(blob, 5))
        out = [
            f"HDFS via WebHDFS ({conn['webhdfs_url']}, 1 NameNode + 1 DataNode on this machine, "
            f"started in {started:.0f} s), {ARTIFACT_BYTES} B artifacts",
            HEADER,
        ]
        client = service.client()
        raw_path = f"{path}/raw.bin"
        client.write(raw_path, data=b"", overwrite=True)
        base = timed(
            "baseline: hdfs client append per record",
            windows,
            lambda i: client.write(raw_path, data=record, append=True),
            windows * len(blob),
        )
        m = FSWindowDataManager(root, "bench", fs_options=opts, durability="flush")
        m.setup()
        save = timed(
            "save, durability='flush'",
            windows,
            lambda i: m.save(blob, i),
            windows * len(blob),
        )
        m.teardown()
        ms = FSWindowDataManager(root, "bench-sync", fs_options=opts)  # default: fsync
        ms.setup()
        save_sync = timed(
            "save, durability='fsync' (default)",
            windows,
            lambda i: ms.save(blob, i),
            windows * len(blob),
        )
        ms.teardown()
        # what fsync changes on HDFS: CREATE with createflag=sync_block (fsync on close)
        creates = max(5, windows // 5)
        plain, _ = filesystem_for(root, **opts)
        synced, _ = filesystem_for(root, **opts, fsync=True)
        create = timed(
            "create 1 KB file (fsync=False)",
            creates,
            lambda i: plain.create(f"{path}/c/plain-{i}", blob),
            creates * len(blob),
        )
        create_sync = timed(
            "create 1 KB file (fsync=True: sync_block)",
            creates,
            lambda i: synced.create(f"{path}/c/sync-{i}", blob),
            creates * len(blob),
        )
        t = time.perf_counter()
        r = FSWindowDataManager(root, "bench", fs_options=opts, durability="flush")
        r.setup()
        setup_s = time.perf_counter() - t
        retrieve = timed(
            "retrieve (replay in window order)", windows, r.retrieve, windows * len(blob)
        )
        largest = timed("largest_completed_window()", 20, lambda i: r.largest_completed_window(), 0)
        r.teardown()
        # a fresh reader in "another process": the first retrieve reads the segment
        r2 = FSWindowDataManager(root, "bench", fs_options=opts, durability="flush")
        r2.setup()
        cold = timed(
            "retrieve (first access, cold reader)",
            1,
            lambda i: r2.retrieve(windows // 2),
            len(blob),
        )
        r2.teardown()
        os.environ.setdefault(WEBHDFS_ENV, conn["webhdfs_url"])  # the engine's own lookup
        claimed = claims(f"{conn['url']}/malhar-bench/{uuid.uuid4().hex[:8]}", windows)
        out += [
            base.row(),
            save.row(base),
            save_sync.row(base),
            f"  durability cost, HDFS saves: fsync {save_sync.rate:,.2f} saves/s vs flush "
            f"{save.rate:,.2f} saves/s: fsync/flush = {save_sync.rate / save.rate:.3f}",
            create.row(),
            create_sync.row(create),
            claimed.row(save),
            retrieve.row(),
            cold.row(),
            largest.row(),
            f"  setup() of a partition log with {windows} windows: {setup_s * 1e3:.1f} ms",
        ]
        fs.delete(path, recursive=True)
        return out
    finally:
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=20_000, help="local FS windows")
    parser.add_argument(
        "--fsync-windows", type=int, default=2_000, help="local FS windows with fsync"
    )
    parser.add_argument("--hdfs-windows", type=int, default=100)
    parser.add_argument("--no-hdfs", action="store_true")
    args = parser.parse_args()
    print(
        f"malhar storage benchmark - {platform.node()}: {os.cpu_count()} cores, "
        f"{_memory_gib():.0f} GiB, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}, load average {_load()} "
        "(other processes on this machine skew figures)"
    )
    for line in local_bench(args.windows, args.fsync_windows):
        print(line, flush=True)
    if not args.no_hdfs:
        for line in hdfs_bench(args.hdfs_windows):
            print(line, flush=True)
    print(f"load average at the end: {_load()}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _memory_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(ln for ln in f if ln.startswith("MemTotal:")).split()[1])
        return kib / (1 << 20)
    except (OSError, StopIteration, ValueError):
        return float("nan")


if __name__ == "__main__":
    main()
