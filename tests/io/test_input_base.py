"""The replayable input contract (``malhar.io.base.ReplayableInput``), through the example
connector of docs/howto-input.md (``malhar/testing/line_input.py``): new windows, exact replay,
release on committed, limits, misuse; then SIGKILLed driver processes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from malhar import OperatorContext, OutputPort
from malhar.attributes import APPLICATION_WINDOW_COUNT, MAX_TUPLES_PER_WINDOW
from malhar.errors import ConfigError, StateError
from malhar.io.base import ReplayableInput, ReplayError, WindowRecord
from malhar.testing.harness import OperatorHarness
from malhar.testing.line_input import LineFileInput
from malhar.testing.operators import collected
from malhar.testing.services.process import wait_until
from tests.drivers import start_driver

ROOT = Path(__file__).resolve().parents[2]


def write_lines(path: Path, first: int, count: int, prefix: str = "") -> list[str]:
    lines = [f"{prefix}{i}" for i in range(first, first + count)]
    with open(path, "a") as f:
        f.write("".join(f"{line}\n" for line in lines))
    return lines


def harness(op: Any, checkpoint: Path, saved: bytes | None = None, **context: Any) -> Any:
    ctx = OperatorContext(name=context.pop("name", "lines"), checkpoint=str(checkpoint), **context)
    if saved is not None:
        return OperatorHarness.restored(op, saved, ctx)
    return OperatorHarness(op, ctx)


def windows_of(h: OperatorHarness) -> dict[int, list[Any]]:
    return {w: list(v) for w, v in h.sink("output").per_window.items()}


# -- the protocol, by hand ---------------------------------------------------------------------
def test_new_windows_replay_exactly_and_read_on(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    lines_a = write_lines(a, 0, 10, "a")
    lines_b = write_lines(b, 0, 4, "b")
    checkpoint = tmp_path / "ckpt"
    h = harness(LineFileInput([str(a), str(b)], max_records_per_window=6), checkpoint)
    h.run_window()  # 0
    h.run_window()  # 1
    saved = h.checkpoint()  # the state after window 1
    more = write_lines(a, 10, 3, "a") + write_lines(b, 4, 2, "b")
    for _ in range(3):
        h.run_window()  # 2, 3, 4
    first = windows_of(h)
    h.teardown()
    assert [len(first.get(w, [])) for w in range(5)] == [6, 6, 6, 1, 0]
    assert sorted(x for w in first.values() for x in w) == sorted(lines_a + lines_b + more)
    records = {w: h.operator.window_data_manager.retrieve(w) for w in range(5)}
    assert records[0] == {"ranges": [[str(a), 0, 18, 6]]}  # six lines "a0" .. "a5" of 3 bytes
    assert records[4] == {"ranges": []}  # an empty window is recorded too

    # another instance, restored from window 1's state (as after a crash in window 2):
    # windows 2-4 are replays with exactly the same lines, then it reads on
    later = write_lines(b, 6, 2, "b")
    h2 = harness(LineFileInput([str(a), str(b)], max_records_per_window=6), checkpoint, saved)
    for w in (2, 3, 4):
        h2.run_window(window=w)
        assert h2.operator.replaying
    h2.run_window()  # 5: new
    assert not h2.operator.replaying
    again = windows_of(h2)
    # committed: windows 0-4 released from the log (recorded by the first instance), 5 from
    # memory, all in the form the log gives back
    released: list[WindowRecord] = []
    h2.operator.release = released.extend
    h2.committed(5)
    wdm = h2.operator.window_data_manager
    assert released == [WindowRecord(w, wdm.retrieve(w)) for w in range(6)]
    assert released[5].record == {"ranges": [[str(b), 18, 24, 2]]}  # "b6", "b7"
    h2.teardown()
    assert {w: again.get(w) for w in (2, 3, 4)} == {w: first.get(w) for w in (2, 3, 4)}
    assert again[5] == later


def test_limits_come_from_the_engine_and_the_property(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    write_lines(path, 0, 25)
    h = harness(
        LineFileInput([str(path)], lines_per_read=4),
        tmp_path / "ckpt",
        attributes={MAX_TUPLES_PER_WINDOW.name: 10},
    )
    for _ in range(4):
        h.run_window()
    assert [len(v) for v in windows_of(h).values()] == [10, 10, 5]
    h.teardown()
    h = harness(
        LineFileInput([str(path)], max_records_per_window=3),
        tmp_path / "ckpt2",
        attributes={MAX_TUPLES_PER_WINDOW.name: 10},
    )
    h.run_window()
    assert windows_of(h) == {0: ["0", "1", "2"]}
    h.teardown()


def test_partitions_split_the_files_and_bad_lines_go_to_the_error_port(tmp_path: Path) -> None:
    paths = [tmp_path / f"f{i}.txt" for i in range(3)]
    for i, p in enumerate(paths):
        write_lines(p, 0, 2, f"f{i}-")
    with open(paths[1], "ab") as f:
        f.write(b"\xff\xfe broken\nf1-after\n")
    got: dict[int, list[str]] = {}
    errors: list[Any] = []
    for part in range(2):
        h = harness(
            LineFileInput([str(p) for p in paths]), tmp_path / "ckpt", partition=part, partitions=2
        )
        h.run_window()
        got[part] = h.sink("output").tuples
        errors += h.sink("error").tuples
        h.teardown()
    assert got == {0: ["f0-0", "f0-1", "f2-0", "f2-1"], 1: ["f1-0", "f1-1", "f1-after"]}
    assert [(e["path"], e["offset"]) for e in errors] == [(str(paths[1]), 10)]
    assert "utf-8" in errors[0]["error"]
    # the replay of that window routes the bad line to the error port again
    h = harness(
        LineFileInput([str(p) for p in paths]), tmp_path / "ckpt", partition=1, partitions=2
    )
    h.run_window(window=0)
    assert h.sink("output").tuples == got[1] and h.sink("error").tuples == errors
    h.teardown()


def test_committed_releases_each_window_once_then_purges(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    write_lines(path, 0, 9)
    progress = tmp_path / "progress"
    h = harness(
        LineFileInput([str(path)], max_records_per_window=3, progress_file=str(progress)),
        tmp_path / "ckpt",
    )
    released: list[list[int]] = []
    op = h.operator
    real = op.release
    op.release = lambda records: (released.append([r.window for r in records]), real(records))
    for _ in range(4):
        h.run_window()
    h.committed(1)
    assert json.loads(Path(f"{progress}.0").read_text()) == {str(path): 12}
    h.committed(1)  # again (a restart delivers it again): nothing new
    h.committed(0)  # an older one: nothing
    h.committed(3)
    assert released == [[0, 1], [2, 3]]
    assert json.loads(Path(f"{progress}.0").read_text()) == {str(path): 18}
    assert op._released == 3 and op._unreleased == []
    # window 3's record stays until a later release is checkpointed: a partition restored
    # from an older snapshot releases windows 2-3 again and finds their records
    assert op.window_data_manager.retrieve(3) == {"ranges": []}
    h.teardown()


def test_a_skipped_replay_still_moves_the_position(tmp_path: Path) -> None:
    # at-most-once: the engine drops a replayed window's emission (emit_tuples is not
    # called) but the position must still move past it, or the next window re-reads it
    path = tmp_path / "in.txt"
    write_lines(path, 0, 6)
    h = harness(LineFileInput([str(path)], max_records_per_window=4), tmp_path / "ckpt")
    h.setup()
    saved = h.checkpoint()
    h.run_window()
    h.teardown()
    h2 = harness(LineFileInput([str(path)], max_records_per_window=4), tmp_path / "ckpt", saved)
    h2.begin_window(0)
    h2.end_window()  # skipped
    h2.run_window()
    assert windows_of(h2) == {1: ["4", "5"]}
    h2.teardown()


def test_a_changed_file_cannot_be_replayed(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    write_lines(path, 0, 6)
    h = harness(LineFileInput([str(path)]), tmp_path / "ckpt")
    h.setup()
    saved = h.checkpoint()
    h.run_window()
    h.teardown()
    path.write_text("0\n1\n")  # truncated and rewritten
    h2 = harness(LineFileInput([str(path)]), tmp_path / "ckpt", saved)
    with pytest.raises(ReplayError, match=r"truncated or rewritten"):
        h2.run_window(window=0)
    h2.teardown()


class Broken(ReplayableInput):
    """Reads one item per window and records whatever ``record`` says."""

    output = OutputPort()

    def __init__(self, record: Any) -> None:
        self.record = record  # runtime: not a property, set after construction only

    def open(self, context: OperatorContext) -> None:
        self.sent = False

    def begin_new_window(self, window_id: int) -> None:
        self.sent = False

    def read(self, limit: int) -> int:
        if self.sent:
            return 0
        self.sent = True
        self.output.emit(1)
        return 1

    def window_record(self) -> Any:
        return self.record

    def replay(self, record: Any) -> int:
        self.output.emit(1)
        return 1

    def advance_past(self, record: Any) -> None:
        pass


def test_contract_misuse_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="returned None"):
        harness(Broken(None), tmp_path / "a").run_window()
    with pytest.raises(StateError, match="not JSON-able"):
        harness(Broken({"when": object()}), tmp_path / "b").run_window()
    with pytest.raises(ConfigError, match="APPLICATION_WINDOW_COUNT"):
        harness(Broken({}), tmp_path / "c", attributes={APPLICATION_WINDOW_COUNT.name: 2}).setup()
    # a window at or before the largest recorded one that has no record (purged, or ids
    # that jumped) cannot be replayed: refused rather than read as new
    h = harness(Broken({}), tmp_path / "d")
    h.run_window(window=0)
    h.run_window(window=5)
    with pytest.raises(ReplayError, match="window 3 must be replayed"):
        h.begin_window(3)
    h.teardown()
    with pytest.raises(TypeError, match="abstract"):
        type("Half", (ReplayableInput,), {"read": lambda self, limit: 0})()
    assert WindowRecord(3, {"x": 1}).window == 3


def test_the_howto_shows_the_tested_connector() -> None:
    # docs/howto-input.md prints the whole example module: it must be this file, verbatim
    doc = (ROOT / "docs" / "howto-input.md").read_text()
    module = (ROOT / "malhar" / "testing" / "line_input.py").read_text()
    assert f"```python\n{module.rstrip()}\n```" in doc


# -- SIGKILLed driver processes ----------------------------------------------------------------
def _start(root: Path, files: list[Path]) -> subprocess.Popen:
    args = [str(root / "ckpt"), *map(str, files)]
    return start_driver("tests.io.line_crash_app", *args, log=root / "driver.log")


def _journal(root: Path) -> list[dict[str, Any]]:
    path = root / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_sigkilled_driver_restarts_and_every_line_arrives_exactly_once(tmp_path: Path) -> None:
    files = [tmp_path / f"in-{i}.txt" for i in range(3)]
    expected: list[str] = []
    for i, f in enumerate(files):
        expected += write_lines(f, 0, 40, f"f{i}-")
    rng = random.Random(11)
    last = -1
    for run in range(3):
        proc = _start(tmp_path, files)
        target = last + rng.randint(2, 4)
        wait_until(
            lambda t=target: any(e["w"] >= t for e in _journal(tmp_path)),
            timeout=240,
            what=f"window {target} in the journal",
            alive=lambda p=proc: None if p.poll() is None else f"driver exited {p.returncode}",
        )
        _kill(proc)
        last = max(e["w"] for e in _journal(tmp_path))
        for i, f in enumerate(files):  # the files grow between runs
            expected += write_lines(f, 40 + 20 * run, 20, f"f{i}-")

    proc = _start(tmp_path, files)
    checkpoint = str(tmp_path / "ckpt")

    def out() -> list[str]:
        return [x for rows in collected(checkpoint, "out").values() for x in rows]

    try:
        wait_until(
            lambda: len(out()) >= len(expected),
            timeout=240,
            what=lambda: f"{len(expected)} lines collected ({len(out())} so far)",
            alive=lambda: None if proc.poll() is None else f"driver exited {proc.returncode}",
        )
    finally:
        _kill(proc)

    # every line exactly once over the completed windows ...
    assert sorted(out()) == sorted(expected)
    # ... and every window that ran more than once (a replay) had the same lines each time
    seen: dict[int, list[str]] = {}
    runs: set[str] = set()
    for e in _journal(tmp_path):
        runs.add(e["run"])
        if e["w"] in seen:
            assert sorted(e["v"]) == seen[e["w"]], f"window {e['w']} replayed differently"
        seen[e["w"]] = sorted(e["v"])
    assert len(runs) == 4
    windows = sorted(seen)
    assert windows == list(range(windows[0], windows[-1] + 1))  # never backwards, no gap
