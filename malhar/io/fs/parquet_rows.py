"""How the file input reads a Parquet file: by row group, as Arrow tables.

A file larger than ``block_size``, or large enough to spread over the partitions, is one
split per row group (index = the group; rows ``[0, rows of the group)``) when it has
several; any other file is one split, index -1, whose rows are counted over the whole file.
Positions and the ranges a window records are row numbers within the split.

The ``ParquetFile`` (its footer) is kept per path, and the last row group read is kept
too: a read call emits at most 65,536 rows and a window's budget may end inside a group,
so consecutive reads slice the same group. A file that is not Parquet or does not fit
``schema`` is reported once on the error port, by the owner of its first split; the other
splits are finished without rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from malhar.io.fs.decoders import error_row
from malhar.io.fs.errors import UNREADABLE, UnreadableSplit
from malhar.io.fs.paths import hive_values, open_binary
from malhar.io.fs.splits import END, INDEX, PATH, POS, SPREAD_MIN_BLOCK
from malhar.ports import OutputPort
from malhar.util.fs import FileSystem, StorageUnavailableError

__all__ = ["ParquetRows"]


class ParquetRows:
    """Mixin of :class:`~malhar.io.fs.input_operator.FileInputOperator`: cuts a Parquet
    file (:meth:`_parquet_splits`), reads a split (:meth:`_read_parquet`) and a recorded
    range again (:meth:`_emit_rows`).

    The operator provides ``block_size``, the ``schema`` as Arrow (``_arrow``, None
    without one), ``_fs``, the ports and the window's bookkeeping (``_record``,
    ``_finish``, ``_counts``, ``_url``); it empties ``_parquet`` when it starts cutting
    files and when it closes, and ``_rg_cache`` when it opens.
    """

    #: path -> ``ParquetFile``, or why the file cannot be read (a str)
    _parquet: dict[str, Any]
    #: the last row group read: ((path, group), table)
    _rg_cache: tuple[tuple[str, int], pa.Table] | None
    #: the operator's (see above)
    block_size: int
    output: OutputPort
    error: OutputPort
    _arrow: pa.Schema | None
    _fs: FileSystem
    _counts: dict[str, int]
    _url: Callable[[str], str]
    _record: Callable[[dict[str, Any]], None]
    _finish: Callable[[list[Any]], None]

    def _parquet_splits(self, path: str, size: int, cut: int) -> list[tuple[int, int, int]]:
        """A file's splits: its row groups ``(group, 0, rows)`` when it is large enough to
        spread over the partitions and has several, else the whole file ``(-1, 0, -1)``."""
        if size > self.block_size or (cut > 1 and size >= cut * SPREAD_MIN_BLOCK):
            try:
                pf = self._parquet_file(path, size)
            except UNREADABLE:
                # gone or refused since the listing (off the local filesystem): one split,
                # whose read says so on the error port
                return [(-1, 0, -1)]
            if not isinstance(pf, str) and pf.metadata.num_row_groups > 1:
                return [
                    (k, 0, pf.metadata.row_group(k).num_rows)
                    for k in range(pf.metadata.num_row_groups)
                ]
        return [(-1, 0, -1)]

    def _parquet_file(self, path: str, size: int | None = None) -> Any:
        """The ``ParquetFile`` of ``path`` (cached), or why it cannot be read (a str)."""
        found = self._parquet.get(path)
        if found is not None:
            return found
        try:
            source = path if self._fs.backend == "local" else open_binary(self._fs, path, size)
            found = pq.ParquetFile(source)
        except UNREADABLE:
            raise
        except (OSError, pa.ArrowException) as exc:
            if isinstance(exc, StorageUnavailableError):
                raise
            found = f"not a readable Parquet file: {exc}"
        if len(self._parquet) > 64:
            self._parquet.clear()
        self._parquet[path] = found
        return found

    def _hive(self, path: str) -> dict[str, str | None]:
        """The columns the file's folders name (``day=2026-11-23/``), as Spark reads them."""
        scanner = getattr(self, "_scanner", None)
        return {} if scanner is None else hive_values(scanner.base, path)

    def _schema_problem(self, pf: Any, path: str) -> str | None:
        if self._arrow is None:
            return None
        have = pf.schema_arrow
        hive = self._hive(path)
        missing = [n for n in self._arrow.names if n not in have.names and n not in hive]
        if missing:
            return f"schema mismatch: the file has no column(s) {missing} (it has {have.names})"
        present = pa.schema([f for f in self._arrow if f.name in have.names])
        try:
            have.empty_table().select(present.names).cast(present)
        except (pa.ArrowException, ValueError) as exc:
            return f"schema mismatch: {exc}"
        return None

    def _with_hive(self, table: pa.Table, path: str) -> pa.Table:
        """``table`` with the columns its folders name that it lacks (text, cast with the
        rest to the schema's types when it names them)."""
        for name, value in self._hive(path).items():
            if name not in table.column_names:
                wanted = self._arrow is None or name in self._arrow.names
                if wanted:
                    column = pa.array([value] * table.num_rows, pa.string())
                    kind = None if self._arrow is None else self._arrow.field(name).type
                    if kind is not None and pa.types.is_timestamp(kind) and kind.tz:
                        # the folder names the UTC wall clock (hive_text): read it so
                        column = column.cast(pa.timestamp(kind.unit)).cast(kind)
                    table = table.append_column(name, column)
        return table

    def _read_parquet(self, split: list[Any], size: int, budget: int) -> tuple[int, bool]:
        path, index, end = split[PATH], split[INDEX], split[END]
        pos = max(split[POS], 0)
        pf = self._parquet_file(path, size)
        problem = pf if isinstance(pf, str) else self._schema_problem(pf, path)
        if problem is not None:
            self._finish(split)
            if index > 0:  # the owner of the file's first split reports it
                self._record({"f": path, "i": index, "s": pos, "e": pos, "n": 0, "last": True})
                return 0, False
            self._record(
                {"f": path, "i": index, "o": 0, "err": problem, "text": None, "last": True}
            )
            self.error.emit(error_row(self._url(path), 0, problem, None))
            self._counts["errors"] += 1
            return 1, True
        total = pf.metadata.num_rows if index < 0 else end
        n = min(budget, total - pos, 1 << 16)
        if n <= 0:
            self._record({"f": path, "i": index, "s": pos, "e": pos, "n": 0, "last": True})
            self._finish(split)
            return 0, False
        items = self._emit_rows(path, index, pos, pos + n)
        last = pos + n >= total
        self._record({"f": path, "i": index, "s": pos, "e": pos + n, "n": items, "last": last})
        if last:
            self._finish(split)
        else:
            split[POS] = pos + n
        return max(items, 1), True

    def _rows(self, path: str, index: int, start: int, end: int) -> pa.Table:
        """Rows ``[start, end)`` of a split (of the file for index -1, of a row group else)."""
        pf = self._parquet_file(path)
        if isinstance(pf, str):
            raise UnreadableSplit(pf)
        columns = None
        if self._arrow is not None:  # those in the file; its folders may name others
            have = pf.schema_arrow.names
            columns = [n for n in self._arrow.names if n in have]
        meta = pf.metadata
        if index >= 0:
            groups, first = [index], 0
        else:
            bounds = np.cumsum(
                [0] + [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]
            )
            lo = int(np.searchsorted(bounds, start, "right")) - 1
            hi = int(np.searchsorted(bounds, end, "left"))
            groups, first = list(range(lo, hi)), int(bounds[lo])
        tables = []
        for g in groups:
            key = (path, g)
            if self._rg_cache is not None and self._rg_cache[0] == key:
                tables.append(self._rg_cache[1])
                continue
            table = pf.read_row_group(g, columns=columns, use_threads=False)
            self._rg_cache = (key, table)
            tables.append(table)
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        table = self._with_hive(table.slice(start - first, end - start), path)
        if self._arrow is not None:
            try:
                table = table.select(self._arrow.names).cast(self._arrow)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                # the footer's types cast (checked at discovery), a value does not (a null
                # for a NOT NULL field is a ValueError): the split goes to the error port
                raise UnreadableSplit(f"its values do not fit the schema: {exc}") from None
        return table

    def _emit_rows(self, path: str, index: int, start: int, end: int) -> int:
        try:
            table = self._rows(path, index, start, end)
        except (OSError, pa.ArrowException) as exc:
            if isinstance(exc, (StorageUnavailableError, *UNREADABLE)):
                raise
            raise UnreadableSplit(str(exc)) from None
        if self._arrow is not None:
            for batch in table.combine_chunks().to_batches():
                self.output.emit_batch(batch)
        else:
            emit = self.output.emit
            for row in table.to_pylist():
                emit(row)
        return table.num_rows
