"""``StopSignals``: how a driver process hears "stop" (SIGINT, SIGTERM) without deadlocking.

A signal handler runs in the main thread between two bytecodes, wherever that thread is. It
must not take a lock the main thread may hold: ``threading.Event.set()`` in a handler, with
the main thread inside ``Event.wait()`` on the same event, blocks forever on the event's
(non-reentrant) lock. The driver then keeps running windows and never stops. So the handler
only sets a flag, and the waiting loops poll it between bounded waits on Spark.

While it is active, ``kill -USR1 <pid>`` prints the stack of every Python thread to stderr
(:mod:`faulthandler`), to see where a driver that does not stop is waiting.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
from typing import Any

__all__ = ["StopSignals"]


class StopSignals:
    """Ctrl-C (SIGINT) or SIGTERM asks for an orderly stop; a second one stops at once.

    The first signal only sets ``requested``: raising inside a blocking Spark call would
    leave the py4j connection mid-answer (and PySpark's own SIGINT handler cancels every
    running job). The waiting loops poll ``requested`` instead. Outside the main thread
    (where Python cannot set handlers) the signals stay as they are.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}
        self._dumps = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: signals stay as they are
                return self
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        self._dumps = True
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self._dumps:
            faulthandler.unregister(signal.SIGUSR1)
