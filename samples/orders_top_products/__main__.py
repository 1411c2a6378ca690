"""One command: ``python -m samples.orders_top_products``.

Starts Kafka and PostgreSQL (or uses ``MALHAR_KAFKA_BOOTSTRAP`` / ``MALHAR_POSTGRES_DSN``),
creates the products table, produces orders (with re-sent duplicates, half of them while
the application runs), runs the DAG until every order is counted, prints the top products
of the last application window and checks the table against the ground truth read back
from the topic (quantities per product over all windows: with as many products as the
top N, every window's ranking holds them all), and the JSON-lines archive against the
table.
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
from samples.orders_top_products import data
from samples.orders_top_products.app import APPLICATION_NAME, OrdersSettings, populate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.orders_top_products")
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--products", type=int, default=10)
    args = parser.parse_args(argv)
    started = time.monotonic()
    print("starting Kafka and PostgreSQL (malhar.testing) ...", flush=True)
    with acquire("kafka") as kafka, acquire("postgres") as pg:
        topic = f"orders-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=2)
        s = OrdersSettings(
            kafka.bootstrap_servers,
            topic,
            pg.sqlalchemy_url,
            top_table=f"top_{uuid.uuid4().hex[:8]}",
            top_n=max(10, args.products),
            archive_path=tempfile.mkdtemp(prefix="malhar-orders-archive-"),
        )
        data.create_tables(s.url, s.products_table, s.top_table, args.products)
        half = args.orders // 2
        data.produce_orders(s.bootstrap_servers, topic, data.orders(half, args.products))
        spark = build_session("local[2]", app_name=APPLICATION_NAME, shuffle_partitions=2)
        checkpoint = tempfile.mkdtemp(prefix="malhar-orders-")
        run_started = time.monotonic()
        app = launch(
            populate(DAG(APPLICATION_NAME), s), spark=spark, checkpoint=checkpoint, window_ms=200
        )
        rest = data.orders(args.orders - half, args.products, start=half)
        feeder = threading.Thread(
            target=data.produce_orders, args=(s.bootstrap_servers, topic, rest)
        )
        feeder.start()
        try:
            feeder.join()
            truth = data.truth(s.bootstrap_servers, topic, args.products)

            def failed() -> str | None:
                failure = app.failure()
                return None if failure is None else str(failure)

            wait_until(
                lambda: (
                    sum(data.totals(data.table_rows(s.url, s.top_table)).values())
                    >= sum(truth.values())
                ),
                timeout=600,
                interval=0.5,
                what="every order counted",
                alive=failed,
            )
            app.await_window(app.last_window + 2 * s.app_windows)  # a late double count would show
            elapsed = time.monotonic() - run_started
            ranked = len(data.table_rows(s.url, s.top_table))
            wait_until(  # archive files are visible once rolled and committed
                lambda: len(data.archive_lines(s.archive_path)) >= ranked,
                timeout=120,
                interval=0.5,
                what="every ranking in the JSON archive",
                alive=failed,
            )
        finally:
            app.stop()
            spark.stop()
        rows = data.table_rows(s.url, s.top_table)
        got = data.totals(rows)
        last = max(r[0] for r in rows)
        print(
            f"\n{args.orders} orders ({sum(truth.values())} items) in {elapsed:.1f}s "
            f"(services up in {run_started - started:.1f}s); top products of window {last}:"
        )
        for _, rank, product, quantity in [r for r in rows if r[0] == last][:10]:
            print(f"  {rank:>2}. {product:<8} {quantity}")
        lines = data.archive_lines(s.archive_path)
        print(f"\n{len(lines)} ranking rows archived as JSON lines in {s.archive_path}, e.g.")
        print(f"  {lines[-1] if lines else '(none)'}")
        exact = got == truth and sorted(data.archived_rows(s.archive_path)) == rows
        print(
            f"\nexactness check against the ground truth from the topic: {'EXACT' if exact else 'MISMATCH'}"
        )
        return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
