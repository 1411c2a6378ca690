"""Filesystems for the storage managers: local and HDFS (WebHDFS).

>>> from malhar.util.fs import filesystem_for
>>> filesystem_for("/tmp/x")[1]
'/tmp/x'
>>> filesystem_for("webhdfs://nn:9870/apps/x")   # no request until the first operation
(HdfsFileSystem('http://nn:9870', user=...), '/apps/x')
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
