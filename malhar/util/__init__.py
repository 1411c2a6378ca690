"""malhar util: storage managers (window -> data/offset WALs) and filesystems (local, HDFS).

>>> import tempfile
>>> from malhar.util import FSWindowDataManager
>>> with FSWindowDataManager(tempfile.mkdtemp(), "kafka-in", partition=0) as m:
...     m.save({"offsets": {0: 42}}, window_id=7)
...     m.retrieve(7)
{'offsets': {0: 42}}

See ``docs/storage.md`` for layout, durability per backend and concurrency rules.
"""

from malhar.util.fs import (
    Appender,
    ConcurrentWriterError,
    CorruptRecordError,
    FileStatus,
    FileSystem,
    HdfsFileSystem,
    LocalFileSystem,
    StorageConfigError,
    StorageError,
    StorageExistsError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnavailableError,
    WindowOrderError,
    filesystem_for,
)
from malhar.util.wal import (
    FSWindowDataManager,
    JsonSerializer,
    NoopWindowDataManager,
    PickleSerializer,
    Serializer,
    WalIssue,
    WindowDataManager,
    get_serializer,
)

__all__ = [
    "Appender",
    "ConcurrentWriterError",
    "CorruptRecordError",
    "FSWindowDataManager",
    "FileStatus",
    "FileSystem",
    "HdfsFileSystem",
    "JsonSerializer",
    "LocalFileSystem",
    "NoopWindowDataManager",
    "PickleSerializer",
    "Serializer",
    "StorageConfigError",
    "StorageError",
    "StorageExistsError",
    "StorageNotFoundError",
    "StoragePermissionError",
    "StorageUnavailableError",
    "WalIssue",
    "WindowDataManager",
    "WindowOrderError",
    "filesystem_for",
    "get_serializer",
]
