"""Small helpers of the file connectors: URLs, which partition owns a file or a block,
hidden names, Hive partition directories, and a seekable file over any filesystem."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import math
import os
import posixpath
import re
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from malhar.util.fs import FileSystem, LocalFileSystem, filesystem_for
from malhar.util.fs.urls import child_url

__all__ = [
    "RangeFile",
    "child_url",
    "hive_escape",
    "hive_segment",
    "hive_segments",
    "hive_text",
    "is_hidden",
    "location",
    "open_binary",
    "owner",
    "resolve",
    "split_glob",
]

#: Hive's value of a null partition column (what Spark writes and reads back as null)
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: characters Hive escapes in partition values (FileUtils.escapePathName), plus '%'
_HIVE_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(i) for i in range(32))


def resolve(url: str) -> tuple[FileSystem, str]:
    """``(filesystem, absolute path)`` of a local path or an ``hdfs://`` / ``webhdfs://`` URL."""
    return filesystem_for(url)


#: a glob component of a path (as the scanner matches them)
GLOB = re.compile(r"[*?\[]")


def split_glob(path: str) -> tuple[str, list[str]]:
    """``(base, globs)``: the directory before the first component with a glob character,
    and the components from there (none for a path without one).

    Example:
        >>> split_glob("/in/2026-*/x.csv"), split_glob("/in")
        (('/in', ['2026-*', 'x.csv']), ('/in', []))
    """
    parts = path.split("/")
    first = next((i for i, p in enumerate(parts) if GLOB.search(p)), None)
    if first is None:
        return path, []
    return "/".join(parts[:first]) or "/", [p for p in parts[first:] if p]


