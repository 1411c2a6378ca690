"""The README's main command: the flagship end to end, with an exactness check.

Starts Kafka and PostgreSQL (``malhar.testing``; or uses the servers named by
``MALHAR_KAFKA`` / ``MALHAR_POSTGRES``), produces a generated corpus into a topic
of 4 partitions (half before the start, half while the application runs), runs
the flagship on local Spark until every line is counted, then prints the top
words and compares the ``words`` table with the ground truth read back from the
topic.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid

from malhar import DAG, build_session, launch
from malhar.console import progress
from malhar.engine.plan import build_plan, describe
from malhar.testing.services import acquire
from malhar.testing.services.process import wait_until
from samples.wordcount_exactly_once.app import APPLICATION_NAME, WordCountSettings, populate
from samples.wordcount_exactly_once.data import (
    corpus,
    create_table,
    exactness,
    produce,
    table_counts,
    topic_truth,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.wordcount_exactly_once")
    parser.add_argument("--lines", type=int, default=50_000, help="lines in the corpus")
    parser.add_argument("--window-ms", type=int, default=500)
    args = parser.parse_args(argv)

    started = time.monotonic()
    print("starting Kafka and PostgreSQL (malhar.testing) ...", flush=True)
    with acquire("kafka") as kafka, acquire("postgres") as pg:
        print(f"  ready in {time.monotonic() - started:.1f}s", flush=True)
        topic = f"lines-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=4)
        settings = WordCountSettings(
            bootstrap_servers=kafka.bootstrap_servers,
            topic=topic,
            url=pg.sqlalchemy_url,
        )
        create_table(settings.url, settings.table, drop=True)
        lines = corpus(args.lines)
        half = len(lines) // 2
        produce(settings.bootstrap_servers, topic, lines[:half])

        dag = populate(DAG(APPLICATION_NAME), settings)
        print("\nphysical plan:\n" + describe(build_plan(dag)), flush=True)
        spark = build_session("local[2]", app_name=APPLICATION_NAME, shuffle_partitions=2)
        checkpoint = tempfile.mkdtemp(prefix="malhar-wordcount-")
        app = launch(dag, spark=spark, checkpoint=checkpoint, window_ms=args.window_ms)
        run_started = time.monotonic()
        feeder = threading.Thread(
            target=produce, args=(settings.bootstrap_servers, topic, lines[half:]), daemon=True
        )
        feeder.start()
        try:
            feeder.join()
            truth = topic_truth(settings.bootstrap_servers, topic)
            total = sum(truth.values())

            def failed() -> str | None:
                failed = app.failure()
                return None if failed is None else str(failed)

            with progress(f"words counted in {settings.table}", total=total) as update:

                def counted() -> bool:
                    done = sum(table_counts(settings.url, settings.table).values())
                    update(done)
                    return done >= total

                wait_until(
                    counted,
                    timeout=600,
                    interval=0.5,
                    what=f"{total} words counted in {settings.table}",
                    alive=failed,
                )
            # Two more windows: a double count arriving late would show in the check.
            app.await_window(app.last_window + 2)
            elapsed = time.monotonic() - run_started
        finally:
            app.stop()
            spark.stop()
        got = table_counts(settings.url, settings.table)
        print(f"\n{len(lines)} lines, {total} words counted in {elapsed:.1f}s; top words:")
        for word, n in got.most_common(8):
            print(f"  {word:<12} {n}")
        exact, account = exactness(got, truth)
        print(f"\nexactness check against the ground truth from the topic: {account}")
        return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
