"""Benchmark of the keyed windowed operator against Spark's own windowed aggregation.

    python bench/window.py                  # 2.4M events, 2 rounds (~4-8 min on 2 cores)
    python bench/window.py --events 600000 --rounds 1     # a quick look

One invocation, the same data, the same machine, one query at a time:

1. **Throughput**: a keyed tumbling-window count, 10 s event-time windows, 1000 keys,
   events out of order by up to 1 s, in micro-batches of 100k events read from the same
   parquet files.
   - Spark: ``readStream.parquet(maxFilesPerTrigger=1).withWatermark("ts", "1 second")
     .groupBy(window("ts", "10 seconds"), "key").count()`` in append mode into ``noop``
     (RocksDB state store, as ``build_session`` sets it).
   - malhar: an input operator reading the same file per window (two partitions, one row
     group of each file each, emitting its watermark: largest event time - 1 s) -> shuffle by key
     -> ``KeyedWindowedOperator(Count(), TimeWindows(10 s), key="key", timestamp="ts")``
     x2 (the vectorized batch path, in-memory state) -> a pane counter.
   Both run as Spark streaming queries (trigger 10 ms: the next batch starts when the
   previous one ends). Throughput = events / the sum of the batches'
   ``durationMs.triggerExecution`` (query start-up excluded on both sides; wall time is
   printed too). malhar's result is checked: the ON_TIME panes hold every event, one
   pane per (key, window) of a pyarrow group-by of the data. Target: >= 1.0x Spark.
2. **Per-window cost of the state**: what checkpointing the windowed operator's state
   costs at the end of a streaming window (cloudpickle of the state, as the engine's
   snapshot, and the write of the file) for 10k, 100k and 1M (key, window) cells, for the
   in-memory storage; and the spillable storage on managed state when it is available.

Prints the machine (cores, load average before and after) with the figures.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)

from malhar import DAG, InputOperator, KeyCodec, Operator, OperatorContext, Property, State  # noqa: E402
from malhar.control import DeliveryType  # noqa: E402
from malhar.ports import InputPort, OutputPort  # noqa: E402
from malhar.window import (  # noqa: E402
    MAX_TIMESTAMP,
    KeyedWindowedOperator,
    TimeWindows,
    Timing,
    Watermark,
)
from malhar.window.accumulation import Count  # noqa: E402

SCHEMA = pa.schema([("key", pa.string()), ("ts", pa.timestamp("ms", "UTC"))])
WINDOW_MS = 10_000
BASE = 1_700_000_000_000


def make_files(directory: Path, events: int, batch: int, keys: int, seed: int = 1) -> list[Path]:
    """``events`` events in files of ``batch``: event i at BASE + i ms, up to 1 s late."""
    rng = np.random.default_rng(seed)
    names = np.array([f"k{i:05d}" for i in range(keys)], dtype=object)
    files = []
    for f, start in enumerate(range(0, events, batch)):
        n = min(batch, events - start)
        ts = BASE + np.arange(start, start + n, dtype=np.int64) - rng.integers(0, 1000, n)
        table = pa.table(
            {
                "key": pa.array(names[rng.integers(0, keys, n)], type=pa.string()),
                "ts": pa.array(ts, type=pa.int64()).cast(pa.timestamp("ms", "UTC")),
            },
            schema=SCHEMA,
        )
        path = directory / f"part-{f:05d}.parquet"
        pq.write_table(table, path, row_group_size=-(-n // 2))  # a row group per reader
        files.append(path)
    return files


# -- malhar side ---------------------------------------------------------------------------------
class ParquetWindows(InputOperator):
    """Window i reads file i (its partition's row group); the watermark follows. Two
    partitions: the files have two row groups."""

    output = OutputPort("key string, ts timestamp", control_aware=True)

    files = Property(list, default=[])
    lateness_ms = Property(int, default=1000)
    first_window = State(default=None)
    highest = State(default=None)

    def setup(self, context: OperatorContext) -> None:
        self._p, self._n = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        if self.first_window is None:
            self.first_window = window_id
        self._index, self._done = window_id - self.first_window, False

    def emit_tuples(self) -> None:
        if self._done or self._index >= len(self.files):
            return
        self._done = True
        part = pq.ParquetFile(self.files[self._index]).read_row_group(self._p).combine_chunks()
        for b in part.to_batches():
            self.output.emit_batch(b)
        high = int(pc.max(part.column("ts").cast(pa.int64())).as_py())
        self.highest = high if self.highest is None else max(self.highest, high)

    def end_window(self) -> None:
        if self._index >= len(self.files):
            mark = MAX_TIMESTAMP  # the end of the input: every window closes
        elif self.highest is None:
            return
        else:
            mark = self.highest - self.lateness_ms
        self.output.emit_control(Watermark(mark), DeliveryType.END_WINDOW)


class PaneTally(Operator):
    """Counts the ON_TIME panes and the events in them; writes the totals per window."""

    input = InputPort()
    out_dir = Property(str, default="")
    panes = State(default=0)
    total = State(default=0)

    def setup(self, context: OperatorContext) -> None:
        self._file = Path(self.out_dir) / f"tally-{context.partition}"

    def begin_window(self, window_id: int) -> None:
        self._panes = self._total = 0

    def process(self, t: Any) -> None:
        if t.pane.timing is Timing.ON_TIME:
            self._panes += 1
            self._total += t.value

    def end_window(self) -> None:
        self.panes += self._panes
        self.total += self._total
        self._file.write_text(f"{self.panes} {self.total}")


def run_malhar(spark: Any, files: list[Path], work: Path, plan: str) -> dict[str, Any]:
    """``plan="shuffle"``: every event is shuffled by key to the counters (2 partitions).
    ``plan="combine"``: the counters are fused with the readers and send partial counts
    per (window, key) to their unifier, which fires the panes (Spark's own plan: a partial
    aggregation before the shuffle)."""
    from malhar import launch

    out = work / "tally"
    out.mkdir(parents=True, exist_ok=True)
    dag = DAG(f"bench-window-{plan}-{int(time.time() * 1000)}")
    src = dag.add_operator(
        "src", ParquetWindows().configure(files=[str(f) for f in files]), PARTITIONS=2
    )
    combine = plan == "combine"
    counter = KeyedWindowedOperator(
        Count(),
        TimeWindows(WINDOW_MS),
        key="key",
        timestamp="ts",
        allowed_lateness=0,
        combine_partitions=combine,
    )
    counts = dag.add_operator("counts", counter, PARTITIONS=2)
    if not combine:
        counts.input.set_attribute("STREAM_CODEC", KeyCodec("key"))
    tally = dag.add_operator(
        "tally", PaneTally().configure(out_dir=str(out)), PARTITIONS=1 if combine else 2
    )
    dag.add_stream("events", src.output, counts.input)
    dag.add_stream("panes", counts.output, tally.input)
    started = time.monotonic()
    app = launch(
        dag, spark=spark, checkpoint=str(work / "ckpt"), window_ms=10, windows=len(files) + 2
    )
    app.await_completion(timeout=3600)
    wall = time.monotonic() - started
    batches = [p["durationMs"]["triggerExecution"] for p in app.query.recentProgress]
    panes = total = 0
    for f in out.glob("tally-*"):
        p, t = map(int, f.read_text().split())
        panes, total = panes + p, total + t
    return {
        "busy_s": sum(batches) / 1000,
        "wall_s": wall,
        "batches": len(batches),
        "panes": panes,
        "total": total,
    }


# -- Spark side ----------------------------------------------------------------------------------
def run_spark(spark: Any, data_dir: Path, work: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.schema("key string, ts timestamp")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(data_dir))
        .withWatermark("ts", "1 second")
        .groupBy(F.window("ts", "10 seconds"), "key")
        .count()
    )
    started = time.monotonic()
    query = (
        stream.writeStream.outputMode("append")
        .format("noop")
        .option("checkpointLocation", str(work / "spark-ckpt"))
        .trigger(processingTime="10 milliseconds")
        .start()
    )
    files = len(list(data_dir.glob("*.parquet")))
    while True:  # until every file is in a finished batch (the source's offset counts files)
        progress = query.recentProgress
        done = sum(p["numInputRows"] for p in progress)
        if done >= EVENTS_TOTAL[0] and not query.status["isTriggerActive"]:
            break
        if not query.isActive:
            raise RuntimeError(f"the Spark query stopped: {query.exception()}")
        time.sleep(0.2)
    wall = time.monotonic() - started
    query.stop()
    batches = [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress]
    return {"busy_s": sum(batches) / 1000, "wall_s": wall, "batches": len(batches), "files": files}


EVENTS_TOTAL = [0]


def reference(files: list[Path]) -> tuple[int, int]:
    """(key, window) groups and events, by a pyarrow group-by of every file."""
    table = pa.concat_tables(pq.read_table(f) for f in files)
    ts = table.column("ts").cast(pa.int64()).to_numpy()
    table = table.append_column("w", pa.array(ts - ts % WINDOW_MS))
    groups = table.group_by(["key", "w"]).aggregate([([], "count_all")])
    return groups.num_rows, table.num_rows


# -- state checkpoint cost -------------------------------------------------------------------------
def state_cost(kind: str, cells: int, delta: int = 10_000) -> dict[str, float]:
    """The end-of-window checkpoint of a KeyedWindowedOperator holding ``cells`` cells, in
    a window that adds ``delta`` cells (a new event-time window of ``delta`` keys): the
    engine's snapshot of the operator (cloudpickle, written and fsynced) plus, for the
    spillable storage, the managed state's incremental checkpoint."""
    from pyspark import cloudpickle

    from malhar.operator import OperatorContext
    from malhar.state import window_snapshot
    from malhar.testing import OperatorHarness
    from malhar.window import SpillableWindowedStorage

    root = tempfile.mkdtemp(prefix="malhar-bench-state-")
    storage = SpillableWindowedStorage(budget_bytes=64 << 20) if kind == "spillable" else None
    op = KeyedWindowedOperator(
        Count(), TimeWindows(WINDOW_MS), key="key", timestamp="ts", storage=storage
    )
    h = OperatorHarness(op, OperatorContext(name="counts", checkpoint=root))
    names = np.array([f"k{i:05d}" for i in range(delta)], dtype=object)

    def window_batch(w: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {"key": pa.array(names, type=pa.string()), "ts": pa.array([w * WINDOW_MS] * delta)}
        )

    started = time.perf_counter()
    for w in range(max(0, cells // delta - 2)):  # the middle measured window holds `cells`
        h.run_window([("input", window_batch(w))])
    build = time.perf_counter() - started
    times, size = [], 0
    for _ in range(3):
        w = h.window + 1
        h.begin_window(w)
        h.put("input", window_batch(w))
        op.end_window()
        t0 = time.perf_counter()
        h.managed.checkpoint(w)  # spillable: what changed in w; in memory: nothing to do
        data = cloudpickle.dumps(window_snapshot(op), protocol=pickle.HIGHEST_PROTOCOL)
        path = Path(root) / f"{w}.state"
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - t0)
        size = len(data)
        op.checkpointed(w)
    held = len(op._store) - delta  # what the middle (median) window held
    h.teardown()
    return {
        "cells": held,
        "ms": statistics.median(times) * 1000,
        "mb": size / 1e6,
        "build_s": build,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_400_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds (after a warm-up)")
    parser.add_argument("--state-sizes", default="10000,100000,1000000")
    args = parser.parse_args()
    EVENTS_TOTAL[0] = args.events

    from malhar import build_session

    load_before = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}"
    )
    work = Path(tempfile.mkdtemp(prefix="malhar-bench-window-"))
    data_dir = work / "data"
    data_dir.mkdir()
    files = make_files(data_dir, args.events, args.batch, args.keys)
    groups, events = reference(files)
    print(
        f"data: {events} events in {len(files)} files of {args.batch}, {args.keys} keys, {groups} (key, window) groups"
    )
    spark = build_session("local[2]", app_name="bench-window", shuffle_partitions=2)
    plans = ("shuffle", "combine")
    ratios: dict[str, list[float]] = {p: [] for p in plans}
    # round 0 warms both sides up (JVM, code generation, Python workers) and is not counted
    for r in range(args.rounds + 1):
        s = run_spark(spark, data_dir, work / f"spark-{r}")
        line = [
            f"round {r}{' (warm-up)' if r == 0 else ''}: Spark {events / s['busy_s']:,.0f} "
            f"events/s (busy {s['busy_s']:.1f}s in {s['batches']} batches, wall {s['wall_s']:.1f}s)"
        ]
        for plan in plans:
            m = run_malhar(spark, files, work / f"malhar-{plan}-{r}", plan)
            exact = m["panes"] == groups and m["total"] == events
            ratio = s["busy_s"] / m["busy_s"]
            if r:
                ratios[plan].append(ratio)
            line.append(
                f"malhar {plan} {events / m['busy_s']:,.0f} events/s (busy {m['busy_s']:.1f}s, "
                f"wall {m['wall_s']:.1f}s) {ratio:.2f}x {'EXACT' if exact else 'WRONG'}"
            )
            if not exact:
                print(" | ".join(line), file=sys.stderr)
                print(
                    f"  expected {groups} panes holding {events} events, got {m}", file=sys.stderr
                )
                return 1
        print(" | ".join(line), flush=True)
    spark.stop()
    for plan in plans:
        ratio = statistics.median(ratios[plan])
        target = "met" if ratio >= 1.0 else "not met"
        print(
            f"throughput ratio malhar ({plan}) / Spark, median of {len(ratios[plan])} rounds: "
            f"{ratio:.2f}x -> target >= 1.0x {target}"
        )
    print("per-window cost of the state's checkpoint (a window adding 10,000 cells):")
    for kind in ("in-memory", "spillable"):
        for cells in [int(c) for c in args.state_sizes.split(",")]:
            c = state_cost(kind, cells)
            print(
                f"  {kind:>9}, {c['cells']:>9,} cells: {c['ms']:8.1f} ms per window "
                f"(operator snapshot {c['mb']:6.2f} MB; state built in {c['build_s']:.0f}s)",
                flush=True,
            )
    load_after = os.getloadavg()
    print(f"load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
