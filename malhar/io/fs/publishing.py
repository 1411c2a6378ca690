"""How a file-output partition makes its committed rows visible: the final files' names,
one file per directory of ``partition_by`` (Hive layout, nested when it names several
columns: ``user=ann/d=2026-11-29/``), written under a hidden in-progress
name and renamed into place, or a window staged as its own file renamed into place.

Every step is idempotent: a final file already there is left as it is, so publishing
interrupted by a crash and run again after the restart neither loses nor duplicates a
row. Readers (``spark.read.parquet``, Hive) skip names starting with ``_`` or ``.``: they
see whole files only.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from malhar.io.base.output import WindowKey
from malhar.io.fs.encoders import create_encoded, file_extension
from malhar.io.fs.paths import hive_segments
from malhar.io.fs.settings import FileOutputSettings
from malhar.io.fs.staged_pieces import Group, Piece
from malhar.util.fs import StorageExistsError, StorageNotFoundError
from malhar.util.fs.names import encode_segment

__all__ = ["NAMING_SETTINGS", "Publisher"]

#: the output settings that decide a published file's name, folder and bytes (recorded with
#: a publication, so that an interrupted one is finished as it began)
NAMING_SETTINGS = ("format", "compression", "header", "delimiter", "partition_by", "file_prefix")


class Publisher:
    """Publishes one output partition's files under ``root`` (see the module doc)."""

    def __init__(self, settings: FileOutputSettings, key: WindowKey, fs: Any, root: str) -> None:
        self.settings = settings
        self.key = key
        self.fs = fs
        self.root = root.rstrip("/")
        #: in-progress leftovers may exist: a crash or a lost compare-and-swap interrupted
        #: an attempt at the next group to publish (set by the store's load, cleared once a
        #: group is finalized; see publish)
        self.sweep = True
        self._codec: str | None = None  #: codec_tag's

    def stem(self) -> str:
        """What the names of this operator's files start with: prefix, application and
        operator joined by ``-``, which they may hold too (see FileStore._claim_names)."""
        k = self.key
        return f"{self.settings.file_prefix}-{encode_segment(k.application)}-{encode_segment(k.operator)}"

    def name(self, group: Group) -> str:
        """The final file name of a group's windows (the same under every Hive folder)."""
        s, k = self.settings, self.key
        ext = file_extension(s.format, s.codec)
        return f"{self.stem()}-{k.partition:05d}-{group.first:012d}-{group.last:012d}{ext}"

    def publish_group(
        self, group: Group, table: pa.Table, before: Callable[[list[str]], None] | None = None
    ) -> list[str]:
        """Publish a group's rows as its final file(s), one per ``partition_by`` directory;
        ``before(files)`` is told the files (relative to the root) before any is written."""
        name = self.name(group)
        parts = self.split(table)
        if before is not None:
            before([self.relative(f"{folder}/{name}") for folder, _ in parts])
        return [self.publish(folder, name, part) for folder, part in parts]

    def relative(self, path: str) -> str:
        """``path`` (below the root) relative to the root."""
        return path[len(self.root) + 1 :]

    def recorded(self) -> dict[str, Any]:
        """The settings a publication is recorded with (see :meth:`resumed`): as JSON reads
        them back (a tuple of columns as a list), so that a record compares equal to its
        own reread."""
        out = {name: getattr(self.settings, name) for name in NAMING_SETTINGS}
        if isinstance(out["partition_by"], tuple):
            out["partition_by"] = list(out["partition_by"])
        return out

    def resumed(self, recorded: dict[str, Any]) -> Publisher:
        """A publisher with the naming settings a publication was recorded with."""
        settings = copy.copy(self.settings)
        settings.__dict__.update({k: v for k, v in recorded.items() if k in NAMING_SETTINGS})
        publisher = Publisher(settings, self.key, self.fs, self.root)
        publisher.sweep = self.sweep
        return publisher

    def renamable(self, piece: Piece) -> bool:
        """Whether a piece is, byte for byte, the file these settings would publish (a
        whole piece staged under other settings is decoded and published anew)."""
        s = self.settings
        return (
            piece.whole
            and s.format == "parquet"
            and not s.partition_by
            and piece.codec == self.codec_tag()
        )

    def codec_tag(self) -> str:
        """How a Parquet footer names the settings' compression (pyarrow decides: "lz4"
        writes LZ4_RAW), learned once by writing one row."""
        if self._codec is None:
            sink = pa.BufferOutputStream()
            pq.write_table(pa.table({"x": [1]}), sink, compression=self.settings.codec)
            meta = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
            self._codec = str(meta.row_group(0).column(0).compression)
        return self._codec

    def move_into_place(self, piece: Piece, staged: str) -> str:
        """Rename a window staged as its own file (at ``staged``) into place
        (idempotent)."""
        final = f"{self.root}/{self.name(Group([piece]))}"
        try:
            self.fs.rename(staged, final, overwrite=False)
        except StorageExistsError:
            delete_quietly(self.fs, staged)  # in place: an interrupted move
        except StorageNotFoundError:
            pass  # moved meanwhile
        return final

    def split(self, table: pa.Table) -> list[tuple[str, pa.Table]]:
        """(directory, rows) per directory of ``partition_by`` (its columns dropped), in
        order: ``<root>/a=1/b=x`` for columns ``a`` and ``b``. Rows are grouped by their
        directory's name, not by value: values written alike (a null and ``""``, or the
        text ``__HIVE_DEFAULT_PARTITION__``) share one file, and each row is in exactly one
        (``-0.0`` equals ``0.0`` but has its own folder)."""
        columns = self.settings.partition_columns
        if not columns:
            return [(self.root, table)]
        folders = folder_names(table, columns)
        rest = table.drop_columns(list(columns))
        out = []
        for folder in pc.unique(folders).to_pylist():
            out.append((f"{self.root}/{folder}", rest.filter(pc.equal(folders, folder))))
        out.sort(key=lambda x: x[0])
        return out

    def publish(self, folder: str, name: str, table: pa.Table) -> str:
        """Write ``folder/name`` holding ``table`` unless it is there (idempotent)."""
        fs = self.fs
        final = f"{folder}/{name}"
        if fs.status(final) is None:
            s = self.settings
            tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.inprogress"
            create_encoded(
                fs,
                tmp,
                table,
                s.format,
                header=s.header,
                delimiter=s.delimiter,
                compression=s.codec,
            )
            try:
                fs.rename(tmp, final, overwrite=False)
            except StorageExistsError:
                delete_quietly(fs, tmp)  # published meanwhile by another attempt
        if self.sweep:
            # Groups are finalized in window order and finalized.json records each, so only
            # the first group finalized after a load can have leftovers: listing the folder
            # (every file ever published there) for each file made publishing O(files).
            self.sweep_leftovers(self.relative(final))
        return final

    def sweep_leftovers(self, *files: str) -> None:
        """Delete the in-progress leftovers of interrupted attempts at ``files`` (relative
        to the root; their folders may not exist)."""
        fs = self.fs
        for file in files:
            folder, _, name = f"{self.root}/{file}".rpartition("/")
            try:
                entries = fs.list(folder)
            except StorageNotFoundError:
                continue
            for entry in entries:
                if entry.name.startswith(f".{name}.") and entry.name.endswith(".inprogress"):
                    delete_quietly(fs, entry.path)


def folder_names(table: pa.Table, columns: tuple[str, ...]) -> pa.ChunkedArray:
    """Each row's directory below the root: its :func:`hive_segments`, outermost first,
    joined by ``/`` (one column: that column's segment, the layout of every release)."""
    segments = [hive_segments(c, table.column(c)) for c in columns]
    if len(segments) == 1:
        return segments[0]
    return pc.binary_join_element_wise(*segments, "/")


def delete_quietly(fs: Any, path: str) -> None:
    """Delete ``path``; gone already is fine (a step run again after a crash)."""
    try:
        fs.delete(path)
    except StorageNotFoundError:
        pass
