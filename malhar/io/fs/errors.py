"""Errors of the file connectors. Each names the file (as a URL without credentials) and
what failed; all derive from :class:`malhar.errors.MalharError`.

:class:`UnreadableSplit` and :data:`UNREADABLE` are the input's own: its ways of reading a
split raise them, and the operator turns them into an error row, :class:`FileReadError` or
:class:`FileReplayError`; a user never sees them."""

from __future__ import annotations

from malhar.errors import ConfigError, MalharError
from malhar.io.base.input import ReplayError
from malhar.io.base.output import OutputConfigError, OutputError
from malhar.util.fs import StorageNotFoundError, StoragePermissionError

__all__ = [
    "FileConfigError",
    "FileConnectorError",
    "FileOutputError",
    "FileReadError",
    "FileReplayError",
]


class FileConnectorError(MalharError, RuntimeError):
    """Base class of the file input's errors."""


class FileConfigError(FileConnectorError, ConfigError):
    """Settings of a file connector that cannot work (no path, a bad regex, a move target
    inside the scanned directory, a format option the format does not have)."""


class FileReadError(FileConnectorError):
    """A file could not be read and the operator is configured to fail
    (``on_unreadable="fail"``, ``decode_errors="fail"``)."""


class FileReplayError(FileConnectorError, ReplayError):
    """A window cannot be replayed with exactly the items it had: a file it read vanished
    or no longer holds the same bytes."""


class FileOutputError(OutputError):
    """The file output failed (the message names the directory and the window)."""


class FileOutputConfigError(FileOutputError, OutputConfigError):
    """Settings of the file output that cannot work."""


#: storage errors that mean "this file cannot be read" (not "the filesystem is down")
UNREADABLE = (StorageNotFoundError, StoragePermissionError)


class UnreadableSplit(FileConnectorError):
    """A split cannot be read (vanished, refused, shrank, corrupt). A library error like the
    others, though the operator always catches it."""
