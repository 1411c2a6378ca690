"""File connectors: replayable file input and exactly-once rolling file output, on the local
filesystem and HDFS (``malhar.util.fs``).

- Input (:class:`~malhar.io.base.ReplayableInput`): :class:`LinesFileInput`,
  :class:`CsvFileInput`, :class:`JsonLinesFileInput`, :class:`ParquetFileInput`; settings
  :class:`FileInputSettings`.
- Output (:class:`~malhar.io.base.output_operator.TransactionalOutputOperator`):
  :class:`FileOutputOperator` and :class:`ParquetFileOutput`, :class:`CsvFileOutput`,
  :class:`JsonLinesFileOutput`, :class:`LinesFileOutput`; settings :class:`FileOutputSettings`.
- :class:`FileSink`: the output as a Spark sink, ``df.writeStream.format("malhar_files")``
  (call :func:`register` once per session).

See ``docs/connectors/files.md``.
"""

from __future__ import annotations

from typing import Any

from malhar.io.fs.errors import (
    FileConfigError,
    FileConnectorError,
    FileOutputConfigError,
    FileOutputError,
    FileReadError,
    FileReplayError,
)
from malhar.io.fs.file_inputs import (
    CsvFileInput,
    JsonLinesFileInput,
    LinesFileInput,
    ParquetFileInput,
)
from malhar.io.fs.input_operator import FileInputOperator
from malhar.io.fs.output_operator import (
    CsvFileOutput,
    FileOutputOperator,
    JsonLinesFileOutput,
    LinesFileOutput,
    ParquetFileOutput,
)
from malhar.io.fs.scanner import DirectoryScanner
from malhar.io.fs.settings import FileInputSettings, FileOutputSettings, FileSinkSettings
from malhar.io.fs.store import FileStore

__all__ = [
    "CsvFileInput",
    "CsvFileOutput",
    "DirectoryScanner",
    "FileConfigError",
    "FileConnectorError",
    "FileInputOperator",
    "FileInputSettings",
    "FileOutputConfigError",
    "FileOutputError",
    "FileOutputOperator",
    "FileOutputSettings",
    "FileReadError",
    "FileReplayError",
    "FileSink",
    "FileSinkSettings",
    "FileStore",
    "JsonLinesFileInput",
    "JsonLinesFileOutput",
    "LinesFileInput",
    "LinesFileOutput",
    "ParquetFileInput",
    "ParquetFileOutput",
    "register",
]


def __getattr__(name: str) -> Any:  # the Spark sink imports pyspark's data source API: lazily
    if name in ("FileSink", "FileStreamWriter", "register", "SINK_NAME"):
        from malhar.io.fs import spark_sink

        return getattr(spark_sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
