"""One command: ``python -m samples.clicks_attribution``.

Starts Kafka and PostgreSQL (or uses ``MALHAR_KAFKA_BOOTSTRAP`` / ``MALHAR_POSTGRES_DSN``),
creates the result tables, produces impressions and clicks (with re-sent duplicates, bot
clicks and bad lines; half of them while the application runs), runs the DAG until every
attributable click is in PostgreSQL, prints the clicks per ad and the rejected clicks, and
checks the three tables against the ground truth read back from the topics.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid

from malhar import DAG, build_session, launch
from malhar.testing.services import acquire
from malhar.testing.services.process import wait_until
from samples.clicks_attribution import data
from samples.clicks_attribution.app import APPLICATION_NAME, ClicksSettings, populate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.clicks_attribution")
    parser.add_argument("--impressions", type=int, default=10_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    started = time.monotonic()
    print("starting Kafka and PostgreSQL (malhar.testing) ...", flush=True)
    with acquire("kafka") as kafka, acquire("postgres") as pg:
        tag = uuid.uuid4().hex[:8]
        s = ClicksSettings(
            kafka.bootstrap_servers,
            f"impressions-{tag}",
            f"clicks-{tag}",
            pg.sqlalchemy_url,
            attributed_table=f"attributed_{tag}",
            ad_clicks_table=f"ad_clicks_{tag}",
            rejected_table=f"rejected_{tag}",
        )
        for topic in (s.impressions_topic, s.clicks_topic):
            kafka.create_topic(topic, partitions=2)
        data.create_tables(s.url, s.attributed_table, s.ad_clicks_table, s.rejected_table)
        half = args.impressions // 2
        first, rest = data.events(half), data.events(args.impressions - half, start=half)
        data.produce_lines(s.bootstrap_servers, s.impressions_topic, first[0])
        data.produce_lines(s.bootstrap_servers, s.clicks_topic, first[1])
        spark = build_session(args.master, app_name=APPLICATION_NAME, shuffle_partitions=2)
        checkpoint = tempfile.mkdtemp(prefix="malhar-clicks-")
        run_started = time.monotonic()
        app = launch(
            populate(DAG(APPLICATION_NAME), s), spark=spark, checkpoint=checkpoint, window_ms=200
        )

        def feed() -> None:
            data.produce_lines(s.bootstrap_servers, s.clicks_topic, rest[1])
            data.produce_lines(s.bootstrap_servers, s.impressions_topic, rest[0])

        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            feeder.join()
            truth = data.truth(
                s.bootstrap_servers, s.impressions_topic, s.clicks_topic, s.within_ms
            )
            expected = data.per_ad(truth)
            rejected = data.rejected_truth(s.bootstrap_servers, s.clicks_topic)

            def failed() -> str | None:
                failure = app.failure()
                return None if failure is None else str(failure)

            wait_until(
                lambda: (
                    data.ad_clicks(s.url, s.ad_clicks_table) == dict(expected)
                    and data.rejected_total(s.url, s.rejected_table) >= rejected
                ),
                timeout=600,
                interval=0.5,
                what="every attributable and every rejected click counted",
                alive=failed,
            )
            app.await_window(app.last_window + 2 * s.app_windows)  # a late double count would show
            elapsed = time.monotonic() - run_started
        finally:
            app.stop()
            spark.stop()
        rows = data.attributed_rows(s.url, s.attributed_table)
        counts = data.ad_clicks(s.url, s.ad_clicks_table)
        rejected_total = data.rejected_total(s.url, s.rejected_table)
        print(
            f"\n{args.impressions} impressions, {len(rows)} attributed clicks in {elapsed:.1f}s "
            f"(services up in {run_started - started:.1f}s); clicks per ad:"
        )
        for ad, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"  {ad:<8} {n}")
        print(f"  rejected (bot clicks and re-sent copies): {rejected_total}")
        exact = rows == truth and counts == dict(expected) and rejected_total == rejected
        print(
            f"\nexactness check against the ground truth from the topics: {'EXACT' if exact else 'MISMATCH'}"
        )
        return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
