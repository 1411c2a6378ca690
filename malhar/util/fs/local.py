"""Local filesystem backend.

Durability (Linux/POSIX, see ``docs/storage.md``):

- ``Appender.flush()`` / ``append()``: one ``write(2)`` of the buffered bytes. On
  return the bytes are *visible* to every reader and *process-crash safe* (they are
  in the kernel page cache); they are *power-loss safe* only after ``sync()``.
  With ``fsync=True`` every flush is followed by ``fdatasync`` (power-loss safe on
  return, much slower).
- ``Appender.sync()``: ``fdatasync(2)``; power-loss safe on return.
- ``create()`` / ``write_atomic()`` / ``truncate()``: data fsynced before return.
- ``rename()``: ``rename(2)`` (atomic); with ``overwrite=False`` a ``link(2)`` +
  ``unlink(2)`` so an existing target is never replaced. The parent directory is
  fsynced so the new name is power-loss safe on return.
- ``mkdirs()`` / ``create()`` / a created appender: every directory entry they add
  is made durable by fsyncing its directory. A directory that cannot be fsynced is
  an error (:class:`StorageError` naming it, operation ``fsync-dir``), never ignored.

Files are created with mode 0o600 and directories with 0o700 whatever the umask
(an explicit ``fchmod``/``chmod`` after creation): existing ones keep their mode.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO

from malhar.util.fs.base import DIR_MODE, FILE_MODE, Appender, Data, FileStatus, FileSystem
from malhar.util.fs.errors import (
    StorageError,
    StorageExistsError,
    StorageNotFoundError,
    StoragePermissionError,
)

_BACKEND = "local"


@contextlib.contextmanager
def _mapped(operation: str, path: str) -> Iterator[None]:
    """Translate OSError into the StorageError hierarchy, naming backend and path."""
    try:
        yield
    except StorageError:
        raise
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else path
        detail = exc.strerror or str(exc)
        kwargs = {"backend": _BACKEND, "path": where, "operation": operation}
        if exc.errno == errno.ENOENT:
            raise StorageNotFoundError(f"no such file or directory: {detail}", **kwargs) from exc
        if exc.errno == errno.EEXIST:
            raise StorageExistsError(f"already exists: {detail}", **kwargs) from exc
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise StoragePermissionError(f"permission denied: {detail}", **kwargs) from exc
        raise StorageError(f"{operation} failed: {detail} (errno {exc.errno})", **kwargs) from exc


def _fsync_dir(path: str) -> None:
    """fsync a directory so the names created/removed in it survive a power loss.

    Errors are raised (mapped), never ignored: a name that is not durable breaks the
    durability promised by the caller."""
    with _mapped("fsync-dir", path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _mkdirs(path: str) -> None:
    """``mkdir -p`` with mode 0o700 for every directory created (umask-independent),
    each new entry made durable by fsyncing its parent."""
    missing = []
    head = path
    while not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for folder in reversed(missing):
        with _mapped("mkdirs", folder):
            try:
                os.mkdir(folder, DIR_MODE)
            except FileExistsError:
                if os.path.isdir(folder):
                    continue  # created concurrently by another writer: theirs, keep its mode
                raise
            os.chmod(folder, DIR_MODE)  # the umask may have removed bits
        _fsync_dir(os.path.dirname(folder))


def _open_new(path: str, flags: int, *, overwrite: bool) -> tuple[int, bool]:
    """Open ``path`` for writing, creating it owner-only if missing: (fd, created)."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        if not overwrite:
            raise
        return os.open(path, flags), False
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have removed bits
    except BaseException:
        os.close(fd)
        raise
    return fd, True


