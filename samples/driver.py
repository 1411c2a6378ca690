"""The driver process of a sample: what every ``samples/<name>/driver.py`` runs.

    <NAME>_SETTINGS='{...}' python -m samples.<name>.driver CHECKPOINT [--master local[2]]
        [--name NAME] [--window-ms 200] [--windows N]

The settings come from the environment, as JSON (a URL may hold a password, which must not
show in ``ps``). The process runs the sample's DAG until SIGTERM (an orderly stop, exit 0),
until ``--windows`` windows are done, or until the query fails (its failure printed, exit
1). The crash tests start it, SIGKILL it and start it again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from malhar import DAG, RunningApplication, build_session, launch
from malhar.engine.stop_signals import StopSignals

__all__ = ["run_driver", "serve", "settings_from_env"]

S = TypeVar("S")


def settings_from_env(variable: str, settings: Callable[[dict[str, Any]], S]) -> S:
    """The sample's settings from the JSON in environment ``variable``."""
    text = os.environ.get(variable)
    if not text:
        raise SystemExit(f"set {variable} to the sample's settings as JSON")
    return settings(json.loads(text))


def run_driver(
    argv: list[str] | None,
    *,
    prog: str,
    name: str,
    dag: Callable[[DAG], DAG],
) -> int:
    """Parse ``argv``, build the DAG with ``dag(DAG(name))`` and run it (see the module doc)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("checkpoint", help="checkpoint root (local path or hdfs://)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--name", default=name, help="application name")
    parser.add_argument("--window-ms", type=int, default=200)
    parser.add_argument("--windows", type=int, default=0, help="stop after N windows (0: never)")
    args = parser.parse_args(argv)
    built = dag(DAG(args.name))
    spark = build_session(args.master, app_name=args.name, shuffle_partitions=2)
    app = launch(
        built,
        spark=spark,
        checkpoint=args.checkpoint,
        windows=args.windows or None,
        window_ms=args.window_ms,
    )
    if args.windows:
        app.await_completion()
        return 0
    return serve(app)


def serve(app: RunningApplication) -> int:
    """Run ``app`` until SIGTERM (stop it in order: 0), every input partition of a bounded
    application has ended (said, then stopped in order: 0) or its query fails (print why: 1).

    The signal only sets a flag, polled between waits on the query (``StopSignals``: an
    ``Event`` set from the handler can deadlock the main thread waiting on it)."""
    with StopSignals() as stop:
        while not stop.requested and not app.input_ended():
            try:
                if app.query.awaitTermination(0.25):
                    break
            except Exception:  # the query failed: said below
                break
    failed = app.failure()
    if failed is not None:
        print(failed, file=sys.stderr)
        return 1
    if app.input_ended():
        print(f"every input ended at window {app.last_window}", flush=True)
    app.stop()
    return 0
