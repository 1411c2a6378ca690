"""pytest plugin (entry point ``pytest11: malhar``): real services and Spark as fixtures.

Fixtures (all session-scoped, started on first use, stopped at the end):

- ``kafka_service``: :class:`~malhar.testing.services.kafka.KafkaService`
- ``postgres_service``: :class:`~malhar.testing.services.postgres.PostgresService`
- ``hdfs_service``: :class:`~malhar.testing.services.hdfs.HdfsService`
- ``spark``: a ``local[2]`` SparkSession from :func:`malhar.build_session`

A service that cannot start fails the tests that need it with the service's
log; it never skips them. When a test that used a service fails, the paths of
the service logs are added to the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from malhar.testing.services import Service, acquire

_started: dict[str, Service] = {}


def _service(name: str) -> Iterator[Service]:
    service = acquire(name)
    _started[name] = service
    try:
        yield service
    finally:
        _started.pop(name, None)
        service.stop()


@pytest.fixture(scope="session")
def kafka_service() -> Iterator[Any]:
    yield from _service("kafka")


@pytest.fixture(scope="session")
def postgres_service() -> Iterator[Any]:
    yield from _service("postgres")


@pytest.fixture(scope="session")
def hdfs_service() -> Iterator[Any]:
    yield from _service("hdfs")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from malhar.session import build_session

    session = build_session("local[2]", app_name="malhar-tests", shuffle_partitions=2)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    used = [
        _started[n]
        for n in ("kafka", "postgres", "hdfs")
        if f"{n}_service" in getattr(item, "fixturenames", ()) and n in _started
    ]
    lines = [f"{s.name} log: {path}" for s in used for path in s.log_paths]
    if lines:
        report.sections.append(("malhar service logs", "\n".join(lines)))
