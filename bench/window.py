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
from malhar.window import MAX_TIMESTAMP, KeyedWindowedOperator, TimeWindows, Watermark  # noqa: E402
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

    def process(self, t: Any) -> None:
        if t.pane.timing.value == "ON_TIME":
            self.panes += 1
            self.total += t.value

    def end_window(self) -> None:
        self._file.write_text(f"{self.panes} {self.total}")


def run_malhar(spark: Any, files: list[Path], work: Path) -> dict[str, Any]:
    from malhar import launch

    out = work / "tally"
    out.mkdir(parents=True, exist_ok=True)
    dag = DAG(f"bench-window-{int(time.time() * 1000)}")
    src = dag.add_operator(
        "src", ParquetWindows().configure(files=[str(f) for f in files]), PARTITIONS=2
    )
    counter = KeyedWindowedOperator(
        Count(), TimeWindows(WINDOW_MS), key="key", timestamp="ts", allowed_lateness=0
    )
    counts = dag.add_operator("counts", counter, PARTITIONS=2)
    counts.input.set_attribute("STREAM_CODEC", KeyCodec("key"))
    tally = dag.add_operator("tally", PaneTally().configure(out_dir=str(out)), PARTITIONS=2)
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
def state_cost(cells: int, keys: int = 10_000) -> dict[str, float]:
    """End-of-window checkpoint of a KeyedWindowedOperator holding ``cells`` cells."""
    from pyspark import cloudpickle

    from malhar.state import window_snapshot
    from malhar.testing import OperatorHarness

    op = KeyedWindowedOperator(Count(), TimeWindows(WINDOW_MS), key="key", timestamp="ts")
    h = OperatorHarness(op)
    windows = max(1, cells // keys)
    names = np.array([f"k{i:05d}" for i in range(keys)], dtype=object)
    rows = windows * keys
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array(np.tile(names, windows), type=pa.string()),
            "ts": pa.array(np.repeat(np.arange(windows, dtype=np.int64) * WINDOW_MS, keys)),
        }
    )
    h.run_window([("input", batch)])
    assert len(op._store) == rows
    times, size = [], 0
    with tempfile.TemporaryDirectory() as d:
        for i in range(5):
            started = time.perf_counter()
            data = cloudpickle.dumps(window_snapshot(op), protocol=pickle.HIGHEST_PROTOCOL)
            path = Path(d) / f"{i}.state"
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            times.append(time.perf_counter() - started)
            size = len(data)
    return {"cells": rows, "ms": statistics.median(times) * 1000, "mb": size / 1e6}


def spillable_available() -> bool:
    try:
        import malhar.util.state  # noqa: F401
    except ImportError:
        return False
    return False  # the spillable windowed storage is not built yet (docs/window.md)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_400_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
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
    ratios = []
    for r in range(args.rounds):
        s = run_spark(spark, data_dir, work / f"spark-{r}")
        m = run_malhar(spark, files, work / f"malhar-{r}")
        exact = m["panes"] == groups and m["total"] == events
        ratio = s["busy_s"] / m["busy_s"]
        ratios.append(ratio)
        print(
            f"round {r + 1}: Spark {events / s['busy_s']:,.0f} events/s (busy {s['busy_s']:.1f}s in "
            f"{s['batches']} batches, wall {s['wall_s']:.1f}s) | malhar {events / m['busy_s']:,.0f} "
            f"events/s (busy {m['busy_s']:.1f}s in {m['batches']} batches, wall {m['wall_s']:.1f}s) "
            f"| ratio {ratio:.2f}x | malhar result {'EXACT' if exact else 'WRONG'} "
            f"({m['panes']} panes, {m['total']} events)"
        )
        if not exact:
            print(f"  expected {groups} panes holding {events} events", file=sys.stderr)
            return 1
    spark.stop()
    ratio = statistics.median(ratios)
    target = "met" if ratio >= 1.0 else "not met"
    print(
        f"throughput ratio malhar / Spark (median of {len(ratios)}): {ratio:.2f}x -> target >= 1.0x {target}"
    )
    print("per-window cost of checkpointing the windowed operator's state:")
    for cells in (10_000, 100_000, 1_000_000):
        c = state_cost(cells)
        print(
            f"  in-memory, {c['cells']:>9,} cells: {c['ms']:8.1f} ms per window, {c['mb']:6.1f} MB"
        )
    if spillable_available():
        print("  spillable: see above")
    else:
        print(
            "  spillable: not measured: the spillable storage on managed state (malhar/util/state) "
            "is not built yet; see docs/window.md"
        )
    load_after = os.getloadavg()
    print(f"load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
