"""Benchmark of managed state (``malhar.util.state``), in one invocation.

    python bench/state.py            # 10M keys (a few minutes on 2 cores)
    python bench/state.py --quick    # 1M keys

(a) a keyed running count over ``--keys`` distinct string keys with a 256 MiB budget,
    driven through ``ManagedState`` directly, windows of 200k updates, each window
    checkpointed and the previous one committed: throughput and the process's peak
    RSS (target < 1 GiB);
(b) checkpoint cost per window with 10k keys changed per window, at 100k total keys
    and at ``--keys`` total keys (the state of (a)): p50 of ``checkpoint()`` and the
    ratio (target within 1.5x);
    and on the HDFS fixture at 100k keys (skip with ``--no-hdfs``);
(c) the local store comparison of ``bench/state_stores.py``;
(d) the keyed running count through the engine (managed state in the counting
    operators, Spark tasks) against Spark's ``transformWithStateInPandas`` with the
    RocksDB provider and changelog checkpointing, on the same data
    (``bench/state_engine.py``): throughput ratio at ``--engine-keys`` (1M; target
    >= 1.0x) and the counting Python workers' peak RSS (``--skip-engine`` to skip).

Each measurement runs in its own child process so its peak RSS is its own. The
checkpoint root and the local stores are on the local filesystem (``/tmp``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

WINDOW_UPDATES = 200_000
CHANGED_PER_WINDOW = 10_000
COST_WINDOWS = 20
BUDGET = 256 << 20
STRIDE = 7_919  # coprime with the key counts used: i * STRIDE % n visits every key once


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


def _load_malhar_state() -> Any:
    """Import ``malhar.util.state`` without ``malhar/__init__`` (which imports the engine and
    pyspark): the RSS measured is managed state's, not Spark's."""
    import types

    if "malhar" not in sys.modules:
        pkg = types.ModuleType("malhar")
        pkg.__path__ = [str(Path(__file__).resolve().parents[1] / "malhar")]
        sys.modules["malhar"] = pkg
    import malhar.util.state as state

    return state


def child(
    keys: int, load: bool, budget: int, root: str | None = None, fs_options: str = "{}"
) -> dict[str, Any]:
    """Load ``keys`` counters (timed if ``load``), then COST_WINDOWS windows of 10k changes.

    ``root``: the checkpoint root (default: a temporary local directory).
    """
    state = _load_malhar_state()
    tmp = tempfile.mkdtemp(prefix="malhar-bench-state-")
    out: dict[str, Any] = {"keys": keys}
    try:
        ms = state.ManagedState(
            root or os.path.join(tmp, "ckpt"),
            "counter",
            0,
            budget_bytes=budget,
            local_dir=os.path.join(tmp, "local"),
            fs_options=json.loads(fs_options),
        )
        counts = ms.map("counts", key_codec=state.STR, value_codec=state.INT_VALUE)
        ms.restore(-1)
        window = 0
        t0 = time.perf_counter()
        ckpt_s = commit_s = 0.0
        for start in range(0, keys, WINDOW_UPDATES):
            for i in range(start, min(keys, start + WINDOW_UPDATES)):
                k = f"key-{i * STRIDE % keys:09d}"
                counts[k] = counts.get(k, 0) + 1
            c0 = time.perf_counter()
            ms.checkpoint(window)
            c1 = time.perf_counter()
            ms.committed(window - 1)
            commit_s += time.perf_counter() - c1
            ckpt_s += c1 - c0
            window += 1
        load_s = time.perf_counter() - t0
        if load:
            out.update(
                load_updates=keys,
                load_s=load_s,
                load_per_s=keys / load_s,
                load_windows=window,
                load_checkpoint_s=ckpt_s,
                load_committed_s=commit_s,
            )
        # (b): windows of 10k changed keys spread over the whole key space
        step = max(1, keys // CHANGED_PER_WINDOW)
        per_window, per_bytes, per_commit, per_process = [], [], [], []
        for w in range(COST_WINDOWS):
            p0 = time.perf_counter()
            for j in range(CHANGED_PER_WINDOW):
                k = f"key-{(j * step + w * 7) % keys:09d}"
                counts[k] = counts.get(k, 0) + 1
            b0 = ms.stats["bytes_written"]
            c0 = time.perf_counter()
            ms.checkpoint(window)
            c1 = time.perf_counter()
            ms.committed(window - 1)
            c2 = time.perf_counter()
            per_process.append(c0 - p0)
            per_window.append(c1 - c0)
            per_commit.append(c2 - c1)
            per_bytes.append(ms.stats["bytes_written"] - b0)
            window += 1
        assert len(counts) == keys, (len(counts), keys)
        out.update(
            checkpoint_p50_ms=statistics.median(per_window) * 1000,
            checkpoint_max_ms=max(per_window) * 1000,
            checkpoint_bytes_p50=statistics.median(per_bytes),
            committed_mean_ms=statistics.mean(per_commit) * 1000,
            process_p50_ms=statistics.median(per_process) * 1000,
            checkpoint_disk_mib=_du(os.path.join(tmp, "ckpt")) / (1 << 20),
            local_disk_mib=_du(os.path.join(tmp, "local")) / (1 << 20),
            checkpoint_files=sum(len(f) for _, _, f in os.walk(os.path.join(tmp, "ckpt"))),
        )
        ms.close()
        out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _spawn(keys: int, load: bool, root: str | None = None, opts: str = "{}") -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(keys), "--budget", str(BUDGET)]
    if load:
        cmd.append("--load")
    if root:
        cmd += ["--root", root, "--fs-options", opts]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child {cmd} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _hdfs_cost() -> str:
    """(b) on the project's HDFS fixture (WebHDFS): 100k keys, 10k changed per window."""
    import uuid

    from malhar.testing.services import acquire

    service = acquire("hdfs")
    try:
        conn = service.connection()
        opts = json.dumps({"webhdfs_url": conn["webhdfs_url"], "user": conn["user"]})
        root = f"{conn['url']}/malhar-bench/state-{uuid.uuid4().hex[:8]}"
        r = _spawn(100_000, load=False, root=root, opts=opts)
    finally:
        if not getattr(service, "external", False):
            service.stop()
    return (
        f"100k keys, checkpoint root on HDFS (WebHDFS, one create + one rename per window): "
        f"checkpoint() p50 {r['checkpoint_p50_ms']:.0f} ms (max {r['checkpoint_max_ms']:.0f}), "
        f"committed() mean {r['committed_mean_ms']:.0f} ms"
    )


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M keys instead of 10M")
    ap.add_argument("--keys", type=int, default=None)
    ap.add_argument("--store-keys", type=int, default=None)
    ap.add_argument("--skip-stores", action="store_true")
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--engine-keys", type=int, default=None, help="1M (quick: 200k)")
    ap.add_argument("--no-hdfs", action="store_true", help="skip the checkpoint cost on HDFS")
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--fs-options", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=int, default=BUDGET, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.load, args.budget, args.root, args.fs_options)))
        return
    keys = args.keys or (1_000_000 if args.quick else 10_000_000)
    store_keys = args.store_keys or (200_000 if args.quick else 1_000_000)
    print(
        f"managed state benchmark: {platform.node()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, budget {BUDGET >> 20} MiB"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    big = _spawn(keys, load=True)
    print(
        f"\n(a) keyed running count, {keys:,} distinct keys, windows of {WINDOW_UPDATES:,} updates"
    )
    print(
        f"    {big['load_updates']:,} updates in {big['load_s']:.1f}s = {big['load_per_s']:,.0f}/s "
        f"({big['load_windows']} windows; checkpoint {big['load_checkpoint_s']:.1f}s, "
        f"committed/compaction {big['load_committed_s']:.1f}s of it)"
    )
    print(
        f"    checkpoint FS {big['checkpoint_disk_mib']:.0f} MiB in {big['checkpoint_files']} "
        f"files, local store {big['local_disk_mib']:.0f} MiB"
    )
    rss_ok = big["peak_rss_mib"] < 1024
    print(f"    peak RSS {big['peak_rss_mib']:.0f} MiB (target < 1024 MiB): {_verdict(rss_ok)}")

    small = _spawn(100_000, load=False)
    print(
        f"\n(b) checkpoint cost per window, {CHANGED_PER_WINDOW:,} keys changed per window "
        f"({COST_WINDOWS} windows)"
    )
    for label, r in (("100k keys", small), (f"{keys / 1e6:g}M keys", big)):
        print(
            f"    {label:>10}: checkpoint() p50 {r['checkpoint_p50_ms']:.1f} ms "
            f"(max {r['checkpoint_max_ms']:.1f}), {r['checkpoint_bytes_p50'] / 1024:.0f} KiB "
            f"written; committed() mean {r['committed_mean_ms']:.1f} ms; "
            f"processing the window p50 {r['process_p50_ms']:.0f} ms"
        )
    ratio = big["checkpoint_p50_ms"] / small["checkpoint_p50_ms"]
    print(
        f"    ratio {keys / 1e6:g}M / 100k = {ratio:.2f}x (target <= 1.5x): {_verdict(ratio <= 1.5)}"
    )
    if not args.no_hdfs:
        print(f"    {_hdfs_cost()}")

    if not args.skip_stores:
        import state_stores

        print(f"\n(c) local store candidates, {store_keys:,} keys (bench/state_stores.py)")
        state_stores.print_table(state_stores.compare(store_keys))
    if not args.skip_engine:
        import state_engine

        engine_keys = args.engine_keys or (200_000 if args.quick else 1_000_000)
        rows = 20_000 if args.quick else 100_000
        windows = max(12, 3 * engine_keys // rows)
        state_engine.main(
            ["--keys", str(engine_keys), "--rows", str(rows), "--windows", str(windows)]
        )
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
