"""What a file-output partition stages per committed window (a *piece*), and the windows
of one output file (a *group*); how a piece is encoded on storage and read back.

A piece is ``<folder>/w<window>.arrow`` (the partition's folder), whatever it holds:

* an Arrow IPC file of the window's rows, with the partition's bookkeeping in its schema
  metadata (rows, the roll decision, when the group opened, the commit mark's digest and
  run token, the window's rejected rows);
* or, for a window that is its own file, that final Parquet file already encoded (told
  apart by its first bytes, ``PAR1`` against Arrow's ``ARROW1``).

One name per window keeps the commit's compare-and-swap whatever the piece holds (see
:mod:`malhar.io.fs.store`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from malhar.io.base.output import CommitMark, rows_json
from malhar.io.fs.paths import RangeFile
from malhar.util.fs import StorageNotFoundError

__all__ = ["Group", "Piece"]

_ROWS, _ROLL, _OPENED = b"malhar.rows", b"malhar.roll", b"malhar.opened_ms"
_DIGEST, _RUN, _REJECTED = b"malhar.digest", b"malhar.run", b"malhar.rejected"


@dataclass
class Piece:
    """One committed (staged) window of the partition."""

    window: int
    rows: int
    size: int
    roll: bool
    opened_ms: int
    digest: str | None = None
    run: str | None = None
    #: staged as its final Parquet file (published by a rename), not as Arrow IPC
    whole: bool = False
    #: a whole piece's Parquet compression (as its footer names it)
    codec: str | None = None

    @property
    def name(self) -> str:
        """Its file name in the staging folder: one per window, whatever it holds (the
        commit's compare-and-swap is on it)."""
        return staged_name(self.window)


@dataclass
class Group:
    """The windows of one output file (set): from the last roll to the next."""

    pieces: list[Piece] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.pieces[0].window

    @property
    def last(self) -> int:
        return self.pieces[-1].window

    @property
    def closed(self) -> bool:
        return bool(self.pieces) and self.pieces[-1].roll

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.pieces)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.pieces)


def staged_name(window: int) -> str:
    return f"w{window:020d}.arrow"


def staged_window(name: str) -> int | None:
    """The window of a piece's file name (None: not a piece)."""
    if name.startswith("w") and name.endswith(".arrow"):
        return int(name[1:-6])
    return None


def piece_meta(
    rows: int, opened_ms: int, mark: CommitMark, rejected: list[dict[str, Any]]
) -> dict[bytes, bytes]:
    """The schema metadata of an Arrow piece (without the roll mark)."""
    meta = {_ROWS: str(rows).encode(), _OPENED: str(opened_ms).encode()}
    if mark.digest:
        meta[_DIGEST] = mark.digest.encode()
    if mark.run:
        meta[_RUN] = mark.run.encode()
    if rejected:
        meta[_REJECTED] = rows_json(rejected).encode()
    return meta


def marked_rolling(meta: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """``meta`` with the mark that the piece closes its group."""
    return {**meta, _ROLL: b"1"}


def ipc_bytes(table: pa.Table, meta: dict[bytes, bytes]) -> memoryview:
    """An Arrow piece: ``table`` with ``meta`` as one IPC file."""
    sink = pa.BufferOutputStream()
    schema = table.schema.with_metadata(meta)
    with pa.ipc.new_file(sink, schema) as writer:
        if table.num_rows:
            writer.write_table(table.replace_schema_metadata(meta))
    return memoryview(sink.getvalue())  # no copy into bytes (see encoders._parquet_bytes)


def load_piece(fs: Any, path: str, window: int, size: int, whole: bool) -> Piece:
    """The piece staged at ``path`` (``whole``: as its final Parquet file, see
    :func:`holds_parquet`), from its metadata or footer only."""
    if whole:
        meta = pq.ParquetFile(_footer_source(fs, path, size)).metadata
        codec = str(meta.row_group(0).column(0).compression) if meta.num_row_groups else None
        return Piece(window, meta.num_rows, size, True, 0, whole=True, codec=codec)
    meta = _ipc_meta(fs, path, size)
    return Piece(
        window,
        int(meta.get(_ROWS, b"0")),
        size,
        meta.get(_ROLL) == b"1",
        int(meta.get(_OPENED, b"0")),
        meta[_DIGEST].decode() if _DIGEST in meta else None,
        meta[_RUN].decode() if _RUN in meta else None,
    )


def read_piece(fs: Any, path: str, whole: bool) -> pa.Table:
    """A piece's rows."""
    if whole:
        return pq.read_table(_whole_source(fs, path)).replace_schema_metadata(None)
    return _ipc_reader(fs, path).read_all().replace_schema_metadata(None)


def read_rejected(fs: Any, path: str) -> list[dict[str, Any]]:
    """The rejected rows kept with a piece (raises StorageNotFoundError without it)."""
    if holds_parquet(fs, path):
        return []  # staged whole: only windows without rejected rows are
    meta = _ipc_meta(fs, path, None)
    return json.loads(meta[_REJECTED]) if _REJECTED in meta else []


def holds_parquet(fs: Any, path: str) -> bool:
    """Whether a staged piece is a window staged whole (Parquet's magic, not Arrow's)."""
    return fs.read(path, 0, 4) == b"PAR1"


def _whole_source(fs: Any, path: str) -> Any:
    """A piece to read in full: the file itself locally, its bytes elsewhere."""
    if fs.backend == "local":
        try:
            return pa.memory_map(path)
        except FileNotFoundError:
            raise StorageNotFoundError("no such file", backend="local", path=path) from None
    return pa.py_buffer(fs.read_all(path))


def _footer_source(fs: Any, path: str, size: int | None) -> Any:
    """A piece to read the metadata of: the file itself locally, ranged reads elsewhere
    (pyarrow reads the footer: on HDFS a few round trips instead of the whole piece, which
    the Spark sink's driver re-read per batch for each piece of the open group)."""
    if fs.backend == "local":
        return _whole_source(fs, path)  # mapped: only the pages read are
    return RangeFile(fs, path, size)


def _ipc_reader(fs: Any, path: str) -> Any:
    return pa.ipc.open_file(_whole_source(fs, path))


def _ipc_meta(fs: Any, path: str, size: int | None) -> dict[bytes, bytes]:
    return pa.ipc.open_file(_footer_source(fs, path, size)).schema.metadata or {}
