"""Real Kafka, PostgreSQL and HDFS for tests, samples and benchmarks.

Not run: the example starts a real server (``tests/services`` covers it).

>>> from malhar.testing.services import acquire
>>> with acquire("postgres") as pg:          # doctest: +SKIP
...     print(pg.connection()["dsn"])
"""

from __future__ import annotations

import importlib
import os

from malhar.testing.services.base import Service
from malhar.testing.services.errors import ServiceError

#: service name -> "module:Class"; modules are imported on first use so that
#: ``malhar.testing`` does not pull in every client library.
SERVICES: dict[str, str] = {
    "kafka": "malhar.testing.services.kafka:KafkaService",
    "postgres": "malhar.testing.services.postgres:PostgresService",
    "hdfs": "malhar.testing.services.hdfs:HdfsService",
}


def service_class(name: str) -> type[Service]:
    try:
        module, cls = SERVICES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown service {name!r}; known: {', '.join(SERVICES)}") from None
    return getattr(importlib.import_module(module), cls)


def acquire(name: str, *, timeout: float = 180.0) -> Service:
    """A ready service ``name``: external (env var), Docker (``MALHAR_SERVICES=docker``) or local."""
    cls = service_class(name)
    value = os.environ.get(cls.env_var)
    if value:
        service = cls.from_env(value)
        service.external = True
        if not service.ping():
            raise ServiceError(
                name,
                f"the server named by {cls.env_var} does not answer",
                hint=f"check {cls.env_var} or unset it to start a local {name}",
            )
        return service
    if os.environ.get("MALHAR_SERVICES") == "docker":
        return cls.from_docker(timeout=timeout)
    return cls().start(timeout=timeout)


__all__ = ["SERVICES", "Service", "ServiceError", "acquire", "service_class"]
