"""The sample's DAG and data: sales as CSV files, the valid ones as Parquet by date.

CsvFileInput (typed, 2 partitions) -> CleanSales -> ParquetFileOutput(partition_by=date)
             \\-> error port -> Collector "rejected" (malformed lines, with file and offset)
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from malhar import DAG, InputPort, Operator, OutputPort, launch
from malhar.io.fs import CsvFileInput, ParquetFileOutput
from malhar.testing.operators import Collector, collected

#: what the CSV files hold (a header line first)
CSV_SCHEMA = "ts timestamp, store string, amount double"
#: what the Parquet files hold (date names the directory, it is not stored in the files)
OUT_SCHEMA = "date date, store string, amount double"
STORES = ["berlin", "pune", "lima", "osaka"]


class CleanSales(Operator):
    """Keeps the sales with a positive amount and adds their (UTC) date; vectorized."""

    input = InputPort(CSV_SCHEMA)
    output = OutputPort(OUT_SCHEMA)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        kept = batch.filter(pc.greater(batch.column("amount"), 0.0))
        if kept.num_rows:
            date = pc.cast(kept.column("ts"), pa.date32())
            self.output.emit_batch(
                pa.RecordBatch.from_arrays(
                    [date, kept.column("store"), kept.column("amount")],
                    names=["date", "store", "amount"],
                )
            )


def build(source: str, out: str, name: str = "files-to-parquet") -> DAG:
    dag = DAG(name)
    src = dag.add_operator(
        "csv", CsvFileInput(source, schema=CSV_SCHEMA, scan_interval_ms=200), PARTITIONS=2
    )
    clean = dag.add_operator("clean", CleanSales(), PARTITIONS=2)
    sink = dag.add_operator(
        "parquet",
        ParquetFileOutput(out, schema=OUT_SCHEMA, partition_by="date", roll_windows=5),
        PARTITIONS=2,
    )
    rejected = dag.add_operator("rejected", Collector())
    dag.add_stream("sales", src.output, clean.input)
    dag.add_stream("clean", clean.output, sink.input)
    dag.add_stream("bad", src.error, rejected.input)
    return dag


def write_files(folder: Path, files: int = 6, rows: int = 500, seed: int = 7) -> Counter:
    """CSV files of sales over three days (some refunds, one malformed line per file);
    return the ground truth: (date, store) -> number of valid sales."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    truth: Counter = Counter()
    start = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    for f in range(files):
        lines = ["ts,store,amount"]
        for i in range(rows):
            ts = start + dt.timedelta(seconds=rng.randrange(3 * 86_400))
            store = rng.choice(STORES)
            amount = round(rng.uniform(-20, 200), 2)  # negative: a refund, filtered out
            lines.append(f"{ts:%Y-%m-%d %H:%M:%S},{store},{amount}")
            if amount > 0:
                truth[(ts.date().isoformat(), store)] += 1
            if i == rows // 2:
                lines.append("not a timestamp,lima")  # malformed: to the error port
        tmp = folder / f".sales-{f:03d}.csv.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(folder / f"sales-{f:03d}.csv")  # appears complete, as producers should
    return truth


@dataclass
class Result:
    """What a run of the sample produced, next to the ground truth."""

    truth: Counter
    got: Counter = field(default_factory=Counter)  #: (date, store) -> rows read back
    by_date: dict[str, int] = field(default_factory=dict)
    rejected: list[dict[str, Any]] = field(default_factory=list)  #: the error port's rows
    error_counts: Counter = field(default_factory=Counter)  #: "operator.port" -> tuples
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return self.got == self.truth


def run_sample(spark: Any, work: Path, timeout: float = 600.0) -> Result:
    """Write the CSV files under ``work``, run the application until every valid sale is in
    the Parquet output (or ``timeout``), stop it, and read the output back with
    ``spark.read.parquet``."""
    source, out, checkpoint = work / "in", work / "out", str(work / "checkpoint")
    result = Result(write_files(source))
    total = sum(result.truth.values())
    started = time.monotonic()
    app = launch(build(str(source), str(out)), spark=spark, checkpoint=checkpoint, window_ms=200)

    def rows() -> int:  # from the visible files' footers: no Spark job competing with the app
        n = 0
        for path in out.rglob("*.parquet"):
            if not any(p.startswith(("_", ".")) for p in path.relative_to(out).parts):
                n += pq.ParquetFile(path).metadata.num_rows
        return n

    try:
        while rows() < total and app.failure() is None and time.monotonic() - started < timeout:
            time.sleep(0.5)  # the files appear as their windows are committed
        failure = app.failure()
        if failure is not None:
            raise RuntimeError(f"the application failed: {failure}")
    finally:
        app.stop()
    result.seconds = time.monotonic() - started
    for w in range(app.last_window + 1):
        result.error_counts.update(app.error_counts(w))
    back = spark.read.parquet(str(out))
    for r in back.select("date", "store").collect():
        result.got[(str(r["date"]), r["store"])] += 1
    for r in back.groupBy("date").count().orderBy("date").collect():
        result.by_date[str(r["date"])] = r["count"]
    result.rejected = [e for rows_ in collected(checkpoint, "rejected").values() for e in rows_]
    return result
