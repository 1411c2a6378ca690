"""Every family through the engine on Spark, partitioned, against the one-partition harness.

One application holds an operator of each family behind a typed parser (so Arrow batches
cross the shuffles, and the typed variants of the operators are shipped to Spark's
workers): each operator runs with 2 or 3 partitions (keyed ones with their codecs), and
what its Collector got per window equals what the harness gives with one partition.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from malhar import DAG, OperatorContext, run
from malhar.algo import (
    Average,
    Counter,
    CsvParser,
    Enricher,
    FileLookup,
    FilterOperator,
    JsonFormatter,
    MergeSort,
    ProjectionOperator,
    StreamJoin,
    Sum,
    TimeBasedDedup,
    TopN,
    UniqueValueCount,
    partition_by_key,
)
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import Collector, ListInput, collected
from tests.algo.partitions import as_multiset

SCHEMA = "id bigint, k string, v bigint, t bigint"
WINDOWS = 3


def _lines(seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for w in range(WINDOWS):
        lines = []
        for _ in range(40):
            i = rng.randrange(30)  # an id is one event: its repeats are identical (dedup)
            k, v = "abcde"[(i * 7 + w) % 5], (i * 37 + w * 11 + seed) % 101 - 50
            lines.append(f"{i},{k},{v},{w * 1000 + i}")
        lines += [lines[0], "bad,line", f"{w},x,notanumber,1"]
        out.append(lines)
    return out


def _operators(lookup: str) -> dict[str, tuple]:
    """name -> (operator factory, partitions, input port, output port, upstream)."""
    return {
        "sum": (lambda: Sum(key="k", value="v"), 3, "data", "sum", "left"),
        "avg": (lambda: Average(value="v"), 2, "data", "average", "left"),
        "top": (lambda: TopN(n=3, order_by="v", key="k"), 3, "data", "top", "left"),
        "sort": (lambda: MergeSort(order_by="id"), 3, "data", "sort", "left"),
        "uvc": (lambda: UniqueValueCount(key="k", value="id"), 3, "data", "count", "left"),
        "filter": (
            lambda: FilterOperator("v > 0 and k != 'e'", schema=SCHEMA),
            2,
            "input",
            "truePort",
            "left",
        ),
        "project": (
            lambda: ProjectionOperator(
                select_fields=["id", "k"], rename={"k": "key"}, schema="id bigint, key string"
            ),
            3,
            "input",
            "projected",
            "filter",
        ),
        "count": (lambda: Counter(), 3, "input", "output", "left"),
        "dedup": (
            lambda: TimeBasedDedup(key="id", time="t", expire_after=10_000, schema=SCHEMA),
            2,
            "input",
            "unique",
            "left",
        ),
        "enrich": (
            lambda: Enricher(FileLookup(lookup), lookup_fields=["k"], miss_policy="null"),
            2,
            "input",
            "output",
            "left",
        ),
        "json": (lambda: JsonFormatter(fields=["id", "label"]), 2, "input", "out", "enrich"),
    }


def _expected(lines: list[list[str]], ops: dict, tmp: Path) -> dict[str, dict[int, list]]:
    parse = OperatorHarness(CsvParser(schema=SCHEMA))
    parsed = {}
    for w, window in enumerate(lines):
        parse.run_window([("input", line) for line in window], window=w)
        parsed[w] = parse.sink("out").per_window.get(w, [])
    feeds = {"left": parsed}
    out: dict[str, dict[int, list]] = {}
    for name, (make, _, port, oport, up) in ops.items():
        ctx = OperatorContext(name=name, checkpoint=str(tmp / "expected"))
        h = OperatorHarness(make(), ctx)
        for w in range(WINDOWS):
            h.run_window([(port, r) for r in feeds[up].get(w, [])], window=w)
        out[name] = {w: as_multiset(h.sink(oport).per_window.get(w, [])) for w in range(WINDOWS)}
        feeds[name] = {w: h.sink(oport).per_window.get(w, []) for w in range(WINDOWS)}
        h.teardown()
    return out


@pytest.mark.integration
@pytest.mark.slow
def test_every_family_partitioned_on_spark_equals_the_harness(spark, tmp_path: Path) -> None:
    lookup = tmp_path / "labels.csv"
    lookup.write_text("k,label\na,alpha\nb,beta\nc,gamma\n")
    lines = _lines(7)
    right_lines = _lines(8)
    ops = _operators(str(lookup))
    dag = DAG("algo-catalogue")
    src = dag.add_operator("src", ListInput(lines), PARTITIONS=2)
    parse = dag.add_operator("parse", CsvParser(schema=SCHEMA), PARTITIONS=2)
    dag.add_stream("lines", src.output, parse.input)
    rsrc = dag.add_operator("rsrc", ListInput(right_lines), PARTITIONS=1)
    rparse = dag.add_operator("rparse", CsvParser(schema=SCHEMA), PARTITIONS=1)
    dag.add_stream("rlines", rsrc.output, rparse.input)
    handles = {"left": (parse, "out")}
    sinks: dict[str, list] = {"left": []}
    for name, (make, parts, port, oport, up) in ops.items():
        h = partition_by_key(dag.add_operator(name, make(), PARTITIONS=parts))
        sinks.setdefault(up, []).append(getattr(h, port))
        handles[name] = (h, oport)
        sinks[name] = []
    join = partition_by_key(
        dag.add_operator("join", StreamJoin("k", expiry_windows=1), PARTITIONS=3)
    )
    sinks["left"].append(join.left)
    for name in handles:
        if name == "left":
            continue
        out = dag.add_operator(f"out_{name}", Collector())
        sinks[name].append(out.input)
    out_join = dag.add_operator("out_join", Collector())
    dag.add_stream("rparsed", rparse.out, join.right)
    dag.add_stream("joined", join.output, out_join.input)
    for name, (h, oport) in handles.items():
        dag.add_stream(f"s_{name}", getattr(h, oport), *sinks[name])
    ckpt = tmp_path / "ckpt"
    run(dag, windows=WINDOWS, spark=spark, checkpoint=str(ckpt), window_ms=100)

    expected = _expected(lines, ops, tmp_path)
    for name in ops:
        got = collected(str(ckpt), f"out_{name}")
        for w in range(WINDOWS):
            assert as_multiset(got.get(w, [])) == expected[name][w], (name, w)
    # the join: every left row of a window with the right rows of its key in that window
    joined = collected(str(ckpt), "out_join")
    parse_l, parse_r = (
        OperatorHarness(CsvParser(schema=SCHEMA)),
        OperatorHarness(CsvParser(schema=SCHEMA)),
    )
    for w in range(WINDOWS):
        parse_l.run_window([("input", x) for x in lines[w]], window=w)
        parse_r.run_window([("input", x) for x in right_lines[w]], window=w)
        lrows, rrows = parse_l.sink("out").per_window[w], parse_r.sink("out").per_window[w]
        truth = [
            {**lr, **{f"right_{f}": v for f, v in rr.items() if f != "k"}}
            for lr in lrows
            for rr in rrows
            if lr["k"] == rr["k"]
        ]
        assert as_multiset(joined.get(w, [])) == as_multiset(truth), w
        assert truth  # the data has matches
