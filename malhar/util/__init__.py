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
    CorruptRecordError,
    FileSystem,
    HdfsFileSystem,
    LocalFileSystem,
    StorageConfigError,
    StorageError,
    filesystem_for,
)
from malhar.util.wal import FSWindowDataManager, NoopWindowDataManager, WindowDataManager

# The storage layer's other names (appenders, serializers, every error class) live in
# malhar.util.fs, malhar.util.fs.errors and malhar.util.wal; managed state in
# malhar.util.state.
__all__ = [
    "CorruptRecordError",
    "FSWindowDataManager",
    "FileSystem",
    "HdfsFileSystem",
    "LocalFileSystem",
    "NoopWindowDataManager",
    "StorageConfigError",
    "StorageError",
    "WindowDataManager",
    "filesystem_for",
]
