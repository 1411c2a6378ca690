"""The file input operator (Malhar's ``AbstractFileInputOperator``, ``FileSplitterInput`` and
``BlockReader``), exactly once, on :class:`~malhar.io.base.ReplayableInput`: the files, the
splits, the window record and its replay. The formats are its subclasses in
:mod:`malhar.io.fs.file_inputs`; how a split is read is a mixin per kind of split
(:mod:`~malhar.io.fs.text_blocks`, :mod:`~malhar.io.fs.compressed_streams`,
:mod:`~malhar.io.fs.parquet_rows`), and what happens to a file once read is
:mod:`~malhar.io.fs.post_actions`.

**Files and splits.** Every partition lists the path (:class:`DirectoryScanner`, at most every
``scan_interval_ms``) and cuts each new file into *splits*: equal blocks of at most
``block_size`` bytes for uncompressed text, a multiple of the partition count of them (a
smaller file into one block per partition when each keeps at least 1 MiB), the whole stream for compressed text, row groups for a Parquet file larger
than ``block_size`` (or large enough to spread; else the whole file). A split belongs to
the partition :func:`~malhar.io.fs.splits.split_owner` gives it (the file's stable hash,
then round robin over its splits), so every process and every restart agrees on who reads
what without talking (:mod:`malhar.io.fs.splits`). A partition reads its splits oldest file first (modification
time, then path). A line belongs to the block where it starts: a block skips the end of
the line it starts in and reads past its end to finish its last line, so a line that
crosses a boundary is read once; a multi-byte character never straddles a cut, since cuts
are at newline bytes.

**Position and record.** The position (checkpointed ``State``) is the set of files seen and
the queue of this partition's splits with the next byte (or row) of each. A window records
``{"ranges": [...], "new": [...]}``: per split the byte (row) range read, how many items it
held and whether it finished the split, plus the files discovered in the window. A replay
reads exactly those ranges again and checks the counts; ``advance_past`` rebuilds the
position from the record. Files are identified by path: each is read once, also across
restarts.

**Repartitioning.** The operator is its own partitioner: a running input changes its
partition count with ``RunningApplication.repartition({name: n})``, which moves its files and
unfinished splits with their positions to the new partitions
(:mod:`malhar.io.fs.partitions`).

**Committed windows.** With ``post_action`` ``delete`` or ``move``, a file is deleted or
moved once every window that read it is committed; a file read by several partitions is
handled by the partition that owns its first split, once the others have left a marker
under the checkpoint (:mod:`malhar.io.fs.post_actions`).

**Bad input** goes to the ``error`` port (``file, offset, error, text``): a line that is not
valid text, a malformed CSV or JSON record, a Parquet file that does not fit the schema, a
file that vanished or cannot be read (or the operator fails, ``on_unreadable="fail"``).
Every error row counts as an item of its window and is emitted again by a replay.
"""

from __future__ import annotations

import bisect
import logging
import time
import zlib
from typing import Any, ClassVar

from malhar.io.base.dealing import DealtPositions
from malhar.io.base.input import ReplayableInput, WindowRecord
from malhar.io.fs.compressed_streams import CompressedStreams
from malhar.io.fs.decoders import (
    ERROR_DDL,
    LineDecoder,
    error_row,
)
from malhar.io.fs.end_of_input import EndOfInput
from malhar.io.fs.errors import (
    UNREADABLE,
    FileConfigError,
    FileReadError,
    FileReplayError,
    UnreadableSplit,
)
from malhar.io.fs.idle_input import IdleWhenNothingToRead
from malhar.io.fs.parquet_rows import ParquetRows
from malhar.io.fs.partitions import deal
from malhar.io.fs.post_actions import PostActions
from malhar.io.fs.scanner import DirectoryScanner
from malhar.io.fs.settings import FileInputSettings, parse_schema
from malhar.io.fs.splits import (
    CHANGED,
    CUT_RULE,
    END,
    INDEX,
    OWN,
    PATH,
    POS,
    RELEASED,
    SEEN_MTIME,
    SIZE,
    START,
    UNREAD,
    block_size_for,
    complete_seen,
    split_owner,
)
from malhar.io.fs.text_blocks import TextBlocks
from malhar.operator import OperatorContext
from malhar.ports import OutputPort
from malhar.state import State
from malhar.util.fs import (
    FileSystem,
    StorageError,
    StoragePermissionError,
    StorageUnavailableError,
)

