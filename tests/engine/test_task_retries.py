"""Spark retries a failed task inside the window (``spark.task.maxFailures``), in local
mode and with separate executor processes. The retry of a level-0 task must run the input
slots its first attempt claimed (``slot_claims``), and every retry must start from the
state of the previous window: the failed attempt half-updated it, and PySpark's worker
exits after an exception, so the retry restores it from the store.
"""

from __future__ import annotations

import json

import pytest

from tests.engine.ops import window_items
from tests.spark_subprocess import run_spark_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = """
import json, sys
from pathlib import Path
from malhar import DAG, build_session, run
from malhar.testing.operators import Collector, collected
from tests.engine.ops import FailOnce, Numbers, PartialTotal, RunningTotal

master, checkpoint = {master!r}, {checkpoint!r}
spark = build_session(master, shuffle_partitions=2, conf={{"spark.task.maxFailures": "3"}})
dag = DAG("retries")
src = dag.add_operator("src", Numbers(), PARTITIONS=2)
part = dag.add_operator("part", PartialTotal(), PARTITIONS=2)  # fused with src: level 0
fail0 = dag.add_operator("fail0", FailOnce(fail_window=2), PARTITIONS=2)
total = dag.add_operator("total", RunningTotal())  # one partition: after a shuffle
fail1 = dag.add_operator("fail1", FailOnce(fail_window=3))
out = dag.add_operator("out", Collector())
dag.add_stream("items", src.output, part.input)
dag.add_stream("partials", part.output, fail0.input)
dag.add_stream("checked", fail0.output, total.input)
dag.add_stream("totals", total.output, fail1.input)
dag.add_stream("result", fail1.output, out.input)
run(dag, spark=spark, checkpoint=checkpoint, windows=6, window_ms=50)
failed = sorted(p.name for p in Path(checkpoint).glob("failed-*"))
print(json.dumps({{"out": {{str(w): v for w, v in collected(checkpoint, "out").items()}},
                   "failed": failed}}))
"""


def expected(windows: int) -> dict[str, list[int]]:
    """``total`` adds, every window, the running totals of both partitions."""
    through, total, out = 0, 0, {}
    for w in range(windows):
        through += sum(v for _, v in window_items(w))
        total += through
        out[str(w)] = [total]
    return out


@pytest.mark.long
@pytest.mark.parametrize("master", ["local[2,3]", "local-cluster[2,1,1024]"])
def test_task_retries_inside_a_window_give_exact_results(tmp_path, master: str) -> None:
    checkpoint = str(tmp_path / "ckpt")
    got = run_spark_script(SCRIPT.format(master=master, checkpoint=checkpoint), timeout=400)
    # every injected failure happened (each once) and Spark's retry finished the window:
    # ``run`` would have raised had the query failed
    assert got["failed"] == ["failed-fail0-0", "failed-fail0-1", "failed-fail1-0"], got
    assert got["out"] == expected(6), json.dumps(got["out"])
