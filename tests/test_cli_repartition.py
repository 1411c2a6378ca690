"""``malhar repartition``: operators of an application ``malhar run`` runs are repartitioned
from another process, exactly once; refusals and a missing application are clear."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from malhar.cli import cli
from malhar.engine import generations, requests
from malhar.testing.operators import collected
from malhar.testing.services.process import wait_until
from tests.drivers import kill_when_paused
from tests.engine.test_repartition import _check_exact
from tests.test_cli import malhar_command

ROOT = Path(__file__).resolve().parents[1]

APP = """
from malhar import DAG, KeyCodec
from malhar import attributes as A
from malhar.testing.operators import Collector
from tests.engine.ops import KeyedRunningCount, RatedKeys


def app(dag: DAG) -> None:
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    count = dag.add_operator("count", KeyedRunningCount())
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, count.input)
    dag.add_stream("counts", count.output, out.input)
    count.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _ask(checkpoint: Path, *counts: str) -> subprocess.CompletedProcess:
    command = [*malhar_command(), "repartition", "--checkpoint", str(checkpoint), *counts]
    return subprocess.run(
        command, env=_env(), capture_output=True, text=True, timeout=300, cwd=ROOT
    )


@pytest.mark.integration
def test_an_application_malhar_run_runs_is_repartitioned_by_malhar_repartition(
    tmp_path: Path,
) -> None:
    (tmp_path / "keyed_app.py").write_text(APP)
    checkpoint = tmp_path / "ck"
    command = [*malhar_command(), "run", f"{tmp_path / 'keyed_app.py'}:app", "--master"]
    command += ["local[1]", "--checkpoint", str(checkpoint), "--window-ms", "100"]
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(command, env=_env(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: (
                proc.poll() is not None
                or (
                    requests.serving(str(checkpoint)) is not None
                    and len(collected(str(checkpoint), "out")) >= 2
                )
            ),
            timeout=300,
            what="the application's first windows",
        )
        assert proc.poll() is None, (tmp_path / "run.log").read_text()
        done = _ask(checkpoint, "count=3")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "repartitioned after window" in done.stdout and ": count 3 partitions" in done.stdout
        assert generations.load(str(checkpoint)).operators["count"].partitions == 3
        refused = _ask(checkpoint, "nope=2")
        assert refused.returncode == 1
        assert "refused: ConfigError: no operator 'nope' to repartition" in refused.stderr
        last = max(collected(str(checkpoint), "out"))
        wait_until(
            lambda: max(collected(str(checkpoint), "out")) >= last + 3,
            timeout=120,
            what="windows after the repartitioning",
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    text = (tmp_path / "run.log").read_text()
    assert "keyed_app: repartitioned after window" in text and ": count 3 partitions" in text
    assert "repartitioning refused: ConfigError: no operator 'nope'" in text
    _check_exact(str(checkpoint))  # every window exact, before and after
    assert requests.serving(str(checkpoint)) is None  # its heartbeat went with it
    gone = _ask(checkpoint, "count=2")
    assert gone.returncode == 2 and "no application is running on" in gone.stderr


def test_bad_counts_are_usage_errors() -> None:
    for bad in ("count", "count=0", "count=x", "=3"):
        result = CliRunner().invoke(cli, ["repartition", "--checkpoint", "/nowhere", bad])
        assert result.exit_code == 2, bad
        assert "write OPERATOR=N with N a partition count of 1 or more" in result.output, bad


def test_a_request_nobody_serves_is_refused_at_once_and_a_late_one_expires(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["repartition", "--checkpoint", str(tmp_path), "a=2"])
    assert result.exit_code == 2 and "no application is running on" in result.output
    nowhere = CliRunner().invoke(cli, ["repartition", "--checkpoint", str(tmp_path / "x"), "a=2"])
    assert nowhere.exit_code == 2 and "there is no checkpoint at" in nowhere.output
    # a heartbeat older than three beats is stale
    requests.heartbeat(str(tmp_path), "app")
    assert requests.serving(str(tmp_path))["application"] == "app"
    beat = tmp_path / "malhar" / "requests" / "serving.json"
    doc = json.loads(beat.read_text())
    doc["at"] -= 3 * requests.HEARTBEAT_S + 1
    beat.write_text(json.dumps(doc))
    assert requests.serving(str(tmp_path)) is None
    # a request its asker no longer waits for is answered "expired", not carried out
    from malhar.cli_repartition import RequestServer

    class _NeverRepartitioned:  # the server must not call it for an expired request
        checkpoint = str(tmp_path)

        class dag:  # the attribute the server reads
            name = "app"

        def repartition(self, counts: dict) -> None:
            raise AssertionError("an expired request was carried out")

    request = requests.submit(str(tmp_path), {"a": 2}, timeout=1)
    wait_until(
        lambda: time.time() > requests.pending(str(tmp_path))[0].until,
        timeout=5,
        what="the request's deadline",
    )
    RequestServer(_NeverRepartitioned()).poll()
    answer = requests.await_answer(str(tmp_path), request, timeout=1)
    assert answer == requests.Answer(False, "expired") and requests.pending(str(tmp_path)) == []


def test_an_application_that_dies_before_taking_the_request_is_noticed(tmp_path: Path) -> None:
    # the asker waited out its whole --timeout (300 s by default) for a killed run
    requests.heartbeat(str(tmp_path), "app")
    beat = tmp_path / "malhar" / "requests" / "serving.json"
    doc = json.loads(beat.read_text())
    doc["at"] -= 3 * requests.HEARTBEAT_S - 1  # stale a second from now: the run died
    beat.write_text(json.dumps(doc))
    started = time.monotonic()
    result = CliRunner().invoke(
        cli, ["repartition", "--checkpoint", str(tmp_path), "--timeout", "60", "a=2"]
    )
    assert result.exit_code == 2, result.output
    assert "app stopped serving" in result.output and "nothing changed" in result.output
    assert time.monotonic() - started < 30
    assert requests.pending(str(tmp_path)) == []  # withdrawn


def test_files_that_are_not_requests_are_left_alone_and_old_leftovers_swept(
    tmp_path: Path,
) -> None:
    # a stray file there made pending() raise, and the run loop with it (review finding)
    folder = tmp_path / "malhar" / "requests"
    folder.mkdir(parents=True)
    for name, text in {
        "notes.json": "[1, 2]",
        "bad.json": '{"counts": {"a": "three"}}',
        "half.json": "{",
        "x.json": '{"counts": {"a": 2}, "at": "soon"}',
    }.items():
        (folder / name).write_text(text)
    request = requests.submit(str(tmp_path), {"a": 2})
    assert [r.id for r in requests.pending(str(tmp_path))] == [request]
    old, fresh = folder / "r1.answer.json", folder / "r2.taken"
    old.write_text("{}")
    fresh.write_text("{}")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    requests.sweep(str(tmp_path))
    assert not old.exists() and fresh.exists() and (folder / "notes.json").exists()


def test_ctrl_c_withdraws_the_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the request stayed, to be carried out later for nobody (review finding)
    requests.heartbeat(str(tmp_path), "app")

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(requests, "await_answer", interrupted)
    result = CliRunner().invoke(cli, ["repartition", "--checkpoint", str(tmp_path), "a=2"])
    assert result.exit_code == 2 and "interrupted; the request is withdrawn" in result.output
    assert requests.pending(str(tmp_path)) == []


def test_an_input_that_cannot_move_its_positions_is_refused_before_anything_stops() -> None:
    # it was refused only after the whole application had stopped in order (review)
    from malhar import DAG
    from malhar.engine.repartition import check_requests
    from malhar.errors import ConfigError
    from malhar.testing.operators import Collector, ListInput

    dag = DAG("inputs")
    src = dag.add_operator("src", ListInput(windows=[[1]]))
    dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
    with pytest.raises(ConfigError, match="'src' is an input that cannot move its read positions"):
        check_requests(dag, {"src": 2})


PAUSING_APP = (
    APP
    + """
from malhar.engine import repartition
from tests.drivers import pause_hook

# the repartitioning stops at this step, writes <checkpoint>/paused and waits to be killed
repartition.STEP_HOOK = pause_hook({checkpoint!r}, {step!r})
"""
)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("step", ["snapshots", "committed"])
def test_an_application_killed_while_repartitioning_is_noticed(tmp_path: Path, step: str) -> None:
    # malhar repartition waited out its whole --timeout for a run killed after it had
    # taken the request, and left the taken request behind (walkthrough finding)
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    app = tmp_path / "pausing_app.py"
    app.write_text(PAUSING_APP.format(checkpoint=str(checkpoint), step=step))
    command = [*malhar_command(), "run", f"{app}:app", "--master", "local[1]"]
    command += ["--checkpoint", str(checkpoint), "--window-ms", "100"]
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(
        command, env=_env(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    ask = None
    try:
        wait_until(
            lambda: (
                requests.serving(str(checkpoint)) is not None
                and len(collected(str(checkpoint), "out")) >= 2
            ),
            timeout=300,
            what="the application's first windows",
            alive=lambda: None if proc.poll() is None else (tmp_path / "run.log").read_text(),
        )
        before = generations.load(str(checkpoint))
        asked = [*malhar_command(), "repartition", "--checkpoint", str(checkpoint)]
        ask = subprocess.Popen(
            [*asked, "--timeout", "280", "count=3"],
            env=_env(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        kill_when_paused(proc, checkpoint, step)  # SIGKILL while repartitioning
        killed = time.monotonic()
        out, err = ask.communicate(timeout=120)  # well under its --timeout of 280 s
        assert time.monotonic() - killed < 60, err
    finally:
        for p in (proc, ask):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        log.close()
    assert "repartitioning count: 3" in (tmp_path / "run.log").read_text()
    assert ask.returncode == 2, out + err
    assert "stopped while repartitioning, before it answered" in err, err
    after = generations.load(str(checkpoint))
    if step == "committed":
        assert after.generation == before.generation + 1
        assert after.operators["count"].partitions == 3
        assert "it had committed: the checkpoint records count 3" in err, err
    else:
        assert after.generation == before.generation
        assert "it had not committed: nothing changed, the checkpoint records count 1" in err
    assert "the next launch runs on these counts" in err, err
    # the taken request is removed (no later run would act on it anyway); the stale
    # heartbeat stays for the next run to write over
    left = sorted(p.name for p in (checkpoint / "malhar" / "requests").iterdir())
    assert left == ["serving.json"], left


def _serve_in_thread(checkpoint: Path, serve: Callable[[str], None]) -> threading.Thread:
    """Runs ``serve(request)`` on the first request that appears (a stand-in for a run)."""

    def run() -> None:
        wait_until(lambda: bool(requests.pending(str(checkpoint))), timeout=30, what="the request")
        serve(requests.pending(str(checkpoint))[0].id)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _beat(checkpoint: Path, run: str, pid: int) -> dict:
    """A heartbeat of run ``run`` (pid ``pid``) on ``checkpoint``."""
    beat = checkpoint / "malhar" / "requests" / "serving.json"
    requests.heartbeat(str(checkpoint), "app", run)
    doc = {**json.loads(beat.read_text()), "pid": pid}
    beat.write_text(json.dumps(doc))
    return doc


A_2_DONE = "after window 9 (generation 1): a 2 partitions"


def _answer_a_2(checkpoint: Path, request: str) -> None:
    """What a run that carried out ``a=2`` answers."""
    requests.answer(str(checkpoint), request, requests.Answer(True, A_2_DONE))


def _ask_a_2(tmp_path: Path, serve: Any) -> Any:
    """``malhar repartition a=2`` on ``tmp_path`` while ``serve`` plays the application."""
    thread = _serve_in_thread(tmp_path, serve)
    result = CliRunner().invoke(
        cli, ["repartition", "--checkpoint", str(tmp_path), "--timeout", "60", "a=2"]
    )
    thread.join()
    return result


def test_a_new_run_serving_while_the_request_is_under_way_means_the_taker_died(
    tmp_path: Path,
) -> None:
    # the asker waited for an answer that the killed run could not give, while a new run
    # served the checkpoint (walkthrough finding)
    taker = _beat(tmp_path, "run-a", 1001)

    def killed_while_repartitioning(request: str) -> None:
        assert requests.take(str(tmp_path), request, taker)
        _beat(tmp_path, "run-b", 1002)  # run-a died; run-b started on the checkpoint

    result = _ask_a_2(tmp_path, killed_while_repartitioning)
    assert result.exit_code == 2, result.output
    assert "app (pid 1001 on" in result.output
    assert "stopped while repartitioning, before it answered" in result.output
    assert "it had not committed: nothing changed, the checkpoint records a ?" in result.output
    assert "a new run (pid 1002 on" in result.output
    left = sorted(p.name for p in (tmp_path / "malhar" / "requests").iterdir())
    assert left == ["serving.json"]  # the new run's heartbeat stays
    assert requests.serving(str(tmp_path))["run"] == "run-b"


def test_a_request_a_new_run_took_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the run asked died before taking it; the next run on the checkpoint took it: its
    # answer is the one to wait for, not a false "stopped while repartitioning"
    _beat(tmp_path, "run-a", 1001)
    seen = threading.Event()  # the asker saw the request under way
    taken = requests.taken

    def watched(checkpoint: str, request: str) -> dict | None:
        by = taken(checkpoint, request)
        if by:
            seen.set()
        return by

    monkeypatch.setattr(requests, "taken", watched)

    def taken_by_the_next_run(request: str) -> None:
        new = _beat(tmp_path, "run-b", 1002)
        assert requests.take(str(tmp_path), request, new)
        assert seen.wait(timeout=30)
        _answer_a_2(tmp_path, request)

    result = _ask_a_2(tmp_path, taken_by_the_next_run)
    assert result.exit_code == 0, result.output
    assert f"repartitioned {A_2_DONE}" in result.output


def test_a_run_late_to_beat_while_repartitioning_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a heartbeat a few seconds late (a run moving state, a slow checkpoint file system)
    # was taken for a dead run: exit 2 "it had not committed", and its files deleted while
    # it went on (review)
    taker = _beat(tmp_path, "run-a", 1001)
    beat = tmp_path / "malhar" / "requests" / "serving.json"
    looked = threading.Event()  # the asker saw the silence and went on waiting
    silent_for = requests.silent_for

    def watched(checkpoint: str, run: dict) -> float | None:
        silent = silent_for(checkpoint, run)
        if silent is not None and silent > 3 * requests.HEARTBEAT_S:
            looked.set()
        return silent

    monkeypatch.setattr(requests, "silent_for", watched)

    def late_to_beat(request: str) -> None:
        assert requests.take(str(tmp_path), request, taker)
        doc = json.loads(beat.read_text())
        beat.write_text(json.dumps({**doc, "at": doc["at"] - 7}))  # not fresh, not dead
        assert looked.wait(timeout=30)
        _answer_a_2(tmp_path, request)

    result = _ask_a_2(tmp_path, late_to_beat)
    assert result.exit_code == 0, result.output
    assert f"repartitioned {A_2_DONE}" in result.output
