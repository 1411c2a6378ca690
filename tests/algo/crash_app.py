"""Stateful catalogue operators in one application, for the SIGKILL test.

    python -m tests.algo.crash_app CHECKPOINT MASTER WINDOWS

WINDOWS=0 runs until killed. The inputs are a function of the window's index (ListInput),
so a replayed window has the same content; each Collector keeps its latest per window.
"""

from __future__ import annotations

import os
import sys
import threading

from malhar import DAG, build_session, launch
from malhar.algo import BoundedDedup, CsvParser, LookupJoin, TimeBasedDedup, partition_by_key
from malhar.testing.operators import Collector, ListInput

SCHEMA = "id bigint, k bigint, v bigint, s string"
WINDOWS = 24  # windows with input; the later ones are empty


def lines(w: int) -> list[str]:
    """Window ``w``'s stream records: ids (and their str form s) repeat across windows, a bad
    line in each; v grows with the window (TimeBasedDedup's event time)."""
    rows = [((w * 7 + i) % 90, (w + i) % 12, w * 100 + i) for i in range(30)]
    return [f"{i},{k},{v},s{i}" for i, k, v in rows] + ["x,y"]


def time_dedup() -> TimeBasedDedup:
    """By the str key s; buckets of 3 windows, expired 10 windows behind (state is purged
    while the test runs; no tuple is late)."""
    return TimeBasedDedup(key="s", time="v", expire_after=1_000, bucket_span=300, schema=SCHEMA)


def table(w: int) -> list[dict]:
    """Window ``w``'s table updates: key -> a version that changes every few windows."""
    return [{"k": k, "version": w // 3, "tag": f"t{k}-{w // 3}"} for k in range(w % 3, 12, 3)]


def build() -> DAG:
    dag = DAG("algo-crash")
    src = dag.add_operator("src", ListInput([lines(w) for w in range(WINDOWS)]), PARTITIONS=2)
    tsrc = dag.add_operator("tsrc", ListInput([table(w) for w in range(WINDOWS)]))
    parse = dag.add_operator("parse", CsvParser(schema=SCHEMA), PARTITIONS=2)
    dedup = partition_by_key(
        dag.add_operator("dedup", BoundedDedup(key="id", schema=SCHEMA), PARTITIONS=2)
    )
    join = partition_by_key(
        dag.add_operator("join", LookupJoin("k", join_type="left"), PARTITIONS=2)
    )
    tdedup = partition_by_key(dag.add_operator("tdedup", time_dedup(), PARTITIONS=2))
    dag.add_stream("lines", src.output, parse.input)
    dag.add_stream("rows", parse.out, dedup.input, tdedup.input)
    dag.add_stream("unique", dedup.unique, join.stream)
    dag.add_stream("updates", tsrc.output, join.table)
    outputs = (("out_dup", dedup.duplicate), ("out_join", join.output), ("out_t", tdedup.unique))
    for name, port in outputs:
        out = dag.add_operator(name, Collector())
        dag.add_stream(f"s_{name}", port, out.input)
    return dag


def main() -> None:
    checkpoint, master, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.environ["CRASH_RUN_ID"] = f"{os.getpid()}"
    spark = build_session(master, app_name="malhar-algo-crash", shuffle_partitions=2)
    app = launch(
        build(), spark=spark, checkpoint=checkpoint, windows=windows or None, window_ms=100
    )
    if windows:
        app.await_completion()
    else:
        threading.Event().wait()  # until the test SIGKILLs this process


if __name__ == "__main__":
    main()
