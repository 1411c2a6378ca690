"""Write-ahead logs and window data managers (Malhar's ``WindowDataManager``)."""

from malhar.util.wal.framing import decode_header, encode_header, encode_record, scan
from malhar.util.wal.manager import (
    FSWindowDataManager,
    NoopWindowDataManager,
    WindowDataManager,
)
from malhar.util.wal.segments import LogReader, LogWriter, WalIssue
from malhar.util.wal.serializers import (
    JsonSerializer,
    PickleSerializer,
    Serializer,
    get_serializer,
)

__all__ = [
    "FSWindowDataManager",
    "JsonSerializer",
    "LogReader",
    "LogWriter",
    "NoopWindowDataManager",
    "PickleSerializer",
    "Serializer",
    "WalIssue",
    "WindowDataManager",
    "decode_header",
    "encode_header",
    "encode_record",
    "get_serializer",
    "scan",
]
