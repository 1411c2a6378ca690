"""Run the clicks sample as its own driver process until it is killed or stopped
(``samples/driver.py``)::

    CLICKS_SETTINGS='{"bootstrap_servers": ..., "impressions_topic": ..., "clicks_topic": ..., "url": ...}' \\
        python -m samples.clicks_attribution.driver CHECKPOINT [--windows N]
"""

from __future__ import annotations

import sys

from samples.clicks_attribution.app import APPLICATION_NAME, ClicksSettings, populate
from samples.driver import run_driver, settings_from_env

SETTINGS_ENV = "CLICKS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    settings = settings_from_env(SETTINGS_ENV, ClicksSettings.from_config)
    return run_driver(
        argv,
        prog="samples.clicks_attribution.driver",
        name=APPLICATION_NAME,
        dag=lambda dag: populate(dag, settings),
    )


if __name__ == "__main__":
    sys.exit(main())
