"""Errors of managed state. Every message names what it concerns (operator, structure, file)."""

from __future__ import annotations

from malhar.errors import MalharError
from malhar.util.fs.errors import CorruptRecordError, StorageError


class StateError(StorageError):
    """Managed state cannot do what was asked (bad window order, inconsistent checkpoint...)."""


class StateCodecError(MalharError, TypeError):
    """A key or value the structure's codec cannot encode (or bytes it cannot decode).

    The message names the operator, the partition, the structure and the key type.
    """


class CorruptCheckpointError(CorruptRecordError):
    """A checkpoint file failed its checksum, signature or framing check, or is truncated.

    ``path`` names the file and ``offset`` the first bad byte; such a file is never
    read as empty.
    """


__all__ = ["CorruptCheckpointError", "StateCodecError", "StateError"]
