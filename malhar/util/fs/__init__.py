"""Filesystems for the storage managers: local and HDFS (WebHDFS).

>>> from malhar.util.fs import filesystem_for
>>> fs, path = filesystem_for("/tmp/x")            # doctest: +SKIP
>>> fs, path = filesystem_for("webhdfs://nn:9870/apps/x")   # doctest: +SKIP
"""

from malhar.util.fs.base import Appender, FileStatus, FileSystem
from malhar.util.fs.errors import (
    ConcurrentWriterError,
    CorruptRecordError,
    StorageConfigError,
    StorageError,
    StorageExistsError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnavailableError,
    WindowOrderError,
)
from malhar.util.fs.hdfs import HdfsFileSystem
from malhar.util.fs.local import LocalFileSystem
from malhar.util.fs.resolve import WEBHDFS_ENV, filesystem_for

__all__ = [
    "WEBHDFS_ENV",
    "Appender",
    "ConcurrentWriterError",
    "CorruptRecordError",
    "FileStatus",
    "FileSystem",
    "HdfsFileSystem",
    "LocalFileSystem",
    "StorageConfigError",
    "StorageError",
    "StorageExistsError",
    "StorageNotFoundError",
    "StoragePermissionError",
    "StorageUnavailableError",
    "WindowOrderError",
    "filesystem_for",
]
