"""Run the flagship as its own driver process until it is killed or stopped
(``samples/driver.py``)::

    WORDCOUNT_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ...}' \\
        python -m samples.wordcount_exactly_once.driver CHECKPOINT [--master local[2]]

``python -m samples.wordcount_exactly_once`` runs the same DAG in-process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from malhar.io.jdbc import JdbcOutputOperator
from samples.driver import run_driver, settings_from_env
from samples.wordcount_exactly_once.app import APPLICATION_NAME, WordCountSettings, populate

SETTINGS_ENV = "WORDCOUNT_SETTINGS"


def main(
    argv: list[str] | None = None, output: Callable[[], JdbcOutputOperator] | None = None
) -> int:
    """``output``: the JDBC output to use instead of the sample's (the crash tests' pausing one)."""
    settings = settings_from_env(SETTINGS_ENV, WordCountSettings.from_config)
    return run_driver(
        argv,
        prog="samples.wordcount_exactly_once.driver",
        name=APPLICATION_NAME,
        dag=lambda dag: populate(dag, settings, output=output() if output else None),
    )


if __name__ == "__main__":
    sys.exit(main())
