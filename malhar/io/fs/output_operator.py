"""The file output operators: exactly-once rolling files (lines, CSV, JSON lines, Parquet),
optionally in Hive-style partition directories, on
:class:`~malhar.io.base.output_operator.TransactionalOutputOperator` and :class:`~malhar.io.fs.store.FileStore`.

Each operator partition writes its own set of files, named
``<prefix>-<application>-<operator>-<partition>-<first window>-<last window>.<ext>``: two
partitions, two operators, two applications or two runs never write the same name. A
window's rows become visible when the file they belong to has rolled and every window of it
is committed in the whole application (see :mod:`malhar.io.fs.store`).

Input ``input``: dicts (by field name), Arrow record batches from a typed stream (written
without per-row work), and for ``lines`` plain strings. A tuple that does not fit the schema
(an unknown field, a missing required one, a value of another type) goes to ``error`` as
``{**row, "error": reason}`` and is counted; the other rows of the window are written.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from malhar.control import ControlSender
from malhar.io.base.output import WindowKey
from malhar.io.base.output_operator import TransactionalOutputOperator, WindowBuffer
from malhar.io.fs.conform import conform
from malhar.io.fs.settings import FileOutputSettings
from malhar.io.fs.store import FileStore
from malhar.operator import OperatorContext
from malhar.ports import InputPort
from malhar.properties import Property, properties_of
from malhar.state import State
from malhar.window.watermark import Watermark
from malhar.window.windows import MAX_TIMESTAMP

__all__ = [
    "CsvFileOutput",
    "FileOutputOperator",
    "JsonLinesFileOutput",
    "LinesFileOutput",
    "ParquetFileOutput",
    "conform",
]


class FileOutputOperator(TransactionalOutputOperator, FileOutputSettings):
    """Rolling files exactly once: lines, CSV, JSON lines or Parquet (``format``).

    See the module doc. The properties are those of
    :class:`~malhar.io.fs.settings.FileOutputSettings` (and the retry settings).

    Example:
        >>> from malhar.io.fs import FileOutputOperator
        >>> out = FileOutputOperator("/data/out", format="parquet",
        ...                          schema="word string, count bigint", roll_windows=10)
        >>> out.roll_windows, out.codec
        (10, 'snappy')
    """

    #: control aware: the end of the input closes the open file (see process_control)
    input = InputPort(control_aware=True)
    #: whether the input had ended at the last window: the file closes when it ends, once
    #: (an input merged with an ended one goes on, and sends rows to later files)
    _ended_before = State(bool)

    def __init__(self, path: str | None = None, **properties: Any) -> None:
        if path is not None:
            self.path = path
        self.configure(**properties)

    def preflight(self, label: str, timeout: float) -> str:
        """The output path is a directory or can be one (see :mod:`malhar.io.fs.preflight`)."""
        from malhar.io.fs.preflight import check_output

        self.check_settings()
        return check_output(self, label, timeout)

    def fields_read(self, port: str) -> list[str]:
        """The ``partition_by`` columns: a typed stream must have them."""
        return list(self.partition_columns) if port == "input" else []

    def create_store(self, context: OperatorContext) -> FileStore:
        self.check_settings()
        return FileStore(
            self.output_settings(),
            WindowKey(context.application, context.name, context.partition),
            partitions=context.partitions,
        )

    def output_settings(self) -> FileOutputSettings:
        """This operator's configuration as the plain settings its store takes (the values
        in effect, a format subclass's default ``format`` included)."""
        settings = FileOutputSettings()
        for name in properties_of(FileOutputSettings):
            settings.__dict__[name] = getattr(self, name)
        return settings

    def window_rows(self, buffer: WindowBuffer) -> tuple[pa.Table, list[dict[str, Any]]]:
        return conform(buffer.pieces, self._store.schema, self.format)

    def begin_window(self, window_id: int) -> None:
        super().begin_window(window_id)
        #: stream -> (upstream partitions feeding this one, those that ended in this window)
        self._ended: dict[str, tuple[int, set[int]]] = {}

    def process_control(self, payload: Any, sender: ControlSender | None) -> bool:
        """Take note of the end of the input (``Watermark(MAX_TIMESTAMP)``, which a bounded
        input sends in every window once it has read everything): the file then closes
        at the end of the window, to be published once it is committed (the orderly last
        window of a run that stops at the end of its input delivers that), rather than
        waiting for ``roll_ms`` in a run that does not come."""
        if isinstance(payload, Watermark) and payload.timestamp == MAX_TIMESTAMP:
            s = sender or ControlSender("", "", 0, 1)
            self._ended.setdefault(s.stream, (s.partitions, set()))[1].add(s.partition)
        return False

    def _input_ended(self) -> bool:
        ended = getattr(self, "_ended", None)
        return bool(ended) and all(len(p) >= n for n, p in ended.values())

    def end_window(self) -> None:
        buffer = self._buffer
        store: FileStore = self._store
        now_ended = self._input_ended()
        ended = not buffer.skip and now_ended and not self._ended_before
        self._ended_before = now_ended  # in replayed windows too: as the run that made them
        if (
            not buffer.skip
            and not len(buffer)
            and (store.roll_due(buffer.window) or (ended and store.open_group is not None))
        ):
            # a window without rows still closes a file whose time (or window count) is up,
            # or whose input has ended
            window = buffer.window
            try:
                store.force_roll = True
                self._committer.commit_window(window, pa.table({}))
            finally:
                store.force_roll = False
                buffer.clear()
            return
        try:
            store.force_roll = bool(ended)
            super().end_window()
        finally:
            store.force_roll = False


class ParquetFileOutput(FileOutputOperator):
    """Rolling Parquet files exactly once (``schema`` required); see :class:`FileOutputOperator`."""

    format = Property(str, default="parquet", one_of=("parquet",), doc="parquet")


class CsvFileOutput(FileOutputOperator):
    """Rolling CSV files exactly once (``schema`` required); see :class:`FileOutputOperator`."""

    format = Property(str, default="csv", one_of=("csv",), doc="csv")


class JsonLinesFileOutput(FileOutputOperator):
    """Rolling JSON-lines files exactly once; see :class:`FileOutputOperator`.

    With ``schema``: those fields, checked; without: each dict as it is."""

    format = Property(str, default="jsonl", one_of=("jsonl",), doc="jsonl")


class LinesFileOutput(FileOutputOperator):
    """Rolling text files exactly once, a line per string; see :class:`FileOutputOperator`."""

    format = Property(str, default="lines", one_of=("lines",), doc="lines")
