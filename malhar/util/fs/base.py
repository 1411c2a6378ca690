"""The ``FileSystem`` abstraction: the few operations the write-ahead logs need.

Paths are POSIX-style strings. For :class:`~malhar.util.fs.local.LocalFileSystem`
they are absolute OS paths; for :class:`~malhar.util.fs.hdfs.HdfsFileSystem` they
are absolute HDFS paths (``/apps/x``). :func:`~malhar.util.fs.filesystem_for` turns
a URL into a ``(FileSystem, path)`` pair.

Durability vocabulary used by every backend (see ``docs/storage.md``):

- *visible*: another process (or host) that reads the file sees the bytes;
- *process-crash safe*: the bytes survive the death of the writing process;
- *power-loss safe*: the bytes survive an OS crash or power loss.

Each backend documents which of these an operation gives when it returns.

Permissions: files and directories created through this layer are owner-only
(:data:`FILE_MODE` 0o600, :data:`DIR_MODE` 0o700): checkpoints hold offsets, state
and possibly secrets. Existing files and directories keep their mode.
"""

from __future__ import annotations

import io
import posixpath
import re
import threading
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar

from malhar.util.fs.errors import StorageError, StorageNotFoundError

#: mode of the files this layer creates (umask-independent on the local FS)
FILE_MODE = 0o600
#: mode of the directories this layer creates
DIR_MODE = 0o700

#: temporary files of ``write_atomic`` (``.<name>.<uuid4 hex>.tmp``) and of the emulated
#: HDFS truncate (``<name>.truncating``): left behind only by an interrupted writer
TEMPORARY_RE = re.compile(r"^(\..+\.[0-9a-f]{32}\.tmp|.+\.truncating)$")
#: a temporary file this much older than a writer's own is an interrupted write's: a live
#: writer's lives for one create + rename, bounded by the retries and timeouts (< 10 min)
STALE_TEMPORARY_SECONDS = 600.0
#: what ``create`` and ``write_atomic`` take: a memoryview lets a large encoded file (an
#: Arrow buffer) be written without first copying it into ``bytes``
Data = bytes | memoryview

#: directories swept once per filesystem instance (bounded: one folder per window exists)
_SWEPT_MAX = 4096


@dataclass(frozen=True)
class FileStatus:
    """One entry of a directory listing (or the status of one path)."""

    name: str
    path: str
    size: int
    is_dir: bool
    mtime: float  # seconds since the epoch
    permission: int | None = None  # permission bits (0o600), None if the backend has none


