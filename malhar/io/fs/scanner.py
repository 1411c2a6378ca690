"""The directory scanner of the file input (Malhar's ``DirectoryScanner``): which files a
path, a glob or a directory tree holds now, oldest first.

- ``path`` is a file, a directory, or a glob (``/data/in/*.csv``, ``/data/2026-*/part-*``;
  ``*``, ``?`` and ``[...]`` in any path component, matched per component); a path that
  exists as written is taken literally (a directory named ``in[1]``), and ``[[]``, ``[*]``,
  ``[?]`` match the character itself in a glob; a glob that matches nothing, or a path
  that does not exist, is logged once;
- ``recursive`` also lists the files of subdirectories (of the directory, or of the
  directories a glob matches);
- ``pattern`` is a regular expression the whole file *name* must match;
- names starting with ``.`` or ``_`` and files being copied (``x._COPYING_``) are skipped,
  as Hadoop and Spark do: write a file under such a name and rename it into place to make
  it appear complete.

Files come sorted by modification time, then path.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from dataclasses import dataclass

from malhar.io.fs.errors import FileConfigError
from malhar.io.fs.paths import is_hidden, resolve, split_glob
from malhar.redaction import redact_url
from malhar.util.fs import FileStatus, FileSystem, StorageNotFoundError

__all__ = ["DirectoryScanner", "FoundFile"]

log = logging.getLogger("malhar.io.fs")


@dataclass(frozen=True, order=True)
class FoundFile:
    """A file found by a scan (ordered by modification time, then path)."""

    mtime: float
    path: str
    size: int


class DirectoryScanner:
    """Lists the input files of a path, a glob or a directory (see the module doc).

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> for age, name in enumerate(("b.csv", "a.csv", "c.txt", ".hidden.csv")):
        ...     _ = open(os.path.join(d, name), "w").write("x\\n")
        ...     os.utime(os.path.join(d, name), (1e9 - age, 1e9 - age))  # a.csv is older
        >>> [os.path.basename(f.path) for f in DirectoryScanner(d, pattern=r".*\\.csv").scan()]
        ['a.csv', 'b.csv']
        >>> len(DirectoryScanner(os.path.join(d, "*.txt")).scan())
        1
    """

    def __init__(self, url: str, *, recursive: bool = False, pattern: str | None = None) -> None:
        self.url = url
        self.recursive = recursive
        try:
            self.pattern = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise FileConfigError(f"file name pattern {pattern!r} is not a regex: {exc}") from None
        self.fs, path = resolve(url)
        self.literal = path
        self.base, self.globs = split_glob(path)
        self._warned = False

    def quiet(self) -> None:
        """Log nothing about a path that matches nothing (the caller says it)."""
        self._warned = True

    @property
    def filesystem(self) -> FileSystem:
        return self.fs

    def scan(self) -> list[FoundFile]:
        """The files there now, oldest first (an empty list while the path does not exist)."""
        out: list[FoundFile] = []
        # a path that exists as written is taken literally, glob characters and all (a
        # directory named "in[1]" would otherwise be a glob that never matches it)
        status = self.fs.status(self.literal) if self.globs else None
        if self.globs and status is None:
            self._glob(self.base, 0, out)
            if not out and not self._warned:
                self._warned = True  # once: the files may simply not be there yet
                log.warning(
                    "no file matches the glob %s (yet); a name with glob characters is "
                    "matched literally with [*], [?] and [[]",
                    redact_url(self.url),
                )
        else:
            status = status or self.fs.status(self.literal)
            if status is None:
                if not self._warned:
                    self._warned = True  # once, as for a glob: it may be created later
                    log.warning(
                        "the input path %s does not exist (yet); nothing is read until it does",
                        redact_url(self.url),
                    )
                return []
            if status.is_dir:
                self._walk(self.literal, out, self.recursive)
            else:
                self._add(status, out, named=False)
        out.sort()
        return out

    # -- helpers -----------------------------------------------------------------------------
    def _list(self, directory: str) -> list[FileStatus]:
        try:
            return self.fs.list(directory)
        except StorageNotFoundError:
            return []  # removed while scanning

    def _add(self, status: FileStatus, out: list[FoundFile], *, named: bool = True) -> None:
        if named and is_hidden(status.name):
            return
        if self.pattern is not None and not self.pattern.fullmatch(status.name):
            return
        out.append(FoundFile(status.mtime, status.path, status.size))

    def _walk(self, directory: str, out: list[FoundFile], recursive: bool) -> None:
        for entry in self._list(directory):
            if entry.is_dir:
                if recursive and not is_hidden(entry.name):
                    self._walk(entry.path, out, True)
            else:
                self._add(entry, out)

    def _glob(self, directory: str, depth: int, out: list[FoundFile]) -> None:
        glob = self.globs[depth]
        last = depth == len(self.globs) - 1
        for entry in self._list(directory):
            if is_hidden(entry.name) or not fnmatch.fnmatchcase(entry.name, glob):
                continue
            if entry.is_dir:
                if last:
                    self._walk(entry.path, out, self.recursive)
                else:
                    self._glob(entry.path, depth + 1, out)
            elif last:
                self._add(entry, out)
