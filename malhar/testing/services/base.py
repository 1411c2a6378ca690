"""What every real-service manager (Kafka, PostgreSQL, HDFS) offers.

A service comes from one of three places, tried in this order:

1. an existing server named by an environment variable (``env_var``);
2. testcontainers, when ``MALHAR_SERVICES=docker`` and a Docker engine answers;
3. a local process started from the official distribution (the default).

Only services of the third kind are stopped and removed by ``stop()``.
"""

from __future__ import annotations

import json
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Self

from malhar.testing.services.process import ManagedProcess, stop_process_group


class Service(ABC):
    """A running (or reachable) real service and how to connect to it."""

    #: short name used by the CLI and in error messages: "kafka", "postgres", "hdfs".
    name: ClassVar[str]
    #: environment variable naming an existing server to use instead of starting one.
    env_var: ClassVar[str]

    def __init__(self) -> None:
        self.home: Path | None = None  # data + logs of a locally started instance
        self.processes: list[ManagedProcess] = []
        self.external = False
        self.container: Any = None

    # -- lifecycle -------------------------------------------------------------------
    @abstractmethod
    def start(self, timeout: float = 120.0) -> Self:
        """Start a local instance; return once a real request succeeded."""

    @classmethod
    @abstractmethod
    def from_env(cls, value: str) -> Self:
        """Attach to the existing server named by ``value`` of ``env_var``."""

    @abstractmethod
    def ping(self) -> bool:
        """One real request (metadata, SELECT 1, a listing); True if it worked."""

    @abstractmethod
    def connection(self) -> dict[str, Any]:
        """What a client needs to connect (JSON-serializable)."""

    @abstractmethod
    def env_value(self) -> str:
        """The value of ``env_var`` that points another process at this instance."""

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Re-attach to an instance recorded by :meth:`state` (for ``status``)."""
        service = cls.from_env(state["env_value"])
        service.external = True
        return service

    @classmethod
    def from_docker(cls, timeout: float = 120.0) -> Self:  # pragma: no cover - needs Docker
        raise NotImplementedError(f"{cls.name}: no testcontainers support")

    def stop(self) -> None:
        """Stop a locally started instance and remove its data; leave external ones alone."""
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        if self.container is not None:  # pragma: no cover - needs Docker
            self.container.stop()
            self.container = None
        if self.home is not None and not self.external:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- logs and state ------------------------------------------------------------------
    @property
    def log_paths(self) -> list[Path]:
        """Log files of the local processes (printed when a test fails)."""
        return [p.log_path for p in self.processes]

    def state(self) -> dict[str, Any]:
        """What the CLI records to find this instance again from another process."""
        return {
            "name": self.name,
            "external": self.external,
            "home": str(self.home) if self.home else None,
            "pids": [p.pid for p in self.processes if p.pid],
            "logs": [str(p) for p in self.log_paths],
            "connection": self.connection(),
            "env_value": self.env_value(),
        }


def stop_recorded(state: dict[str, Any]) -> None:
    """Stop an instance recorded by :meth:`Service.state` in another process."""
    for pid in reversed(state.get("pids", [])):
        stop_process_group(pid)
    home = state.get("home")
    if home and not state.get("external"):
        shutil.rmtree(home, ignore_errors=True)


def dumps_state(states: dict[str, dict[str, Any]]) -> str:
    return json.dumps(states, indent=2, sort_keys=True)