class Appender(ABC):
    """An open file that grows at its end.

    ``write`` only buffers; ``flush`` hands the buffered bytes to the backend (one
    system call or one HDFS append) with the backend's *flush* guarantee; ``sync``
    gives the backend's strongest guarantee. One appender per file at a time.
    """

    path: str

    @property
    @abstractmethod
    def size(self) -> int:
        """Bytes in the file once everything written so far is flushed."""

    @abstractmethod
    def write(self, data: bytes) -> None: ...

    @abstractmethod
    def flush(self) -> None: ...

    @abstractmethod
    def sync(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Flush, then release the handle (no sync)."""

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileSystem(ABC):
    """A filesystem backend. Instances are picklable (handles are re-opened lazily)."""

    #: short backend name used in error messages: "local", "hdfs".
    backend: ClassVar[str]

    # -- naming ---------------------------------------------------------------------------
    @staticmethod
    def join(*parts: str) -> str:
        return posixpath.join(*parts)

    @staticmethod
    def basename(path: str) -> str:
        return posixpath.basename(path.rstrip("/"))

    @staticmethod
    def dirname(path: str) -> str:
        return posixpath.dirname(path.rstrip("/"))

    def describe(self, path: str) -> str:
        """A URL naming ``path`` on this backend, for messages."""
        return path

    # -- metadata -------------------------------------------------------------------------
    @abstractmethod
    def status(self, path: str) -> FileStatus | None:
        """Status of ``path``, or None if it does not exist."""

    def exists(self, path: str) -> bool:
        return self.status(path) is not None

    @abstractmethod
    def list(self, path: str) -> list[FileStatus]:
        """Entries of directory ``path`` (sorted by name); StorageNotFoundError if missing."""

    @abstractmethod
    def mkdirs(self, path: str) -> None:
        """Create ``path`` and its parents; no error if it exists."""

    # -- data -----------------------------------------------------------------------------
    @abstractmethod
    def create(self, path: str, data: Data = b"", *, overwrite: bool = False) -> None:
        """Write a whole file (parents created). StorageExistsError if it exists and not
        ``overwrite``. On return the content has the backend's *sync* guarantee."""

    def create_with(
        self, path: str, fill: Callable[[BinaryIO], object], *, overwrite: bool = False
    ) -> int:
        """:meth:`create` a file whose bytes ``fill`` writes to the binary file it is
        given; return its size. Backends that can stream to the file do (the local FS: a
        large encoding then never sits whole in memory, nor grows a buffer by copies); the
        others collect the bytes and :meth:`create` them."""
        buffer = io.BytesIO()
        fill(buffer)
        data = buffer.getbuffer()
        self.create(path, data, overwrite=overwrite)
        return len(data)

    @abstractmethod
    def append(self, path: str, data: bytes) -> None:
        """Append ``data`` to an existing file with the backend's *flush* guarantee."""

    @abstractmethod
    def open_appender(self, path: str, *, create: bool = False) -> Appender:
        """An :class:`Appender` at the end of ``path`` (created empty first if ``create``
        and missing)."""

    @abstractmethod
    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[offset, offset+length)`` (to the end if ``length`` is None); short at EOF."""

    @abstractmethod
    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Atomically rename a file. Without ``overwrite`` it fails with
        StorageExistsError if ``dst`` exists (a compare-and-swap on the name)."""

    @abstractmethod
    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete a file (or a directory, if ``recursive``); False if it did not exist."""

    @abstractmethod
    def truncate(self, path: str, length: int) -> None:
        """Cut ``path`` to its first ``length`` bytes (crash-safe; see the backend)."""

    # -- helpers --------------------------------------------------------------------------
    def write_atomic(self, path: str, data: Data, *, overwrite: bool = True) -> None:
        """Write ``data`` to a temporary sibling, then rename it onto ``path``.

        Readers see the old content or the new one, never a mix. With
        ``overwrite=False`` the rename is a compare-and-swap: StorageExistsError if
        ``path`` appeared meanwhile (the temporary file is removed).

        The first write into a directory (per filesystem instance, i.e. per process)
        also deletes the temporary files that interrupted writers left there: those
        older than this writer's own by :data:`STALE_TEMPORARY_SECONDS`.
        """
        parent = self.dirname(path)
        tmp = self.join(parent, f".{self.basename(path)}.{uuid.uuid4().hex}.tmp")
        self.create(tmp, data, overwrite=False)
        try:
            self.rename(tmp, path, overwrite=overwrite)
        except BaseException:
            try:
                self.delete(tmp)
            except StorageError:
                pass  # the rename's error is the one to report
            raise
        self._sweep_once(parent, path)

    def _sweep_once(self, directory: str, own: str) -> None:
        swept = self.__dict__.get("_swept")
        if swept is None:
            swept = self.__dict__.setdefault("_swept", (threading.Lock(), OrderedDict()))
        lock, seen = swept
        with lock:
            if directory in seen:
                return
            seen[directory] = None
            while len(seen) > _SWEPT_MAX:
                seen.popitem(last=False)
        self.remove_stale_temporaries(directory, own)

    def remove_stale_temporaries(self, directory: str, own: str) -> list[str]:
        """Delete the temporary files of interrupted writes in ``directory`` that are
        older than the file ``own`` (just written by this writer) by
        :data:`STALE_TEMPORARY_SECONDS`; return their names. Comparing with a file of
        the same filesystem needs no clock agreement between hosts."""
        entries = self.list(directory)
        name = self.basename(own)
        ref = next((e.mtime for e in entries if e.name == name), None)
        if ref is None:
            return []
        removed = []
        for entry in entries:
            if (
                not entry.is_dir
                and TEMPORARY_RE.match(entry.name)
                and entry.mtime < ref - STALE_TEMPORARY_SECONDS
            ):
                try:
                    self.delete(entry.path)
                except StorageNotFoundError:
                    continue  # another process cleaned it up first
                removed.append(entry.name)
        return removed

    def read_all(self, path: str) -> bytes:
        return self.read(path, 0, None)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections (optional)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_swept", None)  # per-process bookkeeping (and a lock)
        return state

    def __enter__(self) -> FileSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
