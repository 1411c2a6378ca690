"""Run the sample as its own driver process until it is killed or stopped (SIGTERM).

    CLICKS_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ...}' \\
        python -m samples.event_time_windows.driver CHECKPOINT [--master local[2]]

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
from samples.event_time_windows.app import APPLICATION_NAME, ClickSettings, populate

SETTINGS_ENV = "CLICKS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="samples.event_time_windows.driver")
    parser.add_argument("checkpoint", help="checkpoint root (local path or hdfs://)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--name", default=APPLICATION_NAME, help="application name (meta rows)")
    parser.add_argument("--window-ms", type=int, default=200)
    args = parser.parse_args(argv)
    text = os.environ.get(SETTINGS_ENV)
    if not text:
        raise SystemExit(f"set {SETTINGS_ENV} to the sample's settings as JSON")
    settings = ClickSettings.from_config(json.loads(text))
    dag = populate(DAG(args.name), settings)
    spark = build_session(args.master, app_name=args.name, shuffle_partitions=2)
    app = launch(dag, spark=spark, checkpoint=args.checkpoint, window_ms=args.window_ms)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while not stopping.is_set() and app.query.isActive:
        stopping.wait(0.5)
    failed = app.failure()
    if failed is not None:
        print(failed, file=sys.stderr)
        return 1
    app.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
