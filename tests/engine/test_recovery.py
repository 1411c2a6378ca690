"""SIGKILL the driver process, restart it, and check window ids and state.

Each run is a separate ``python -m tests.engine.crash_app`` driver process;
the kill is a real SIGKILL of its whole process group (driver JVM and Python
workers included).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from malhar.engine.reconcile import refusal_before_launch
from malhar.testing.operators import collected
from malhar.testing.services.process import wait_until
from tests.drivers import start_driver
from tests.engine.crash_app import build
from tests.engine.ops import window_items

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _start(
    checkpoint: Path, master: str = "local[2]", windows: int = 0, journals: int = 1
) -> subprocess.Popen:
    args = [str(checkpoint), master, str(windows), str(journals)]
    return start_driver("tests.engine.crash_app", *args, log=checkpoint.parent / "driver.log")


def _journal(root: Path) -> list[dict]:
    path = root / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _expected_total(w: int) -> int:
    return sum(v for x in range(w + 1) for _, v in window_items(x))


@pytest.mark.long
def test_sigkill_restart_and_lost_spark_checkpoint(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    rng = random.Random(7)
    last = -1
    for _ in range(3):
        proc = _start(checkpoint)
        target = last + rng.randint(2, 4)
        wait_until(
            lambda t=target: any(e["w"] >= t for e in _journal(tmp_path)),
            timeout=180,
            what=f"window {target} in the journal",
            alive=lambda p=proc: None if p.poll() is None else f"driver exited {p.returncode}",
        )
        _kill(proc)
        last = max(e["w"] for e in _journal(tmp_path))
    # Lose Spark's checkpoint: window ids must continue from malhar's own log.
    shutil.rmtree(checkpoint / "spark")
    proc = _start(checkpoint, windows=3)
    assert proc.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()[-3000:]

    journal = _journal(tmp_path)
    runs: dict[int, list[int]] = {}
    for e in journal:
        runs.setdefault(e["run"], []).append(e["w"])
        # every window, including each replay, carries exactly the state after that window
        assert e["v"] == [_expected_total(e["w"])], e
    order = list(runs.values())
    assert len(order) == 4
    for ws in order:
        assert ws == list(range(ws[0], ws[0] + len(ws))), ws  # consecutive within a run
    for before, after in itertools.pairwise(order):
        assert after[0] in (before[-1], before[-1] + 1), (before[-3:], after[:3])  # never backwards
    assert order[-1][0] > 0  # continued, not restarted at 0, after losing the Spark checkpoint
    final = collected(str(checkpoint), "out")
    assert sorted(final) == list(range(max(final) + 1))
    assert all(final[w] == [_expected_total(w)] for w in final)


def test_local_and_local_cluster_give_identical_results(tmp_path: Path) -> None:
    results = {}
    for master in ("local[2]", "local-cluster[2,1,1024]"):
        checkpoint = tmp_path / master.replace("[", "_").replace("]", "").replace(",", "_") / "ckpt"
        checkpoint.parent.mkdir(parents=True)
        proc = _start(checkpoint, master=master, windows=4)
        assert proc.wait(timeout=300) == 0, (checkpoint.parent / "driver.log").read_text()[-3000:]
        results[master] = collected(str(checkpoint), "out")
    assert results["local[2]"] == results["local-cluster[2,1,1024]"]
    assert results["local[2]"] == {w: [_expected_total(w)] for w in range(4)}


def test_a_count_change_after_a_crash_waits_for_a_clean_stop(tmp_path: Path) -> None:
    """The window in flight at a SIGKILL may be committed by some output partitions: its
    replay with other counts would route its rows to others (written twice). So a count
    change is refused until a run with the old counts stopped cleanly."""
    checkpoint = tmp_path / "ckpt"
    log = tmp_path / "driver.log"
    proc = _start(checkpoint)
    wait_until(
        lambda: any(e["w"] >= 2 for e in _journal(tmp_path)),
        timeout=180,
        what="window 2 in the journal",
        alive=lambda: None if proc.poll() is None else f"driver exited {proc.returncode}",
    )
    _kill(proc)
    # said before Spark starts (malhar run), from the checkpoint alone
    refused = refusal_before_launch(build(2), str(checkpoint))
    assert refused and "journal: 1 -> 2: the partition counts changed" in refused, refused
    assert refusal_before_launch(build(1), str(checkpoint)) is None
    changed = _start(checkpoint, windows=2, journals=2)
    assert changed.wait(timeout=300) != 0
    assert "journal: 1 -> 2: the partition counts changed" in log.read_text()
    assert "did not stop cleanly after window" in log.read_text()
    assert _start(checkpoint, windows=2).wait(timeout=300) == 0, log.read_text()[-3000:]
    assert refusal_before_launch(build(2), str(checkpoint)) is None  # stopped cleanly
    # the clean stop's mark does not outlive the next launch: killed again, refused again
    seen = len(_journal(tmp_path))
    proc = _start(checkpoint)
    wait_until(
        lambda: len(_journal(tmp_path)) > seen,
        timeout=180,
        what="a window of the next run in the journal",
        alive=lambda: None if proc.poll() is None else f"driver exited {proc.returncode}",
    )
    _kill(proc)
    assert _start(checkpoint, windows=2, journals=2).wait(timeout=300) != 0
    assert _start(checkpoint, windows=2).wait(timeout=300) == 0, log.read_text()[-3000:]
    assert _start(checkpoint, windows=2, journals=2).wait(timeout=300) == 0, log.read_text()[-3000:]
    final = collected(str(checkpoint), "out")
    assert sorted(final) == list(range(max(final) + 1))
    assert all(final[w] == [_expected_total(w)] for w in final)
