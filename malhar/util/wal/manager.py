"""Window data managers: per-window artifacts (offsets, state) for replay and continuity.

This is Malhar's ``WindowDataManager`` / ``FSWindowDataManager`` on top of the
segmented write-ahead log of :mod:`malhar.util.wal.segments`.

An input operator partition saves, at the end of every window, what it needs to
replay that window with exactly the same content (e.g. Kafka offsets); after a
failure it calls :meth:`retrieve` for the windows it had completed, instead of
reading new data. The engine uses :meth:`largest_completed_window` to keep window
ids continuous across restarts, and :meth:`committed` to purge what can no longer
be replayed.

Replay rule: for a window ``w <= partition_largest_window()`` use ``retrieve(w)``;
``save`` accepts only windows after it (a byte-identical re-save of a saved window
is a no-op, for a save that crashed after writing).

Thread and process safety (see ``docs/storage.md``):

- **one writer per partition log**: at any time, at most one manager instance (in
  one process) may call ``save``/``committed`` for a given operator partition. A
  second writer is detected on the local filesystem (the active segment grows behind
  the writer's back) and reported as :class:`ConcurrentWriterError`; on HDFS it is
  not detected reliably.
- **any number of readers**: ``retrieve``/``retrieve_all_partitions``/
  ``largest_completed_window`` may run in any process while the writers append.
  ``setup()`` never modifies a log: a torn tail is cut only before the instance's
  own first ``save`` (so a driver-side manager may inspect a live partition).
- one manager instance may be shared by threads: every public method holds the
  instance's lock.
- ``partition()`` (a driver-side operation) and the generation clean-up done by
  ``committed()`` of partition 0 update the manifest with a compare-and-swap; they
  may race safely.

Durability (``durability=``): ``"fsync"`` (default) makes every ``save`` power-loss
safe before it returns on the local FS (fdatasync of the segment; every new file and
directory name fsynced in its parent), as durable as a transactional output the
input feeds; on HDFS see ``docs/storage.md`` (what WebHDFS can and cannot do).
``"flush"`` is the explicit opt-out: a save is visible and survives the death of the
process, not an OS crash.

Authentication (``integrity_key=``, off by default): an HMAC-SHA256 tag over every
record, verified on every read (:mod:`malhar.util.integrity`).
"""

from __future__ import annotations

import operator as _operator
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from malhar.secrets import is_reference
from malhar.util.fs.base import FileSystem
from malhar.util.fs.errors import (
    CorruptRecordError,
    StorageConfigError,
    StorageError,
    StorageExistsError,
    WindowOrderError,
)
from malhar.util.fs.names import encode_segment
from malhar.util.fs.resolve import filesystem_for
from malhar.util.integrity import Signer
from malhar.util.wal.manifest import Generation, Layout, scan_layout, write_manifest
from malhar.util.wal.segments import LogReader, LogWriter, WalIssue
from malhar.util.wal.serializers import Serializer, get_serializer

MAX_WINDOW = (1 << 63) - 1
#: ``durability=`` values: every save fsynced (default), or only flushed to the OS
DURABILITY = ("fsync", "flush")


def _window(window_id: Any) -> int:
    if isinstance(window_id, bool):
        raise TypeError(f"window id must be an int, got {window_id!r}")
    try:
        w = _operator.index(window_id)
    except TypeError:
        raise TypeError(f"window id must be an int, got {window_id!r}") from None
    if not 0 <= w <= MAX_WINDOW:
        raise ValueError(f"window id must be in [0, 2**63), got {w}")
    return w