def location(url: str) -> tuple[str, str]:
    """``(filesystem, normalised absolute path)`` of a URL, without connecting: ``local``
    for a local path or ``file://`` URL, ``hdfs:<host>`` for any HDFS scheme and port (so
    that two spellings of one place compare equal).

    Example:
        >>> location("file:///in/../in/") == location("/in")
        True
        >>> location("webhdfs://nn:9870/in/") == location("hdfs://NN:8020/in?user=x")
        True
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # one letter: a Windows drive
        path = unquote(parts.path) if scheme == "file" else url
        return "local", os.path.abspath(os.path.expanduser(path or "/"))
    path = posixpath.normpath("/" + unquote(parts.path).lstrip("/"))
    kind = "hdfs" if scheme in ("hdfs", "webhdfs", "swebhdfs") else scheme
    return f"{kind}:{(parts.hostname or '').lower()}", path


def owner(key: str, partitions: int) -> int:
    """The partition (of ``partitions``) that owns ``key``: a stable hash, the same in every
    process, Python version and run.

    Example:
        >>> owner("/data/in/a.csv", 4) == owner("/data/in/a.csv", 4)
        True
    """
    if partitions <= 1:
        return 0
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


def is_hidden(name: str) -> bool:
    """Names Hadoop and Spark skip: ``.x``, ``_x`` and files being copied (``x._COPYING_``)."""
    return name.startswith((".", "_")) or name.endswith("._COPYING_")


def hive_escape(text: str) -> str:
    """A partition value as Hive and Spark write it in a directory name (``%XX`` escapes).

    Example:
        >>> hive_escape("2026-11-23"), hive_escape("a/b=c")
        ('2026-11-23', 'a%2Fb%3Dc')
    """
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in text)


def hive_text(value: Any) -> str | None:
    """A partition value as the text of its directory name, before escaping, as Spark
    writes it (None for Hive's default partition): a null or an empty string is the
    default partition (Spark reads both back as null); booleans ``true`` / ``false``;
    NaN and infinities ``NaN``, ``Infinity``, ``-Infinity``; a timestamp its UTC wall
    clock, ``2026-01-01 12:00:00`` (``.5`` with a fraction, trailing zeros dropped), as
    Spark with ``spark.sql.session.timeZone`` UTC; other numbers, dates and strings as
    Python's ``str`` / ``isoformat`` (``1.0``, ``1e+20``, ``2026-11-23``).

    Example:
        >>> [hive_text(v) for v in (None, "", True, float("nan"), float("-inf"), 2.5, 7)]
        [None, None, 'true', 'NaN', '-Infinity', '2.5', '7']
    """
    if value is None or (isinstance(value, str) and not value):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        text = value.replace(microsecond=0).isoformat(sep=" ")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def hive_segment(column: str, value: Any) -> str:
    """``column=value`` as one directory name (see :func:`hive_text`; a null or an empty
    value is Hive's default partition).

    Example:
        >>> hive_segment("day", dt.date(2026, 11, 23)), hive_segment("k", "")
        ('day=2026-11-23', 'k=__HIVE_DEFAULT_PARTITION__')
    """
    text = hive_text(value)
    return f"{hive_escape(column)}={HIVE_NULL if text is None else hive_escape(text)}"


def hive_values(base: str, path: str) -> dict[str, str | None]:
    """The Hive partition values a file's folders below ``base`` name (``day=2026-11-23``
    -> ``{"day": "2026-11-23"}``, unescaped; Hive's default partition -> None), as Spark
    discovers them; outermost first, a later folder of a name winning.

    Example:
        >>> hive_values("/out", "/out/user=a%2Fb/d=__HIVE_DEFAULT_PARTITION__/part-0.parquet")
        {'user': 'a/b', 'd': None}
    """
    root = base.rstrip("/") + "/"
    if not path.startswith(root):
        return {}
    out: dict[str, str | None] = {}
    for folder in path[len(root) :].split("/")[:-1]:
        name, eq, value = folder.partition("=")
        if eq and name:
            out[unquote(name)] = None if value == HIVE_NULL else unquote(value)
    return out


def hive_segments(column: str, values: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """The directory name (:func:`hive_segment`) of each row's value of ``column``: a string
    column, formatted once per distinct value. Rows whose values differ but are written
    alike (a null and an empty string, a NaN of another bit pattern) get the same name."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    chunks = []
    null = f"{hive_escape(column)}={HIVE_NULL}"
    for chunk in values.chunks:
        encoded = pc.dictionary_encode(chunk)
        names = [hive_segment(column, v) for v in encoded.dictionary.to_pylist()]
        named = pc.take(pa.array(names, pa.string()), encoded.indices)
        chunks.append(pc.fill_null(named, null))
    return pa.chunked_array(chunks, pa.string())


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over :meth:`FileSystem.read` (one ranged read per refill):
    how pyarrow reads Parquet footers and compressed streams on HDFS."""

    def __init__(self, fs: FileSystem, path: str, size: int | None = None) -> None:
        super().__init__()
        self._fs = fs
        self._path = path
        self._pos = 0
        if size is None:
            status = fs.status(path)
            if status is None:
                from malhar.util.fs import StorageNotFoundError

                raise StorageNotFoundError("no such file", backend=fs.backend, path=path)
            size = status.size
        self._size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self._size + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._pos >= self._size or not len(view):
            return 0
        data = self._fs.read(self._path, self._pos, min(len(view), self._size - self._pos))
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    @property
    def size(self) -> int:
        return self._size


def open_binary(fs: FileSystem, path: str, size: int | None = None) -> Any:
    """A buffered, seekable binary file: the OS file on the local filesystem, ranged reads
    (8 MiB at a time) elsewhere."""
    if isinstance(fs, LocalFileSystem):
        return open(path, "rb")
    return io.BufferedReader(RangeFile(fs, path, size), buffer_size=8 << 20)


def local_path(fs: FileSystem, path: str) -> str | None:
    """``path`` when ``fs`` is the local filesystem (pyarrow opens it natively), else None."""
    return path if isinstance(fs, LocalFileSystem) and os.path.isabs(path) else None
