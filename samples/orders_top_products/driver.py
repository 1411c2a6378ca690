"""Run the orders sample as its own driver process until it is killed or stopped.

    ORDERS_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ...}' \\
        python -m samples.orders_top_products.driver CHECKPOINT [--windows N]

The crash test starts this process, SIGKILLs it and starts it again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from malhar import DAG, build_session, launch
from samples.orders_top_products.app import APPLICATION_NAME, OrdersSettings, populate

SETTINGS_ENV = "ORDERS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="samples.orders_top_products.driver")
    parser.add_argument("checkpoint")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--name", default=APPLICATION_NAME)
    parser.add_argument("--window-ms", type=int, default=200)
    parser.add_argument("--windows", type=int, default=0, help="stop after N windows (0: never)")
    args = parser.parse_args(argv)
    text = os.environ.get(SETTINGS_ENV)
    if not text:
        raise SystemExit(f"set {SETTINGS_ENV} to the sample's settings as JSON")
    settings = OrdersSettings.from_config(json.loads(text))
    spark = build_session(args.master, app_name=args.name, shuffle_partitions=2)
    app = launch(
        populate(DAG(args.name), settings),
        spark=spark,
        checkpoint=args.checkpoint,
        windows=args.windows or None,
        window_ms=args.window_ms,
    )
    if args.windows:
        app.await_completion()
        return 0
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while not stopping.wait(1.0):
        pass
    app.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