def _write_all(fd: int, data: Data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_fd(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


class LocalAppender(Appender):
    """Buffered writes, one ``write(2)`` per flush, ``O_APPEND`` file descriptor."""

    def __init__(self, path: str, *, create: bool, fsync: bool) -> None:
        self.path = path
        self._fsync = fsync
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        created = False
        if create:
            _mkdirs(os.path.dirname(path))
        with _mapped("open-append", path):
            if create:
                self._fd, created = _open_new(path, flags, overwrite=True)
            else:
                self._fd = os.open(path, flags)
            self._size = os.fstat(self._fd).st_size
        if created:
            _fsync_dir(os.path.dirname(path))
        self._buffer: list[bytes] = []
        self._pending = 0

    @property
    def size(self) -> int:
        return self._size + self._pending

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise StorageError("appender is closed", backend=_BACKEND, path=self.path)
        return self._fd

    def unchanged(self) -> bool:
        """True if ``path`` is still this file and holds exactly the bytes flushed through
        this appender (``fstat`` + ``stat``, ~2 us): False means another writer appended,
        truncated, renamed or replaced it."""
        with _mapped("fstat", self.path):
            st = os.fstat(self.fd)
            if st.st_size != self._size:
                return False
            try:
                return os.stat(self.path).st_ino == st.st_ino
            except FileNotFoundError:
                return False

    def write(self, data: bytes) -> None:
        self._buffer.append(data)
        self._pending += len(data)

    def flush(self) -> None:
        if self._pending:
            data = self._buffer[0] if len(self._buffer) == 1 else b"".join(self._buffer)
            self._buffer.clear()
            self._pending = 0
            view = memoryview(data)
            fd = self.fd
            with _mapped("append", self.path):
                while view:
                    n = os.write(fd, view)
                    self._size += n
                    view = view[n:]
                if self._fsync:
                    _sync_fd(fd)

    def sync(self) -> None:
        self.flush()
        with _mapped("fsync", self.path):
            _sync_fd(self.fd)

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = None


class LocalFileSystem(FileSystem):
    """The local filesystem. ``fsync=True`` makes every flush power-loss safe."""

    backend = "local"

    def __init__(self, *, fsync: bool = False) -> None:
        self.fsync = bool(fsync)

    def describe(self, path: str) -> str:
        return f"file://{path}"

    def status(self, path: str) -> FileStatus | None:
        with _mapped("status", path):
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
        return FileStatus(
            os.path.basename(path.rstrip("/")),
            path,
            st.st_size,
            stat.S_ISDIR(st.st_mode),
            st.st_mtime,
            stat.S_IMODE(st.st_mode),
        )

    def list(self, path: str) -> list[FileStatus]:
        out = []
        with _mapped("list", path), os.scandir(path) as it:
            for entry in it:
                try:
                    st = entry.stat()
                except FileNotFoundError:  # removed while listing
                    continue
                out.append(
                    FileStatus(
                        entry.name,
                        entry.path,
                        st.st_size,
                        stat.S_ISDIR(st.st_mode),
                        st.st_mtime,
                        stat.S_IMODE(st.st_mode),
                    )
                )
        out.sort(key=lambda s: s.name)
        return out

    def mkdirs(self, path: str) -> None:
        _mkdirs(path)

    def create(self, path: str, data: Data = b"", *, overwrite: bool = False) -> None:
        def write(fd: int) -> int:
            _write_all(fd, data)
            return len(data)

        self._create(path, write, overwrite)

    def create_with(
        self, path: str, fill: Callable[[BinaryIO], object], *, overwrite: bool = False
    ) -> int:
        def write(fd: int) -> int:
            with os.fdopen(fd, "wb", closefd=False) as f:
                fill(f)
                f.flush()
                return f.tell()

        return self._create(path, write, overwrite)

    def _create(self, path: str, write: Callable[[int], int], overwrite: bool) -> int:
        """Open ``path`` new (or truncated), ``write(fd)`` its bytes, sync; their count."""
        parent = os.path.dirname(path)
        _mkdirs(parent)
        flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
        with _mapped("create", path):
            fd, created = _open_new(path, flags, overwrite=overwrite)
            try:
                if not created:
                    os.ftruncate(fd, 0)
                size = write(fd)
                _sync_fd(fd)
            except BaseException:
                if created:
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # half a file under a name nobody else knows yet
                raise
            finally:
                os.close(fd)
        if created:
            _fsync_dir(parent)
        return size

    def append(self, path: str, data: bytes) -> None:
        with _mapped("append", path):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
            try:
                _write_all(fd, data)
                if self.fsync:
                    _sync_fd(fd)
            finally:
                os.close(fd)

    def open_appender(self, path: str, *, create: bool = False) -> LocalAppender:
        return LocalAppender(path, create=create, fsync=self.fsync)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        if length is not None and length <= 0:
            return b""
        with _mapped("read", path), open(path, "rb", buffering=0) as f:
            if length is None:
                f.seek(offset)
                return f.read()
            return os.pread(f.fileno(), length, offset)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        with _mapped("rename", src):
            if overwrite:
                os.replace(src, dst)
            else:
                try:
                    os.link(src, dst)
                except FileExistsError:
                    raise StorageExistsError(
                        f"rename target exists: {dst}",
                        backend=_BACKEND,
                        path=dst,
                        operation="rename",
                    ) from None
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                        raise
                    # no hard links here: check-then-rename (single writer per target)
                    if os.path.lexists(dst):
                        raise StorageExistsError(
                            f"rename target exists: {dst}",
                            backend=_BACKEND,
                            path=dst,
                            operation="rename",
                        ) from None
                    os.rename(src, dst)
                else:
                    os.unlink(src)
        _fsync_dir(os.path.dirname(dst))
        if os.path.dirname(src) != os.path.dirname(dst):
            _fsync_dir(os.path.dirname(src))

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        with _mapped("delete", path):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return False
            if stat.S_ISDIR(st.st_mode):
                if recursive:
                    shutil.rmtree(path)
                else:
                    os.rmdir(path)
            else:
                os.unlink(path)
        try:
            _fsync_dir(os.path.dirname(path.rstrip("/")))
        except StorageNotFoundError:
            pass  # the directory itself was removed meanwhile: nothing left to make durable
        return True

    def truncate(self, path: str, length: int) -> None:
        """``truncate(2)`` then ``fsync``: idempotent, so a crash midway is repaired by redoing it."""
        with _mapped("truncate", path):
            fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.ftruncate(fd, length)
                os.fsync(fd)
            finally:
                os.close(fd)
