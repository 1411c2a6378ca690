"""Errors of the windowed operator; all derive from :class:`malhar.MalharError`."""

from __future__ import annotations

from malhar.errors import ConfigError, MalharError

__all__ = ["AccumulationError", "WindowConfigError", "WindowError"]


class WindowError(MalharError, RuntimeError):
    """A windowed operator met input or state it cannot handle (the message says why)."""


class WindowConfigError(ConfigError):
    """A window option, trigger, accumulation mode or extractor that cannot work."""


class AccumulationError(WindowError, TypeError):
    """An accumulation was asked for something it does not support (a merge, a retraction)."""
