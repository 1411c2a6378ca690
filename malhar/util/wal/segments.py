"""A segmented write-ahead log in one directory (one log per operator partition).

Files in a log directory::

    wal-00000007-120-135.log      finalized segment 7, windows 120..135 (immutable)
    wal-00000008.tmp              the active (temporary) segment, appended to
    wal-00000008.tmp.damaged-4096 bytes cut from a corrupt tail (evidence, never read)

Life of a segment: created as ``wal-<seq>.tmp``; records are appended, one per
window; once it reaches ``segment_bytes`` it is synced and *finalized* by an atomic
rename to ``wal-<seq>-<first>-<last>.log`` (the window range in the name lets
readers and ``purge`` work without opening it). A segment may exceed
``segment_bytes`` by one record (a window is never split).

Recovery (:meth:`LogWriter.recover`) scans only the active segment. A *torn tail*
(damaged or incomplete bytes at the end that no valid record follows) is reported
and cut off, the cut bytes kept in a ``.damaged-<offset>`` file; appending
continues after the last whole window. *Corruption* (damaged bytes followed by a
valid record) is reported with its path and offset, kept, and never cut off;
reading a window that may have been in it raises :class:`CorruptRecordError`, and
the writer's largest window stays the largest valid one, so a window id that was
used is never accepted again.

With a :class:`~malhar.util.integrity.Signer`, every payload is stored as
``HMAC tag + payload`` (the tag also covers the log's identity and the window id)
and verified on every read; a segment without authentication is then refused.

One writer per log; any number of readers (in any process). Readers see finalized
segments (immutable) and the complete records of the active segment; an incomplete
record at the end of someone else's active segment is an append in flight, not an
error.
"""

from __future__ import annotations

import bisect
import logging
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from malhar.util.fs.base import Appender, FileSystem
from malhar.util.fs.errors import (
    ConcurrentWriterError,
    CorruptRecordError,
    StorageConfigError,
    StorageError,
    StorageNotFoundError,
)
from malhar.util.integrity import IntegrityError, Signer
from malhar.util.wal import framing

log = logging.getLogger("malhar.util.wal")

FINAL_RE = re.compile(r"^wal-(\d{8,})-(\d+)-(\d+)\.log$")
TMP_RE = re.compile(r"^wal-(\d{8,})\.tmp$")


_WINDOW = struct.Struct("<q")  # the window id, as authenticated with a record


def _corruption_issue(path: str, problem: framing.Problem) -> WalIssue:
    upto = "" if problem.before_window is None else f"<{problem.before_window}"
    return WalIssue(
        path,
        problem.offset,
        problem.kind,
        f"{problem.detail}; windows {problem.after_window}<w{upto} may have been lost",
        "kept; reading such a window raises CorruptRecordError; never cut off",
    )


def final_name(seq: int, first: int, last: int) -> str:
    return f"wal-{seq:08d}-{first}-{last}.log"


def tmp_name(seq: int) -> str:
    return f"wal-{seq:08d}.tmp"


@dataclass
class Segment:
    seq: int
    name: str
    path: str
    final: bool
    first: int | None = None
    last: int | None = None


@dataclass(frozen=True)
class WalIssue:
    """A problem found in a log: where, what, and what was done about it."""

    path: str
    offset: int | None
    kind: str  # torn | checksum | length | order | header | stray
    detail: str
    action: str

    def __str__(self) -> str:
        at = f" at offset {self.offset}" if self.offset is not None else ""
        return f"{self.path}{at}: {self.kind}: {self.detail} ({self.action})"


