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


RESUBMIT_SCRIPT = """
import json
from pathlib import Path
from malhar import DAG, build_session, run
from malhar.testing.operators import Collector, collected
from tests.engine.ops import ExecutorTrace, KillsItsExecutor, Numbers, RunningTotal

checkpoint = {checkpoint!r}
spark = build_session("local-cluster[2,1,1024]", shuffle_partitions=1,
                      conf={{"spark.task.maxFailures": "4"}})
dag = DAG("resubmit")
src = dag.add_operator("src", Numbers(), PARTITIONS=2)
trace = dag.add_operator("trace", ExecutorTrace(), PARTITIONS=2)  # fused with src: level 0
total = dag.add_operator("total", RunningTotal())  # one partition: after a shuffle
kill = dag.add_operator("kill", KillsItsExecutor(from_window=2))
out = dag.add_operator("out", Collector())
dag.add_stream("items", src.output, trace.input)
dag.add_stream("traced", trace.output, total.input)
dag.add_stream("totals", total.output, kill.input)
dag.add_stream("result", kill.output, out.input)
run(dag, spark=spark, checkpoint=checkpoint, windows=8, window_ms=50)
killed = Path(checkpoint, "killed-executor")
print(json.dumps({{"out": {{str(w): v for w, v in collected(checkpoint, "out").items()}},
                   "killed": json.loads(killed.read_text()) if killed.exists() else None,
                   "runs": sorted(p.name.rsplit("-", 1)[0]
                                  for p in Path(checkpoint, "trace").iterdir())}}))
"""


def running_totals(windows: int) -> dict[str, list[int]]:
    """``total`` adds every value of every window."""
    total, out = 0, {}
    for w in range(windows):
        total += sum(v for _, v in window_items(w))
        out[str(w)] = [total]
    return out


@pytest.mark.long
def test_level0_tasks_run_again_after_their_executor_and_its_shuffle_output_are_lost(
    tmp_path,
) -> None:
    """An executor SIGKILLed while the next level reads the window takes that window's
    level-0 shuffle output with it: Spark resubmits the level-0 stage for the lost
    partitions, numbering their attempts from 0 again. Each re-run must run the slots its
    partition claimed (it used to find them claimed and run nothing: the window lost them)."""
    checkpoint = str(tmp_path / "ckpt")
    got = run_spark_script(RESUBMIT_SCRIPT.format(checkpoint=checkpoint), timeout=400)
    killed = got["killed"]
    assert killed is not None, "no window's level-0 output lived on the level-1 executor"
    window = killed["window"]
    # the lost level-0 partitions ran that window twice, every other window ran once
    again = {name.rsplit("-", 1)[0].split("-", 1)[1] for name in killed["level0"]}
    expected_runs = sorted(
        f"{w}-{p}"
        for w in range(8)
        for p in range(2)
        for _ in range(2 if w == window and str(p) in again else 1)
    )
    assert got["runs"] == expected_runs, got
    assert got["out"] == running_totals(8), json.dumps(got["out"])
