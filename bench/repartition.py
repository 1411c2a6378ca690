"""What a dynamic repartitioning costs: the pause and the throughput before and after.

    python bench/repartition.py            # 20 s per phase
    python bench/repartition.py --quick    # 8 s per phase

One application on ``local[2]``: a source emitting ``--rows`` keyed tuples per window
(2 partitions) -> a keyed running count in a ``State(keyed=True)`` field -> a sink
that drops its input. It runs ``--seconds`` on 1 counter partition, is repartitioned
to 2 (``RunningApplication.repartition``), runs ``--seconds`` more, and is
repartitioned back to 1. The driver polls the window log every 20 ms:

- **pause**: the longest time without a completed window around each repartitioning
  (the orderly stop, the state rewrite, the query's restart), against the median time
  between windows in steady state;
- **throughput**: tuples per second in each phase (completed windows x rows / time).

Printed with the machine's load average; there is no target (the issue asks to
measure it).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from malhar import (
    DAG,
    InputOperator,
    InputPort,
    KeyCodec,
    Operator,
    OperatorContext,
    OutputPort,
    Property,
    State,
    build_session,
    launch,
)
from malhar import attributes as A


class Keys(InputOperator):
    output = OutputPort()
    rows = Property(int, default=20_000)
    keys = Property(int, default=10_000)

    def setup(self, context: OperatorContext) -> None:
        self._p, self._n = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            share = self.rows // self._n
            base = self._w * self.rows + self._p * share
            for i in range(share):
                self.output.emit({"key": f"k{(base + i) % self.keys}"})


class KeyedCount(Operator):
    input = InputPort()
    output = OutputPort()
    counts = State(dict, keyed=True)

    def process(self, row: dict) -> None:
        self.counts[row["key"]] = self.counts.get(row["key"], 0) + 1


class Drop(Operator):
    input = InputPort()

    def process(self, value: object) -> None:
        pass


def watch(app, seconds: float) -> list[tuple[float, int]]:
    """(time, last completed window) every 20 ms for ``seconds``."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.append((time.monotonic(), app.last_window))
        time.sleep(0.02)
    return out


def phase(samples: list[tuple[float, int]], rows: int) -> tuple[float, float]:
    """(tuples/s, median seconds between windows) over a steady phase."""
    changes = [t for (_, w0), (t, w) in itertools.pairwise(samples) if w != w0]
    if len(changes) < 2:
        return 0.0, float("nan")
    windows = samples[-1][1] - samples[0][1]
    rate = windows * rows / (samples[-1][0] - samples[0][0])
    return rate, statistics.median(b - a for a, b in itertools.pairwise(changes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--rows", type=int, default=20_000)
    args = ap.parse_args()
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    print(f"bench/repartition.py: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    spark = build_session("local[2]", app_name="bench-repartition", shuffle_partitions=2)
    dag = DAG("bench-repartition")
    src = dag.add_operator("src", Keys().configure(rows=args.rows), PARTITIONS=2)
    count = dag.add_operator("count", KeyedCount())
    drop = dag.add_operator("drop", Drop())
    dag.add_stream("rows", src.output, count.input)
    dag.add_stream("out", count.output, drop.input)
    count.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    app = launch(dag, spark=spark, checkpoint=tempfile.mkdtemp(), window_ms=200)
    app.await_window(3)  # warm
    results = []
    try:
        for label, target in (("1 partition", 2), ("2 partitions", 1), ("1 partition again", None)):
            steady = watch(app, seconds)
            rate, gap = phase(steady, args.rows)
            pause = float("nan")
            if target is not None:
                began = time.monotonic()
                before = app.last_window
                app.repartition({"count": target})
                app.await_window(before + 1)
                pause = time.monotonic() - began
            results.append((label, rate, gap, pause))
    finally:
        app.stop()
    print(f"{'phase':<20}{'tuples/s':>12}{'s/window':>10}{'pause after (s)':>17}")
    for label, rate, gap, pause in results:
        print(f"{label:<20}{rate:>12,.0f}{gap:>10.3f}{pause:>17.2f}")
    base = results[0][1]
    for label, rate, _, _ in results[1:]:
        print(f"throughput {label} / 1 partition: {rate / base:.2f}x" if base else "")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