class WindowDataManager(ABC):
    """Saves and replays one artifact per window for one operator partition."""

    @abstractmethod
    def setup(self) -> None:
        """Open and scan (tolerates torn tails); idempotent."""

    @abstractmethod
    def teardown(self) -> None:
        """Sync and release handles; the manager can be set up again."""

    @abstractmethod
    def save(self, artifact: Any, window_id: int) -> None:
        """Persist ``artifact`` for ``window_id``; durable (per backend) on return."""

    @abstractmethod
    def retrieve(self, window_id: int) -> Any | None:
        """The artifact this partition saved for ``window_id``, or None."""

    @abstractmethod
    def retrieve_all_partitions(self, window_id: int) -> dict[int, Any]:
        """partition -> artifact for ``window_id``, over every partition of the operator."""

    @abstractmethod
    def largest_completed_window(self) -> int:
        """The largest window completed by every partition of the operator; -1 if none."""

    @abstractmethod
    def partition_largest_window(self) -> int:
        """The largest window saved by this partition (or covered by its generation); -1."""

    @abstractmethod
    def committed(self, window_id: int) -> None:
        """``window_id`` is durable downstream: purge what can no longer be replayed."""

    @abstractmethod
    def partition(self, new_count: int, removed_ids: Iterable[int]) -> list[WindowDataManager]:
        """Managers for partitions ``0..new_count-1`` after a repartitioning."""

    def __enter__(self) -> WindowDataManager:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()


class NoopWindowDataManager(WindowDataManager):
    """For operators that need no replay: saves nothing, retrieves nothing."""

    def setup(self) -> None:
        pass

    def teardown(self) -> None:
        pass

    def save(self, artifact: Any, window_id: int) -> None:
        _window(window_id)

    def retrieve(self, window_id: int) -> Any | None:
        _window(window_id)
        return None

    def retrieve_all_partitions(self, window_id: int) -> dict[int, Any]:
        _window(window_id)
        return {}

    def largest_completed_window(self) -> int:
        return -1

    def partition_largest_window(self) -> int:
        return -1

    def committed(self, window_id: int) -> None:
        _window(window_id)

    def partition(
        self, new_count: int, removed_ids: Iterable[int] = ()
    ) -> list[NoopWindowDataManager]:
        if new_count < 1:
            raise ValueError(f"new_count must be >= 1, got {new_count}")
        return [NoopWindowDataManager() for _ in range(new_count)]

    def __repr__(self) -> str:
        return "NoopWindowDataManager()"


