"""A keyed count in managed state, larger than its memory budget, for crash tests.

    python -m tests.engine.managed_crash_app CHECKPOINT MASTER WINDOWS

WINDOWS=0 runs until killed. ``Journal`` appends each window's output (never
overwritten), so every replay shows; the Collector keeps the latest per window.
"""

from __future__ import annotations

import os
import sys
import threading

from malhar import DAG, build_session, launch
from malhar.testing.operators import Collector
from tests.engine.crash_app import Journal
from tests.engine.ops import FirstOfPair, ManagedCount, ManyKeys


def build() -> DAG:
    dag = DAG("managed-crash")
    src = dag.add_operator("src", ManyKeys(), PARTITIONS=2)
    count = dag.add_operator("count", ManagedCount(), PARTITIONS=2)
    journal = dag.add_operator("journal", Journal())
    out = dag.add_operator("out", Collector())
    dag.add_stream("items", src.output, count.input)
    dag.add_stream("counts", count.output, journal.input, out.input)
    count.input.set_attribute("STREAM_CODEC", FirstOfPair())
    return dag


def main() -> None:
    checkpoint, master, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.environ["CRASH_RUN_ID"] = f"{os.getpid()}"
    spark = build_session(master, app_name="malhar-managed-crash", shuffle_partitions=2)
    app = launch(
        build(), spark=spark, checkpoint=checkpoint, windows=windows or None, window_ms=100
    )
    if windows:
        app.await_completion()
    else:
        threading.Event().wait()  # until the test SIGKILLs this process


if __name__ == "__main__":
    main()
