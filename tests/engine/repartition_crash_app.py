"""A keyed count in a State field, one in managed state and three windowed counts (keyed,
in memory and spilled to managed state; combined by a unifier), repartitioned while
running.

    python -m tests.engine.repartition_crash_app CHECKPOINT WINDOWS [PAUSE_AT]

After window 3 of the run (WINDOWS=0: unbounded) the counters go to 3 partitions;
with PAUSE_AT the repartitioning stops at that step (``malhar.engine.repartition``
STEP_HOOK), writes ``<checkpoint>/paused`` and waits to be killed.
"""

from __future__ import annotations

import os
import sys
import threading

from malhar import DAG, KeyCodec, build_session, launch
from malhar import attributes as A
from malhar.engine import repartition
from malhar.testing.operators import Collector
from malhar.window import (
    KeyedWindowedOperator,
    SpillableWindowedStorage,
    TimeWindows,
    WindowedOperator,
)
from malhar.window.accumulation import Count
from tests.drivers import pause_hook
from tests.engine.crash_app import Journal
from tests.engine.ops import KeyedRunningCount, ManagedKeyCount, RatedKeys


def build() -> DAG:
    dag = DAG("repartition-crash")
    src = dag.add_operator("src", RatedKeys(), PARTITIONS=2)
    fields = dag.add_operator("fields", KeyedRunningCount())
    managed = dag.add_operator("managed", ManagedKeyCount(), PARTITIONS=2)
    journal = dag.add_operator("journal", Journal())
    out1 = dag.add_operator("out1", Collector())
    out2 = dag.add_operator("out2", Collector())
    dag.add_stream("a", fields.output, out1.input)
    dag.add_stream("b", managed.output, journal.input, out2.input)
    for op in (fields, managed):
        op.input.set_attribute(A.STREAM_CODEC, KeyCodec("key"))
    # windows of two streaming windows on the implicit time (window id * 100 ms)
    windows = KeyedWindowedOperator(Count(), TimeWindows(200), key="key", fixed_watermark=0)
    keyed = dag.add_operator("windows", windows, PARTITIONS=2)
    keyed.input.set_attribute(A.STREAM_CODEC, windows.key_codec())
    totals = dag.add_operator(
        "totals", WindowedOperator(Count(), TimeWindows(200), fixed_watermark=0), PARTITIONS=3
    )
    # the same keyed count with its cells in managed state
    spilled_op = KeyedWindowedOperator(
        Count(),
        TimeWindows(200),
        key="key",
        fixed_watermark=0,
        storage=SpillableWindowedStorage(budget_bytes=8 << 20),
    )
    spilled = dag.add_operator("spilled", spilled_op, PARTITIONS=2)
    spilled.input.set_attribute(A.STREAM_CODEC, spilled_op.key_codec())
    dag.add_stream(
        "items", src.output, fields.input, managed.input, keyed.input, totals.input, spilled.input
    )
    dag.add_stream("wk", keyed.output, dag.add_operator("out3", Collector()).input)
    dag.add_stream("wt", totals.output, dag.add_operator("out4", Collector()).input)
    dag.add_stream("ws", spilled.output, dag.add_operator("out5", Collector()).input)
    return dag


def main() -> None:
    checkpoint, windows = sys.argv[1], int(sys.argv[2])
    pause = sys.argv[3] if len(sys.argv) > 3 else ""
    os.environ["CRASH_RUN_ID"] = f"{os.getpid()}"

    repartition.STEP_HOOK = pause_hook(checkpoint, pause)
    spark = build_session("local[2]", app_name="malhar-repartition-crash", shuffle_partitions=2)
    app = launch(
        build(), spark=spark, checkpoint=checkpoint, windows=windows or None, window_ms=100
    )
    app.await_window(app.last_window + 3)
    app.repartition({"fields": 3, "managed": 3, "windows": 3, "totals": 2, "spilled": 3})
    if windows:
        app.await_completion()
    else:
        threading.Event().wait()  # until the test SIGKILLs this process


if __name__ == "__main__":
    main()
