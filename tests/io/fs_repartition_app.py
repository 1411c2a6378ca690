"""A file input repartitioned from 2 to 3 partitions while running, for SIGKILL tests.

    python -m tests.io.fs_repartition_app CHECKPOINT SOURCE TOTAL [PAUSE_AT]

Reads the files of SOURCE (deleting each once committed) into a Collector; after two
windows the input goes to 3 partitions. With PAUSE_AT the repartitioning stops at that step
(``malhar.engine.repartition.STEP_HOOK``), writes ``<checkpoint>/paused`` and waits to be
killed; without it the application runs until TOTAL lines were collected and stops in
order.
"""

from __future__ import annotations

import sys

from malhar import DAG, build_session, launch
from malhar.engine import repartition
from malhar.io.fs import LinesFileInput
from malhar.testing.operators import Collector, collected
from malhar.testing.services.process import wait_until
from tests.drivers import pause_hook


def build(source: str, partitions: int) -> DAG:
    dag = DAG("files-rp")
    src = dag.add_operator(
        "src",
        LinesFileInput(
            source,
            block_size=200,
            scan_interval_ms=0,
            max_records_per_window=15,
            post_action="delete",
        ),
        PARTITIONS=partitions,
    )
    dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
    return dag


def lines(checkpoint: str) -> list[str]:
    return [r["line"] for rows in collected(checkpoint, "out").values() for r in rows]


def main() -> None:
    checkpoint, source, total = sys.argv[1:4]
    pause = sys.argv[4] if len(sys.argv) > 4 else ""

    repartition.STEP_HOOK = pause_hook(checkpoint, pause)
    spark = build_session("local[2]", app_name="malhar-files-repartition", shuffle_partitions=2)
    app = launch(build(source, 2), spark=spark, checkpoint=checkpoint, window_ms=100)
    app.await_window(app.last_window + 2)
    app.repartition({"src": 3})
    wait_until(lambda: len(lines(checkpoint)) >= int(total), timeout=300, what=f"{total} lines")
    app.stop()


if __name__ == "__main__":
    main()
