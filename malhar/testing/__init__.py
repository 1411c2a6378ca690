"""malhar.testing: test your own operators and applications the way malhar tests its own.

- :class:`OperatorHarness` drives one operator without Spark (the engine's own dispatcher);
- :class:`ListInput`, :class:`Collector` and :func:`collected`: an in-memory input and a
  collecting output that work inside Spark tasks;
- :class:`EventTimeInput`: a deterministic, replayable stream of timed, keyed rows (optionally
  out of order, optionally bounded) for event-time windows;
- the pytest plugin (``kafka_service``, ``postgres_service``, ``hdfs_service``, ``spark``
  fixtures) and :mod:`malhar.testing.services` start real Kafka, PostgreSQL and HDFS.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CollectorSink": "malhar.testing.harness",
    "OperatorHarness": "malhar.testing.harness",
    "Collector": "malhar.testing.operators",
    "EventTimeInput": "malhar.testing.event_input",
    "ListInput": "malhar.testing.operators",
    "TypedCollector": "malhar.testing.operators",
    "collected": "malhar.testing.operators",
}

__all__ = [
    "Collector",
    "CollectorSink",
    "EventTimeInput",
    "ListInput",
    "OperatorHarness",
    "TypedCollector",
    "collected",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'malhar.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
