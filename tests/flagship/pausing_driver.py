"""The flagship driver with a writer that can stop dead at a chosen point of a window.

    FLAGSHIP_PAUSE=before_commit|after_commit FLAGSHIP_MARKER=/path \\
        python -m tests.flagship.pausing_driver CHECKPOINT ...

``before_commit``: the window's rows and meta row are written, COMMIT not sent.
``after_commit``: the database transaction is committed, the engine has not yet
recorded the window (the point between the data write and the window's commit).
The first window with rows in this process touches ``FLAGSHIP_MARKER`` and blocks
until the test SIGKILLs the process group.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from malhar.io.jdbc import JdbcOutputOperator
from samples.wordcount_exactly_once.driver import main

PAUSE_ENV = "FLAGSHIP_PAUSE"
MARKER_ENV = "FLAGSHIP_MARKER"


def _stop_here(window_id: int) -> None:
    marker = Path(os.environ[MARKER_ENV])
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(str(window_id))
    tmp.replace(marker)  # the waiting test sees the marker only with its window id in it
    threading.Event().wait()  # until SIGKILL


class PausingOutput(JdbcOutputOperator):
    def before_commit(self, connection: Any, window_id: int) -> None:
        if os.environ.get(PAUSE_ENV) == "before_commit":
            _stop_here(window_id)

    def end_window(self) -> None:
        had_rows = not self._skip and len(self._buffer) > 0
        window = self._window
        super().end_window()
        if had_rows and os.environ.get(PAUSE_ENV) == "after_commit":
            _stop_here(window)


if __name__ == "__main__":
    sys.exit(main(output=PausingOutput))
