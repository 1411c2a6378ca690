"""One file-output partition's store: windows staged, files rolled, renamed into place once
committed (Malhar's ``AbstractFileOutputOperator``, on
:class:`~malhar.io.base.output.TransactionalStore`).

Layout of an output directory ``<path>``::

    <path>/[<column>=<value>/...]<prefix>-<app>-<op>-<partition>-<first>-<last>.<ext>   final files
    <path>/_malhar/<app>/<op>/<partition>/w<window>.arrow     a committed window (staged)
    <path>/_malhar/<app>/<op>/<partition>/finalized.json      the last window made visible
    <path>/_malhar/<app>/<op>/<partition>/publishing.json     the last group being published

**A window commits** by renaming its staged piece (the window's rows as an Arrow IPC file,
the roll decision and the group's opening time in its metadata) to ``w<window>.arrow``:
the rows and the window id in one atomic step, and a compare-and-swap (a rename that
finds the name taken fails), so a second writer of the partition cannot commit the window
twice. A replayed window finds its piece (or ``finalized.json`` past it) and is skipped.

**A window that is its own file** (Parquet, ``roll_windows=1``, no ``partition_by``, no
rejected rows; a file per window, like Spark's file sink) is staged as that file, already
encoded, under the same name: its rows are encoded once, and finalization is a rename. One
name per window, whatever it holds, keeps the compare-and-swap: two writers of a window (a
zombie with other settings included) cannot both commit it. What a piece holds and how it
is read back: :mod:`malhar.io.fs.staged_pieces`.

**A file rolls** when the group of windows since the last roll reaches ``roll_records``,
``roll_bytes`` (as staged), ``roll_windows`` or ``roll_ms``: that window's piece is marked,
and the group is closed.

**Finalization** runs on ``committed(w)``, when every window up to ``w`` is durable in the
whole application: each closed group whose last window is ``<= w`` is written as the final
file(s) (one per directory of ``partition_by``), first under a hidden in-progress name
(``.<name>.<uuid>.inprogress``) and then renamed into place; a file already there is left as
it is, so a finalization interrupted by a crash and run again after the restart neither
loses nor duplicates a row. ``publishing.json`` records the group's files and the settings
that name them before any is written: after a restart with other settings (format,
compression, ``partition_by``, ``file_prefix``), a group with a file of that attempt visible
is finished as it began (names from the new settings would publish its rows twice); one
with none visible is published under the new settings. Then ``finalized.json`` moves past
the group and its pieces are deleted. A window staged as its own file is recorded in
``finalized.json`` first (with its file's name) and then renamed into place; a load that
finds such a piece at or below ``finalized.json`` completes the rename (or, when the
recorded file is already in place, deletes the piece: the local rename links, then
unlinks). A piece staged whole under other settings and not visible yet is decoded and
published like any other group instead. How files are named and made visible:
:mod:`malhar.io.fs.publishing`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from malhar.errors import MalharError
from malhar.io.base.output import (
    NO_WINDOW,
    CommitMark,
    TransactionalStore,
    WindowKey,
    is_checkpoint_run,
)
from malhar.io.base.staged_batches import StagedBatches
from malhar.io.fs.encoders import create_encoded
from malhar.io.fs.errors import FileOutputConfigError
from malhar.io.fs.paths import resolve
from malhar.io.fs.publishing import Publisher, delete_quietly
from malhar.io.fs.settings import FileOutputSettings
from malhar.io.fs.staged_pieces import (
    Group,
    Piece,
    holds_parquet,
    ipc_bytes,
    load_piece,
    marked_rolling,
    piece_meta,
    read_piece,
    read_rejected,
    staged_name,
    staged_window,
)
from malhar.util.fs import StorageError, StorageExistsError, StorageNotFoundError
from malhar.util.fs.names import encode_segment

__all__ = ["FileStore", "Group"]

log = logging.getLogger("malhar.io.fs")

STAGING = "_malhar"
#: the record of the last group whose publication began (see FileStore._resuming)
PUBLISHING = "publishing.json"
#: the file-name stems an operator has written (see FileStore._claim_names)
STEMS = "stems.json"
#: (operator staging folder, stem) checked by this process
_CLAIMED: set[tuple[str, str]] = set()


class CommitConflictError(MalharError, ConnectionError):
    """Another writer committed the window first: transient, so the committer retries,
    re-reads the committed windows and skips it (an ``OutputError`` would not be retried)."""


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
        partitions: the operator's partition count, given to partition 0 of an operator
            (not the Spark sink, whose driver finalizes every partition's folder): it also
            finalizes the staged windows of partitions a repartitioning removed.
    """

    #: rejected rows are kept in the window's piece: a replay re-emits them
    records_rejected = True
    #: the Spark sink stages a partition's rows of a partly committed batch
    stages_batches = True

    def __init__(
        self,
        settings: FileOutputSettings,
        key: WindowKey,
        *,
        schema: pa.Schema | None = None,
        clock: Any = None,
        keep_rejected: bool = True,
        partitions: int | None = None,
    ) -> None:
        super().__init__(key)
        #: partitions at or above this count are a former partitioning's: adopted (above)
        self._adopt_from = partitions if key.partition == 0 else None
        self.records_rejected = keep_rejected
        self.settings = settings
        self.schema = schema if schema is not None else settings.arrow_schema
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.fs, self.root = resolve(settings.path)
        self.folder = "/".join(
            [
                self.root.rstrip("/"),
                STAGING,
                encode_segment(key.application),
                encode_segment(key.operator),
                str(key.partition),
            ]
        )
        self.publisher = Publisher(settings, key, self.fs, self.root)
        #: the Spark sink's rows of a partly committed batch, beside the pieces
        self.staging = StagedBatches(self.fs, self.folder)
        self.groups: list[Group] = []  #: closed groups not finalized yet, then the open one
        self.finalized = NO_WINDOW
        #: the file finalized.json names: the last window staged whole, as it was published
        self._finalized_file: str | None = None
        #: publishing.json: the files (and settings) of the last group whose publication began
        self._intent: dict[str, Any] | None = None
        self.force_roll = False  #: the next commit closes the group (a due roll, no data)
        self._mark = CommitMark()
        self._stale = True

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self) -> None:
        try:
            self.fs.mkdirs(self.folder)
        except StorageError:
            status = self.fs.status(self.root)
            if status is None or status.is_dir:
                raise
            raise FileOutputConfigError(
                f"{self.key}: the output path {self.fs.describe(self.root)} is a file: give a "
                "directory (it holds the output's files) or a path that does not exist yet"
            ) from None
        self._claim_names()
        self._load()

    def _claim_names(self) -> None:
        """Refuse to write names another (application, operator) of this folder writes:
        names join prefix, application and operator with ``-``, which they may hold
        (``x`` + ``a-b`` and ``x-a`` + ``b``), and a file found in place counts as published,
        so the second writer's rows would be dropped. Each operator lists the stems it
        has written under ``_malhar/<app>/<op>/stems.json``; checked once per process."""
        stem = self.publisher.stem()
        operator_dir = self._operator_dir
        claim = (self.fs.describe(operator_dir), stem)
        if claim in _CLAIMED:
            return
        staging = f"{self.root.rstrip('/')}/{STAGING}"
        for app in self.fs.list(staging):
            for op in self.fs.list(app.path) if app.is_dir else ():
                if not op.is_dir or op.path.rstrip("/") == operator_dir.rstrip("/"):
                    continue
                other = _read_json(self.fs, f"{op.path}/{STEMS}") or {}
                if stem in other.get("stems", ()):
                    raise FileOutputConfigError(
                        f"{self.key}: its files would be named like those of another writer "
                        f"of {self.describe()} (staged under {op.path}): both start with "
                        f"{stem!r}; give one of them another file_prefix or folder"
                    )
        mine = _read_json(self.fs, f"{operator_dir}/{STEMS}") or {}
        stems = list(mine.get("stems", ()))
        if stem not in stems:
            stems.append(stem)
            self.fs.write_atomic(f"{operator_dir}/{STEMS}", json.dumps({"stems": stems}).encode())
        _CLAIMED.add(claim)

    def describe(self) -> str:
        return self.fs.describe(self.root)

    @property
    def _operator_dir(self) -> str:
        """The folder of every partition of this writer's application and operator."""
        return self.folder.rsplit("/", 1)[0]

    def _load(self) -> None:
        """Rebuild the groups from the staged pieces (and drop leftovers of crashes)."""
        fs = self.fs
        self.publisher.sweep = True  # before publishing a recorded whole piece (below)
        raw = _read_json(fs, f"{self.folder}/finalized.json")
        self.finalized = int(raw["window"]) if raw else NO_WINDOW
        self._finalized_file = raw.get("file") if raw else None
        self._intent = _read_json(fs, f"{self.folder}/{PUBLISHING}")
        pieces: list[Piece] = []
        for entry in fs.list(self.folder):
            name = entry.name
            if name.startswith(".") and name.endswith(".tmp"):
                delete_quietly(fs, entry.path)  # an interrupted commit
                continue
            window = staged_window(name)
            if window is None:
                continue
            whole = holds_parquet(fs, entry.path)
            if window > self.finalized:
                pieces.append(load_piece(fs, entry.path, window, entry.size, whole))
            elif whole:
                # recorded as finalized, its rename interrupted
                self._publish_whole(load_piece(fs, entry.path, window, entry.size, whole))
            else:
                delete_quietly(fs, entry.path)  # finalized; its deletion was interrupted
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
            # the finalized window's fingerprint: a re-run of it (a Spark batch whose commit
            # log a dead driver never wrote) is still verified once it is published
            self._mark = CommitMark(
                self.finalized, raw.get("digest") if raw else None, raw.get("run") if raw else None
            )
        self._stale = False
        self.publisher.sweep = True

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
        group = self.open_group
        opened = group.pieces[0].opened_ms if group else now
        size_before = group.size if group else 0
        rows_before = group.rows if group else 0
        first = group.first if group else window
        mark = txn.mark or CommitMark(window)
        meta = piece_meta(table.num_rows, opened, mark, txn.rejected)
        s = self.settings
        roll = (
            self.force_roll
            or (s.roll_records is not None and rows_before + table.num_rows >= s.roll_records)
            or (s.roll_windows is not None and window - first + 1 >= s.roll_windows)
            or (s.roll_ms is not None and now - opened >= s.roll_ms)
        )
        tmp = f"{self.folder}/.w{window:020d}.{uuid.uuid4().hex}.tmp"
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
            data = ipc_bytes(table, meta)
            roll = s.roll_bytes is not None and size_before + len(data) >= s.roll_bytes
        if roll and not whole:
            data = ipc_bytes(table, marked_rolling(meta))
        if data is not None:
            self.fs.create(tmp, data, overwrite=False)
            size = len(data)
        piece = Piece(window, table.num_rows, size, roll, opened, mark.digest, mark.run)
        if whole:
            piece.whole, piece.codec = True, self.publisher.codec_tag()
        try:
            self.fs.rename(tmp, self._path(piece), overwrite=False)
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
            # a whole file records no run: fine for a checkpoint's (only compared when both
            # marks have one), not for the Spark sink's per-execution runs
            and (mark.run is None or is_checkpoint_run(mark.run))
        )

    def store_rejected(self, txn: _Txn, window: int, rows: list[dict[str, Any]]) -> None:
        txn.rejected = list(rows)

    def read_rejected(self, window: int) -> list[dict[str, Any]]:
        try:
            return read_rejected(self.fs, f"{self.folder}/{staged_name(window)}")
        except StorageNotFoundError:
            return []  # finalized: committed in the whole application, never replayed

    def abort(self, txn: _Txn, error: BaseException | None) -> None:
        if txn.tmp is not None:
            try:
                delete_quietly(self.fs, txn.tmp)
            except StorageError:
                pass
            txn.tmp = None

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, ConnectionError | TimeoutError)

    # -- the Spark sink's partly committed batches (TransactionalStreamWriter) --------------------
    def committed_partitions(self, window: int) -> dict[int, str | None]:
        """Partitions of this writer's application and operator whose committed window is
        ``window`` or later, with the run that committed each. Read only: the others may
        be committing meanwhile."""
        out: dict[int, str | None] = {}
        for entry in self.fs.list(self._operator_dir):
            if entry.is_dir and entry.name.isdigit():
                mark = _peek_committed(self.fs, entry.path, window)
                if mark is not None:
                    out[int(entry.name)] = mark.run
        return out

    def stage(self, window: int, run: str, rows: pa.Table) -> None:
        self.staging.stage(window, run, rows)

    def staged(self, window: int, run: str) -> pa.Table | None:
        return self.staging.staged(window, run)

    def drop_staged(self, txn: _Txn, window: int) -> None:
        self.staging.drop(window)

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
        if self._adopt_from is not None:
            self._adopt_removed(window)

    def _adopt_removed(self, window: int) -> None:
        """Partition 0: finalize what the partitions a repartitioning removed had staged,
        their open group too (no window of theirs comes any more), once ``window`` covers
        it, then remove their folders. Their files keep those partitions' names."""
        assert self._adopt_from is not None
        parent = self._operator_dir
        removed = [
            int(e.name)
            for e in self.fs.list(parent)
            if e.is_dir and e.name.isdigit() and int(e.name) >= self._adopt_from
        ]
        pending = False
        for partition in sorted(removed):
            key = WindowKey(self.key.application, self.key.operator, partition)
            other = FileStore(self.settings, key, schema=self.schema, clock=self.clock)
            other.open()
            if other.groups and other.groups[-1].last > window:
                pending = True  # not complete in the whole application yet
                continue
            if other.groups and not other.groups[-1].closed:
                other.groups[-1].pieces[-1].roll = True  # closed here; a crash closes it again
            other.committed(window)
            self.fs.delete(other.folder, recursive=True)
            log.info("malhar output %s: partition %d's staged windows finalized", key, partition)
        if not pending:
            self._adopt_from = None  # once per process: nothing is left to adopt

    def finalize(self, group: Group) -> list[str]:
        """Write a closed group's final file(s) and forget its pieces; return the files."""
        fs = self.fs
        publisher = self.publisher
        if len(group.pieces) == 1 and publisher.renamable(group.pieces[0]):
            # recorded first: a load finding the piece at or below finalized.json renames it
            piece = group.pieces[0]
            self._record_finalized(group.last, publisher.name(group), piece)
            written = [publisher.move_into_place(piece, self._path(piece))]
            log.info("malhar output %s: window %d finalized: %s", self.key, group.last, written[0])
            return written
        tables = []
        for piece in group.pieces:
            if piece.rows:
                tables.append(read_piece(fs, self._path(piece), piece.whole))
        written = []
        if tables:
            table = pa.concat_tables(tables, promote_options="permissive")
            publisher = self._resuming(group)
            written = publisher.publish_group(
                group, table, lambda files: self._record_intent(group, files, publisher)
            )
        self._record_finalized(group.last, None, group.pieces[-1])
        for piece in group.pieces:
            delete_quietly(fs, self._path(piece))
        log.info(
            "malhar output %s: windows %d-%d finalized: %s",
            self.key,
            group.first,
            group.last,
            ", ".join(written) or "no rows",
        )
        return written

    def _record_finalized(
        self, window: int, file: str | None = None, last: Piece | None = None
    ) -> None:
        record: dict[str, Any] = {"window": window}
        if file is not None:
            record["file"] = file
        if last is not None and last.digest is not None:
            record["digest"], record["run"] = last.digest, last.run
        self.fs.write_atomic(f"{self.folder}/finalized.json", json.dumps(record).encode())
        self.finalized = window
        self._finalized_file = file
        self.publisher.sweep = False

    def _visible(self, relative: str) -> bool:
        return self.fs.status(f"{self.root.rstrip('/')}/{relative}") is not None

    def _resuming(self, group: Group) -> Publisher:
        """The publisher of a group: with the settings its publication began with when a
        file of that attempt is visible (a crash interrupted it, and settings changed since:
        names from the new ones would publish its rows twice), else the current one."""
        intent = self._intent
        if intent is None or intent.get("window") != group.last:
            return self.publisher
        files = intent.get("files", ())
        if any(self._visible(f) for f in files):
            return self.publisher.resumed(intent.get("settings", {}))
        # the attempt's in-progress files, under names the current settings may not give
        self.publisher.sweep_leftovers(*files)
        return self.publisher

    def _record_intent(self, group: Group, files: list[str], publisher: Publisher) -> None:
        """Record a group's files and settings before any is written (see _resuming)."""
        intent = {"window": group.last, "files": files, "settings": publisher.recorded()}
        if intent != self._intent:
            self.fs.write_atomic(f"{self.folder}/{PUBLISHING}", json.dumps(intent).encode())
            self._intent = intent

    def _path(self, piece: Piece) -> str:
        return f"{self.folder}/{piece.name}"

    def _publish_whole(self, piece: Piece) -> None:
        """Publish a whole piece recorded in ``finalized.json`` (a crash interrupted its
        rename), then forget it: already in place under its recorded name (the rename placed
        it and died before removing the piece: the local rename links, then unlinks), renamed,
        or decoded and published under changed settings."""
        path = self._path(piece)
        recorded = self._finalized_file if piece.window == self.finalized else None
        if recorded is not None and self._visible(recorded):
            delete_quietly(self.fs, path)
            return
        group = Group([piece])
        # a publication under other settings that began (a file of it visible) is finished
        # as it began: a rename now would publish the rows twice
        publisher = self._resuming(group)
        if publisher is self.publisher and publisher.renamable(piece):
            publisher.move_into_place(piece, path)
            return
        publisher.publish_group(
            group,
            read_piece(self.fs, path, True),
            lambda files: self._record_intent(group, files, publisher),
        )
        delete_quietly(self.fs, path)


