"""Managed state inside running applications: restored on any worker, exact under SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from malhar import OperatorContext
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import collected
from malhar.testing.services.process import wait_until
from tests.drivers import start_driver
from tests.engine.ops import ManagedCount, managed_items


def expected_output(window: int) -> list[tuple[str, int]]:
    """What the count emits in ``window``: each key seen in it, with its running count."""
    totals: Counter = Counter()
    for w in range(window + 1):
        totals.update(k for k, _ in managed_items(w))
    return sorted((k, totals[k]) for k in {k for k, _ in managed_items(window)})


def test_managed_state_through_the_harness_checkpoint_and_replay(tmp_path: Path) -> None:
    context = OperatorContext(name="count", checkpoint=str(tmp_path))
    h = OperatorHarness(ManagedCount(), context)
    for w in range(3):
        h.run_window([("input", kv) for kv in managed_items(w)], window=w)
    assert h.sink("output").per_window[2] == expected_output(2)
    saved = h.checkpoint()
    h.run_window([("input", kv) for kv in managed_items(3)], window=3)
    first = h.sink("output").per_window[3]
    h.teardown()
    # a new worker replays window 3 from the checkpoint after window 2
    replay = OperatorHarness.restored(ManagedCount(), saved, context)
    replay.run_window([("input", kv) for kv in managed_items(3)], window=3)
    assert replay.sink("output").per_window[3] == first == expected_output(3)
    replay.teardown()


def _start(checkpoint: Path, master: str, windows: int = 0) -> subprocess.Popen:
    args = [str(checkpoint), master, str(windows)]
    log = checkpoint.parent / "driver.log"
    return start_driver("tests.engine.managed_crash_app", *args, log=log)


def _journal(root: Path) -> list[dict]:
    path = root / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("master,kills", [("local[2]", 3), ("local-cluster[2,1,1024]", 2)])
def test_sigkill_with_state_larger_than_its_memory_budget(
    tmp_path: Path, master: str, kills: int
) -> None:
    checkpoint = tmp_path / "ckpt"
    rng = random.Random(11)
    last = -1
    for _ in range(kills):
        proc = _start(checkpoint, master)
        target = last + rng.randint(2, 4)
        wait_until(
            lambda t=target: any(e["w"] >= t for e in _journal(tmp_path)),
            timeout=300,
            what=f"window {target} in the journal",
            alive=lambda p=proc: None if p.poll() is None else f"driver exited {p.returncode}",
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        last = max(e["w"] for e in _journal(tmp_path))
    # at least 8 windows in all: 160k keys, twice what two 8 MiB budgets hold in memory
    proc = _start(checkpoint, master, windows=max(2, 7 - last))
    assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    journal = _journal(tmp_path)
    assert max(e["w"] for e in journal) >= last + 1
    for e in journal:  # every window, each replay included, saw exactly the state before it
        assert sorted(map(tuple, e["v"])) == expected_output(e["w"]), e["w"]
    final = collected(str(checkpoint), "out")
    assert sorted(final) == list(range(max(final) + 1))
    assert all(sorted(final[w]) == expected_output(w) for w in final)
    # ~146 bytes of memory per entry: far more keys than two 8 MiB budgets hold
    assert len({k for w in final for k, _ in final[w]}) * 146 > 2 * (8 << 20)
