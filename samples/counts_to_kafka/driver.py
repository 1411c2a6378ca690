"""Run the sample as its own driver process until it is killed or stopped (the crash test
starts it, SIGKILLs it and starts it again)::

    COUNTS_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ..., "counts_topic": ...}' \\
        python -m samples.counts_to_kafka.driver CHECKPOINT [--master local[2]]

The settings come from the environment (the URL holds a password, which must not show in
``ps``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from malhar import DAG, build_session, launch
from samples.counts_to_kafka.app import APPLICATION_NAME, CountsToKafkaSettings, build

SETTINGS_ENV = "COUNTS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="samples.counts_to_kafka.driver")
    parser.add_argument("checkpoint", help="checkpoint root (local path or hdfs://)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--name", default=APPLICATION_NAME, help="application name")
    parser.add_argument("--window-ms", type=int, default=200)
    args = parser.parse_args(argv)
    text = os.environ.get(SETTINGS_ENV)
    if not text:
        raise SystemExit(f"set {SETTINGS_ENV} to the sample's settings as JSON")
    settings = CountsToKafkaSettings.from_config(json.loads(text))
    dag = build(DAG(args.name), settings)
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
