"""SIGKILL a real driver running stateful catalogue operators (BoundedDedup, LookupJoin and
TimeBasedDedup by a str key, on managed state, keyed over two partitions): after restarts,
every window's output equals the one-partition harness run of the same inputs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from pathlib import Path

import pytest

from malhar import OperatorContext
from malhar.algo import BoundedDedup, CsvParser, LookupJoin
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import collected
from malhar.testing.services.process import wait_until
from tests.algo import crash_app
from tests.algo.partitions import as_multiset
from tests.drivers import start_driver


def _start(checkpoint: Path, windows: int = 0) -> subprocess.Popen:
    args = [str(checkpoint), "local[2]", str(windows)]
    return start_driver("tests.algo.crash_app", *args, log=checkpoint.parent / "driver.log")


def _expected(tmp: Path, windows: int) -> dict[str, dict[int, list]]:
    parse = OperatorHarness(CsvParser(schema=crash_app.SCHEMA))
    ctx = OperatorContext(name="x", checkpoint=str(tmp / "expected"))
    dedup = OperatorHarness(BoundedDedup(key="id", schema=crash_app.SCHEMA), ctx)
    join = OperatorHarness(
        LookupJoin("k", join_type="left"), OperatorContext(name="j", checkpoint=ctx.checkpoint)
    )
    tdedup = OperatorHarness(
        crash_app.time_dedup(), OperatorContext(name="t", checkpoint=ctx.checkpoint)
    )
    for w in range(windows):
        feed = crash_app.lines(w) if w < crash_app.WINDOWS else []
        parse.run_window([("input", x) for x in feed], window=w)
        rows = parse.sink("out").per_window.get(w, [])
        dedup.run_window([("input", r) for r in rows], window=w)
        tdedup.run_window([("input", r) for r in rows], window=w)
        updates = crash_app.table(w) if w < crash_app.WINDOWS else []
        unique = dedup.sink("unique").per_window.get(w, [])
        join.run_window([("table", t) for t in updates] + [("stream", r) for r in unique], window=w)
    out = {
        "out_dup": {
            w: as_multiset(dedup.sink("duplicate").per_window.get(w, [])) for w in range(windows)
        },
        "out_join": {
            w: as_multiset(join.sink("output").per_window.get(w, [])) for w in range(windows)
        },
        "out_t": {
            w: as_multiset(tdedup.sink("unique").per_window.get(w, [])) for w in range(windows)
        },
    }
    dedup.teardown()
    join.teardown()
    tdedup.teardown()
    return out


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_sigkill_twice_and_every_window_equals_the_harness(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    rng = random.Random(17)
    last = -1

    def done() -> int:
        got = collected(str(checkpoint), "out_join")
        return max(got) if got else -1

    for _ in range(2):
        proc = _start(checkpoint)
        target = last + rng.randint(3, 6)
        wait_until(
            lambda t=target: done() >= t,
            timeout=300,
            what=f"window {target} collected",
            alive=lambda p=proc: None if p.poll() is None else f"driver exited {p.returncode}",
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        last = done()
    proc = _start(checkpoint, windows=crash_app.WINDOWS + 2 - last)
    assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    final = max(done(), crash_app.WINDOWS)
    expected = _expected(tmp_path, final + 1)
    for name in ("out_dup", "out_join", "out_t"):
        got = collected(str(checkpoint), name)
        for w in range(final + 1):
            assert as_multiset(got.get(w, [])) == expected[name][w], (name, w)
    joined = [r for rows in collected(str(checkpoint), "out_join").values() for r in rows]
    assert any("tag" in r for r in joined) and any("tag" not in r for r in joined)
    assert any(expected["out_dup"].values())
    # the str keys repeat inside a bucket (duplicates dropped) and come back in later buckets
    unique_t = [r["s"] for rows in expected["out_t"].values() for r in rows]
    assert len(unique_t) > len(set(unique_t)) and len(unique_t) < 30 * crash_app.WINDOWS