def _peek_committed(fs: Any, folder: str, window: int) -> CommitMark | None:
    """The commit mark of the partition staged in ``folder`` when its committed window is
    ``window`` or later (None: earlier), without loading (or repairing) the partition: its
    last piece past ``finalized.json``, else ``finalized.json``. A piece's footer is read
    only when it is the answer."""
    for _ in range(2):  # a piece finalized between the reads: read again
        raw = _read_json(fs, f"{folder}/finalized.json") or {}
        finalized = int(raw.get("window", NO_WINDOW))
        pieces = [
            (piece_window, entry)
            for entry in fs.list(folder)
            if (piece_window := staged_window(entry.name)) is not None and piece_window > finalized
        ]
        if not pieces:
            if finalized < window:
                return None
            return CommitMark(finalized, raw.get("digest"), raw.get("run"))
        last, entry = max(pieces, key=lambda found: found[0])
        if last < window:
            return None
        try:
            piece = load_piece(fs, entry.path, last, entry.size, holds_parquet(fs, entry.path))
        except StorageNotFoundError:
            continue
        return CommitMark(last, piece.digest, piece.run)
    return None


def _concat(tables: list[pa.Table], schema: pa.Schema | None) -> pa.Table:
    if not tables:
        return schema.empty_table() if schema is not None else pa.table({})
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def _read_json(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        return json.loads(fs.read_all(path))
    except StorageNotFoundError:
        return None
