"""The one exception base of malhar: every error the library raises derives from it.

``except malhar.MalharError`` catches anything malhar raised on purpose (a bad
DAG, a property value, a connector that cannot reach its system, a failed
application) and nothing else. Each concrete error also derives from the
built-in exception it refines (``ValueError`` for bad settings,
``ConnectionError`` for an unreachable service ...), so code written against the
built-ins keeps working.

This module imports nothing from malhar or pyspark: every part of the package
(``malhar.util`` included, which must import without Spark) can use it.
"""

from __future__ import annotations

__all__ = [
    "ApplicationError",
    "ConfigError",
    "ConfigWarning",
    "MalharError",
    "OperatorError",
    "StateError",
]


class MalharError(Exception):
    """Base of every error malhar raises."""


class ConfigError(MalharError, ValueError):
    """A setting (property, option, attribute) that cannot work; the message says how to fix it."""


class OperatorError(MalharError, RuntimeError):
    """User operator code failed; the message names operator, partition, method and window."""


class StateError(MalharError, TypeError):
    """An operator's checkpointed state cannot be saved or restored (names the attribute)."""


class ConfigWarning(MalharError, UserWarning):
    """A setting that has no effect (a config key nothing reads); issued with ``warnings``."""


class ApplicationError(MalharError, ValueError):
    """The application cannot be loaded or built; ``problems`` lists every reason."""

    def __init__(self, problems: list[str], app: str | None = None) -> None:
        self.problems = list(problems)
        self.app = app
        head = f"cannot load application {app!r}" if app else "cannot load the application"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))
