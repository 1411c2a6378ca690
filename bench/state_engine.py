"""Section (d) of ``bench/state.py``: the keyed running count through the engine, against
Spark's own state (``transformWithStateInPandas``, RocksDB provider, changelog
checkpointing), on the same generated data in one Spark session.

    python bench/state_engine.py --keys 1000000 --rows 100000 --windows 30

Data: window/batch ``b`` holds ``rows`` keys ``"k<(b * rows + i) % keys>"``: after
``keys / rows`` windows every key exists and each window updates ``rows`` of them.

- **malhar**: ``Keys`` (2 input partitions) -> ``KeyCodec("word")`` shuffle ->
  ``ManagedCount`` x 2: ``pyarrow.compute.value_counts`` per batch, then a get + put
  per distinct key in a managed-state map (a 256 MiB budget per partition); each
  partition reports its process's peak RSS as an operator metric.
- **Spark**: the same keys from a Python data source -> ``groupBy("word")`` ->
  ``transformWithStateInPandas`` with a ``ValueState`` count per key, RocksDB state
  store with changelog checkpointing, ``noop`` sink.

Throughput = updates / time from start to the last window/batch done. Target:
malhar >= 1.0x Spark's at 1M keys. Printed with the Python workers' peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from malhar import (
    DAG,
    InputOperator,
    InputPort,
    KeyCodec,
    Operator,
    OperatorContext,
    OutputPort,
    Property,
    build_session,
    launch,
)
from malhar import attributes as A

DDL = "word string"
PARTS = 2


def keys_of(batch: int, part: int, rows: int, keys: int) -> pa.RecordBatch:
    share = rows // PARTS
    start = batch * rows + part * share
    words = [f"k{(start + i) % keys}" for i in range(share)]
    return pa.RecordBatch.from_pydict({"word": words}, schema=pa.schema([("word", pa.string())]))


class Keys(InputOperator):
    output = OutputPort(DDL)
    rows = Property(int, default=100_000)
    keys = Property(int, default=1_000_000)

    def setup(self, context: OperatorContext) -> None:
        self._p = context.partition

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit_batch(keys_of(self._w, self._p, self.rows, self.keys))


class ManagedCount(Operator):
    input = InputPort(DDL)
    budget = Property(int, default=256 << 20)

    def setup(self, context: OperatorContext) -> None:
        self._counts = context.managed_state(budget_bytes=self.budget).map("counts")

    def process_batch(self, batch: pa.RecordBatch) -> None:
        counted = pc.value_counts(batch.column(0))
        counts = self._counts
        for key, n in zip(
            counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True
        ):
            counts[key] = counts.get(key, 0) + n

    def metrics(self) -> dict[str, float]:
        return {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


@dataclass
class KeysPartition(InputPartition):
    batch: int
    part: int
    rows: int
    keys: int


class KeysReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.rows, self.keys = int(options["rows"]), int(options["keys"])
        self.batches = int(options["batches"])

    def initialOffset(self) -> dict:
        return {"b": 0}

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        return {"b": min(int(start["b"]) + 1, self.batches)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if start["b"] == end["b"]:
            return []
        b = int(start["b"])
        return [KeysPartition(b, p, self.rows, self.keys) for p in range(PARTS)]

    def read(self, partition: KeysPartition) -> Iterator[pa.RecordBatch]:
        yield keys_of(partition.batch, partition.part, partition.rows, partition.keys)


class KeysSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_keys"

    def schema(self) -> str:
        return DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KeysReader(dict(self.options))


class TwsCount(StatefulProcessor):
    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "c bigint")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        n = sum(len(pdf) for pdf in rows)
        old = self.count.get()[0] if self.count.exists() else 0
        self.count.update((old + n,))
        return iter(())

    def close(self) -> None:
        pass


def run_malhar(spark: Any, rows: int, keys: int, windows: int) -> tuple[float, float]:
    """(seconds, peak RSS MiB of the counting workers)."""
    dag = DAG("bench-state-engine")
    src = dag.add_operator("src", Keys().configure(rows=rows, keys=keys), PARTITIONS=PARTS)
    count = dag.add_operator("count", ManagedCount(), PARTITIONS=PARTS)
    dag.add_stream("words", src.output, count.input)
    count.input.set_attribute(A.STREAM_CODEC, KeyCodec("word"))
    began = time.monotonic()
    app = launch(dag, spark=spark, checkpoint=tempfile.mkdtemp(), windows=windows, window_ms=100)
    app.await_completion()
    seconds = time.monotonic() - began
    rss = max(
        (w.metrics.get("peak_rss_mib", 0.0) for w in app._progress.recent.get("count", ())),
        default=0.0,
    )
    return seconds, rss


def run_spark(spark: Any, rows: int, keys: int, windows: int) -> float:
    spark.dataSource.register(KeysSource)
    df = (
        spark.readStream.format("bench_keys")
        .option("rows", str(rows))
        .option("keys", str(keys))
        .option("batches", str(windows))
        .load()
        .groupBy("word")
        .transformWithStateInPandas(
            statefulProcessor=TwsCount(),
            outputStructType="word string, c bigint",
            outputMode="Update",
            timeMode="None",
        )
    )
    began = time.monotonic()
    query = (
        df.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", tempfile.mkdtemp())
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    query.processAllAvailable()
    seconds = time.monotonic() - began
    query.stop()
    return seconds


def main(argv: list[str] | None = None) -> list[tuple[str, float, float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--windows", type=int, default=30)
    args = ap.parse_args(argv)
    spark = build_session(
        "local[2]",
        app_name="bench-state-engine",
        shuffle_partitions=PARTS,
        conf={
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            "spark.sql.shuffle.partitions": str(PARTS),
        },
    )
    updates = args.rows * args.windows
    print(
        f"\n(d) keyed running count through the engine: {args.keys:,} keys, {args.windows} "
        f"windows of {args.rows:,} updates, {PARTS} partitions; load {os.getloadavg()[0]:.2f}"
    )
    m_s, rss = run_malhar(spark, args.rows, args.keys, args.windows)
    s_s = run_spark(spark, args.rows, args.keys, args.windows)
    ratio = (updates / m_s) / (updates / s_s)
    print(f"    malhar managed state      {updates / m_s:>10,.0f} updates/s  ({m_s:.1f}s)")
    print(f"    Spark TWS + RocksDB        {updates / s_s:>10,.0f} updates/s  ({s_s:.1f}s)")
    ok = ratio >= 1.0
    print(f"    malhar / Spark {ratio:.2f}x (target >= 1.0x): {'met' if ok else 'NOT met'}")
    print(f"    peak RSS of the counting Python workers: {rss:.0f} MiB")
    print(f"    load average at the end: {os.getloadavg()[0]:.2f}")
    return [("engine keyed count vs TWS", ratio, 1.0)]


if __name__ == "__main__":
    main()
