"""Run the orders sample as its own driver process until it is killed or stopped
(``samples/driver.py``)::

    ORDERS_SETTINGS='{"bootstrap_servers": ..., "topic": ..., "url": ...}' \\
        python -m samples.orders_top_products.driver CHECKPOINT [--windows N]
"""

from __future__ import annotations

import sys

from samples.driver import run_driver, settings_from_env
from samples.orders_top_products.app import APPLICATION_NAME, OrdersSettings, populate

SETTINGS_ENV = "ORDERS_SETTINGS"


def main(argv: list[str] | None = None) -> int:
    settings = settings_from_env(SETTINGS_ENV, OrdersSettings.from_config)
    return run_driver(
        argv,
        prog="samples.orders_top_products.driver",
        name=APPLICATION_NAME,
        dag=lambda dag: populate(dag, settings),
    )


if __name__ == "__main__":
    sys.exit(main())
