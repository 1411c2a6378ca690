"""Errors of the windowed operator; all derive from :class:`malhar.MalharError`."""

from __future__ import annotations

from malhar.errors import ConfigError, MalharError

__all__ = ["AccumulationError", "BadTupleError", "WindowConfigError", "WindowError"]


class WindowError(MalharError, RuntimeError):
    """A windowed operator met input or state it cannot handle (the message says why)."""


class BadTupleError(WindowError):
    """One tuple a windowed operator cannot take: a missing field, a null timestamp or one
    that is not a time, a key that cannot be a key. It goes to the operator's ``error``
    port (``{"tuple": ..., "reason": ...}``, counted) and the window goes on."""


class WindowConfigError(ConfigError):
    """A window option, trigger, accumulation mode or extractor that cannot work."""


class AccumulationError(WindowError, TypeError):
    """An accumulation was asked for something it does not support (a merge, a retraction)."""
