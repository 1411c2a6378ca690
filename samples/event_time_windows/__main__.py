"""``python -m samples.event_time_windows``: the sample end to end, with an exactness check.

Starts Kafka and PostgreSQL (``malhar.testing``), produces click events into a topic of
4 partitions (more while the application runs, then an hour-old batch of late clicks),
runs the application on local Spark until the table equals the batch reference, and
prints a few windows and the late clicks.
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
from samples.event_time_windows.app import APPLICATION_NAME, ClickSettings, populate
from samples.event_time_windows.data import (
    clicks,
    compare,
    create_tables,
    late_clicks,
    produce,
    read_tables,
    reference,
    topic_events,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.event_time_windows")
    parser.add_argument("--clicks", type=int, default=6_000)
    parser.add_argument("--window-ms", type=int, default=200)
    args = parser.parse_args(argv)
    with acquire("kafka") as kafka, acquire("postgres") as pg:
        topic = f"clicks-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=4)
        s = ClickSettings(
            bootstrap_servers=kafka.bootstrap_servers,
            topic=topic,
            url=pg.sqlalchemy_url,
            table=f"clicks_{uuid.uuid4().hex[:6]}",
            late_table=f"late_{uuid.uuid4().hex[:6]}",
        )
        create_tables(s.url, s.table, s.late_table)
        half = args.clicks // 2
        produce(s.bootstrap_servers, topic, clicks(half))
        spark = build_session("local[2]", app_name=APPLICATION_NAME, shuffle_partitions=2)
        app = launch(
            populate(DAG(APPLICATION_NAME), s),
            spark=spark,
            checkpoint=tempfile.mkdtemp(prefix="malhar-clicks-"),
            window_ms=args.window_ms,
        )
        started = time.monotonic()
        try:
            # late clicks only once the watermark passed the stream's start: an ON_TIME row
            wait_until(
                lambda: read_tables(s.url, s.table, s.late_table)[2]["ON_TIME"] > 0,
                timeout=300,
                interval=0.5,
                what="the first ON_TIME pane",
            )
            produce(
                s.bootstrap_servers, topic, late_clicks(40) + clicks(args.clicks - half, first=half)
            )
            expected, late = reference(topic_events(s.bootstrap_servers, topic))
            wait_until(
                lambda: read_tables(s.url, s.table, s.late_table)[:2] == (expected, late),
                timeout=600,
                interval=0.5,
                what="the tables to equal the batch reference",
            )
            got, got_late, timings = read_tables(s.url, s.table, s.late_table)
        finally:
            app.stop()
        print(
            f"{args.clicks} clicks in {time.monotonic() - started:.1f}s; pane timings {dict(timings)}"
        )
        for key in sorted(got)[:5]:
            print(f"  {key[0]:>4} [{key[1]}, {key[2]})  {got[key]} clicks")
        print(f"late clicks in {s.late_table}: {sum(got_late.values())}")
        print("exactness check against the batch reference:", compare(got, expected))
        return 0 if got == expected and got_late == late else 1


if __name__ == "__main__":
    sys.exit(main())
