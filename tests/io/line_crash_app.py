"""The example line-file input in an application, run as a driver process for crash tests.

    python -m tests.io.line_crash_app CHECKPOINT FILE [FILE ...]

Runs until killed: ``LineFileInput`` (2 partitions, at most 7 lines per window each) ->
``Journal`` (appends every window it processes, replays included, to
``<CHECKPOINT>/../journal.jsonl``) and ``Collector`` (the latest result per window).
"""

from __future__ import annotations

import os
import sys
import threading

from malhar import DAG, build_session, launch
from malhar.testing.line_input import LineFileInput
from malhar.testing.operators import Collector
from tests.engine.crash_app import Journal


def build(files: list[str]) -> DAG:
    dag = DAG("line-crash")
    src = dag.add_operator("in", LineFileInput(files, max_records_per_window=7), PARTITIONS=2)
    journal = dag.add_operator("journal", Journal())
    out = dag.add_operator("out", Collector())
    dag.add_stream("lines", src.output, journal.input, out.input)
    return dag


def main() -> None:
    checkpoint, files = sys.argv[1], sys.argv[2:]
    os.environ["CRASH_RUN_ID"] = f"{os.getpid()}"  # inherited by the JVM and its Python workers
    spark = build_session("local[2]", app_name="malhar-line-crash", shuffle_partitions=2)
    launch(build(files), spark=spark, checkpoint=checkpoint, window_ms=100)
    threading.Event().wait()  # until the test SIGKILLs this process


if __name__ == "__main__":
    main()
