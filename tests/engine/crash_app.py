"""A small application for crash tests, run as a separate driver process.

    python -m tests.engine.crash_app CHECKPOINT MASTER WINDOWS [JOURNAL_PARTITIONS]

WINDOWS=0 runs until killed. The ``Journal`` operator appends one line per
window (window, running total, pid) without ever overwriting, so the journal
shows every replay; the Collector keeps the latest result per window.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from malhar import DAG, InputPort, Operator, OperatorContext, build_session, launch
from malhar.testing.operators import Collector
from tests.engine.ops import Numbers, RunningTotal


class Journal(Operator):
    input = InputPort()

    def setup(self, context: OperatorContext) -> None:
        self._path = Path(context.checkpoint).parent / "journal.jsonl"

    def begin_window(self, window_id: int) -> None:
        self._w, self._seen = window_id, []

    def process(self, value: Any) -> None:
        self._seen.append(value)

    def end_window(self) -> None:
        with open(self._path, "a") as f:
            line = {"w": self._w, "v": self._seen, "run": os.environ.get("CRASH_RUN_ID")}
            f.write(json.dumps(line) + "\n")


def build(journal_partitions: int = 1) -> DAG:
    dag = DAG("crash")
    src = dag.add_operator("src", Numbers(), PARTITIONS=2)
    tot = dag.add_operator("total", RunningTotal())
    journal = dag.add_operator("journal", Journal(), PARTITIONS=journal_partitions)
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, tot.input)
    dag.add_stream("totals", tot.output, journal.input, out.input)
    return dag


def main() -> None:
    checkpoint, master, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    journals = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.environ["CRASH_RUN_ID"] = f"{os.getpid()}"  # inherited by the JVM and its Python workers
    spark = build_session(master, app_name="malhar-crash", shuffle_partitions=2)
    app = launch(
        build(journals),
        spark=spark,
        checkpoint=checkpoint,
        windows=windows or None,
        window_ms=100,
    )
    if windows:
        app.await_completion()
    else:
        threading.Event().wait()  # until the test SIGKILLs this process


if __name__ == "__main__":
    main()