class FSWindowDataManager(WindowDataManager):
    """A window data manager backed by a segmented WAL on the local FS or HDFS.

    :param root: directory URL (local path, ``file://``, ``hdfs://``, ``webhdfs://``).
    :param operator: operator name; its logs live in ``<root>/<operator>/``.
    :param partition: this partition's index (0-based).
    :param segment_bytes: rotate the active segment once it reaches this size.
    :param serializer: ``"pickle"`` (default), ``"json"`` or a serializer object.
    :param fs_options: options for :func:`~malhar.util.fs.filesystem_for`
        (``webhdfs_url``, ``user``, ``retries``, ...).
    :param durability: ``"fsync"`` (default): every save is synced before it returns
        (local FS: fdatasync + directory fsync of new names; HDFS: see docs/storage.md);
        ``"flush"``: written to the OS / HDFS only (survives the process, not an OS
        crash). ``fs_options={"fsync": bool}`` is the older spelling of the same choice.
    :param integrity_key: authenticate every record with HMAC-SHA256 under this key:
        ``bytes``, or a secret reference ``"${env:NAME}"`` / ``"${file:/path}"`` resolved
        where the log is opened (keeps the key out of pickles). None: off.

    The operator name may be any non-empty string: it is encoded into one safe path
    segment (:func:`malhar.util.fs.names.encode_segment`), so ``"a b"``, ``"a/b"`` and
    ``"a_b"`` get distinct directories and ``".."`` cannot leave ``root``.

    Instances hold only configuration until first use (picklable: handles are
    dropped by ``__getstate__`` and re-opened lazily in the new process).
    """

    def __init__(
        self,
        root: str,
        operator: str,
        *,
        partition: int = 0,
        segment_bytes: int = 8 << 20,
        serializer: str | Serializer = "pickle",
        fs_options: dict | None = None,
        durability: str | None = None,
        integrity_key: bytes | str | None = None,
    ) -> None:
        if not isinstance(operator, str) or not operator:
            raise StorageConfigError(f"operator name must be a non-empty string: {operator!r}")
        try:
            self._segment = encode_segment(operator)
        except ValueError as exc:
            raise StorageConfigError(f"operator name {operator!r}: {exc}") from None
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise StorageConfigError(f"partition must be an int >= 0, got {partition!r}")
        if not isinstance(segment_bytes, int) or segment_bytes < 1:
            raise StorageConfigError(f"segment_bytes must be an int >= 1, got {segment_bytes!r}")
        if not isinstance(root, str) or not root:
            raise StorageConfigError(f"root must be a non-empty path or URL, got {root!r}")
        if "://" not in root:
            # resolve now (on the driver): executors may run in another working directory
            root = os.path.abspath(os.path.expanduser(root))
        self.root = root
        self.operator = operator
        self.partition_id = partition
        self.segment_bytes = segment_bytes
        self.serializer = get_serializer(serializer)
        self.fs_options = dict(fs_options or {})
        self.durability = self._durability(durability, self.fs_options.pop("fsync", None))
        if integrity_key in (None, "", b""):
            integrity_key = None
        elif not (isinstance(integrity_key, str) and is_reference(integrity_key)):
            Signer.from_setting(integrity_key)  # bytes: checked now; a literal str: refused
        # a reference is resolved where the log is opened (setup), e.g. on an executor
        self.integrity_key = integrity_key
        self._superseded = False
        self._init_runtime()

    # -- runtime state (never pickled) --------------------------------------------------------
    def _init_runtime(self) -> None:
        self._lock = threading.RLock()
        self._ready = False
        self._fs: FileSystem | None = None
        self._opdir = ""
        self._gens: list[Generation] = []
        self._layout: Layout | None = None
        self._implicit = True
        self._log_id = -1
        self._writer: LogWriter | None = None
        self._readers: dict[int, LogReader] = {}
        self._signer: Signer | None = None

    def _context(self, log_id: int) -> bytes:
        """What every record tag of log ``log_id`` is bound to: a record copied to another
        operator's or partition's log fails authentication."""
        name = self.operator.encode("utf-8", "surrogatepass")
        return b"malhar-wal\0" + name + b"\0" + str(log_id).encode()

    _CONFIG = (
        "root",
        "operator",
        "partition_id",
        "segment_bytes",
        "serializer",
        "fs_options",
        "durability",
        "integrity_key",
    )

    @staticmethod
    def _durability(durability: str | None, fsync: Any) -> str:
        if durability is not None and durability not in DURABILITY:
            raise StorageConfigError(
                f"durability must be one of {', '.join(map(repr, DURABILITY))}, got "
                f"{durability!r} ('fsync': every save survives an OS crash; 'flush': it "
                "survives the process only)"
            )
        if fsync is None:
            return durability or "fsync"
        implied = "fsync" if fsync else "flush"
        if durability is not None and durability != implied:
            raise StorageConfigError(
                f"fs_options fsync={fsync!r} contradicts durability={durability!r}; "
                "pass only durability="
            )
        return implied

    def __getstate__(self) -> dict[str, Any]:
        state = {k: getattr(self, k) for k in self._CONFIG}
        state["_superseded"] = self._superseded
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "durability" not in state:  # pickled by a version before durability=
            fsync = dict(state.get("fs_options") or {}).pop("fsync", None)
            state["fs_options"] = {k: v for k, v in state["fs_options"].items() if k != "fsync"}
            state["durability"] = self._durability(None, fsync)
        state.setdefault("integrity_key", None)
        self.__dict__.update(state)
        self._segment = encode_segment(self.operator)
        self._init_runtime()

    def __repr__(self) -> str:
        return (
            f"FSWindowDataManager({self.root!r}, {self.operator!r}, partition={self.partition_id}, "
            f"serializer={self.serializer.name!r}, durability={self.durability!r}"
            f"{', integrity_key=<set>' if self.integrity_key else ''})"
        )

    def _clone(self, partition: int) -> FSWindowDataManager:
        return FSWindowDataManager(
            self.root,
            self.operator,
            partition=partition,
            segment_bytes=self.segment_bytes,
            serializer=self.serializer,
            fs_options=dict(self.fs_options),
            durability=self.durability,
            integrity_key=self.integrity_key,
        )

    # -- setup ----------------------------------------------------------------------------------
    def setup(self) -> None:
        with self._lock:
            if self._ready:
                return
            self._check_live()
            fs, root_path = filesystem_for(
                self.root, **self.fs_options, fsync=self.durability == "fsync"
            )
            self._signer = Signer.from_setting(self.integrity_key)
            self._fs = fs
            self._opdir = fs.join(root_path, self._segment)
            layout = scan_layout(fs, self._opdir)
            self._layout = layout
            gens = self._generations(layout)
            current = gens[-1]
            if layout.generations is None:
                self._log_id = self.partition_id
            elif self.partition_id in current.logs:
                self._log_id = current.logs[self.partition_id]
            else:
                raise StorageConfigError(
                    f"operator {self.operator!r} has {len(current.logs)} partitions since its "
                    f"repartitioning (generation {current.generation}); partition "
                    f"{self.partition_id} does not exist",
                    backend=fs.backend,
                    path=fs.describe(self._opdir),
                    operation="setup",
                )
            self._writer = LogWriter(
                fs,
                fs.join(self._opdir, str(self._log_id)),
                self.serializer.name,
                segment_bytes=self.segment_bytes,
                signer=self._signer,
                context=self._context(self._log_id),
            )
            self._writer.recover(repair=False)  # read-only: the writer may be elsewhere
            self._ready = True

    def _generations(self, layout: Layout) -> list[Generation]:
        self._implicit = layout.generations is None
        gens = layout.effective()
        if self._implicit:
            gens[0].logs.setdefault(self.partition_id, self.partition_id)
        self._gens = gens
        return gens

    def _ensure(self) -> LogWriter:
        if self._superseded:
            self._check_live()
        if not self._ready:
            self.setup()
        assert self._writer is not None
        return self._writer

    def _check_live(self) -> None:
        if self._superseded:
            raise StorageError(
                f"this manager of operator {self.operator!r} partition {self.partition_id} was "
                "repartitioned: use the managers returned by partition()",
                operation="partition",
            )

    def teardown(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
            self._readers.clear()
            self._ready = False
            if writer is not None:
                writer.close()

    # -- generations and logs ---------------------------------------------------------------------
    def _refresh_layout(self) -> list[Generation]:
        """Re-read the operator directory: partition logs appear, old generations go.

        If another process repartitioned the operator since this manager was set up,
        this manager is stale: it raises (use the managers of the new partitioning).
        """
        assert self._fs is not None
        layout = scan_layout(self._fs, self._opdir, self._layout)
        current = self._gens[-1].generation
        gens = layout.effective()
        if gens[-1].generation != current:
            self._superseded = True
            self._check_live()
        self._layout = layout
        return self._generations(layout)

    def _log(self, log_id: int) -> LogReader:
        writer = self._writer
        assert writer is not None and self._fs is not None
        if log_id == self._log_id and writer.writable:
            # this instance has written: its own view of the log is authoritative
            return writer
        # a log written by someone else, or this partition's log while this instance
        # has only read it (the partition's writer may be appending in another process)
        reader = self._readers.get(log_id)
        if reader is None:
            reader = self._readers[log_id] = LogReader(
                self._fs,
                self._fs.join(self._opdir, str(log_id)),
                self.serializer.name,
                signer=self._signer,
                context=self._context(log_id),
            )
        return reader

    @staticmethod
    def _covering(gens: list[Generation], window: int) -> Generation | None:
        for gen in reversed(gens):
            if window > gen.base:
                return gen
        return None

    def _completed(self, gen: Generation) -> int:
        if not gen.logs:
            return -1
        return min(max(self._log(i).largest_window(), gen.base) for i in gen.logs.values())

    # -- the API ----------------------------------------------------------------------------------
    def save(self, artifact: Any, window_id: int) -> None:
        w = _window(window_id)
        payload = self.serializer.dumps(artifact)
        with self._lock:
            writer = self._ensure()
            writer.ensure_writable()
            self._readers.pop(self._log_id, None)
            base = self._gens[-1].base
            if w <= writer.largest or w <= base:
                try:
                    stored = writer.read(w) if w <= writer.largest else None
                except CorruptRecordError as exc:
                    raise WindowOrderError(
                        f"window {w} may have been lost in corrupt bytes at offset {exc.offset} "
                        f"of {exc.path}; a window id that may have been used is never saved "
                        f"again (operator {self.operator!r} partition {self.partition_id})",
                        backend=exc.backend,
                        path=exc.path,
                        operation="save",
                    ) from exc
                if stored is not None and stored == payload:
                    return  # idempotent re-save of the same window
                if stored is not None:
                    why = f"window {w} was already saved with a different artifact"
                elif w <= base:
                    why = (
                        f"window {w} belongs to the partitioning before the last repartitioning "
                        f"(windows <= {base})"
                    )
                else:
                    why = f"window {w} is not after the largest saved window {writer.largest}"
                raise WindowOrderError(
                    f"{why}; operator {self.operator!r} partition {self.partition_id} saves only "
                    "windows in increasing order (replay uses retrieve())",
                    backend=self._fs.backend if self._fs else None,
                    path=writer.describe(),
                    operation="save",
                )
            writer.append(w, payload)

    def retrieve(self, window_id: int) -> Any | None:
        w = _window(window_id)
        with self._lock:
            self._ensure()
            gens = self._gens if w > self._gens[-1].base else self._refresh_layout()
            gen = self._covering(gens, w)
            if gen is None:
                return None
            if gen is gens[-1]:
                payload = self._log(self._log_id).read(w)
            else:
                log_id = gen.logs.get(self.partition_id)
                payload = None if log_id is None else self._log(log_id).read(w)
            return None if payload is None else self.serializer.loads(payload)

    def retrieve_all_partitions(self, window_id: int) -> dict[int, Any]:
        w = _window(window_id)
        with self._lock:
            self._ensure()
            gen = self._covering(self._refresh_layout(), w)
            if gen is None:
                return {}
            out: dict[int, Any] = {}
            for p, log_id in sorted(gen.logs.items()):
                payload = self._log(log_id).read(w)
                if payload is not None:
                    out[p] = self.serializer.loads(payload)
            return out

    def largest_completed_window(self) -> int:
        with self._lock:
            self._ensure()
            return self._completed(self._refresh_layout()[-1])

    def partition_largest_window(self) -> int:
        with self._lock:
            self._ensure()
            return max(self._log(self._log_id).largest_window(), self._gens[-1].base)

    def committed(self, window_id: int) -> None:
        w = _window(window_id)
        with self._lock:
            writer = self._ensure()
            writer.purge(w)
            self._readers.pop(self._log_id, None)  # its cache may hold purged segments
            if self.partition_id == 0 and not self._implicit and len(self._gens) > 1:
                self._drop_generations(w)

    def _drop_generations(self, committed: int) -> None:
        """Partition 0 deletes the logs of generations whose windows are all committed."""
        fs = self._fs
        assert fs is not None
        for _ in range(10):
            layout = scan_layout(fs, self._opdir)
            gens = layout.generations
            if gens is None:
                return
            cut = 0
            while cut < len(gens) - 1 and gens[cut + 1].base <= committed:
                cut += 1
            keep = gens[cut:]
            referenced = {i for g in keep for i in g.logs.values()}
            floor = min(referenced, default=0)
            doomed = {i for g in gens[:cut] for i in g.logs.values()}
            doomed |= {i for i in layout.log_ids if i < floor and i not in referenced}
            if cut:
                try:
                    write_manifest(fs, self._opdir, layout.version + 1, keep)
                except StorageExistsError:
                    continue  # someone else changed the manifest: re-read
            for log_id in sorted(doomed):
                fs.delete(fs.join(self._opdir, str(log_id)), recursive=True)
                self._readers.pop(log_id, None)
            self._layout = None
            self._gens = keep
            return
        raise StorageError(
            "could not update the partitions manifest (kept changing)",
            backend=fs.backend,
            path=fs.describe(self._opdir),
            operation="committed",
        )

    def partition(
        self, new_count: int, removed_ids: Iterable[int] = ()
    ) -> list[FSWindowDataManager]:
        """Record a repartitioning and return managers for partitions ``0..new_count-1``.

        Every old partition log stays readable (``retrieve_all_partitions``); the new
        partitions write fresh logs. The operator's largest completed window right
        after this call is the minimum over the old partitions. ``removed_ids`` must
        name existing partitions; they are recorded in the manifest. This manager is
        retired: further calls raise, except ``teardown``.
        """
        if isinstance(new_count, bool) or not isinstance(new_count, int) or new_count < 1:
            raise StorageConfigError(f"new_count must be an int >= 1, got {new_count!r}")
        removed = {int(r) for r in (removed_ids or ())}
        with self._lock:
            self._ensure()
            fs = self._fs
            assert fs is not None
            for _ in range(10):
                layout = scan_layout(fs, self._opdir)
                gens = self._generations(layout)
                current = gens[-1]
                unknown = removed - set(current.logs)
                if unknown:
                    raise StorageConfigError(
                        f"removed partition(s) {sorted(unknown)} do not exist; operator "
                        f"{self.operator!r} has partitions {sorted(current.logs)}",
                        backend=fs.backend,
                        path=fs.describe(self._opdir),
                        operation="partition",
                    )
                base = self._completed(current)
                used = set(layout.log_ids) | {i for g in gens for i in g.logs.values()}
                first = max(used, default=-1) + 1
                new = Generation(
                    current.generation + 1,
                    base,
                    {p: first + p for p in range(new_count)},
                    sorted(removed),
                )
                try:
                    write_manifest(fs, self._opdir, layout.version + 1, [*gens, new])
                except StorageExistsError:
                    continue
                break
            else:
                raise StorageError(
                    "could not write the partitions manifest (concurrent repartitioning)",
                    backend=fs.backend,
                    path=fs.describe(self._opdir),
                    operation="partition",
                )
            self.teardown()
            self._superseded = True
            return [self._clone(p) for p in range(new_count)]

    # -- diagnostics ------------------------------------------------------------------------------
    @property
    def issues(self) -> list[WalIssue]:
        """Problems found so far (torn/corrupt tails, corrupt records), with path and offset."""
        with self._lock:
            out: dict[tuple, WalIssue] = {}  # the writer and a reader may see the same one
            logs = [self._writer] if self._writer is not None else []
            for log in [*logs, *self._readers.values()]:
                for issue in log.issues:
                    out.setdefault((issue.path, issue.offset, issue.kind), issue)
            return list(out.values())

    def verify(self) -> list[WalIssue]:
        """Scan every segment of this partition's log; return the issues found."""
        with self._lock:
            return self._ensure().verify()

    @property
    def log_path(self) -> str:
        """URL of this partition's log directory (after setup)."""
        with self._lock:
            return self._ensure().describe()
