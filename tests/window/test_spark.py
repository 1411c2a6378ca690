"""Windowed operators through the engine on Spark: keyed partitions by key codec, a
propagated downstream window operator fed by every partition's watermark, and a
partitioned non-keyed operator merged by its unifier; then exactly once on
``local-cluster`` with task failures and a restart, the keyed operator's state in the
spillable storage (managed state)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from malhar import DAG, run
from malhar.window import KeyedWindowedOperator, TimeWindows, WindowedOperator
from malhar.window.accumulation import Count, Sum, TopNByKey
from tests.spark_subprocess import run_spark_script
from tests.window.ops import EventSource, PaneRecorder, event_windows, on_time, recorded, reference

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def build(dag: DAG, data: list, *, fail: bool = False, storage=None) -> DAG:
    """src (2) -> counts (keyed, 2, by key) -> top (propagation, 1) -> recorder
    src (2) -> totals (non-keyed, 2, fused with src) -> [unifier] -> sums (propagation) -> recorder
    """
    src = dag.add_operator("src", EventSource(data), PARTITIONS=2)
    counts_op = KeyedWindowedOperator(
        Count(), TimeWindows(100), timestamp=lambda kv: kv[1], storage=storage
    )
    counts = dag.add_operator("counts", counts_op, PARTITIONS=2)
    counts.input.set_attribute("STREAM_CODEC", counts_op.key_codec())
    top = dag.add_operator("top", WindowedOperator(TopNByKey(2)))
    totals = dag.add_operator(
        "totals", WindowedOperator(Count(), TimeWindows(100), timestamp=lambda kv: kv[1]),
        PARTITIONS=2,
    )  # fmt: skip
    sums = dag.add_operator("sums", WindowedOperator(Sum()))
    counts_out = dag.add_operator("counts_out", PaneRecorder())
    dag.add_stream("events", src.output, counts.input, totals.input)
    if fail:
        from tests.engine.ops import FailOnce

        # fails once at the end of window 3, after the counts fired in the same task
        gate = dag.add_operator("gate", FailOnce(fail_window=3), PARTITIONS=2)
        dag.add_stream("counted", counts.output, gate.input)
        dag.add_stream("gated", gate.output, top.input, counts_out.input)
    else:
        dag.add_stream("counted", counts.output, top.input, counts_out.input)
    dag.add_stream("top_n", top.output, dag.add_operator("top_out", PaneRecorder()).input)
    dag.add_stream("totaled", totals.output, sums.input)
    dag.add_stream("summed", sums.output, dag.add_operator("sums_out", PaneRecorder()).input)
    return dag


def expected_top(ref: dict) -> dict:
    out: dict = {}
    for start in sorted({s for _, s in ref}):
        counts = sorted((k, n) for (k, s), n in ref.items() if s == start)
        out[(None, start)] = [list(kv) for kv in sorted(counts, key=lambda kv: -kv[1])[:2]]
    return out


def expected_totals(ref: dict) -> dict:
    totals: Counter = Counter()
    for (_, start), n in ref.items():
        totals[start] += n
    return {(None, s): n for s, n in totals.items()}


def test_windowed_operators_through_the_engine(spark, tmp_path) -> None:
    data = event_windows()
    checkpoint = str(tmp_path / "ckpt")
    run(build(DAG("windows"), data), windows=9, spark=spark, checkpoint=checkpoint, window_ms=100)
    ref = reference(data)
    assert on_time(recorded(checkpoint, "counts_out")) == ref
    assert on_time(recorded(checkpoint, "top_out")) == expected_top(ref)
    assert on_time(recorded(checkpoint, "sums_out")) == expected_totals(ref)


@pytest.mark.parametrize(("middle", "windowed"), [(1, 1), (3, 2)])
def test_watermarks_through_an_operator_that_is_not_control_aware_keep_their_senders(
    spark, tmp_path, middle: int, windowed: int
) -> None:
    """src (2) -> filter (not control aware, ``middle`` partitions, shuffled) -> counts.
    Each filter partition passes on both sources' watermarks: under its own identity the
    windowed operator took their largest for the sender's (18 of 240 events late, lost)."""
    from malhar.algo.transform import FilterOperator

    data = event_windows()
    checkpoint = str(tmp_path / "ckpt")
    dag = DAG(f"through-{middle}-{windowed}")
    src = dag.add_operator("src", EventSource(data), PARTITIONS=2)
    mid = dag.add_operator("mid", FilterOperator(predicate=lambda t: True), PARTITIONS=middle)
    op = KeyedWindowedOperator(Count(), TimeWindows(100), timestamp=lambda kv: kv[1])
    counts = dag.add_operator("counts", op, PARTITIONS=windowed)
    counts.input.set_attribute("STREAM_CODEC", op.key_codec())
    dag.add_stream("events", src.output, mid.input)
    dag.add_stream("kept", mid.truePort, counts.input)
    dag.add_stream("counted", counts.output, dag.add_operator("out", PaneRecorder()).input)
    run(dag, windows=9, spark=spark, checkpoint=checkpoint, window_ms=100)
    assert on_time(recorded(checkpoint, "out")) == reference(data)


SCRIPT = """
import json
from malhar import DAG, build_session, run
from tests.window.ops import event_windows, on_time, recorded
from malhar.window.impl.spillable import SpillableWindowedStorage
from tests.window.test_spark import build

checkpoint = {checkpoint!r}
spark = build_session("local-cluster[2,1,1024]", shuffle_partitions=2,
                      conf={{"spark.task.maxFailures": "3"}})
data = event_windows()
for windows in (4, 5):  # a restart from the checkpoint in the middle
    dag = build(DAG("exactly-once-windows"), data, fail=True,
                storage=SpillableWindowedStorage(budget_bytes=16 << 20))  # managed state
    run(dag, windows=windows, spark=spark, checkpoint=checkpoint, window_ms=100)
out = {{}}
for name in ("counts_out", "top_out", "sums_out"):
    out[name] = sorted([list(k), v] for k, v in on_time(recorded(checkpoint, name)).items())
print(json.dumps(out))
"""


@pytest.mark.long
def test_exactly_once_on_local_cluster_with_task_failures_and_a_restart(tmp_path) -> None:
    checkpoint = str(tmp_path / "ckpt")
    got = run_spark_script(SCRIPT.format(checkpoint=checkpoint), timeout=600)
    ref = reference(event_windows())

    def as_json(d: dict) -> list:
        return sorted([list(k), v] for k, v in d.items())

    assert got["counts_out"] == json.loads(json.dumps(as_json(ref)))
    assert got["top_out"] == json.loads(json.dumps(as_json(expected_top(ref))))
    assert got["sums_out"] == json.loads(json.dumps(as_json(expected_totals(ref))))
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("failed-*")) == [
        "failed-gate-0",
        "failed-gate-1",
    ]
