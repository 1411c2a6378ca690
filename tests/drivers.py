"""Driver processes for crash tests: started in their own process group (a SIGKILL of the
group takes the driver's JVM and Python workers with it), paused at a step, killed; and
killed by the kernel when the test process dies (its JVM exits on its closed stdin pipe)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from malhar.testing.services.process import die_with_parent, wait_until

ROOT = Path(__file__).resolve().parent.parent
PAUSED = "paused"


def start_driver(
    module: str,
    *args: str,
    log: Path,
    env: Mapping[str, str | None] | None = None,
    header: str | None = None,
) -> subprocess.Popen:
    """``python -m module args`` from the project root, its output appended to ``log``
    (after a ``header`` line, when given); ``env`` adds variables (None removes one)."""
    full: dict[str, str] = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    if header is not None:
        out.write(f"\n==== {header}\n".encode())
        out.flush()
    return subprocess.Popen(
        die_with_parent([sys.executable, "-m", module, *args]),  # gone if the test run dies
        cwd=ROOT,
        env=full,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def pause_hook(checkpoint: str, pause: str) -> Callable[[str], None]:
    """A step hook (in the driver) that, at step ``pause``, writes ``<checkpoint>/paused``
    and waits to be killed."""

    def hook(step: str) -> None:
        if step == pause:
            Path(checkpoint, PAUSED).write_text(step)
            threading.Event().wait()  # until the test SIGKILLs this process

    return hook


def kill_when_paused(proc: subprocess.Popen, checkpoint: Path, step: str) -> None:
    """Wait for the driver to pause at ``step`` (:func:`pause_hook`), SIGKILL its group."""
    marker = checkpoint / PAUSED
    wait_until(
        marker.exists,
        timeout=300,
        what=f"the driver to reach {step!r}",
        alive=lambda: None if proc.poll() is None else f"driver exited {proc.returncode}",
    )
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    marker.unlink()


def stop_driver(proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> int:
    """SIGTERM the driver (an orderly stop) and return its exit code. A driver that does not
    exit in ``timeout`` seconds is asked for every thread's stack (SIGUSR1, see
    ``malhar.engine.stop_signals``), killed, and the test fails with the end of its log."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        try:
            wait_until(
                lambda: "Current thread" in log.read_text(errors="replace"),
                timeout=15,
                what="the driver's thread dump",
            )
        except Exception:  # no dump (a driver without StopSignals): the log still says much
            pass
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        tail = log.read_text(errors="replace")[-8000:]
        raise AssertionError(
            f"the driver did not stop in {timeout:g}s after SIGTERM:\n{tail}"
        ) from None
