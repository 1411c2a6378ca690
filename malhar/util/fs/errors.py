"""Errors of the storage layer (filesystems and write-ahead logs).

Every error names the backend (``local`` or ``hdfs``) and the path it concerns, so
a message in a log is enough to find the file::

    StorageError                      any storage failure (base class)
    ├── StorageConfigError            bad URL / missing option (also a ValueError)
    ├── StorageNotFoundError          a file or directory does not exist
    ├── StorageExistsError            the target of a create / rename already exists
    ├── StoragePermissionError        the backend refused access (EACCES, AccessControlException)
    ├── StorageUnavailableError       the backend did not answer after bounded retries
    ├── CorruptRecordError            a stored record failed its checksum / framing check
    │   └── IntegrityError            ... or its HMAC tag (malhar.util.integrity)
    ├── WindowOrderError              save() of a window id that is not after the saved ones
    └── ConcurrentWriterError         a second writer appended to a partition log
"""

from __future__ import annotations

from malhar.errors import MalharError


class StorageError(MalharError):
    """A storage operation failed; ``backend`` and ``path`` say where."""

    def __init__(
        self,
        message: str,
        *,
        backend: str | None = None,
        path: str | None = None,
        operation: str | None = None,
    ) -> None:
        self.message = message
        self.backend = backend
        self.path = path
        self.operation = operation
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.backend:
            where.append(f"backend={self.backend}")
        if self.operation:
            where.append(f"op={self.operation}")
        if self.path:
            where.append(f"path={self.path}")
        return f"{self.message} [{', '.join(where)}]" if where else self.message

    def __reduce__(self):  # keep picklable across Spark / process boundaries
        return (_rebuild, (type(self), self.message, self.__dict__.copy()))


def _rebuild(cls: type[StorageError], message: str, state: dict) -> StorageError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    err.args = (err._format(),)
    return err


class StorageConfigError(StorageError, ValueError):
    """The storage URL or an option is wrong (unknown scheme, missing WebHDFS address...)."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """The file or directory does not exist."""


class StorageExistsError(StorageError, FileExistsError):
    """The target of a no-overwrite create or rename already exists."""


class StoragePermissionError(StorageError, PermissionError):
    """The backend refused the operation for lack of permission."""


class StorageUnavailableError(StorageError, ConnectionError):
    """The backend did not answer (NameNode down, connection refused) after bounded retries."""

    def __init__(self, message: str, *, attempts: int = 1, **kwargs) -> None:
        self.attempts = attempts
        super().__init__(message, **kwargs)


class CorruptRecordError(StorageError):
    """A record failed its checksum or framing check; ``offset`` is its byte offset in ``path``."""

    def __init__(self, message: str, *, offset: int | None = None, **kwargs) -> None:
        self.offset = offset
        super().__init__(message, **kwargs)

    def _format(self) -> str:
        base = super()._format()
        if getattr(self, "offset", None) is not None and base.endswith("]"):
            return f"{base[:-1]}, offset={self.offset}]"
        return base


class WindowOrderError(StorageError, ValueError):
    """save() of a window id that is not greater than the largest saved window."""


class ConcurrentWriterError(StorageError):
    """Another writer changed a partition log this manager is writing (one writer per log)."""


__all__ = [
    "ConcurrentWriterError",
    "CorruptRecordError",
    "StorageConfigError",
    "StorageError",
    "StorageExistsError",
    "StorageNotFoundError",
    "StoragePermissionError",
    "StorageUnavailableError",
    "WindowOrderError",
]
