"""Run the counts-to-Kafka sample as its own driver process until it is killed or stopped
(``samples/driver.py``)::

    COUNTS_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ..., "counts_topic": ...}' \\
        python -m samples.counts_to_kafka.driver CHECKPOINT [--windows N]
"""

from __future__ import annotations

import sys

from samples.counts_to_kafka.app import APPLICATION_NAME, CountsToKafkaSettings, build
from samples.driver import run_driver, settings_from_env

SETTINGS_ENV = "COUNTS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    settings = settings_from_env(SETTINGS_ENV, CountsToKafkaSettings.from_config)
    return run_driver(
        argv,
        prog="samples.counts_to_kafka.driver",
        name=APPLICATION_NAME,
        dag=lambda dag: build(dag, settings),
    )


if __name__ == "__main__":
    sys.exit(main())
