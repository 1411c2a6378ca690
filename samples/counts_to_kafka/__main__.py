"""One command: ``python -m samples.counts_to_kafka``.

Starts Kafka and PostgreSQL (``malhar.testing``; or uses ``MALHAR_KAFKA`` /
``MALHAR_POSTGRES``), produces a corpus into a topic of 4 partitions, runs the flagship
with its counts also published to a Kafka topic, and checks that the ``words`` table and
the counts topic read as ``read_committed`` both match the ground truth, with each
(window, word) record in the topic once.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid

from malhar import DAG, build_session, launch
from malhar.testing.services import acquire
from malhar.testing.services.process import wait_until
from samples.counts_to_kafka.app import (
    APPLICATION_NAME,
    CountsToKafkaSettings,
    build,
    published_counts,
)
from samples.wordcount_exactly_once.data import (
    corpus,
    create_table,
    exactness,
    produce,
    table_counts,
    topic_truth,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.counts_to_kafka")
    parser.add_argument("--lines", type=int, default=20_000, help="lines in the corpus")
    parser.add_argument("--window-ms", type=int, default=500)
    args = parser.parse_args(argv)
    print("starting Kafka and PostgreSQL (malhar.testing) ...", flush=True)
    with acquire("kafka") as kafka, acquire("postgres") as pg:
        suffix = uuid.uuid4().hex[:8]
        settings = CountsToKafkaSettings(
            bootstrap_servers=kafka.bootstrap_servers,
            topic=f"lines-{suffix}",
            url=pg.sqlalchemy_url,
            table=f"words_{suffix}",
            counts_topic=f"word-counts-{suffix}",
        )
        kafka.create_topic(settings.topic, partitions=4)
        kafka.create_topic(settings.counts_topic, partitions=2)
        create_table(settings.url, settings.table, drop=True)
        produce(settings.bootstrap_servers, settings.topic, corpus(args.lines))
        truth = topic_truth(settings.bootstrap_servers, settings.topic)
        total = sum(truth.values())

        spark = build_session("local[2]", app_name=APPLICATION_NAME, shuffle_partitions=2)
        checkpoint = tempfile.mkdtemp(prefix="malhar-counts-to-kafka-")
        started = time.monotonic()
        app = launch(
            build(DAG(APPLICATION_NAME), settings),
            spark=spark,
            checkpoint=checkpoint,
            window_ms=args.window_ms,
        )
        try:
            wait_until(
                lambda: sum(table_counts(settings.url, settings.table).values()) >= total,
                timeout=600,
                interval=0.5,
                what=f"{total} words counted",
                alive=lambda: None if app.failure() is None else str(app.failure()),
            )
            app.await_window(app.last_window + 2)
            elapsed = time.monotonic() - started
        finally:
            app.stop()
            spark.stop()
        table_ok, table_account = exactness(table_counts(settings.url, settings.table), truth)
        published, records = published_counts(settings.bootstrap_servers, settings.counts_topic)
        topic_ok, topic_account = exactness(published, truth)
        once = all(n == 1 for n in records.values())
        print(f"\n{args.lines} lines, {total} words in {elapsed:.1f}s")
        print(f"table {settings.table}: {table_account}")
        print(
            f"topic {settings.counts_topic} (read_committed, {len(records)} records): "
            f"{topic_account}; each (window, word) once: {once}"
        )
        return 0 if table_ok and topic_ok and once else 1


if __name__ == "__main__":
    sys.exit(main())
