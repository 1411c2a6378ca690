"""File connectors benchmark: CSV files -> Parquet files, exactly once, in one invocation on the
same data (issue 15).

    python bench/files.py [--files 8] [--rows 100000] [--repeat 2] [--master local[2]]

Measured, each on a fresh copy of the same CSV directory (``ts timestamp, store string,
amount double, qty bigint``), from the query's start until every row is in a visible
Parquet file:

- **malhar**: ``CsvFileInput`` (typed, 2 partitions) -> ``ParquetFileOutput`` (2 partitions,
  staged windows renamed into place on commit) on the malhar engine;
- **Spark**: ``readStream.csv(...)`` -> ``writeStream.parquet(...)`` with a checkpoint (Spark's
  exactly-once file sink), ``trigger(availableNow=True)``;
- **pyarrow**: ``pyarrow.csv.read_csv`` of every file, one thread (the raw read rate: the
  ceiling of a reader that must also write).

Targets (issue 15): malhar >= 1.0x Spark's throughput; malhar >= 60% of pyarrow's raw read
rate. The figures are printed with the machine's load average (a shared machine skews them).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DDL = "ts timestamp, store string, amount double, qty bigint"
SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("store", pa.string()), ("amount", pa.float64()),
     ("qty", pa.int64())]
)  # fmt: skip


#: rows per window and input partition
WINDOW_ROWS = 1_000_000


def write_data(folder: Path, files: int, rows: int) -> int:
    """``files`` CSV files of ``rows`` rows each (a header line first); return the bytes."""
    rng = random.Random(15)
    stores = [f"store-{i:03d}" for i in range(200)]
    folder.mkdir(parents=True)
    total = 0
    for f in range(files):
        lines = ["ts,store,amount,qty"]
        base = 1_795_000_000 + f * 86_400
        for _ in range(rows):
            t = time.gmtime(base + rng.randrange(86_400))
            lines.append(
                f"{time.strftime('%Y-%m-%d %H:%M:%S', t)},{rng.choice(stores)},"
                f"{rng.uniform(1, 500):.2f},{rng.randint(1, 9)}"
            )
        data = ("\n".join(lines) + "\n").encode()
        (folder / f"part-{f:04d}.csv").write_bytes(data)
        total += len(data)
    return total


def visible_rows(folder: Path) -> int:
    """Rows of the visible Parquet files (hidden names and staging skipped), by footers."""
    n = 0
    for p in folder.rglob("*.parquet"):
        rel = p.relative_to(folder).parts
        if any(x.startswith((".", "_")) for x in rel):
            continue
        try:
            n += pq.ParquetFile(p).metadata.num_rows
        except (OSError, pa.ArrowException):
            pass  # being renamed
    return n


def run_pyarrow(source: Path) -> float:
    started = time.perf_counter()
    rows = 0
    for p in sorted(source.glob("*.csv")):
        t = pcsv.read_csv(
            p,
            read_options=pcsv.ReadOptions(use_threads=False),
            convert_options=pcsv.ConvertOptions(column_types=SCHEMA),
        )
        rows += t.num_rows
    return time.perf_counter() - started


def run_spark(spark, source: Path, work: Path, total: int) -> float:
    out, ckpt = work / "spark-out", work / "spark-ckpt"
    started = time.perf_counter()
    q = (
        spark.readStream.schema(DDL)
        .option("header", True)
        .csv(str(source))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    elapsed = time.perf_counter() - started
    got = spark.read.parquet(str(out)).count()
    assert got == total, f"Spark wrote {got} rows, expected {total}"
    return elapsed


def run_malhar(spark, source: Path, work: Path, total: int, n: int) -> float:
    from malhar import DAG, launch
    from malhar import attributes as A
    from malhar.io.fs import CsvFileInput, ParquetFileOutput

    out = work / "malhar-out"
    dag = DAG(f"bench-files-{n}")
    # like Spark's file source with availableNow (one batch for what is there): large
    # windows; like its file sink (a file per task and batch): a file per window
    src = dag.add_operator(
        "csv",
        CsvFileInput(str(source), schema=DDL, scan_interval_ms=0),
        PARTITIONS=2,
        MAX_TUPLES_PER_WINDOW=WINDOW_ROWS,
    )
    sink = dag.add_operator(
        "parquet",
        ParquetFileOutput(str(out), schema=DDL, roll_windows=1, roll_bytes=1 << 30),
        PARTITIONS=2,
    )
    sink.input.set_attribute(A.PARALLEL_PARTITION, True)  # fused with the reader: no shuffle
    dag.add_stream("rows", src.output, sink.input)
    started = time.perf_counter()
    app = launch(dag, spark=spark, checkpoint=str(work / f"malhar-ckpt-{n}"), window_ms=50)
    try:
        while visible_rows(out) < total:
            failure = app.failure()
            if failure is not None:
                raise RuntimeError(failure)
            time.sleep(0.05)  # polling the output: files appear as windows commit
        elapsed = time.perf_counter() - started
    finally:
        app.stop()
    got = visible_rows(out)
    assert got == total, f"malhar wrote {got} rows, expected {total}"
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/files.py")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per file")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(ROOT))

    from malhar import build_session

    work = Path(tempfile.mkdtemp(prefix="malhar-bench-files-"))
    try:
        size = write_data(work / "data", args.files, args.rows)
        total = args.files * args.rows
        print(f"data: {args.files} CSV files, {total:,} rows, {size / 1e6:.1f} MB")
        spark = build_session(args.master, app_name="bench-files", shuffle_partitions=2)
        times: dict[str, list[float]] = {"pyarrow": [], "spark": [], "malhar": []}
        loads = []
        for i in range(args.repeat + 1):  # the first round warms the JVM and the workers up
            round_dir = work / f"round-{i}"
            source = round_dir / "in"
            shutil.copytree(work / "data", source)
            t = {
                "pyarrow": run_pyarrow(source),
                "spark": run_spark(spark, source, round_dir, total),
                "malhar": run_malhar(spark, source, round_dir, total, i),
            }
            loads.append(os.getloadavg()[0])
            label = "warm-up" if i == 0 else f"round {i}"
            print(f"  {label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
            if i:
                for k, v in t.items():
                    times[k].append(v)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rate = {k: total / statistics.median(v) for k, v in times.items()}
    print(f"\nthroughput (rows/s, median of {args.repeat}; load average {statistics.mean(loads):.1f}"
          f" on {os.cpu_count()} cores):")  # fmt: skip
    for k in ("pyarrow", "spark", "malhar"):
        print(f"  {k:<8} {rate[k]:>12,.0f}  ({size / 1e6 / statistics.median(times[k]):.1f} MB/s)")
    verdicts = [
        ("malhar / Spark readStream.csv -> parquet sink", rate["malhar"] / rate["spark"], 1.0),
        ("malhar / pyarrow raw CSV read", rate["malhar"] / rate["pyarrow"], 0.6),
    ]
    print("\ntargets:")
    for name, ratio, goal in verdicts:
        print(
            f"  {name:<48} {ratio:6.2f}x  (>= {goal:.1f}x) {'met' if ratio >= goal else 'NOT met'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
