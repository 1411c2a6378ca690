"""A Kafka input repartitioned from 2 to 3 readers while running, for SIGKILL tests.

    python -m tests.io.kafka_repartition_app CHECKPOINT BOOTSTRAP TOPIC GROUP TOTAL [PAUSE_AT]

Reads TOPIC into a Collector; once records arrived, the input goes to 3 readers. With
PAUSE_AT the repartitioning stops at that step (``malhar.engine.repartition.STEP_HOOK``),
writes ``<checkpoint>/paused`` and waits to be killed; without it the application runs
until TOTAL records were collected and stops in order.
"""

from __future__ import annotations

import sys

from malhar import DAG, build_session, launch
from malhar.engine import repartition
from malhar.io.kafka import KafkaInputOperator
from malhar.testing.operators import Collector, collected
from malhar.testing.services.process import wait_until
from tests.drivers import pause_hook


def build(bootstrap: str, topic: str, group: str) -> DAG:
    dag = DAG("kafka-repartition-crash")
    src = dag.add_operator(
        "src",
        KafkaInputOperator(
            bootstrap_servers=bootstrap,
            topics=topic,
            initial_offset="EARLIEST",
            group_id=group,
            poll_timeout_ms=200,
        ),
        PARTITIONS=2,
    )
    dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
    return dag


def rows(checkpoint: str) -> int:
    return sum(len(r) for r in collected(checkpoint, "out").values())


def main() -> None:
    checkpoint, bootstrap, topic, group, total = sys.argv[1:6]
    pause = sys.argv[6] if len(sys.argv) > 6 else ""

    repartition.STEP_HOOK = pause_hook(checkpoint, pause)
    spark = build_session("local[2]", app_name="malhar-kafka-repartition", shuffle_partitions=2)
    app = launch(build(bootstrap, topic, group), spark=spark, checkpoint=checkpoint, window_ms=100)
    app.await_window(app.last_window + 2)
    app.repartition({"src": 3})
    wait_until(lambda: rows(checkpoint) >= int(total), timeout=300, what=f"{total} records")
    app.stop()


if __name__ == "__main__":
    main()