__all__ = ["FileInputOperator"]

log = logging.getLogger("malhar.io.fs")

#: a window record: {"ranges": [entry, ...], "new": [[path, size, mtime], ...]}; an entry is
#: a range {"f": path, "i": split, "s": start, "e": end, "n": items, "last": bool} or an
#: error event {"f", "i", "o": offset, "err": reason, "text": str | None, "last": bool}; plus
#: "quiet": n and "idle": true when the window had nothing to read (idle_input)
Record = dict[str, Any]


def _typed(cls: type, ddl: str) -> type:
    """``cls`` with its ``output`` port typed by ``ddl`` (one subclass per schema)."""
    key = (cls, ddl)
    found = _TYPED.get(key)
    if found is None:
        found = type(
            cls.__name__,
            (cls,),
            {
                "output": OutputPort(ddl, control_aware=True),
                "__module__": cls.__module__,
                "__qualname__": f"{cls.__qualname__}<{ddl}>",
                "__doc__": cls.__doc__,
                "_untyped": cls,
            },
        )
        _TYPED[key] = found
    return found


_TYPED: dict[tuple[type, str], type] = {}


class FileInputOperator(
    TextBlocks,
    CompressedStreams,
    ParquetRows,
    PostActions,
    IdleWhenNothingToRead,
    EndOfInput,
    DealtPositions,
    ReplayableInput[Record],
    FileInputSettings,
):
    """Reads the files of a path exactly once (see the module doc); a format subclass
    decides how bytes become tuples. Use :class:`~malhar.io.fs.LinesFileInput`,
    :class:`~malhar.io.fs.CsvFileInput`, :class:`~malhar.io.fs.JsonLinesFileInput` or
    :class:`~malhar.io.fs.ParquetFileInput`."""

    #: control aware: an idle partition says so (WatermarkIdle, :mod:`~malhar.io.fs.idle_input`)
    output = OutputPort(control_aware=True)
    error = OutputPort(ERROR_DDL, error=True)

    #: "text" (lines of bytes) or "parquet" (rows of row groups)
    kind: ClassVar[str] = "text"
    #: whether a schema makes the output port typed
    typed_by_schema: ClassVar[bool] = True

    #: path -> [size, mtime, splits owned here, finished and released]: files seen
    _seen = State(dict)
    #: this partition's unfinished splits, oldest first: [mtime, path, index, start, end, pos]
    _queue = State(list)
    #: files whose post action is due once the other partitions' markers are there
    _awaiting = State(dict)
    #: the newest modification time seen (max_file_age_ms)
    _newest = State(default=0.0)
    #: the partition count the checkpoint was written with
    _partitions = State(default=None)
    #: how this application cuts files: ``[splits.CUT_RULE, block_size]`` at its first open
    _cut = State(default=None)

    def __init__(self, path: str | None = None, **properties: Any) -> None:
        if path is not None:
            self.path = path
        self.configure(**properties)

    def configure(self, **values: Any) -> Any:
        """Set properties by name; a ``schema`` types the ``output`` port (CSV, JSON lines,
        Parquet): the instance becomes one of a subclass whose port has that schema."""
        super().configure(**values)
        if self.typed_by_schema:
            base = type(self).__dict__.get("_untyped", type(self))
            target = _typed(base, self.schema) if self.schema else base
            if type(self) is not target:
                self.__class__ = target
        return self

    # -- the format's part --------------------------------------------------------------------
    def make_decoder(self) -> LineDecoder | None:
        """The decoder of text formats (None for Parquet)."""
        raise NotImplementedError

    def has_header(self) -> bool:
        """Whether the first line of every file is a header, not a record."""
        return False

    def first_record(self, path: str, size: int | None) -> int:
        """Byte offset of the first record of a file (after its header line)."""
        if not self.has_header() or size == 0:
            return 0
        return len(self._first_line(path, size))

    def _first_line(self, path: str, size: int | None) -> bytes:
        """The first line of a file (decompressed), with its newline."""
        data = b""
        step = 64 << 10
        if self._codec(path) is not None:
            stream = self._open_stream(path)
            try:
                while b"\n" not in data:
                    chunk = stream.read(step)
                    if not chunk:
                        break
                    data += chunk
            finally:
                stream.close()
        else:
            if size is None:
                status = self._fs.status(path)
                size = 0 if status is None else status.size
            while len(data) < size and b"\n" not in data:
                data += self._read_bytes(path, len(data), min(step, size - len(data)))
                step *= 2
        nl = data.find(b"\n")
        return data if nl < 0 else data[: nl + 1]

    def names_for(self, path: str) -> list[str] | None:
        """Column names of a file's records when the format takes them from the file."""
        return None

    # -- ReplayableInput ----------------------------------------------------------------------
    def preflight(self, label: str, timeout: float) -> str:
        """The files the path holds now (see :mod:`malhar.io.fs.preflight`)."""
        from malhar.io.fs.preflight import check_input

        self.check_settings()
        return check_input(self, label, timeout)

    def open(self, context: OperatorContext) -> None:
        self.check_settings()
        if self._partitions is not None and self._seen and self._partitions != context.partitions:
            raise FileConfigError(
                f"{self.label}: the checkpoint was written with {self._partitions} partitions, "
                f"now {context.partitions}: which partition reads which block depends on the "
                "partition count, and its read positions were not moved to the new count; "
                "change it on the running application (RunningApplication.repartition({name: "
                "n})) or with PARTITIONS at a launch after a clean stop, which move them"
            )
        for seen in self._seen.values():
            complete_seen(seen, context.partitions)
        rule, block = self._cut_with()
        if block != self.block_size:
            raise FileConfigError(
                f"{self.label}: the checkpoint cut files into blocks of at most {block} bytes, "
                f"block_size is now {self.block_size}: every partition must cut a file alike, "
                f"across restarts too; set block_size={block} again, or start the application "
                "with a new checkpoint"
            )
        self._cut = [rule, block]
        self._partitions = context.partitions
        self._me = context.partition
        self._cutter(context.partitions)
        self._decoder = self.make_decoder()
        self._arrow = parse_schema(self.schema) if self.schema else None
        self._last_scan = float("-inf")
        self._not_mine: dict[str, tuple[int, float]] = {}
        self._headers: dict[str, list[str]] = {}
        self._streams = {}
        self._rg_cache = None
        self._prepare_post_actions(context)
        self._counts = {"files": 0, "bytes": 0, "errors": 0}
        self._ranges: list[dict[str, Any]] = []
        self._new: list[list[Any]] = []

    def close(self) -> None:
        self._close_streams()
        self._parquet = {}

    def begin_new_window(self, window_id: int) -> None:
        self._ranges = []
        self._new = []
        self._counts = {"files": 0, "bytes": 0, "errors": 0}
        self._new_window_unsealed()

    def read(self, limit: int) -> int:
        n = self._maybe_scan()  # error rows about changed files
        queue = self._queue
        while queue and n < limit:
            got, emitted = self._read_split(queue[0], limit - n)
            n += got
            if queue and queue[0][POS] == -2:  # finished
                queue.pop(0)
            if emitted:
                break  # the engine calls again: one chunk per call
        return n

    def window_record(self) -> Record:
        for entry in self._ranges:
            edges = entry.pop(_EDGES, None)
            if edges is not None:
                entry["c"] = _edges_crc(*edges)
        record: Record = {"ranges": self._ranges, "new": self._new}
        self._note_end(record)  # whether the window ends the input, for its replay
        self._note_quiet(record)  # whether the window sends WatermarkIdle, for its replay
        return record

    def end_window(self) -> None:
        super().end_window()  # the record saved (a new window) or advanced past (a replay)
        self._say_if_ended()
        self._say_if_idle()

    def replay(self, record: Record) -> int:
        total = 0
        for entry in record["ranges"]:
            path, index = entry["f"], int(entry["i"])
            if "err" in entry:
                self.error.emit(
                    error_row(self._url(path), entry["o"], entry["err"], entry.get("text"))
                )
                total += 1
                continue
            start, end, count = int(entry["s"]), int(entry["e"]), int(entry["n"])
            if end == start and count == 0:
                continue
            try:
                items = self._emit_range(path, index, start, end, replay=True, crc=entry.get("c"))
            except (UnreadableSplit, *UNREADABLE) as exc:
                raise FileReplayError(
                    f"{self.label}: window {self.window_id} read {self._url(path)} "
                    f"[{start}, {end}) but it cannot be read again: {exc}"
                ) from None
            if items != count:
                raise FileReplayError(
                    f"{self.label}: window {self.window_id} read {count} items in [{start}, {end}) "
                    f"of {self._url(path)}, the file now has {items} there (rewritten?): "
                    "cannot replay exactly"
                )
            total += items
        return total

    def advance_past(self, record: Record) -> None:
        self._replayed_end(record)
        self._replayed_quiet(record)
        for path, size, mtime in record.get("new", []):
            if path not in self._seen:
                self._discover(path, int(size), float(mtime))
        for entry in record["ranges"]:
            if "chg" in entry:
                self._replayed_change(entry["f"], *entry["chg"])
                continue
            split = self._find(entry["f"], int(entry["i"]))
            if split is None:
                continue  # finished already (replayed twice)
            if entry.get("last"):
                split[POS] = -2
                self._queue.remove(split)
            elif "e" in entry:
                split[POS] = int(entry["e"])

    def _replayed_change(self, path: str, size: int, mtime: float) -> None:
        """A replayed window reported ``path`` changed (listed at ``size`` and ``mtime``):
        the state its scan left, so that the next scan does not report it again."""
        seen = self._seen.get(path)
        if seen is not None:
            # a file cut anew at that listing (another partition's until then) has not changed
            if (seen[SIZE], seen[SEEN_MTIME]) != (int(size), float(mtime)):
                seen[CHANGED] = True
        else:
            self._not_mine[path] = (int(size), float(mtime))

    def release(self, records: list[WindowRecord[Record]]) -> None:
        for _, record in records:
            for entry in record["ranges"]:
                if entry.get("last"):
                    seen = self._seen.get(entry["f"])
                    if seen is not None:
                        if "err" in entry:
                            # the split ended unread: its bytes are nowhere but in the file,
                            # so the post action must leave the file alone
                            seen[UNREAD] = True
                        seen[RELEASED] += 1
                        if seen[RELEASED] >= seen[OWN]:
                            self._file_done(entry["f"])
        if self._awaiting:
            self._post_actions()

    # -- metrics ------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """``files``, ``bytes`` and ``errors`` of the window; ``ended``: 1 once the
        partition has read everything before its ``end_marker``."""
        return {**getattr(self, "_counts", {}), "ended": float(getattr(self, "_ended_now", False))}

    def backlog(self) -> int | None:
        return len(self._queue)

    # -- dynamic partitioning: its own Partitioner (DealtPositions) -------------------------------
    def deal(self, inputs: list[Any], count: int) -> list[Any]:
        """Every file known and unfinished split, with its position, dealt to ``count``
        partitions (:mod:`malhar.io.fs.partitions`)."""
        out = deal(inputs, count)
        # carry over what keeps a file from its post action (a split ended unread, the file
        # changed): without it the new coordinator would delete or move such a file
        kept: dict[str, list[bool]] = {}
        for op in inputs:
            for path, seen in op._seen.items():
                if len(seen) > CHANGED and (seen[UNREAD] or seen[CHANGED]):
                    flags = kept.setdefault(path, [False, False])
                    flags[0] |= bool(seen[UNREAD])
                    flags[1] |= bool(seen[CHANGED])
        for op in out:
            for path, (unread, changed) in kept.items():
                seen = op._seen.get(path)
                if seen is not None:
                    complete_seen(seen, count)
                    seen[UNREAD], seen[CHANGED] = unread, changed
        return out

    def _cutter(self, partitions: int) -> FileInputOperator:
        """Runtime enough to cut files (:meth:`_splits_of`) outside a running partition."""
        self._scanner = DirectoryScanner(self.path, recursive=self.recursive, pattern=self.pattern)
        self._fs: FileSystem = self._scanner.fs
        self._sniffed = {}
        self._parquet = {}
        self._n = partitions
        return self

    # -- scanning -----------------------------------------------------------------------------
    def _maybe_scan(self) -> int:
        """List the path (at most every ``scan_interval_ms``) and queue this partition's
        splits of new files; return the error rows emitted."""
        now = time.monotonic()
        if self._sealed or now - self._last_scan < self.scan_interval_ms / 1000:
            return 0  # sealed: the last listing is made (end_marker)
        self._last_scan = now
        try:
            marker = self._last_listing()
            found = self._before_marker(self._scanner.scan(), marker)
        except StorageError as exc:
            if not isinstance(exc, StorageUnavailableError | StoragePermissionError):
                raise
            log.warning(
                "%s: cannot list %s%s now (%s); trying again later",
                self.label,
                self.shown_path,
                "" if self.end_marker is None else " or look for its end_marker",
                exc,
            )
            return 0
        listed = set()
        horizon = before = None
        reported = 0
        if self.max_file_age_ms and found:
            before = self._newest - self.max_file_age_ms / 1000
            self._newest = max(self._newest, max(f.mtime for f in found))
            horizon = self._newest - self.max_file_age_ms / 1000
        risky: list[str] = []
        for f in found:
            listed.add(f.path)
            seen = self._seen.get(f.path)
            if seen is not None:
                if not seen[CHANGED] and (f.size, f.mtime) != (seen[SIZE], seen[SEEN_MTIME]):
                    seen[CHANGED] = True  # reported once
                    reported += self._report_changed(f, seen[SIZE], seen[SEEN_MTIME])
                continue
            if horizon is not None and f.mtime < horizon:
                # each partition decides at its own scan: one that listed the file before a
                # newer file appeared may have read its blocks while this one skips its own.
                # No partition can know, so a file too old only since this listing, that
                # other partitions read blocks of, is named (see max_file_age_ms)
                if f.mtime >= before and self._shared(f):
                    risky.append(f.path)
                continue
            known = self._not_mine.get(f.path)
            if known == (f.size, f.mtime):
                continue
            if known is not None:
                reported += self._report_changed(f, *known)
            if self._discover(f.path, f.size, f.mtime):
                self._new.append([f.path, f.size, f.mtime])
            else:
                self._not_mine[f.path] = (f.size, f.mtime)
        if risky:
            log.warning(
                "%s: %d file(s) older than max_file_age_ms skipped, whose other blocks other "
                "partitions may have read (they listed the path before a newer file came): %s",
                self.label,
                len(risky),
                ", ".join(self._url(p) for p in risky[:10]) + (", ..." if len(risky) > 10 else ""),
            )
        # forget finished files that are gone (moved, deleted) or too old
        for path, seen in list(self._seen.items()):
            finished = seen[RELEASED] >= seen[OWN] and path not in self._awaiting
            old = horizon is not None and seen[SEEN_MTIME] < horizon
            if finished and (path not in listed or old):
                del self._seen[path]
                self._headers.pop(path, None)
        self._sealed_by(marker)
        return reported

    def _report_changed(self, f: Any, size: int, mtime: float) -> int:
        """An error row for a file listed with another size or mtime than it was cut with:
        partitions that listed it at different sizes cut it differently, so lines may be
        lost or read twice (files must be complete when they appear). 1, the items emitted."""
        reason = (
            f"the file changed after it was listed: {size} bytes (mtime {mtime}) then, "
            f"{f.size} bytes (mtime {f.mtime}) now; partitions that list a file at different "
            "sizes cut it differently, so lines may be lost or read twice, and what changes "
            "after a cut is not read (write files under a hidden name and rename them into "
            "place)"
        )
        log.warning("%s: %s: %s", self.label, self._url(f.path), reason)
        # "chg": the listing that differed, for a replay to know the change is reported
        entry = {"f": f.path, "i": 0, "o": size, "err": reason, "text": None, "last": False}
        self._record({**entry, "chg": [f.size, f.mtime]})
        self.error.emit(error_row(self._url(f.path), size, reason, None))
        self._counts["errors"] += 1
        return 1

    def _shared(self, f: Any) -> bool:
        """Whether this partition and another one own splits of a file listed now."""
        try:
            owners = {
                split_owner(f.path, s[0], self._n) for s in self._splits_of(f.path, f.size, self._n)
            }
        except (UnreadableSplit, *UNREADABLE):
            return False  # gone or unreadable: nobody reads a part of it
        return len(owners) > 1 and self._me in owners

    def _splits_of(self, path: str, size: int, cut: int) -> list[tuple[int, int, int]]:
        """``(index, start, end)`` of a file's splits (end -1: to the end of the stream),
        cut for ``cut`` partitions."""
        if self.kind == "parquet":
            return self._parquet_splits(path, size, cut)
        if self._codec(path) is not None:
            return [(0, 0, -1)]
        rule, block = self._cut_with()
        bs = block_size_for(size, block, cut, rule)
        blocks = max(1, -(-size // bs))
        return [(i, i * bs, min((i + 1) * bs, size)) for i in range(blocks)]

    def _cut_with(self) -> tuple[int, int]:
        """``(rule, block_size)`` files are cut with: those the checkpoint recorded, else
        the current ones; a checkpoint from before they were recorded cut with rule 1."""
        if self._cut is not None:
            return self._cut[0], self._cut[1]
        return (1 if self._partitions is not None else CUT_RULE), self.block_size

    def _discover(self, path: str, size: int, mtime: float) -> bool:
        """Queue this partition's splits of a new file; False when it owns none."""
        splits = self._splits_of(path, size, self._n)
        mine = [s for s in splits if split_owner(path, s[0], self._n) == self._me]
        if not mine:
            return False
        self._seen[path] = [size, mtime, len(mine), 0, self._n, len(splits), None, False, False]
        for index, start, end in mine:
            bisect.insort(self._queue, [mtime, path, index, start, end, -1])
        return True

    def _find(self, path: str, index: int) -> list[Any] | None:
        for split in self._queue:
            if split[PATH] == path and split[INDEX] == index:
                return split
        return None

    # -- reading ------------------------------------------------------------------------------
    def _url(self, path: str) -> str:
        return self._fs.describe(path)

    def _record(self, entry: dict[str, Any], data: bytes | None = None) -> None:
        """Add a range (or an error) to the window's record, merged with the range it
        continues. ``data``: the range's bytes, whose edges fingerprint it (see _EDGES)."""
        last = self._ranges[-1] if self._ranges else None
        if (
            last is not None
            and "err" not in entry
            and "err" not in last
            and last["f"] == entry["f"]
            and last["i"] == entry["i"]
            and last["e"] == entry["s"]
            and not last["last"]
        ):
            last["e"], last["n"], last["last"] = entry["e"], last["n"] + entry["n"], entry["last"]
            if data and _EDGES in last:
                head, tail = last[_EDGES]
                if len(head) < _EDGE:
                    head = (head + data[:_EDGE])[:_EDGE]
                last[_EDGES] = (head, (tail + data[-_EDGE:])[-_EDGE:])
        else:
            if data:
                entry[_EDGES] = (data[:_EDGE], data[-_EDGE:])
            self._ranges.append(entry)

    def _finish(self, split: list[Any]) -> None:
        split[POS] = -2
        self._counts["files"] += 1

    def _read_split(self, split: list[Any], budget: int) -> tuple[int, bool]:
        """Read from the queue's first split; (items read, whether anything was emitted)."""
        path, index = split[PATH], split[INDEX]
        size = self._seen[path][SIZE]
        try:
            if self.kind == "parquet":
                return self._read_parquet(split, size, budget)
            if split[END] < 0:
                return self._read_stream(split, budget)
            return self._read_block(split, size, budget)
        except (UnreadableSplit, *UNREADABLE) as exc:
            if self.on_unreadable == "fail":
                raise FileReadError(f"{self.label}: cannot read {self._url(path)}: {exc}") from None
            pos = max(split[POS], split[START])
            reason = f"cannot read the file: {exc}"
            log.warning("%s: %s: %s; skipped", self.label, self._url(path), reason)
            self._record(
                {"f": path, "i": index, "o": pos, "err": reason, "text": None, "last": True}
            )
            self.error.emit(error_row(self._url(path), pos, reason, None))
            self._counts["errors"] += 1
            self._finish(split)
            return 1, True

    def _emit_bytes(self, path: str, index: int, start: int, data: bytes) -> int:
        decoder = self._decoder
        url = self._url(path)
        names = self.names_for(path)
        if names is not None:
            decoded = decoder.decode(data, start, url, names)  # type: ignore[call-arg]
        else:
            decoded = decoder.decode(data, start, url)
        for err in decoded.errors:
            self.error.emit(err)
        self._counts["errors"] += len(decoded.errors)
        if decoded.batch is not None:
            if decoded.batch.num_rows:
                self.output.emit_batch(decoded.batch)
        else:
            emit = self.output.emit
            for row in decoded.rows:
                emit(row)
        return decoded.items

    # -- replay -------------------------------------------------------------------------------
    def _emit_range(
        self, path: str, index: int, start: int, end: int, *, replay: bool, crc: int | None = None
    ) -> int:
        if self.kind == "parquet":
            return self._emit_rows(path, index, start, end)
        if self._codec(path) is not None:
            data = self._stream_range(path, start, end)
        else:
            data = self._fs.read(path, start, end - start)
            if len(data) != end - start:
                raise UnreadableSplit(f"it ends before byte {end}")
            if crc is not None and _edges_crc(data[:_EDGE], data[-_EDGE:]) != crc:
                raise UnreadableSplit(
                    "its bytes there are not those read then (rewritten since, with as many bytes)"
                )
        return self._emit_bytes(path, index, start, data)


#: bytes at each end of a text range that fingerprint it in the window's record ("c"): a
#: file rewritten under its name is found on replay at no cost to the read (a checksum of
#: every byte would be a pass over the data); the edges are kept while the window reads
_EDGE = 4096
_EDGES = "_edges"


def _edges_crc(head: bytes, tail: bytes) -> int:
    return zlib.crc32(tail, zlib.crc32(head))


#: the format subclasses, which moved to :mod:`malhar.io.fs.file_inputs`
_FORMATS = frozenset({"CsvFileInput", "JsonLinesFileInput", "LinesFileInput", "ParquetFileInput"})


def __getattr__(name: str) -> Any:
    # lazily, since file_inputs imports this module: code and pickles that name them here
    # (checkpointed plans included) keep working
    if name in _FORMATS:
        from malhar.io.fs import file_inputs

        return getattr(file_inputs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
