"""Run the event-time sample as its own driver process until it is killed or stopped
(``samples/driver.py``)::

    CLICKS_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ...}' \\
        python -m samples.event_time_windows.driver CHECKPOINT [--windows N]
"""

from __future__ import annotations

import sys

from samples.driver import run_driver, settings_from_env
from samples.event_time_windows.app import APPLICATION_NAME, ClickSettings, populate

SETTINGS_ENV = "CLICKS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    settings = settings_from_env(SETTINGS_ENV, ClickSettings.from_config)
    return run_driver(
        argv,
        prog="samples.event_time_windows.driver",
        name=APPLICATION_NAME,
        dag=lambda dag: populate(dag, settings),
    )


if __name__ == "__main__":
    sys.exit(main())
