"""``malhar services up|status|down`` from a shell: what `up` starts outlives the command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from malhar.testing.services import SERVICES, service_class
from malhar.testing.services.kafka import KafkaService
from malhar.testing.services.process import free_port, port_in_use, wait_until

pytestmark = pytest.mark.integration


class Shell:
    """Runs ``malhar services ...`` as a separate process, like a user in a shell does."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.env = {**os.environ, "MALHAR_RUN_DIR": str(run_dir)}
        self.env.pop("MALHAR_SERVICES", None)
        for name in SERVICES:  # start local servers, never attach to the session's own
            self.env.pop(service_class(name).env_var, None)

    def __call__(self, *args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "malhar", "services", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def states(self) -> dict:
        path = self.run_dir / "services.json"
        return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture
def shell() -> Iterator[Shell]:
    # Not tmp_path (0o700): a PostgreSQL started by root runs as `postgres` and must reach
    # its folder inside the run directory.
    base = Path(tempfile.mkdtemp(prefix="malhar-services-shell-"))
    base.chmod(0o755)
    sh = Shell(base / "run")
    try:
        yield sh
    finally:  # whatever a failed test left running
        if sh.states():
            sh("down")
        shutil.rmtree(base, ignore_errors=True)


def _export(output: str, var: str) -> str:
    found = re.search(rf"^export {var}='([^']*)'$", output, re.MULTILINE)
    assert found, output
    return found.group(1)


def test_up_leaves_kafka_running_after_the_command_exits_until_down(shell: Shell) -> None:
    up = shell("up", "kafka")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "kafka: up" in up.stdout
    bootstrap = _export(up.stdout, "MALHAR_KAFKA_BOOTSTRAP")
    # a shell without it would not find the services again (walkthrough)
    assert _export(up.stdout, "MALHAR_RUN_DIR") == str(shell.run_dir)
    (state,) = shell.states().values()

    # `up` has exited: its broker still answers, to this process and to `status`
    status = shell("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "kafka: answering" in status.stdout
    broker = KafkaService.from_env(bootstrap)
    assert broker.ping(timeout=10)
    assert set(broker.admin().list_topics(timeout=10).brokers) == {1}

    again = shell("up", "kafka")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "kafka: already up" in again.stdout
    assert shell.states()["kafka"]["pids"] == state["pids"]

    down = shell("down", "kafka")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "kafka: down" in down.stdout
    wait_until(lambda: not port_in_use(broker.port or 0), timeout=30, what=f"{bootstrap} closed")
    assert not Path(state["home"]).exists()
    assert shell.states() == {}
    assert shell("status").stdout.strip() == (
        f"no services up (none recorded in {shell.run_dir / 'services.json'}; services "
        "started with another MALHAR_RUN_DIR are recorded there)"
    )


def test_up_restarts_a_recorded_service_that_does_not_answer(shell: Shell) -> None:
    # what `up` recorded for a server that has gone since (killed, a reboot)
    stale_home = shell.run_dir / "postgres-stale"
    stale_home.mkdir(parents=True)
    dsn = f"postgresql://malhar:secret@127.0.0.1:{free_port()}/malhar"
    stale = service_class("postgres").from_env(dsn)
    record = {
        "postgres": {
            "name": "postgres",
            "external": False,
            "home": str(stale_home),
            "pids": [],
            "logs": [],
            "connection": stale.connection(),
            "env_value": dsn,
        }
    }
    (shell.run_dir / "services.json").write_text(json.dumps(record))

    status = shell("status")
    assert status.returncode == 1
    assert "postgres: NOT answering" in status.stdout
    assert "secret" not in status.stdout

    up = shell("up", "postgres")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "already up" not in up.stdout
    assert "postgres: recorded instance" in up.stdout and "restarting" in up.stdout
    assert "secret" not in up.stdout
    assert not stale_home.exists()
    fresh = service_class("postgres").from_env(_export(up.stdout, "MALHAR_POSTGRES_DSN"))
    assert fresh.ping()  # after `up` exited
    assert shell("status").returncode == 0

    down = shell("down", "postgres")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not fresh.ping()
    assert shell.states() == {}


# -- what decides whether a service process outlives its starter ----------------------------
_STARTER = """
import sys
from pathlib import Path
from malhar.testing.services.process import ManagedProcess, outliving_parent

proc = ManagedProcess("probe", ["sleep", "120"], Path(sys.argv[1]))
if sys.argv[2] == "outlive":
    with outliving_parent():
        proc.start()
else:
    proc.start()
print(proc.pid, flush=True)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait long for its reaper)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("mode", ["default", "outlive"])
def test_service_process_dies_with_its_starter_unless_outliving_parent(
    mode: str, tmp_path: Path
) -> None:
    starter = subprocess.run(
        [sys.executable, "-c", _STARTER, str(tmp_path / "probe.log"), mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pid = int(starter.stdout.strip())
    try:
        if mode == "default":  # a fixture's server: gone with the test run that started it
            wait_until(lambda: not _running(pid), timeout=10, what=f"pid {pid} killed")
        else:  # `malhar services up`: still running after the command exited
            assert _running(pid)
            assert "sleep" in Path(f"/proc/{pid}/cmdline").read_text()
    finally:
        if _running(pid):
            os.kill(pid, 9)