@dataclass
class _Index:
    """What a scan of one segment found."""

    segment: Segment
    entries: dict[int, tuple[int, int]] = field(default_factory=dict)
    windows: list[int] = field(default_factory=list)
    corrupt: list[framing.Problem] = field(default_factory=list)
    tail: framing.Problem | None = None
    data: bytearray | bytes | None = None  # kept for reader caches
    end: int = 0  # offset after the last usable record
    header_size: int = 0

    def add(self, result: framing.ScanResult) -> None:
        if result.records:  # an earlier scan's open-ended corruption ends here
            for problem in self.corrupt:
                if problem.before_window is None:
                    problem.before_window = result.records[0][0]
        for window, off, length in result.records:
            self.entries[window] = (off, length)
            self.windows.append(window)
        self.corrupt.extend(result.corrupt)
        self.tail = result.tail
        self.end = result.end

    @property
    def largest(self) -> int:
        return self.windows[-1] if self.windows else -1


class LogReader:
    """Reads one partition log (possibly while its writer appends)."""

    #: finalized segments kept scanned in memory (bytes + index)
    CACHE_SEGMENTS = 2

    def __init__(
        self,
        fs: FileSystem,
        log_dir: str,
        serializer: str,
        *,
        signer: Signer | None = None,
        context: bytes = b"",
    ) -> None:
        self.fs = fs
        self.log_dir = log_dir
        self.serializer = serializer
        #: authenticates payloads (None: off); ``context`` names this log in every tag
        self.signer = signer
        self.context = context
        self.segments: list[Segment] = []  # finalized, by seq
        self.tmp: Segment | None = None
        self.issues: list[WalIssue] = []
        self._seen_issues: set[tuple] = set()
        self._cache: OrderedDict[str, _Index] = OrderedDict()
        self._tmp_index: _Index | None = None
        self._listed = False

    # -- helpers --------------------------------------------------------------------------
    def describe(self, path: str | None = None) -> str:
        return self.fs.describe(path or self.log_dir)

    def _report(self, issue: WalIssue) -> None:
        key = (issue.path, issue.offset, issue.kind)
        if key not in self._seen_issues:
            self._seen_issues.add(key)
            self.issues.append(issue)
            log.warning("write-ahead log issue: %s", issue)

    def _check_header(self, seg: Segment, data: bytes | bytearray) -> int:
        header = framing.decode_header(data)
        if header.serializer != self.serializer:
            raise StorageConfigError(
                f"log segment was written with serializer {header.serializer!r}, "
                f"but this manager uses {self.serializer!r}",
                backend=self.fs.backend,
                path=self.describe(seg.path),
            )
        if self.signer is not None and header.auth is None:
            raise IntegrityError(
                "log segment is not authenticated, but an integrity key is configured: "
                "it was written without the key, or replaced by someone who does not have it "
                "(a log written before the key was set is readable only without the key)",
                offset=0,
                backend=self.fs.backend,
                path=self.describe(seg.path),
                operation="read",
            )
        if self.signer is None and header.auth is not None:
            raise StorageConfigError(
                f"log segment is authenticated ({header.auth}): configure the integrity_key "
                "it was written with",
                backend=self.fs.backend,
                path=self.describe(seg.path),
            )
        return header.size

    def _scan_segment(
        self, idx: _Index, data: bytes | bytearray, last_window: int
    ) -> framing.HeaderError | None:
        """Scan a whole segment into ``idx``. A damaged header followed by valid records
        is corruption at offset 0 (the records stay readable); returns the header error
        when nothing valid follows it (the segment holds no readable window)."""
        try:
            idx.header_size = self._check_header(idx.segment, data)
        except framing.HeaderError as exc:
            resume = framing.next_valid(data, 1) if exc.kind == "corrupt" else None
            if resume is None:
                return exc
            result = framing.scan(data, resume, last_window=last_window)
            first = next((w for w, _, _ in result.records), None)
            idx.corrupt.append(
                framing.Problem(
                    0,
                    "header",
                    f"{exc.detail}; next valid record at offset {resume}",
                    last_window,
                    first,
                    resume,
                )
            )
            idx.header_size = resume
            idx.add(result)
            return None
        idx.add(framing.scan(data, idx.header_size, last_window=last_window))
        return None

    def _payload(self, idx: _Index, window: int, raw: bytes, offset: int) -> bytes:
        """The artifact bytes of a record read from ``idx`` (verified if signed)."""
        if self.signer is None:
            return raw
        return self.signer.verify(
            raw,
            self.context + _WINDOW.pack(window),
            path=self.describe(idx.segment.path),
            offset=offset - framing.RECORD_HEADER_SIZE,
            backend=self.fs.backend,
        )

    @property
    def lasts(self) -> list[int]:
        return [s.last for s in self.segments]  # type: ignore[misc]

    # -- listing --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-list the directory (segments appear, get finalized or purged)."""
        try:
            entries = self.fs.list(self.log_dir)
        except StorageNotFoundError:
            entries = []
        finals: list[Segment] = []
        tmps: list[Segment] = []
        for st in entries:
            if st.is_dir:
                continue
            m = FINAL_RE.match(st.name)
            if m:
                finals.append(Segment(int(m[1]), st.name, st.path, True, int(m[2]), int(m[3])))
                continue
            m = TMP_RE.match(st.name)
            if m:
                tmps.append(Segment(int(m[1]), st.name, st.path, False))
        finals.sort(key=lambda s: s.seq)
        self.segments = finals
        top = finals[-1].seq if finals else -1
        active = None
        for t in sorted(tmps, key=lambda s: s.seq):
            if t.seq > top:
                active = t
        for t in tmps:
            if t is not active:
                self._report(
                    WalIssue(
                        self.describe(t.path),
                        None,
                        "stray",
                        "temporary segment older than the newest segment",
                        "kept, ignored",
                    )
                )
        if active is None or self.tmp is None or active.name != self.tmp.name:
            self._tmp_index = None
        self.tmp = active
        live = {s.name for s in finals}
        for name in [n for n in self._cache if n not in live]:
            del self._cache[name]
        self._listed = True

    def _ensure_listed(self) -> None:
        if not self._listed:
            self.refresh()

    # -- scanning -------------------------------------------------------------------------
    def _final_index(self, seg: Segment) -> _Index:
        idx = self._cache.get(seg.name)
        if idx is not None:
            self._cache.move_to_end(seg.name)
            return idx
        data = self.fs.read_all(seg.path)
        idx = _Index(seg, data=data)
        failed = self._scan_segment(idx, data, (seg.first or 0) - 1)
        if failed is not None:
            idx.tail = framing.Problem(0, "header", failed.detail, (seg.first or 0) - 1)
            self._report(
                WalIssue(self.describe(seg.path), 0, "header", failed.detail, "segment unreadable")
            )
        else:
            self._report_scan(idx, final=True)
        self._cache[seg.name] = idx
        while len(self._cache) > self.CACHE_SEGMENTS:
            self._cache.popitem(last=False)
        return idx

    def _report_scan(self, idx: _Index, *, final: bool) -> None:
        path = self.describe(idx.segment.path)
        for problem in idx.corrupt:
            self._report(_corruption_issue(path, problem))
        if idx.tail is not None and final:
            self._report(
                WalIssue(path, idx.tail.offset, idx.tail.kind, idx.tail.detail, "segment cut short")
            )

    def _refresh_tmp(self) -> _Index | None:
        """Read what was appended to the active segment since the last look."""
        seg = self.tmp
        if seg is None:
            return None
        idx = self._tmp_index
        if idx is None:
            idx = self._tmp_index = _Index(seg, data=bytearray())
        new = self.fs.read(seg.path, len(idx.data))  # type: ignore[arg-type]
        if not new:
            return idx
        idx.data.extend(new)  # type: ignore[union-attr]
        prev = self.segments[-1].last if self.segments else -1
        if not idx.header_size:
            try:
                idx.header_size = self._check_header(seg, idx.data)  # type: ignore[arg-type]
            except framing.HeaderError as exc:
                if exc.kind == "torn":
                    return idx  # being created right now
                resume = framing.next_valid(idx.data, 1)  # type: ignore[arg-type]
                if resume is None:
                    self._report(
                        WalIssue(self.describe(seg.path), 0, "header", exc.detail, "ignored")
                    )
                    return idx
                problem = framing.Problem(
                    0, "header", f"{exc.detail}; next valid record at offset {resume}", prev
                )
                problem.end = resume
                idx.corrupt.append(problem)
                self._report(_corruption_issue(self.describe(seg.path), problem))
                idx.header_size = resume
            idx.end = idx.header_size
        start = idx.end
        if idx.windows:
            prev = idx.largest
        result = framing.scan(idx.data, start, last_window=prev)  # type: ignore[arg-type]
        idx.add(result)
        for problem in result.corrupt:
            self._report(_corruption_issue(self.describe(seg.path), problem))
        return idx

    # -- queries --------------------------------------------------------------------------
    def largest_window(self) -> int:
        """The largest complete window in the log (-1 if none); re-lists the directory."""
        for _ in range(3):
            self.refresh()
            try:
                idx = self._refresh_tmp()
            except StorageNotFoundError:
                continue  # the active segment was finalized between list and read
            if idx is not None and idx.windows:
                return idx.largest
            break
        return self.segments[-1].last if self.segments else -1  # type: ignore[return-value]

    def _lookup(self, idx: _Index, window: int, *, final: bool) -> bytes | None:
        hit = idx.entries.get(window)
        if hit is not None:
            off, length = hit
            if idx.data is not None:
                raw = bytes(idx.data[off : off + length])
            else:
                raw = self.fs.read(idx.segment.path, off, length)
            return self._payload(idx, window, raw, off)
        for problem in idx.corrupt:
            if problem.after_window < window and (
                problem.before_window is None or window < problem.before_window
            ):
                raise CorruptRecordError(
                    f"window {window} may have been in corrupt bytes ({problem.detail})",
                    offset=problem.offset,
                    backend=self.fs.backend,
                    path=self.describe(idx.segment.path),
                    operation="retrieve",
                )
        tail = idx.tail
        if (
            final
            and tail is not None
            and window > tail.after_window
            and idx.segment.last is not None
            and window <= idx.segment.last
        ):
            raise CorruptRecordError(
                f"window {window} is in the unreadable end of a finalized segment ({tail.detail})",
                offset=tail.offset,
                backend=self.fs.backend,
                path=self.describe(idx.segment.path),
                operation="retrieve",
            )
        return None

    def _read_final(self, window: int) -> tuple[bool, bytes | None]:
        """(handled, payload): handled is False if ``window`` is after the finalized ones."""
        if not self.segments or window > self.segments[-1].last:  # type: ignore[operator]
            return False, None
        i = bisect.bisect_left(self.lasts, window)
        seg = self.segments[i]
        if seg.first is not None and window < seg.first:
            return True, None
        try:
            idx = self._final_index(seg)
        except StorageNotFoundError:
            return True, None  # purged meanwhile
        return True, self._lookup(idx, window, final=True)

    def read(self, window: int) -> bytes | None:
        """The payload saved for ``window``, or None."""
        self._ensure_listed()
        for attempt in range(2):
            handled, payload = self._read_final(window)
            if handled:
                return payload
            idx = self._tmp_index
            if idx is not None and window <= idx.largest:
                return self._lookup(idx, window, final=False)  # already read: no I/O
            try:
                idx = self._refresh_tmp()
            except StorageNotFoundError:
                idx = None
            if idx is not None and window <= idx.largest:
                return self._lookup(idx, window, final=False)
            if attempt == 0:
                self.refresh()  # new segments may have appeared
        return None

    def verify(self) -> list[WalIssue]:
        """Scan every segment; return the issues found (also in :attr:`issues`)."""
        self.refresh()
        before = len(self.issues)
        for seg in list(self.segments):
            self._cache.pop(seg.name, None)
            try:
                self._final_index(seg)
            except StorageNotFoundError:
                continue
        self._tmp_index = None
        self._refresh_tmp()
        return self.issues[before:]


