"""Run the flagship as its own driver process until it is killed or stopped.

    WORDCOUNT_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ...}' \\
        python -m samples.wordcount_exactly_once.driver CHECKPOINT [--master local[2]]

The settings come from the environment (the URL holds a password, which must not
show in ``ps``). The crash tests start this process, SIGKILL it and start it again;
``python -m samples.wordcount_exactly_once`` runs the same DAG in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable

from malhar import DAG, build_session, launch
from malhar.io.jdbc import JdbcOutputOperator
from samples.wordcount_exactly_once.app import APPLICATION_NAME, WordCountSettings, populate

SETTINGS_ENV = "WORDCOUNT_SETTINGS"


def settings_from_env() -> WordCountSettings:
    text = os.environ.get(SETTINGS_ENV)
    if not text:
        raise SystemExit(f"set {SETTINGS_ENV} to the sample's settings as JSON")
    return WordCountSettings.from_config(json.loads(text))


def main(
    argv: list[str] | None = None, output: Callable[[], JdbcOutputOperator] | None = None
) -> int:
    parser = argparse.ArgumentParser(prog="samples.wordcount_exactly_once.driver")
    parser.add_argument("checkpoint", help="checkpoint root (local path or hdfs://)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--name", default=APPLICATION_NAME, help="application name (meta rows)")
    parser.add_argument("--window-ms", type=int, default=200)
    parser.add_argument("--windows", type=int, default=0, help="stop after N windows (0: never)")
    args = parser.parse_args(argv)

    settings = settings_from_env()
    dag = populate(DAG(args.name), settings, output=output() if output else None)
    spark = build_session(args.master, app_name=args.name, shuffle_partitions=2)
    app = launch(
        dag,
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
