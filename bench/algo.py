"""The operator catalogue: batch path vs per-tuple path vs Spark's own operator (issue 17).

    python bench/algo.py                 # 1M rows per family (~3 min on 2 cores)
    python bench/algo.py --rows 200000   # quicker
    python bench/algo.py --only math,top

For each family, one representative operator (dedup: two, by an int and by a str key) is fed
the same rows three ways, in one run:

- **batch**: Arrow record batches of ``--batch`` rows through ``process_batch`` (the
  operator harness, i.e. the engine's dispatcher; outputs discarded, typed where the
  operator has a ``schema`` so they stay Arrow);
- **tuple**: the same rows as dicts through ``process``, one call per tuple (on
  ``--tuple-rows`` rows: the rate is what counts);
- **spark**: the equivalent DataFrame operation on a cached DataFrame of the rows in
  ``local[2]`` (``groupBy().agg``, ``row_number`` over a window, ``filter``, ``from_csv``,
  ``dropDuplicates``, a broadcast join ...), written to Spark's ``noop`` sink; best of 3.

Targets: batch >= 10x tuple; batch within 1.5x of Spark (batch/spark >= 0.67). Rates are
tuples per second of input; the 1-minute load average is printed (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from malhar import OperatorContext  # noqa: E402
from malhar import algo as A  # noqa: E402
from malhar.ports import Emitter, ports_of  # noqa: E402
from malhar.testing.harness import OperatorHarness  # noqa: E402

DDL = "id bigint, k string, v bigint, t bigint, s string"


class Discard(Emitter):
    def tuple(self, value: Any) -> None:
        pass

    def batch(self, batch: pa.RecordBatch) -> None:
        pass

    def control(self, ctl: Any, sender: Any = None) -> None:
        pass


def rows_table(n: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = np.array([f"k{i:04d}" for i in range(1000)], dtype=object)
    labels = np.array([f"s{i:02d}" for i in range(50)], dtype=object)
    ids = rng.integers(0, n // 2 + 1, n)  # about a third are repeats
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array(keys[rng.integers(0, 1000, n)], pa.string()),
            "v": pa.array(rng.integers(0, 1000, n), pa.int64()),
            "t": pa.array(1_700_000_000_000 + np.sort(rng.integers(0, 600_000, n)), pa.int64()),
            "s": pa.array(labels[rng.integers(0, 50, n)], pa.string()),
        }
    )


@dataclass
class Family:
    name: str
    operator: str
    make: Callable[[str], Any]  # checkpoint dir -> operator
    port: str
    spark: Callable[[Any, dict], Any]  # (df, extras) -> DataFrame to run
    data: str = "rows"  # "rows", "lines" or "uids" (rows with a string id, uid)
    #: run before the measured window (window 0), e.g. to load a join's table
    prepare: Callable[[OperatorHarness], None] | None = None


def _families(lookup: str) -> list[Family]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return [
        Family(
            "math",
            "Sum per key",
            lambda d: A.Sum(key="k", value="v"),
            "data",
            lambda df, x: df.groupBy("k").agg(F.sum("v")),
        ),
        Family(
            "top",
            "TopN(10) per key",
            lambda d: A.TopN(n=10, order_by="v", key="k"),
            "data",
            lambda df, x: df.withColumn(
                "r", F.row_number().over(Window.partitionBy("k").orderBy(F.desc("v")))
            ).filter("r <= 10"),
        ),
        Family(
            "distinct",
            "Distinct(k)",
            lambda d: A.Distinct(field="k"),
            "data",
            lambda df, x: df.select("k").distinct(),
        ),
        Family(
            "filter",
            "FilterOperator(expr)",
            lambda d: A.FilterOperator("v > 500 and s != 's01'", schema=DDL),
            "input",
            lambda df, x: df.filter("v > 500 and s != 's01'"),
        ),
        Family(
            "transform",
            "TransformOperator",
            lambda d: A.TransformOperator(
                {"id": "id", "w": "v * 2 + 1", "u": "upper(s)"},
                schema="id bigint, w bigint, u string",
            ),
            "input",
            lambda df, x: df.select("id", (F.col("v") * 2 + 1).alias("w"), F.upper("s").alias("u")),
        ),
        Family(
            "parse",
            "CsvParser",
            lambda d: A.CsvParser(schema=DDL),
            "input",
            lambda df, x: df.select(F.from_csv("line", DDL).alias("r")).select("r.*"),
            data="lines",
        ),
        Family(
            "stream", "Counter", lambda d: A.Counter(), "input", lambda df, x: df.groupBy().count()
        ),
        Family(
            "dedup",
            "TimeBasedDedup(id)",
            lambda d: A.TimeBasedDedup(key="id", time="t", expire_after=3_600_000, schema=DDL),
            "input",
            lambda df, x: df.dropDuplicates(["id"]),
        ),
        Family(
            "dedup-str",
            "TimeBasedDedup(uid)",
            lambda d: A.TimeBasedDedup(
                key="uid", time="t", expire_after=3_600_000, schema=DDL + ", uid string"
            ),
            "input",
            lambda df, x: df.dropDuplicates(["uid"]),
            data="uids",
        ),
        Family(
            "format",
            "CsvFormatter",
            lambda d: A.CsvFormatter(fields=["id", "k", "v", "t", "s"]),
            "input",
            lambda df, x: df.select(F.to_csv(F.struct("id", "k", "v", "t", "s")).alias("line")),
        ),
        Family(
            "join",
            "LookupJoin(k) inner",
            lambda d: A.LookupJoin("k", schema=DDL + ", label string"),
            "stream",
            lambda df, x: df.join(x["lookup"], "k"),
            prepare=_load_table,
        ),
        Family(
            "enrich",
            "Enricher(file)",
            lambda d: A.Enricher(
                A.FileLookup(lookup), lookup_fields=["k"], schema=DDL + ", label string"
            ),
            "input",
            lambda df, x: df.join(F.broadcast(x["lookup"]), "k", "left"),
        ),
    ]


def _load_table(h: OperatorHarness) -> None:
    table = pa.RecordBatch.from_pylist(
        [{"k": f"k{i:04d}", "label": f"label{i}"} for i in range(0, 1000, 2)]
    )
    h.run_window([("table", table)], window=0)


def _harness(fam: Family, ckpt: str) -> OperatorHarness:
    op = fam.make(ckpt)
    h = OperatorHarness(op, OperatorContext(name=fam.name, checkpoint=ckpt))
    h.setup()
    for port in ports_of(type(op))[1]:
        getattr(op, port).emitter = Discard()
    h.sinks = {p: h.sinks[p] for p in h.sinks}  # kept for the harness' bookkeeping
    return h


def _prepared(fam: Family, h: OperatorHarness) -> int:
    """The measured window's id (after the family's preparation window, if any)."""
    if fam.prepare is None:
        return 0
    fam.prepare(h)
    return 1


def run_batch(fam: Family, table: pa.Table, batch_rows: int) -> float:
    with tempfile.TemporaryDirectory() as ckpt:
        h = _harness(fam, ckpt)
        batches = table.to_batches(max_chunksize=batch_rows)
        window = _prepared(fam, h)
        started = time.perf_counter()
        h.begin_window(window)
        for b in batches:
            h.put(fam.port, b)
        h.end_window()
        elapsed = time.perf_counter() - started
        h.teardown()
    return table.num_rows / elapsed


def run_tuples(fam: Family, table: pa.Table) -> float:
    rows = table.column(0).to_pylist() if fam.data == "lines" else table.to_pylist()
    with tempfile.TemporaryDirectory() as ckpt:
        h = _harness(fam, ckpt)
        window = _prepared(fam, h)
        started = time.perf_counter()
        h.begin_window(window)
        for r in rows:
            h.put(fam.port, r)
        h.end_window()
        elapsed = time.perf_counter() - started
        h.teardown()
    return len(rows) / elapsed


def run_spark(fam: Family, spark: Any, frames: dict, rounds: int = 3) -> float:
    df = frames[fam.data]
    n = frames["n"]
    best = None
    for _ in range(rounds):
        started = time.perf_counter()
        fam.spark(df, frames).write.format("noop").mode("overwrite").save()
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    return n / best


def with_uids(table: pa.Table) -> pa.Table:
    """The rows with a string copy of ``id``: ``u<id>``."""
    import pyarrow.compute as pc

    uid = pc.binary_join_element_wise("u", pc.cast(table.column("id"), pa.string()), "")
    return table.append_column("uid", uid)


def to_lines(table: pa.Table) -> pa.Table:
    import io

    import pyarrow.csv as pacsv

    sink = io.BytesIO()
    pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False))
    lines = sink.getvalue().decode().splitlines()
    return pa.table({"line": pa.array(lines, pa.string())})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tuple-rows", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--only", default="")
    args = parser.parse_args()

    from malhar import build_session

    table = rows_table(args.rows)
    lines = to_lines(table)
    data_of = {"rows": table, "lines": lines, "uids": with_uids(table)}
    tmp = tempfile.mkdtemp(prefix="malhar-bench-algo-")
    lookup = os.path.join(tmp, "labels.csv")
    with open(lookup, "w") as f:
        f.write("k,label\n" + "".join(f"k{i:04d},label{i}\n" for i in range(0, 1000, 2)))
    families = _families(lookup)
    if args.only:
        wanted = set(args.only.split(","))
        families = [f for f in families if f.name in wanted]

    # the cached frames of 1M rows (and their creation tasks) need more than the default
    # 1 GiB of driver heap
    spark = build_session(
        "local[2]",
        app_name="malhar-bench-algo",
        shuffle_partitions=2,
        conf={"spark.driver.memory": "3g"},
    )
    kinds = {f.data for f in families}
    frames: dict[str, Any] = {
        k: spark.createDataFrame(data_of[k].to_pandas()).cache() for k in sorted(kinds)
    }
    frames.update(lookup=spark.read.csv(lookup, header=True), n=args.rows)
    for k in kinds:
        frames[k].count()

    print(
        f"malhar operator catalogue: {args.rows:,} rows per family, batches of {args.batch:,}, "
        f"per-tuple path on {args.tuple_rows:,} rows; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    header = f"{'family':<10} {'operator':<22} {'batch/s':>12} {'tuple/s':>10} {'spark/s':>12} {'batch/tuple':>11} {'batch/spark':>11}  targets"
    print(header)
    print("-" * len(header))
    results = []
    for fam in families:
        data = data_of[fam.data]
        batch = run_batch(fam, data, args.batch)
        tup = run_tuples(fam, data.slice(0, args.tuple_rows))
        sp = run_spark(fam, spark, frames)
        r1, r2 = batch / tup, batch / sp
        verdict = f"{'met' if r1 >= 10 else 'NOT met'} / {'met' if r2 >= 1 / 1.5 else 'NOT met'}"
        print(
            f"{fam.name:<10} {fam.operator:<22} {batch:>12,.0f} {tup:>10,.0f} {sp:>12,.0f} {r1:>10.1f}x {r2:>10.2f}x  {verdict}"
        )
        results.append((fam.name, batch, tup, sp))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
