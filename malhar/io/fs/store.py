"""One file-output partition's store: windows staged, files rolled, renamed into place once
committed (Malhar's ``AbstractFileOutputOperator``, on
:class:`~malhar.io.base.output.TransactionalStore`).

Layout of an output directory ``<path>``::

    <path>/[<column>=<value>/]<prefix>-<app>-<op>-<partition>-<first>-<last>.<ext>   final files
    <path>/_malhar/<app>/<op>/<partition>/w<window>.arrow     a committed window (staged)
    <path>/_malhar/<app>/<op>/<partition>/finalized.json      the last window made visible

**A window commits** by renaming its staged piece (the window's rows as an Arrow IPC file,
the roll decision and the group's opening time in its metadata) to ``w<window>.arrow``:
the rows and the window id in one atomic step, and a compare-and-swap (a rename that
finds the name taken fails), so a second writer of the partition cannot commit the window
twice. A replayed window finds its piece (or ``finalized.json`` past it) and is skipped.

**A window that is its own file** (Parquet, ``roll_windows=1``, no ``partition_by``, no
rejected rows; a file per window, like Spark's file sink) is staged as that file, already
encoded, under the same name (told apart by its first bytes, ``PAR1`` against Arrow's
``ARROW1``): its rows are encoded once, and finalization is a rename. One name per window,
whatever it holds, keeps the compare-and-swap: two writers of a window (a zombie with other
settings included) cannot both commit it.

**A file rolls** when the group of windows since the last roll reaches ``roll_records``,
``roll_bytes`` (as staged), ``roll_windows`` or ``roll_ms``: that window's piece is marked,
and the group is closed.

**Finalization** runs on ``committed(w)``, when every window up to ``w`` is durable in the
whole application: each closed group whose last window is ``<= w`` is written as the final
file(s) (one per value of ``partition_by``), first under a hidden in-progress name
(``.<name>.<uuid>.inprogress``) and then renamed into place; a file already there is left as
it is, so a finalization interrupted by a crash and run again after the restart neither
loses nor duplicates a row. Then ``finalized.json`` moves past the group and its pieces are
deleted. A window staged as its own file is recorded in ``finalized.json`` first and then
renamed into place; a load that finds such a piece at or below ``finalized.json`` completes
the rename (or, when the file is already in place, deletes the piece). A piece staged whole
under other settings (format, ``partition_by``, compression changed since) is decoded and
published like any other group instead. Readers (``spark.read.parquet``, Hive) skip names
starting with ``_`` or ``.``: they see whole files of committed windows only.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from malhar.errors import MalharError
from malhar.io.base.output import NO_WINDOW, CommitMark, TransactionalStore, WindowKey
from malhar.io.fs.formats import create_encoded, file_extension
from malhar.io.fs.paths import hive_segment, resolve
from malhar.io.fs.settings import FileOutputSettings
from malhar.util.fs import StorageError, StorageExistsError, StorageNotFoundError
from malhar.util.fs.names import encode_segment

__all__ = ["FileStore", "Group"]

log = logging.getLogger("malhar.io.fs")

STAGING = "_malhar"
_ROLL, _OPENED, _DIGEST, _RUN = b"malhar.roll", b"malhar.opened_ms", b"malhar.digest", b"malhar.run"
_REJECTED = b"malhar.rejected"


class CommitConflictError(MalharError, ConnectionError):
    """Another writer committed the window first: transient, so the committer retries,
    re-reads the committed windows and skips it (an ``OutputError`` would not be retried)."""


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
        return _staged_name(self.window)


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


@dataclass
class _Txn:
    window: int
    tables: list[pa.Table] = field(default_factory=list)
    mark: CommitMark | None = None
    tmp: str | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)


class FileStore(TransactionalStore[_Txn]):
    """The store of one output partition (see the module doc).

    Args:
        settings: the output's settings.
        key: (application, operator, partition).
        schema: the rows' Arrow schema (default: the settings' ``schema``).
        clock: milliseconds now (tests move time).
        keep_rejected: keep a window's rejected rows with it, so a replay re-emits them
            (the operator); the Spark sink fails a batch with rejected rows instead.
    """

    #: rejected rows are kept in the window's piece: a replay re-emits them
    records_rejected = True

    def __init__(
        self,
        settings: FileOutputSettings,
        key: WindowKey,
        *,
        schema: pa.Schema | None = None,
        clock: Any = None,
        keep_rejected: bool = True,
    ) -> None:
        super().__init__(key)
        self.records_rejected = keep_rejected
        self.settings = settings
        self.schema = schema if schema is not None else settings.arrow_schema
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.fs, self.root = resolve(settings.path)
        self.stage = "/".join(
            [
                self.root.rstrip("/"),
                STAGING,
                encode_segment(key.application),
                encode_segment(key.operator),
                str(key.partition),
            ]
        )
        self.groups: list[Group] = []  #: closed groups not finalized yet, then the open one
        self.finalized = NO_WINDOW
        self.force_roll = False  #: the next commit closes the group (a due roll, no data)
        self._mark = CommitMark()
        self._codec: str | None = None  #: _codec_tag's
        self._stale = True
        #: in-progress leftovers may exist: a crash or a lost compare-and-swap interrupted
        #: an attempt at the next group to finalize (set by each load, cleared once a group
        #: is finalized; see _publish)
        self._sweep = True

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self) -> None:
        self.fs.mkdirs(self.stage)
        self._load()

    def describe(self) -> str:
        return self.fs.describe(self.root)

    def _load(self) -> None:
        """Rebuild the groups from the staged pieces (and drop leftovers of crashes)."""
        fs = self.fs
        self._sweep = True  # before publishing a recorded whole piece (below)
        raw = _read_json(fs, f"{self.stage}/finalized.json")
        self.finalized = int(raw["window"]) if raw else NO_WINDOW
        pieces: list[Piece] = []
        for entry in fs.list(self.stage):
            name = entry.name
            if name.startswith(".") and name.endswith(".tmp"):
                _delete(fs, entry.path)  # an interrupted commit
                continue
            if not (name.startswith("w") and name.endswith(".arrow")):
                continue
            window = int(name[1:-6])
            if _holds_parquet(fs, entry.path):
                whole = _whole_piece(fs, entry.path, window, entry.size)
                if window <= self.finalized:
                    self._publish_whole(whole)  # recorded, its rename interrupted
                else:
                    pieces.append(whole)
                continue
            if window <= self.finalized:
                _delete(fs, entry.path)  # finalized; its deletion was interrupted
                continue
            meta = _read_table(fs, entry.path, schema_only=True).metadata or {}
            pieces.append(
                Piece(
                    window,
                    int(meta.get(b"malhar.rows", b"0")),
                    entry.size,
                    meta.get(_ROLL) == b"1",
                    int(meta.get(_OPENED, b"0")),
                    meta[_DIGEST].decode() if _DIGEST in meta else None,
                    meta[_RUN].decode() if _RUN in meta else None,
                )
            )
        pieces.sort(key=lambda p: p.window)
        self.groups = []
        for piece in pieces:
            if not self.groups or self.groups[-1].closed:
                self.groups.append(Group())
            self.groups[-1].pieces.append(piece)
        last = pieces[-1] if pieces else None
        if last is not None:
            self._mark = CommitMark(last.window, last.digest, last.run)
        else:
            self._mark = CommitMark(self.finalized)
        self._stale = False
        self._sweep = True

    # -- the window protocol --------------------------------------------------------------------
    def read_committed(self) -> CommitMark:
        if self._stale:
            self._load()
        return self._mark

    def begin(self, window: int) -> _Txn:
        return _Txn(window)

    def read_committed_locked(self, txn: _Txn) -> CommitMark:
        # the commit's rename is a compare-and-swap; after a conflict the pieces are re-read
        return self.read_committed()

    def write(self, txn: _Txn, rows: pa.Table) -> list[dict[str, Any]]:
        if rows.num_rows:
            txn.tables.append(rows)
        return []

    def store_committed(self, txn: _Txn, mark: CommitMark) -> None:
        txn.mark = mark

    def commit(self, txn: _Txn) -> None:
        window = txn.window
        table = _concat(txn.tables, self.schema)
        now = self.clock()
        group = self.groups[-1] if self.groups and not self.groups[-1].closed else None
        opened = group.pieces[0].opened_ms if group else now
        size_before = group.size if group else 0
        rows_before = group.rows if group else 0
        first = group.first if group else window
        meta = {b"malhar.rows": str(table.num_rows).encode(), _OPENED: str(opened).encode()}
        mark = txn.mark or CommitMark(window)
        if mark.digest:
            meta[_DIGEST] = mark.digest.encode()
        if mark.run:
            meta[_RUN] = mark.run.encode()
        if txn.rejected:
            meta[_REJECTED] = json.dumps(txn.rejected, default=str).encode()
        s = self.settings
        roll = (
            self.force_roll
            or (s.roll_records is not None and rows_before + table.num_rows >= s.roll_records)
            or (s.roll_windows is not None and window - first + 1 >= s.roll_windows)
            or (s.roll_ms is not None and now - opened >= s.roll_ms)
        )
        tmp = f"{self.stage}/.w{window:020d}.{uuid.uuid4().hex}.tmp"
        txn.tmp = tmp
        data = None
        whole = self._whole(table, txn, mark, group)
        if whole:
            # encoded straight into the staged file: its rows are encoded once, here
            size = create_encoded(
                self.fs, tmp, table.replace_schema_metadata(None), "parquet", compression=s.codec
            )
        elif not roll:
            # only roll_bytes needs the piece's size: encode without the mark to learn it,
            # and again with the mark only when it decides (once per file); encoding is a
            # copy of the window's rows, the largest cost of a commit after the write
            data = _ipc_bytes(table, meta)
            roll = size_before + len(data) >= s.roll_bytes
        if roll and not whole:
            meta[_ROLL] = b"1"
            data = _ipc_bytes(table, meta)
        if data is not None:
            self.fs.create(tmp, data, overwrite=False)
            size = len(data)
        piece = Piece(window, table.num_rows, size, roll, opened, mark.digest, mark.run)
        if whole:
            piece.whole, piece.codec = True, self._codec_tag()
        final = self._path(piece)
        try:
            self.fs.rename(tmp, final, overwrite=False)
        except StorageExistsError:
            self._stale = True
            raise CommitConflictError(
                f"{self.key}: window {window} was committed by another writer of the partition"
            ) from None
        txn.tmp = None
        if group is None:
            group = Group()
            self.groups.append(group)
        group.pieces.append(piece)
        self._mark = CommitMark(window, mark.digest, mark.run)
        self.force_roll = False

    def _whole(self, table: pa.Table, txn: _Txn, mark: CommitMark, group: Group | None) -> bool:
        """Whether the window is staged as its own final file (the staged name is the same
        either way); an open group left by other settings keeps its windows together."""
        s = self.settings
        return (
            s.format == "parquet"
            and s.roll_windows == 1
            and not s.partition_by
            and group is None
            and table.num_rows > 0
            and not txn.rejected
            and mark.digest is None
            and mark.run is None
        )

    def store_rejected(self, txn: _Txn, window: int, rows: list[dict[str, Any]]) -> None:
        txn.rejected = list(rows)

    def read_rejected(self, window: int) -> list[dict[str, Any]]:
        path = f"{self.stage}/{_staged_name(window)}"
        try:
            if _holds_parquet(self.fs, path):
                return []  # staged whole: only windows without rejected rows are
            meta = _read_table(self.fs, path, schema_only=True).metadata or {}
        except StorageNotFoundError:
            return []  # finalized: committed in the whole application, never replayed
        return json.loads(meta[_REJECTED]) if _REJECTED in meta else []

    def abort(self, txn: _Txn, error: BaseException | None) -> None:
        if txn.tmp is not None:
            try:
                _delete(self.fs, txn.tmp)
            except StorageError:
                pass
            txn.tmp = None

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, ConnectionError | TimeoutError)

    # -- rolling and finalizing -------------------------------------------------------------------
    @property
    def open_group(self) -> Group | None:
        """The group the next window joins (None: the next window opens one)."""
        return self.groups[-1] if self.groups and not self.groups[-1].closed else None

    def roll_due(self, window: int) -> bool:
        """Whether the open group must close at ``window`` by time or window count (checked
        in windows without rows, which commit no piece of their own otherwise)."""
        group = self.open_group
        if group is None:
            return False
        s = self.settings
        if s.roll_windows is not None and window - group.first + 1 >= s.roll_windows:
            return True
        return s.roll_ms is not None and self.clock() - group.pieces[0].opened_ms >= s.roll_ms

    def committed(self, window: int) -> None:
        """Finalize every closed group whose windows are all ``<= window``."""
        while self.groups and self.groups[0].closed and self.groups[0].last <= window:
            self.finalize(self.groups[0])
            self.groups.pop(0)

    def finalize(self, group: Group) -> list[str]:
        """Write a closed group's final file(s) and forget its pieces; return the files."""
        fs = self.fs
        if len(group.pieces) == 1 and self._renamable(group.pieces[0]):
            # recorded first: a load finding the piece at or below finalized.json renames it
            self._record_finalized(group.last)
            written = [self._move_into_place(group.pieces[0])]
            log.info("malhar output %s: window %d finalized: %s", self.key, group.last, written[0])
            return written
        tables = []
        for piece in group.pieces:
            if piece.rows:
                tables.append(_read_piece(fs, self._path(piece), piece.whole))
        written = []
        if tables:
            table = pa.concat_tables(tables, promote_options="permissive")
            written = self._publish_group(group, table)
        self._record_finalized(group.last)
        for piece in group.pieces:
            _delete(fs, self._path(piece))
        log.info(
            "malhar output %s: windows %d-%d finalized: %s",
            self.key,
            group.first,
            group.last,
            ", ".join(written) or "no rows",
        )
        return written

    def _record_finalized(self, window: int) -> None:
        self.fs.write_atomic(
            f"{self.stage}/finalized.json", json.dumps({"window": window}).encode()
        )
        self.finalized = window
        self._sweep = False

    def _path(self, piece: Piece) -> str:
        return f"{self.stage}/{piece.name}"

    def _publish_group(self, group: Group, table: pa.Table) -> list[str]:
        """Publish a group's rows as its final file(s), one per ``partition_by`` value."""
        return [
            self._publish(folder, self._name(group), part) for folder, part in self._split(table)
        ]

    def _renamable(self, piece: Piece) -> bool:
        """Whether a piece is, byte for byte, the file these settings would publish (a
        whole piece staged under other settings is decoded and published anew)."""
        s = self.settings
        return (
            piece.whole
            and s.format == "parquet"
            and not s.partition_by
            and piece.codec == self._codec_tag()
        )

    def _codec_tag(self) -> str:
        """How a Parquet footer names the settings' compression (pyarrow decides: "lz4"
        writes LZ4_RAW), learned once by writing one row."""
        if self._codec is None:
            sink = pa.BufferOutputStream()
            pq.write_table(pa.table({"x": [1]}), sink, compression=self.settings.codec)
            meta = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
            self._codec = str(meta.row_group(0).column(0).compression)
        return self._codec

    def _publish_whole(self, piece: Piece) -> None:
        """Publish a whole piece recorded in ``finalized.json`` (a crash interrupted its
        rename), then forget it: renamed, or decoded and published under changed settings."""
        if self._renamable(piece):
            self._move_into_place(piece)
            return
        self._publish_group(Group([piece]), _read_piece(self.fs, self._path(piece), True))
        _delete(self.fs, self._path(piece))

    def _move_into_place(self, piece: Piece) -> str:
        """Rename a window staged as its own file into place (idempotent)."""
        final = f"{self.root.rstrip('/')}/{self._name(Group([piece]))}"
        try:
            self.fs.rename(self._path(piece), final, overwrite=False)
        except StorageExistsError:
            _delete(self.fs, self._path(piece))  # in place: an interrupted move
        except StorageNotFoundError:
            pass  # moved meanwhile
        return final

    def _name(self, group: Group) -> str:
        s, k = self.settings, self.key
        ext = file_extension(s.format, s.codec)
        app, op = encode_segment(k.application), encode_segment(k.operator)
        return f"{s.file_prefix}-{app}-{op}-{k.partition:05d}-{group.first:012d}-{group.last:012d}{ext}"

    def _split(self, table: pa.Table) -> list[tuple[str, pa.Table]]:
        """(directory, rows) per value of ``partition_by`` (the column dropped), in order."""
        column = self.settings.partition_by
        root = self.root.rstrip("/")
        if not column:
            return [(root, table)]
        values = table.column(column)
        rest = table.drop_columns([column])
        out = []
        for value in pc.unique(values).to_pylist():
            mask = pc.is_null(values) if value is None else pc.equal(values, value)
            mask = pc.fill_null(mask, False)
            out.append((f"{root}/{hive_segment(column, value)}", rest.filter(mask)))
        out.sort(key=lambda x: x[0])
        return out

    def _publish(self, folder: str, name: str, table: pa.Table) -> str:
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
                _delete(fs, tmp)  # published meanwhile by another attempt
        if self._sweep:
            # In-progress leftovers of interrupted attempts at this very file. Groups are
            # finalized in window order and finalized.json records each, so only the first
            # group finalized after a load can have them: listing the folder (every file
            # ever published there) for each file made publishing O(files published).
            for entry in fs.list(folder):
                if entry.name.startswith(f".{name}.") and entry.name.endswith(".inprogress"):
                    _delete(fs, entry.path)
        return final


