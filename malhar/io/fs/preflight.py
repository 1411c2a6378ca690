"""The file connectors' checks before a launch (:meth:`malhar.Operator.preflight`): the
input's path lists (how many files it holds now), the output's path is a directory or can
become one. Nothing is created, moved or deleted.

A local path is checked on the machine that runs the check (the driver): on a cluster the
executors read and write their own local filesystems, so give them a shared path or HDFS.
On HDFS the namenode decides permissions at the first write; the check reaches it and
finds the path, it does not try a write.
"""

from __future__ import annotations

import os

from malhar.io.fs.errors import FileConfigError, FileOutputConfigError
from malhar.io.fs.paths import resolve
from malhar.io.fs.scanner import DirectoryScanner
from malhar.io.fs.settings import FileInputSettings, FileOutputSettings
from malhar.util.fs import (
    FileStatus,
    FileSystem,
    HdfsFileSystem,
    LocalFileSystem,
    StorageError,
    filesystem_for,
)

__all__ = ["check_input", "check_output"]


def check_input(settings: FileInputSettings, label: str, timeout: float) -> str:
    """What the input's path holds now; none is not a problem (files may come later), an
    unreachable filesystem or a ``move_to`` that cannot be a directory is."""
    scanner = DirectoryScanner(
        settings.path, recursive=settings.recursive, pattern=settings.pattern
    )
    scanner.fs, _ = _quick(settings.path, timeout)
    where = scanner.fs.describe(scanner.literal)
    scanner.quiet()  # the result below says it, not a log line
    try:
        files = scanner.scan()
    except StorageError as exc:
        raise FileConfigError(f"{label}: cannot list the input path {where}: {exc}") from None
    if settings.post_action == "move" and settings.move_to:
        fs, path = _quick(settings.move_to, timeout)
        _directory_or_creatable(fs, path, label, "move_to", FileConfigError)
    if not files:
        return f"{where}: no file to read yet (nothing is read until files come)"
    size = sum(f.size for f in files)
    return f"{where}: {len(files)} file(s) to read now, {size:,} bytes"


def check_output(settings: FileOutputSettings, label: str, timeout: float) -> str:
    """The output's path is a directory, or a path that can be created as one."""
    fs, root = _quick(settings.path, timeout)
    exists = _directory_or_creatable(fs, root, label, "the output path", FileOutputConfigError)
    where = fs.describe(root)
    return f"{where}: a directory" if exists else f"{where}: created at the first window"


def _quick(url: str, timeout: float) -> tuple[FileSystem, str]:
    """The filesystem of ``url`` for a check: an HDFS that does not answer within
    ``timeout`` is the finding (one attempt), not something to wait out."""
    fs, path = resolve(url)
    if isinstance(fs, HdfsFileSystem):
        fs, path = filesystem_for(url, retries=0, timeout=(timeout, timeout))
    return fs, path


def _directory_or_creatable(
    fs: FileSystem, path: str, label: str, what: str, error: type[Exception]
) -> bool:
    """True: ``path`` is a directory; False: it can be created (its nearest existing
    ancestor is a directory, writable for a local path). Raises ``error`` otherwise."""
    where = fs.describe(path)
    try:
        status = fs.status(path)
        ancestor, found = path, status
        while found is None and fs.dirname(ancestor) != ancestor:
            ancestor = fs.dirname(ancestor)
            found = fs.status(ancestor)
    except StorageError as exc:
        raise error(f"{label}: cannot reach {what} {where}: {exc}") from None
    if status is not None and not status.is_dir:
        raise error(
            f"{label}: {what} {where} is a file: give a directory, or a path that does not "
            "exist yet"
        )
    if found is None or not found.is_dir:
        shown = "nothing" if found is None else f"{fs.describe(ancestor)} is a file"
        raise error(f"{label}: {what} {where} cannot be created: {shown} on its way")
    if isinstance(fs, LocalFileSystem) and not _writable(found):
        raise error(
            f"{label}: {what} {where} is not writable for this user (under {found.path}): "
            "change its permissions or give another path"
        )
    return status is not None


def _writable(status: FileStatus) -> bool:
    return os.access(status.path, os.W_OK | os.X_OK)
