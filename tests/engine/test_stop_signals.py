"""StopSignals: SIGTERM and SIGINT set a flag (a second one interrupts), SIGUSR1 dumps stacks."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import os, signal, sys
from malhar.engine.stop_signals import StopSignals

with StopSignals() as stop:
    os.kill(os.getpid(), signal.SIGUSR1)  # every thread's stack to stderr, and on
    os.kill(os.getpid(), signal.SIGTERM)
    print("requested", stop.requested, flush=True)
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        print("second signal interrupts", flush=True)
print("handlers back", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
"""


def test_signals_set_a_flag_interrupt_the_second_time_and_dump_stacks() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "requested True",
        "second signal interrupts",
        "handlers back True",
    ]
    assert "Current thread" in proc.stderr and "<string>" in proc.stderr, proc.stderr