# -- helpers -------------------------------------------------------------------------------------
def _concat(tables: list[pa.Table], schema: pa.Schema | None) -> pa.Table:
    if not tables:
        return schema.empty_table() if schema is not None else pa.table({})
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def _staged_name(window: int) -> str:
    return f"w{window:020d}.arrow"


def _holds_parquet(fs: Any, path: str) -> bool:
    """Whether a staged piece is a window staged whole (Parquet's magic, not Arrow's)."""
    return fs.read(path, 0, 4) == b"PAR1"


def _whole_piece(fs: Any, path: str, window: int, size: int) -> Piece:
    """A window staged whole, its rows and compression read from the footer."""
    meta = _parquet_file(fs, path).metadata
    codec = str(meta.row_group(0).column(0).compression) if meta.num_row_groups else None
    return Piece(window, meta.num_rows, size, True, 0, whole=True, codec=codec)


def _parquet_file(fs: Any, path: str) -> pq.ParquetFile:
    if fs.backend == "local":
        return pq.ParquetFile(path)  # reads the footer only
    return pq.ParquetFile(pa.BufferReader(fs.read_all(path)))


def _ipc_bytes(table: pa.Table, meta: dict[bytes, bytes]) -> memoryview:
    sink = pa.BufferOutputStream()
    schema = table.schema.with_metadata(meta)
    with pa.ipc.new_file(sink, schema) as writer:
        if table.num_rows:
            writer.write_table(table.replace_schema_metadata(meta))
    return memoryview(sink.getvalue())  # no copy into bytes (see formats._parquet_bytes)


def _read_table(fs: Any, path: str, *, schema_only: bool = False) -> Any:
    if fs.backend == "local":
        try:
            source = pa.memory_map(path)
        except FileNotFoundError:
            raise StorageNotFoundError("no such file", backend="local", path=path) from None
        reader = pa.ipc.open_file(source)
    else:
        reader = pa.ipc.open_file(pa.py_buffer(fs.read_all(path)))
    if schema_only:
        return reader.schema
    return reader.read_all().replace_schema_metadata(None)


def _read_piece(fs: Any, path: str, whole: bool) -> pa.Table:
    if not whole:
        return _read_table(fs, path)
    return _parquet_file(fs, path).read().replace_schema_metadata(None)


def _read_json(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        return json.loads(fs.read_all(path))
    except StorageNotFoundError:
        return None


def _delete(fs: Any, path: str) -> None:
    try:
        fs.delete(path)
    except StorageNotFoundError:
        pass