class LogWriter(LogReader):
    """The single writer of one partition log."""

    def __init__(
        self,
        fs: FileSystem,
        log_dir: str,
        serializer: str,
        *,
        segment_bytes: int,
        signer: Signer | None = None,
        context: bytes = b"",
    ) -> None:
        super().__init__(fs, log_dir, serializer, signer=signer, context=context)
        if segment_bytes < 1:
            raise StorageConfigError(f"segment_bytes must be >= 1, got {segment_bytes}")
        self.segment_bytes = segment_bytes
        self.largest = -1
        self._appender: Appender | None = None
        self._header_needed = False
        self._dirty = False
        self._recovered = False
        self._tmp_cache: tuple[str, bytearray] | None = None
        self._writable = False
        self._needs_repair = False

    # the writer's view of its own directory is authoritative: no re-listing on misses
    def read(self, window: int) -> bytes | None:
        self.ensure_clean()
        handled, payload = self._read_final(window)
        if handled:
            return payload
        idx = self._tmp_index
        if idx is None or window > idx.largest:
            return None
        hit = idx.entries.get(window)
        if hit is None:
            return self._lookup(idx, window, final=False)  # None, or a corrupt record
        off, length = hit
        # replay reads windows in order: read the active segment in bulk, once, and
        # again only for what was appended since (one request instead of one per window)
        cache = self._tmp_cache
        if cache is None or cache[0] != idx.segment.name:
            cache = self._tmp_cache = (idx.segment.name, bytearray())
        data = cache[1]
        if off + length > len(data):
            data.extend(self.fs.read(idx.segment.path, len(data), idx.end - len(data)))
        if off + length > len(data):
            raise CorruptRecordError(
                f"active segment is shorter ({len(data)} bytes) than this writer wrote",
                offset=off,
                backend=self.fs.backend,
                path=self.describe(idx.segment.path),
                operation="retrieve",
            )
        return self._payload(idx, window, bytes(data[off : off + length]), off)

    def largest_window(self) -> int:
        self.ensure_clean()
        return self.largest

    def verify(self) -> list[WalIssue]:
        """Scan every segment (with a separate reader: the writer's state is untouched)."""
        self.ensure_clean()
        reader = LogReader(
            self.fs, self.log_dir, self.serializer, signer=self.signer, context=self.context
        )
        found = reader.verify()
        for issue in found:
            self._report(issue)
        return found

    @property
    def writable(self) -> bool:
        """True once this writer has repaired the log for appending (its view is current)."""
        return self._writable and not self._dirty

    def ensure_clean(self) -> None:
        """Scanned and consistent (read-only: nothing is modified)."""
        if self._dirty:
            self.recover(repair=self._writable)
        elif not self._recovered:
            self.recover(repair=False)

    def ensure_writable(self) -> None:
        """Ready to append: a torn/corrupt tail is cut off now, not at setup."""
        if self._dirty or not self._writable:
            self.recover(repair=True)

    # -- recovery -------------------------------------------------------------------------
    def recover(self, *, repair: bool = True) -> list[WalIssue]:
        """Scan the log and find where to append.

        With ``repair`` (done before this writer's first append), a torn tail of the
        active segment is cut off, its bytes kept in a ``.damaged-<offset>`` file.
        Corruption (damaged bytes with a valid record after them) is reported and kept;
        appending continues after the last valid record. Without ``repair``
        (``setup()``: the manager may only read, and the real writer may be appending
        right now) nothing is modified: the tail is reported and ignored.
        """
        self._drop_appender()
        before = len(self.issues)
        self.fs.mkdirs(self.log_dir)
        if repair:
            for st in self.fs.list(self.log_dir):
                if st.name.endswith(".truncating"):  # an interrupted (emulated) truncate
                    self.fs.delete(st.path)
        self.refresh()
        self._tmp_index = None
        self._tmp_cache = None
        self._header_needed = False
        self._needs_repair = False
        last_final = self.segments[-1].last if self.segments else -1
        self.largest = last_final  # type: ignore[assignment]
        seg = self.tmp
        later = "unfinished window, ignored; cut off before this partition's next save"
        if seg is not None:
            data = self.fs.read_all(seg.path)
            path = self.describe(seg.path)
            idx: _Index | None = _Index(seg)
            assert idx is not None
            failed = self._scan_segment(idx, data, last_final)  # type: ignore[arg-type]
            if failed is not None:
                self._needs_repair = not repair
                if failed.kind == "torn":
                    action = later
                    if repair and data:
                        action = self._cut(seg.path, data, 0)
                    self._report(WalIssue(path, 0, "torn", failed.detail, action))
                    self._header_needed = True
                    idx.end = 0
                elif repair:
                    damaged = f"{seg.path}.damaged-0"
                    self.fs.rename(seg.path, damaged, overwrite=True)
                    self._report(WalIssue(path, 0, "header", failed.detail, f"moved to {damaged}"))
                    self.tmp = None
                    idx = None
                else:
                    self._report(WalIssue(path, 0, "header", failed.detail, later))
            else:
                self._report_scan(idx, final=False)
                tail = idx.tail
                if tail is not None and not repair:
                    self._needs_repair = True
                    self._report(WalIssue(path, tail.offset, tail.kind, tail.detail, later))
                elif tail is not None:
                    action = self._cut(seg.path, data, tail.offset)
                    self._report(WalIssue(path, tail.offset, tail.kind, tail.detail, action))
                    log.info("repaired %s: %s", path, action)
                    idx.tail = None
                if idx.windows:
                    seg.first, seg.last = idx.windows[0], idx.windows[-1]
                    self.largest = idx.largest
            self._tmp_index = idx
        self._dirty = False
        self._recovered = True
        self._writable = repair
        return self.issues[before:]

    def _cut(self, path: str, data: bytes | bytearray, offset: int) -> str:
        """Cut a torn tail at ``offset``, keeping the cut bytes in ``.damaged-<offset>``."""
        damaged = f"{path}.damaged-{offset}"
        self.fs.create(damaged, bytes(data[offset:]), overwrite=True)
        self.fs.truncate(path, offset)
        return (
            f"unfinished window ignored, {len(data) - offset} bytes moved to "
            f"{self.fs.basename(damaged)}, truncated to {offset} bytes"
        )

    def _check_appendable(self) -> None:
        """Refuse to append after corruption whose window range has no upper bound: the
        writer cannot tell which window ids were used, and must not reuse any."""
        idx = self._tmp_index
        for problem in idx.corrupt if idx is not None else ():
            if problem.before_window is None:
                raise CorruptRecordError(
                    f"corrupt bytes ({problem.detail}) after window {problem.after_window} and "
                    "no valid window after them: the window ids they held are unknown, so this "
                    "partition cannot continue safely. Inspect the file, move it aside, and "
                    "restart from a window id above any it may have held",
                    offset=problem.offset,
                    backend=self.fs.backend,
                    path=self.describe(idx.segment.path),  # type: ignore[union-attr]
                    operation="save",
                )

    # -- writing --------------------------------------------------------------------------
    def _drop_appender(self) -> None:
        appender, self._appender = self._appender, None
        if appender is not None:
            try:
                appender.close()
            except StorageError:
                pass

    def _open(self) -> Appender:
        idx = self._tmp_index
        if self.tmp is None or idx is None:
            seq = max([s.seq for s in self.segments], default=-1) + 1
            path = self.fs.join(self.log_dir, tmp_name(seq))
            self.tmp = Segment(seq, tmp_name(seq), path, False)
            idx = self._tmp_index = _Index(self.tmp)
            self._header_needed = True
        appender = self.fs.open_appender(self.tmp.path, create=True)
        if appender.size != idx.end:
            appender.close()
            self._dirty = True
            raise ConcurrentWriterError(
                f"active segment has {appender.size} bytes, expected {idx.end}: "
                "another writer is using this partition log",
                backend=self.fs.backend,
                path=self.describe(self.tmp.path),
                operation="save",
            )
        if self._header_needed:
            auth = None if self.signer is None else "hmac-sha256"
            header = framing.encode_header(self.serializer, auth)
            appender.write(header)
            idx.header_size = len(header)
            idx.end = len(header)
            self._header_needed = False
        return appender

    def append(self, window: int, payload: bytes) -> None:
        """Append one window durably (per the backend's flush guarantee)."""
        self.ensure_writable()
        self._check_appendable()
        if window <= self.largest:
            raise ValueError(f"window {window} <= largest {self.largest}")  # guarded by manager
        if self.signer is not None:
            payload = self.signer.sign(payload, self.context + _WINDOW.pack(window))
        record = framing.encode_record(window, payload)
        appender = self._appender
        if appender is None:
            appender = self._appender = self._open()
        idx = self._tmp_index
        assert idx is not None and self.tmp is not None
        offset = idx.end
        unchanged = getattr(appender, "unchanged", None)  # local FS: one fstat(2), ~1 us
        if unchanged is not None and not unchanged():
            self._concurrent_writer()
        appender.write(record)
        try:
            appender.flush()
        except BaseException:
            self._dirty = True
            self._drop_appender()
            raise
        if unchanged is not None and not unchanged():
            self._concurrent_writer()
        idx.entries[window] = (offset + framing.RECORD_HEADER_SIZE, len(payload))
        idx.windows.append(window)
        idx.end = appender.size
        if self.tmp.first is None:
            self.tmp.first = window
        self.tmp.last = window
        self.largest = window
        if idx.end >= self.segment_bytes:
            self.finalize()

    def _concurrent_writer(self) -> None:
        self._dirty = True
        self._drop_appender()
        assert self.tmp is not None
        raise ConcurrentWriterError(
            "the active segment changed behind this writer's back: another writer is "
            "appending to this partition log (one writer per partition)",
            backend=self.fs.backend,
            path=self.describe(self.tmp.path),
            operation="save",
        )

    def finalize(self) -> None:
        """Sync the active segment and rename it to its final name."""
        seg, idx = self.tmp, self._tmp_index
        if seg is None or idx is None or not idx.windows:
            return
        try:
            if self._appender is None:
                self._appender = self.fs.open_appender(seg.path)
            self._appender.sync()
            self._drop_appender()
            name = final_name(seg.seq, idx.windows[0], idx.windows[-1])
            path = self.fs.join(self.log_dir, name)
            self.fs.rename(seg.path, path, overwrite=False)
        except BaseException:
            self._dirty = True
            self._drop_appender()
            raise
        self.segments.append(Segment(seg.seq, name, path, True, idx.windows[0], idx.windows[-1]))
        self.tmp = None
        self._tmp_index = None
        self._tmp_cache = None

    def purge(self, committed: int) -> list[str]:
        """Delete finalized segments whose windows are all <= ``committed``.

        The active segment is never purged, and neither is the newest finalized segment
        while the active one holds no window (it holds the partition's largest window).
        """
        self.ensure_clean()
        if self.writable:
            active_empty = self._tmp_index is None or not self._tmp_index.windows
        else:
            # another process may be the writer: look again, and keep the newest segment
            self.refresh()
            active_empty = True
        doomed = [s for s in self.segments if s.last is not None and s.last <= committed]
        if active_empty and self.segments and doomed and doomed[-1] is self.segments[-1]:
            doomed.pop()
        removed = []
        for seg in doomed:
            self.fs.delete(seg.path)
            self.segments.remove(seg)
            self._cache.pop(seg.name, None)
            removed.append(seg.name)
        return removed

    def sync(self) -> None:
        if self._appender is not None:
            self._appender.sync()

    def close(self) -> None:
        """Sync and release the active segment (it stays active: no finalize)."""
        appender, self._appender = self._appender, None
        if appender is not None:
            try:
                appender.sync()
            finally:
                appender.close()
