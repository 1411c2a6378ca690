"""Runtimes cached in Python workers: kept between windows, torn down once idle."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from malhar.engine.task import RuntimeCache
from tests.spark_subprocess import run_spark_script


class _Plan:
    def __init__(self, idle_timeout_ms: int) -> None:
        self.app, self.id, self.idle_timeout_ms = "app", "launch", idle_timeout_ms


class _Group:
    key = "g"


class _Runtime:
    def __init__(self, partition: int, idle_timeout_ms: int) -> None:
        self.plan, self.group, self.partition = _Plan(idle_timeout_ms), _Group(), partition
        self.torn_down = 0

    def teardown(self) -> None:
        self.torn_down += 1


def test_idle_runtimes_are_torn_down_and_busy_ones_kept() -> None:
    cache = RuntimeCache()
    old, fresh = _Runtime(0, 1_000), _Runtime(1, 1_000)
    cache.put(old)  # type: ignore[arg-type]
    cache.put(fresh)  # type: ignore[arg-type]
    cache.live[("app", "g", 0)] = (old, time.monotonic() - 5)  # its slot moved 5 s ago
    assert cache.evict_idle() == 1
    assert old.torn_down == 1 and fresh.torn_down == 0
    assert ("app", "g", 1) in cache and ("app", "g", 0) not in cache


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_runtimes_left_behind_in_other_workers_are_released(tmp_path: Path) -> None:
    """local-cluster[2,1,1024]: a level-1 operator's partitions move between the two
    executors' workers; each copy left behind is torn down once idle (1 s here).
    Without the idle timeout this run left 3 of 84 copies alive."""
    script = textwrap.dedent(
        f"""
        import json, time
        from pathlib import Path
        from malhar import DAG, build_session, launch
        from malhar.testing.operators import Collector
        from tests.engine.ops import EventLog, Numbers

        # without reduce locality Spark places level 1 freely: its partitions move around
        spark = build_session(
            "local-cluster[2,1,1024]", app_name="evict", shuffle_partitions=2,
            conf={{"spark.shuffle.reduceLocality.enabled": "false"}},
        )
        dag = DAG("evict", IDLE_RUNTIME_TIMEOUT_MS=1000)
        src = dag.add_operator("src", Numbers(), PARTITIONS=2)
        log = dag.add_operator("log", EventLog(), PARTITIONS=3)
        out = dag.add_operator("out", Collector())
        dag.add_stream("a", src.output, log.input)
        dag.add_stream("b", log.output, out.input)
        checkpoint = {str(tmp_path / "ck")!r}
        app = launch(dag, spark=spark, checkpoint=checkpoint, window_ms=100)
        app.await_window(40)
        app.stop()  # the last window tears down the copies that ran it

        def balance():
            events = [json.loads(line) for f in Path(checkpoint, "events").glob("*.jsonl")
                      for line in f.read_text().splitlines()]
            return [sum(e["e"] == kind for e in events) for kind in ("setup", "teardown")]

        # copies left behind in other workers (still running: the session is up) go once idle
        deadline = time.monotonic() + 30
        while balance()[0] != balance()[1] and time.monotonic() < deadline:
            time.sleep(0.2)
        print(json.dumps(balance()))
        """
    )
    setups, teardowns = run_spark_script(script, timeout=600, env={"PYTHONPATH": str(Path.cwd())})
    assert setups > 3, "the partitions never moved between workers: nothing to test"
    assert teardowns == setups, (setups, teardowns)
