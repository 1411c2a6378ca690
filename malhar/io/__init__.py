"""malhar io: connectors to external systems.

Names are imported on first use, so a connector whose client library is not installed
(an optional extra such as ``malhar[kafka]``) does not break the others. Each connector
adds its public names to ``_EXPORTS`` (name -> module).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # connector bases (malhar.io.base)
    "ReplayableInput": "malhar.io.base",
    # Kafka (malhar[kafka]: confluent-kafka)
    "KafkaInputOperator": "malhar.io.kafka",
    "KafkaTextInputOperator": "malhar.io.kafka",
    "KafkaJsonInputOperator": "malhar.io.kafka",
    "KafkaSource": "malhar.io.kafka",
    "KafkaSettings": "malhar.io.kafka",
    "InitialOffset": "malhar.io.kafka",
    # JDBC (malhar[jdbc]: SQLAlchemy, psycopg2)
    "JdbcOutputOperator": "malhar.io.jdbc",
    "JdbcSink": "malhar.io.jdbc",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'malhar.io' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
