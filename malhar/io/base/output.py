"""Transactional outputs: the contract a connector author fills, and the one implementation
of "every window lands exactly once" that all outputs share.

An output is exactly once when each partition writes a window's rows **and** the id of
that window in one atomic step of the external system, and skips a window whose id it
finds already there (Apex Malhar's ``TransactionableStore`` +
``AbstractTransactionableStoreOutputOperator``). The parts:

- :class:`TransactionalStore`: one output partition's view of the external system; the
  connector author implements it (a database transaction, a Kafka transaction whose
  ``send_offsets_to_transaction`` stores the window id, a file written in progress and
  renamed when the window commits);
- :class:`WindowCommitter`: runs the protocol for one window on any store: skip if
  committed, re-check under the transaction (fencing a zombie writer), write, record the
  window (and the rejected rows), commit, retry the whole window while the system is
  unavailable, :class:`WindowRegressionError` for ids that went backwards;
- :class:`TransactionalOutputOperator`: the malhar operator base (buffers an application
  window, writes it at ``end_window``, error port ``error``);
- :class:`TransactionalStreamWriter`: the Spark sink base
  (``df.writeStream.format(...)``), on the same store and committer; a micro-batch is a
  window, ``batchId`` its id, the task's partition the output partition.

Settings are :class:`~malhar.properties.Property` declarations on one
:class:`~malhar.properties.Configurable` class (:class:`TransactionalSettings` and the
connector's subclass), shared by the operator (as its properties) and the Spark sink
(from its string options); the running partition (connections, clients) is built from
them where it runs. See ``docs/howto-output.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from malhar.attributes import APPLICATION_NAME
from malhar.errors import ConfigError, MalharError
from malhar.operator import (
    ActivationListener,
    CheckpointListener,
    Operator,
    OperatorContext,
)
from malhar.ports import InputPort, OutputPort
from malhar.properties import Configurable, Property, PropertyError, properties_of
from malhar.redaction import Scrubber
from malhar.state import State

__all__ = [
    "NO_WINDOW",
    "CommitMark",
    "OutputConfigError",
    "OutputError",
    "OutputUnavailableError",
    "RetryPolicy",
    "SinkCommit",
    "TransactionalOutputOperator",
    "TransactionalSettings",
    "TransactionalSinkSettings",
    "TransactionalStore",
    "TransactionalStreamWriter",
    "WindowBuffer",
    "WindowCommitter",
    "WindowContentMismatchError",
    "WindowKey",
    "WindowRegressionError",
    "WindowResult",
    "batch_digest",
    "rejected_row",
]

log = logging.getLogger("malhar.io.output")

T = TypeVar("T")
Txn = TypeVar("Txn")
S = TypeVar("S", bound=Configurable)

#: the window id of a partition that has committed nothing yet
NO_WINDOW = -1
#: the field of an error-port row that holds the reason
ERROR_FIELD = "error"


# -- errors ------------------------------------------------------------------------------------
class OutputError(MalharError, RuntimeError):
    """An output failed; the message names the target and the window (never a secret)."""


class OutputConfigError(OutputError, ConfigError):
    """The output's settings cannot work (missing target, contradicting settings)."""


class OutputUnavailableError(OutputError, ConnectionError):
    """The external system stayed unavailable through every configured retry."""


class WindowRegressionError(OutputError):
    """A window older than the one already committed: the application restarted with a new
    checkpoint (window ids or Spark batch ids from 0) under a name that has committed windows."""


class WindowContentMismatchError(OutputError):
    """A window (Spark micro-batch) re-ran with other rows than the ones committed for it the
    first time: the input is not deterministic, so the re-run cannot be exactly once."""


# -- identities --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowKey:
    """Who owns a committed window: the application's stable name, the operator, its partition."""

    application: str
    operator: str
    partition: int

    def __str__(self) -> str:
        return f"{self.application}/{self.operator}/{self.partition}"


@dataclass(frozen=True)
class CommitMark:
    """What a store records with a committed window.

    Attributes:
        window: the window id (``NO_WINDOW`` when nothing is committed).
        digest: a fingerprint of the window's input (:func:`batch_digest`), when the writer
            verifies re-runs (the Spark sink); None otherwise.
        run: which execution committed it (the Spark sink's per-execution token).
    """

    window: int = NO_WINDOW
    digest: str | None = None
    run: str | None = None


def rejected_row(row: Any, reason: str) -> dict[str, Any]:
    """An error-port row: the fields of ``row`` (or ``{"value": row}`` when it is not a
    mapping) plus ``"error": reason``.

    Example:
        >>> rejected_row({"k": "a", "n": 1}, "too long")
        {'k': 'a', 'n': 1, 'error': 'too long'}
        >>> rejected_row(("a", 1, 2), "3 value(s) for the 2 columns ['k', 'n']")
        {'value': ['a', 1, 2], 'error': "3 value(s) for the 2 columns ['k', 'n']"}
    """
    if isinstance(row, Mapping):
        out = dict(row)
    elif dataclasses.is_dataclass(row) and not isinstance(row, type):
        out = dataclasses.asdict(row)
    elif callable(getattr(row, "asDict", None)):  # a Spark Row
        out = row.asDict()
    elif callable(getattr(row, "_asdict", None)):  # a named tuple
        out = dict(row._asdict())
    else:
        out = {"value": list(row) if isinstance(row, tuple) else row}
    out[ERROR_FIELD] = reason
    return out


def batch_digest(table: pa.Table) -> str:
    """An order-independent fingerprint of ``table``'s rows: ``"<rows>:<hash>"``.

    Two tables with the same rows in any order (and any chunking) have the same digest;
    it is what the Spark sink compares when a micro-batch re-runs.

    Example:
        >>> import pyarrow as pa
        >>> a = pa.table({"k": ["x", "y"], "n": [1, 2]})
        >>> batch_digest(a) == batch_digest(a.take([1, 0]))
        True
        >>> batch_digest(a).split(":")[0]
        '2'
    """
    if table.num_rows == 0:
        return "0:0"
    texts = pa.table(
        [_as_strings(c) for c in table.columns], names=[str(i) for i in range(table.num_columns)]
    )
    order = pc.sort_indices(texts, sort_keys=[(n, "ascending") for n in texts.column_names])
    h = hashlib.sha256(",".join(f"{f.name}:{f.type}" for f in table.schema).encode())
    for column in texts.take(order).columns:  # canonical: sorted rows, contiguous buffers
        arr = column.combine_chunks()
        h.update(np.packbits(arr.is_null().to_numpy(zero_copy_only=False)).tobytes())
        arr = pc.fill_null(arr, "")
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
        offsets = offsets[arr.offset : arr.offset + len(arr) + 1]
        h.update((offsets - offsets[0]).tobytes())
        h.update(memoryview(arr.buffers()[2])[offsets[0] : offsets[-1]])
    return f"{table.num_rows}:{h.hexdigest()[:24]}"


def _as_strings(column: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """The column as text (Arrow's cast; ``repr`` of the values for types it cannot cast)."""
    try:
        return pc.cast(column, pa.string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else repr(v) for v in column.to_pylist()], pa.string())


# -- the store contract ------------------------------------------------------------------------
class TransactionalStore(ABC, Generic[Txn]):
    """One output partition's view of a transactional (or idempotent) external system.

    A connector author implements it; :class:`WindowCommitter` drives it. For window ``w``
    of the partition ``key`` the committer runs::

        txn = begin(w)
        read_committed_locked(txn)       # >= w: already committed (a replay), abort
        rejected = write(txn, rows)      # any number of calls' worth of rows
        store_rejected(txn, w, ...)      # only when records_rejected
        store_committed(txn, CommitMark(w, ...))
        commit(txn)                      # on any failure: abort(txn, error)

    and retries the whole window while :meth:`is_transient` says the failure is the
    system being unavailable. Every method except :meth:`open`, :meth:`close` and
    :meth:`committed` may be retried, so each must be safe to run again.

    Type parameter ``Txn``: whatever :meth:`begin` returns (a database connection in a
    transaction, a producer, an open file).
    """

    #: True when :meth:`store_rejected` keeps rejected rows with their window, so that a
    #: replay re-emits them (:meth:`read_rejected`)
    records_rejected: bool = False
    #: True when the store implements :meth:`committed_partitions`, :meth:`stage`,
    #: :meth:`staged` and :meth:`drop_staged` (the Spark sink's partly committed batches)
    stages_batches: bool = False

    def __init__(self, key: WindowKey) -> None:
        self.key = key

    # -- lifecycle -----------------------------------------------------------------------
    def open(self) -> None:
        """Connect, check the target, create bookkeeping tables; called (with retries) once
        before the first window. Must not read or write a window."""

    def close(self) -> None:
        """Release connections and clients (the partition is retired)."""

    # -- the window protocol ----------------------------------------------------------------
    @abstractmethod
    def read_committed(self) -> CommitMark:
        """The last window committed for :attr:`key`, read outside any transaction
        (``CommitMark()`` when none)."""

    @abstractmethod
    def begin(self, window: int) -> Txn:
        """Begin the transaction of ``window``."""

    @abstractmethod
    def read_committed_locked(self, txn: Txn) -> CommitMark:
        """The last committed window re-read inside ``txn`` so that a second writer of the
        same partition (a zombie task and its replacement) serializes behind this one:
        a row lock (``SELECT ... FOR UPDATE``), a fenced producer epoch, an exclusive file."""

    @abstractmethod
    def write(self, txn: Txn, rows: pa.Table) -> list[dict[str, Any]]:
        """Write ``rows`` inside ``txn``; return the rows the system rejected, each as
        :func:`rejected_row` (the other rows still commit). Raise for anything else."""

    @abstractmethod
    def store_committed(self, txn: Txn, mark: CommitMark) -> None:
        """Record ``mark`` as this partition's committed window, inside ``txn``."""

    @abstractmethod
    def commit(self, txn: Txn) -> None:
        """Commit ``txn``: the rows and the mark become visible together."""

    @abstractmethod
    def abort(self, txn: Txn, error: BaseException | None) -> None:
        """Roll ``txn`` back (best effort; ``error`` is why, None for a skipped window).
        Also called after :meth:`commit` raised (the commit may or may not have taken
        effect: the retry's :meth:`read_committed_locked` tells). Must not raise."""

    def is_transient(self, error: BaseException) -> bool:
        """True when ``error`` means "unavailable, retry the window" (refused, restarted,
        timed out waiting for a lock); False for errors retrying cannot fix."""
        return isinstance(error, ConnectionError | TimeoutError)

    # -- optional ----------------------------------------------------------------------------
    def store_rejected(self, txn: Txn, window: int, rows: list[dict[str, Any]]) -> None:
        """Keep ``rows`` (error-port rows) with ``window`` inside ``txn``; only called when
        :attr:`records_rejected`."""
        raise NotImplementedError

    def read_rejected(self, window: int) -> list[dict[str, Any]]:
        """The rows :meth:`store_rejected` kept with ``window`` (replays re-emit them)."""
        raise NotImplementedError

    def committed(self, window: int) -> None:
        """Every window up to ``window`` is durable in the whole application (the engine's
        ``committed``): finalize what must wait for it (rename in-progress files)."""

    def describe(self) -> str:
        """What errors name: the target, without secrets."""
        return f"{type(self).__name__} {self.key}"

    def failure(self, what: str, error: BaseException, *, attempts: int) -> OutputError:
        """The error raised when ``what`` failed with ``error`` after ``attempts`` tries (a
        transient error after the last retry, or any other error at once)."""
        if self.is_transient(error):
            return OutputUnavailableError(
                f"{what} for {self.key}: {self.describe()} still unavailable after "
                f"{attempts} attempts: {type(error).__name__}: {error}"
            )
        return OutputError(
            f"{what} for {self.key} into {self.describe()} failed: {type(error).__name__}: {error}"
        )

    # -- optional (stages_batches), the Spark sink's re-runs (see TransactionalStreamWriter) --
    def committed_partitions(self, window: int) -> dict[int, str | None]:
        """Partitions of this key's application and operator whose committed window is
        ``window`` or later, with the run that committed each."""
        raise NotImplementedError

    def stage(self, window: int, run: str, rows: pa.Table) -> None:
        """Keep ``rows`` aside (own transaction) as this partition's input of ``window``,
        replacing an earlier staging of it, until the driver applies them."""
        raise NotImplementedError

    def staged(self, window: int, run: str) -> pa.Table | None:
        """The rows :meth:`stage` kept for ``window`` and ``run`` (None: none)."""
        raise NotImplementedError

    def drop_staged(self, txn: Txn, window: int) -> None:
        """Forget staged rows of this partition up to ``window``, inside ``txn``."""
        raise NotImplementedError


# -- the committer -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RetryPolicy:
    """How long a window is retried while the system is unavailable.

    ``attempts`` tries in all; the waits start at ``backoff`` seconds and double up to
    ``max_backoff``.

    Example:
        >>> list(RetryPolicy(attempts=5, backoff=0.5, max_backoff=1.5).delays())
        [0.5, 1.0, 1.5, 1.5]
    """

    attempts: int = 8
    backoff: float = 0.5
    max_backoff: float = 10.0

    def delays(self) -> Iterator[float]:
        """The waits between tries (``attempts - 1`` of them)."""
        delay = float(self.backoff)
        for _ in range(self.attempts - 1):
            yield delay
            delay = min(delay * 2, float(self.max_backoff))


#: told about every retry: (attempt, delay in seconds, the error)
RetryHook = Callable[[int, float, BaseException], None]
#: called inside the transaction after the mark, just before commit: (txn, window)
CommitHook = Callable[[Any, int], None]
#: called inside the transaction with every rejected row; may raise to abort the window
RejectHook = Callable[[Any, int, list[dict[str, Any]]], None]


@dataclass
class WindowResult:
    """What happened to one window."""

    window: int
    skipped: bool = False  #: already committed earlier: nothing written
    written: int = 0  #: rows the system accepted (and committed)
    rejected: list[dict[str, Any]] = field(default_factory=list)  #: error-port rows
    attempts: int = 0  #: transactions tried (1 when the system was up)
    replayed: bool = False  #: ``rejected`` was read back from an earlier commit's record


def _log_retry(attempt: int, delay: float, error: BaseException) -> None:
    log.warning(
        "malhar output: unavailable (attempt %d), retrying in %.2fs: %s", attempt, delay, error
    )


class WindowCommitter(Generic[Txn]):
    """Runs the exactly-once protocol of :class:`TransactionalStore` for one output partition.

    Args:
        store: the partition's store.
        retry: how long to retry while the system is unavailable.
        skip_older_windows: skip windows *older* than the committed one (Apex's behaviour)
            instead of raising :class:`WindowRegressionError`.
        on_retry: told about every retry (a warning is logged by default).
        run: recorded with every committed window (see :class:`CommitMark`).
        sleep: waits between retries (tests may speed it up).
    """

    def __init__(
        self,
        store: TransactionalStore[Txn],
        *,
        retry: RetryPolicy | None = None,
        skip_older_windows: bool = False,
        on_retry: RetryHook | None = None,
        run: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.retry = retry or RetryPolicy()
        self.skip_older_windows = skip_older_windows
        self.on_retry = on_retry or _log_retry
        self.run = run
        self.sleep = sleep
        self.mark = CommitMark()  #: the last mark read or written
        self.opened = False

    @property
    def committed(self) -> int:
        """The last window known committed for the store's key."""
        return self.mark.window

    def open(self) -> int:
        """Open the store and read its committed window (with retries); return it."""
        if not self.opened:
            self.retrying("connecting", self.store.open)
            self.opened = True
        return self.refresh()

    def refresh(self) -> int:
        """Re-read the committed window (outside a transaction); return it."""
        mark = self.retrying("reading the committed window", self.store.read_committed)
        if mark.window >= self.mark.window:
            self.mark = mark
        return self.mark.window

    def close(self) -> None:
        """Close the store."""
        self.store.close()
        self.opened = False

    def is_committed(self, window: int, committed: int | None = None) -> bool:
        """True when ``window`` is already committed (a replay: skip it).

        Raises:
            WindowRegressionError: ``window`` is older than the committed one and
                ``skip_older_windows`` is off.
        """
        done = self.mark.window if committed is None else committed
        if window < done and not self.skip_older_windows:
            raise WindowRegressionError(
                f"{self.store.key}: window {window} is older than window {done}, already "
                f"committed in {self.store.describe()}. Window ids went backwards: the "
                "application restarted with a new checkpoint under a name that already has "
                "committed windows. Keep the checkpoint, give the application a new name, or "
                "delete its committed-window records (or set skip_older_windows to skip "
                "such windows)"
            )
        return window <= done

    def verify(self, window: int, digest: str | None, mark: CommitMark | None = None) -> bool:
        """Compare ``digest`` with the one committed for ``window``; True when they were
        compared and match, False when there is nothing to compare.

        Raises:
            WindowContentMismatchError: the window re-ran with other input.
        """
        mark = mark or self.mark
        if digest is None or mark.digest is None or mark.window != window:
            return False
        if mark.digest != digest:
            raise WindowContentMismatchError(
                f"{self.store.key}: window {window} re-ran with other input than when it was "
                f"committed (rows:fingerprint {digest} now, {mark.digest} then) into "
                f"{self.store.describe()}. Its committed rows are kept and the re-run is "
                "refused: the input of a micro-batch must be the same when it re-runs "
                "(no round-robin repartition() or other nondeterministic step before the "
                "sink; use repartition(n, columns) or write without repartitioning)"
            )
        return True

    def replayed_rejects(self, window: int) -> list[dict[str, Any]]:
        """The rejected rows recorded with ``window`` when it was committed ([] when the
        store does not record them)."""
        if not self.store.records_rejected:
            return []
        return self.retrying(
            f"reading the rejected rows of window {window}",
            lambda: self.store.read_rejected(window),
        )

    def commit_window(
        self,
        window: int,
        rows: pa.Table,
        *,
        rejected: Sequence[dict[str, Any]] = (),
        digest: str | None = None,
        run: str | None = None,
        on_rejected: RejectHook | None = None,
        before_commit: CommitHook | None = None,
    ) -> WindowResult:
        """Write ``rows`` as ``window`` in one transaction, unless it is already committed.

        Args:
            window: the window id.
            rows: the window's rows.
            rejected: rows refused before reaching the store (badly shaped): recorded with
                the window and returned with the store's own rejects.
            digest: the window input's fingerprint, recorded and, for a window found
                committed, compared (:meth:`verify`).
            run: recorded with the window instead of the committer's ``run``.
            on_rejected: called in the transaction with every rejected row (may raise).
            before_commit: called in the transaction after the mark, before commit.

        Returns:
            What happened; a skipped window's ``rejected`` are the rows recorded when it
            was committed (when the store records them).
        """
        if self.is_committed(window):
            self.verify(window, digest)
            return WindowResult(
                window, skipped=True, rejected=self.replayed_rejects(window), replayed=True
            )
        result = WindowResult(window)
        early = list(rejected)
        mark = CommitMark(window, digest, run or self.run)
        store = self.store

        def attempt() -> None:
            result.attempts += 1
            result.skipped, result.replayed, result.written, result.rejected = False, False, 0, []
            txn = store.begin(window)
            aborted = False
            try:
                found = store.read_committed_locked(txn)
                if self.is_committed(window, found.window):
                    self._remember(found)
                    self.verify(window, digest, found)
                    aborted = True
                    store.abort(txn, None)  # nothing to write: a replay
                    result.skipped, result.replayed = True, True
                    result.rejected = store.read_rejected(window) if store.records_rejected else []
                    return
                refused = store.write(txn, rows) if rows.num_rows else []
                every = early + refused
                if every and on_rejected is not None:
                    on_rejected(txn, window, every)
                if every and store.records_rejected:
                    store.store_rejected(txn, window, every)
                store.store_committed(txn, mark)
                if before_commit is not None:
                    before_commit(txn, window)
                store.commit(txn)
            except BaseException as exc:
                if not aborted:  # also after a commit that raised: release the transaction
                    store.abort(txn, exc)
                raise
            result.written = rows.num_rows - len(refused)
            result.rejected = every
            self._remember(mark)

        self.retrying(f"writing window {window}", attempt)
        return result

    def _remember(self, mark: CommitMark) -> None:
        if mark.window >= self.mark.window:
            self.mark = mark

    def retrying(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn``; while the store says the failure is transient, wait and run it again
        (:class:`RetryPolicy`). :class:`OutputError`\\ s pass through; anything else is
        explained by :meth:`TransactionalStore.failure`."""
        delays = self.retry.delays()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except OutputError:
                raise
            except Exception as exc:
                delay = next(delays, None) if self.store.is_transient(exc) else None
                if delay is None:
                    raise self.store.failure(what, exc, attempts=attempt) from exc
                self.on_retry(attempt, delay, exc)
                self.sleep(delay)


# -- settings ------------------------------------------------------------------------------------
class TransactionalSettings(Configurable):
    """Settings every transactional output has (its connector's settings class extends it)."""

    retry_attempts = Property(int, default=8, min=1, doc="tries while the target is unavailable")
    retry_backoff = Property((int, float), default=0.5, min=0, doc="first wait between tries (s)")
    max_backoff = Property((int, float), default=10.0, min=0, doc="longest wait between tries (s)")
    skip_older_windows = Property(
        bool, default=False, doc="skip (instead of failing on) windows older than the committed one"
    )

    def retry_policy(self) -> RetryPolicy:
        """The retry settings as a :class:`RetryPolicy`."""
        return RetryPolicy(
            int(self.retry_attempts), float(self.retry_backoff), float(self.max_backoff)
        )

    def settings_of(self, cls: type[S]) -> S:
        """A ``cls`` instance holding this object's values of ``cls``' properties (the
        operator's configuration, as the plain settings object its store takes)."""
        out = cls.__new__(cls)
        for name in properties_of(cls):
            if name in self.__dict__:
                out.__dict__[name] = self.__dict__[name]
        return out

    #: what :meth:`check_settings` and bad options raise (a connector's own config error)
    config_error: ClassVar[type[Exception]] = OutputConfigError

    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work (each property's own checks; connectors
        add the checks across properties)."""
        return self.property_problems()

    def check_settings(self) -> None:
        """Raise :attr:`config_error` listing every problem of :meth:`settings_problems`."""
        problems = self.settings_problems()
        if problems:
            raise self.config_error(
                f"invalid {type(self).__name__} settings: " + "; ".join(problems)
            )

    def __repr__(self) -> str:
        scrub = Scrubber()
        shown = []
        for name, prop in properties_of(type(self)).items():
            value = getattr(self, name)
            if value is None or value == prop.default:
                continue
            scrub.add(value, name, secret=prop.secret)
            shown.append(f"{name}={'***' if prop.secret else repr(value)}")
        return scrub(f"{type(self).__name__}({', '.join(shown)})")


# -- the operator ---------------------------------------------------------------------------------
class WindowBuffer:
    """The tuples and Arrow batches of one (application) window, in arrival order, with
    the window's id and whether it is a replay being skipped. Checkpointed with the
    operator (application windows spanning several streaming windows); emptied at
    ``end_window``, so an idle buffer pickles to the same bytes every window."""

    def __init__(self) -> None:
        self.window = NO_WINDOW
        self.skip = False
        self.pieces: list[Any] = []  # lists of tuples and Arrow batches, in arrival order
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def begin(self, window: int, skip: bool) -> None:
        self.clear()
        self.window, self.skip = window, skip

    def clear(self) -> None:
        self.window, self.skip, self.pieces, self.count = NO_WINDOW, False, [], 0

    def add(self, value: Any) -> None:
        """Add one tuple (an Arrow batch or table is added as a batch)."""
        if isinstance(value, pa.RecordBatch | pa.Table):
            self.add_batch(value)
            return
        if not self.pieces or not isinstance(self.pieces[-1], list):
            self.pieces.append([])
        self.pieces[-1].append(value)
        self.count += 1

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add an Arrow record batch (kept as it is: no per-row work)."""
        if batch.num_rows:
            self.pieces.append(batch)
            self.count += batch.num_rows


class TransactionalOutputOperator(
    Operator, TransactionalSettings, ActivationListener, CheckpointListener
):
    """The operator base of a transactional output: each partition writes a window in one
    transaction of its :class:`TransactionalStore`, so every window lands exactly once.

    A connector author subclasses it (usually together with the connector's settings
    class) and fills :meth:`create_store`, and :meth:`window_rows` when tuples need
    checking or converting. The base buffers the window's tuples and Arrow batches in a
    :class:`~malhar.state.State` field (an application window may span several streaming
    windows), drops the tuples of a window that is already committed (a replay), writes
    the window at ``end_window`` through a :class:`WindowCommitter`, and emits rejected
    rows on the error port ``error`` as ``{**row, "error": reason}``. With a store that
    records rejected rows, a replayed window re-emits the rows it rejected the first time.

    The committed-window records are keyed by (application name, operator, partition):
    the application must have an explicit, unique name (``DAG("name")``); the engine's
    default name is refused, since every unnamed application would share it.
    """

    input = InputPort()
    error = OutputPort(error=True)

    #: the open window's tuples, id and replay flag (see WindowBuffer)
    _buffer = State(WindowBuffer)

    def __init__(self, **properties: Any) -> None:
        """Set properties by name (an unknown name fails naming the closest ones)."""
        self.configure(**properties)

    # -- to fill ------------------------------------------------------------------------------
    def create_store(self, context: OperatorContext) -> TransactionalStore[Any]:
        """The store of this partition (not opened yet), built from the properties."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_store()")

    def window_rows(self, buffer: WindowBuffer) -> tuple[pa.Table, list[dict[str, Any]]]:
        """The window's rows as one Arrow table, and the tuples that cannot be written
        (as :func:`rejected_row`). By default mappings and Arrow batches are accepted;
        anything else is rejected."""
        tables: list[pa.Table] = []
        bad: list[dict[str, Any]] = []
        for piece in buffer.pieces:
            if not isinstance(piece, list):
                tables.append(
                    pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece
                )
                continue
            good = []
            for value in piece:
                if isinstance(value, Mapping):
                    good.append(value)
                else:
                    bad.append(
                        rejected_row(value, f"expected a mapping, got {type(value).__name__}")
                    )
            if good:
                tables.append(pa.Table.from_pylist(good))
        if not tables:
            return pa.table({}), bad
        return pa.concat_tables(tables, promote_options="permissive"), bad

    # -- extension points ------------------------------------------------------------------
    def before_commit(self, txn: Any, window_id: int) -> None:
        """Called inside the window's transaction, after its rows and committed-window
        record, just before commit (``txn`` is what the store's ``begin`` returned)."""

    def on_retry(self, attempt: int, delay: float, error: BaseException) -> None:
        """Called when the target is unavailable, before waiting ``delay`` s to retry."""
        log.warning(
            "malhar output %s: unavailable (attempt %d of %d), retrying in %.2fs: %s",
            self._store.key if hasattr(self, "_store") else "?",
            attempt,
            self.retry_attempts,
            delay,
            error,
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        check_application_name(context.application, type(self).__name__)
        self._store = self.create_store(context)
        self._committer = WindowCommitter(
            self._store,
            retry=self.retry_policy(),
            skip_older_windows=bool(self.skip_older_windows),
            on_retry=self.on_retry,
        )
        self._committer.open()
        log.info(
            "malhar output: %s writes to %s, last committed window %d",
            self._store.key,
            self._store.describe(),
            self._committer.committed,
        )

    def begin_window(self, window_id: int) -> None:
        # A replayed window that this partition already committed: drop its tuples.
        self._buffer.begin(window_id, self._committer.is_committed(window_id))

    def process(self, value: Any) -> None:
        if not self._buffer.skip:
            self._buffer.add(value)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if not self._buffer.skip:
            self._buffer.add_batch(batch)

    def end_window(self) -> None:
        buffer = self._buffer
        try:
            if buffer.skip:
                # a replay: re-emit the rows this window rejected when it was committed
                self._emit(self._committer.replayed_rejects(buffer.window), buffer.window)
                return
            if not len(buffer):
                return  # empty windows do not touch the target
            rows, bad = self.window_rows(buffer)
            result = self._committer.commit_window(
                buffer.window, rows, rejected=bad, before_commit=self.before_commit
            )
            if result.skipped:
                log.info(
                    "malhar output: %s window %d already committed", self._store.key, result.window
                )
            self._emit(result.rejected, result.window)
        finally:
            buffer.clear()

    def _emit(self, rejected: list[dict[str, Any]], window: int) -> None:
        if not rejected:
            return
        log.warning(
            "malhar output: %s window %d: %d row(s) rejected to the error port, first: %s",
            self._store.key,
            window,
            len(rejected),
            rejected[0].get(ERROR_FIELD),
        )
        for row in rejected:
            self.error.emit(row)

    def committed(self, window_id: int) -> None:
        store = getattr(self, "_store", None)
        if store is not None:
            store.committed(window_id)

    def teardown(self) -> None:
        committer = getattr(self, "_committer", None)
        if committer is not None:
            committer.close()

    # -- for subclasses ---------------------------------------------------------------------
    @property
    def _window(self) -> int:
        """The open window's id (``NO_WINDOW`` between windows)."""
        return self._buffer.window

    @property
    def _skip(self) -> bool:
        """True while the open window is a replay of a committed one (its tuples dropped)."""
        return self._buffer.skip


def check_application_name(application: str, who: str) -> None:
    """Refuse the engine's default application name: committed windows are keyed by it, and
    every application launched without a name would share them (and skip each other's
    windows)."""
    if not application or application == APPLICATION_NAME.default:
        raise OutputConfigError(
            f"{who}: the application has no name of its own ({application!r} is the default "
            "that every unnamed application shares). A transactional output keys its "
            "committed windows by the application's name, so two unnamed applications would "
            "skip each other's windows. Name it: DAG('my-app'), the APPLICATION_NAME "
            "attribute, or `malhar run --name`"
        )


# -- the Spark sink -------------------------------------------------------------------------------
#: Spark's task-local property holding the micro-batch id (internal to Spark: checked)
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: options Spark itself adds to a sink's options
SPARK_SINK_OPTIONS = frozenset({"checkpointlocation", "path"})


class TransactionalSinkSettings(TransactionalSettings):
    """Settings every transactional Spark sink has besides the connector's own."""

    name = Property(
        str, not_null=True, doc="the query's stable name: keys the committed batches (required)"
    )
    operator = Property(str, default="sink", not_null=True, doc="the operator part of the key")
    verify_reruns = Property(
        bool,
        default=True,
        doc="fingerprint each partition's batch and refuse a re-run with other rows",
    )

    def from_options(self, options: Mapping[str, Any]) -> TransactionalSinkSettings:
        """Set the properties from Spark's string options (names case-insensitive; Spark's
        own options are skipped; an unknown name fails with "did you mean")."""
        mine = {k: v for k, v in options.items() if str(k).lower() not in SPARK_SINK_OPTIONS}
        try:
            self.configure_from_strings(mine)
        except PropertyError as exc:
            raise self.config_error(str(exc)) from None
        return self


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did with its partition of a micro-batch."""

    partition: int
    batch: int
    written: int = 0
    rejected: int = 0
    skipped: bool = False  #: committed earlier: nothing written
    verified: bool = False  #: skipped, and its rows matched the committed fingerprint
    staged: str | None = None  #: the run whose staged rows the driver's commit applies
    digest: str | None = None


# Committers live as long as the Python worker (Spark reuses workers): one per partition key.
_COMMITTERS: OrderedDict[tuple, WindowCommitter[Any]] = OrderedDict()
_MAX_COMMITTERS = 32


class TransactionalStreamWriter(DataSourceStreamArrowWriter):
    """The Spark sink base of a transactional output: each task writes its partition of
    micro-batch ``N`` through a :class:`WindowCommitter` as window ``N`` of the output
    partition ``(name, operator, task partition)``.

    A connector author fills :meth:`create_store` (and :meth:`batch_rows` to check rows).

    **Re-runs.** Spark re-runs a micro-batch after a failure with the same ``batchId``;
    partitions that committed it skip. Exactly once needs every partition to get the
    same rows again. With ``verify_reruns`` (the default) each partition records a
    fingerprint of its rows (:func:`batch_digest`) with the committed batch:

    - a partition that committed the batch compares the re-run's rows and fails with
      :class:`WindowContentMismatchError` when they differ;
    - a partition that did not commit it, in a batch that other partitions committed in an
      earlier execution (a *partial* batch), does not write: it stages its rows, and the
      driver's :meth:`commit` applies them only when every partition that committed the
      batch earlier matched. Whatever the re-run's distribution, the rows not yet written
      are then exactly the staged ones.

    Args:
        settings: the sink's settings (shipped to the tasks).
        run: this execution's token (recorded with each committed batch); a new one by
            default: Spark builds a writer for every execution of a batch.
    """

    def __init__(self, settings: TransactionalSinkSettings, run: str | None = None) -> None:
        self.settings = settings
        self.run = run or uuid.uuid4().hex[:16]

    # -- to fill ------------------------------------------------------------------------------
    def create_store(self, key: WindowKey) -> TransactionalStore[Any]:
        """The store of one sink partition (not opened yet)."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_store()")

    def batch_rows(
        self, store: TransactionalStore[Any], rows: pa.Table
    ) -> tuple[pa.Table, list[dict[str, Any]]]:
        """The rows to write and the rows refused before the store (by default all rows
        are written)."""
        return rows, []

    def on_rejected(self, txn: Any, window: int, rejected: list[dict[str, Any]]) -> None:
        """Called in the transaction with the batch's rejected rows when the store does not
        record them (a sink has no error port): by default the batch fails, naming the
        first reason."""
        raise OutputError(
            f"{type(self).__name__} {self.settings.name}: {len(rejected)} row(s) of batch "
            f"{window} cannot be written ({rejected[0].get(ERROR_FIELD)}), and the store "
            "keeps no rejected rows"
        )

    def before_commit(self, txn: Any, window: int) -> None:
        """Called inside the transaction just before commit."""

    # -- running ---------------------------------------------------------------------------
    def committer(self, key: WindowKey) -> WindowCommitter[Any]:
        """This process's opened committer of ``key`` (created on first use)."""
        cache_key = (type(self), self._settings_key(), key)
        found = _COMMITTERS.pop(cache_key, None)
        if found is None:
            found = WindowCommitter(
                self.create_store(key),
                retry=self.settings.retry_policy(),
                skip_older_windows=bool(self.settings.skip_older_windows),
            )
            found.open()
        _COMMITTERS[cache_key] = found
        while len(_COMMITTERS) > _MAX_COMMITTERS:
            _, old = _COMMITTERS.popitem(last=False)
            old.close()
        return found

    def _settings_key(self) -> tuple:
        props = properties_of(type(self.settings))
        return tuple((n, repr(getattr(self.settings, n))) for n in sorted(props))

    def key(self, partition: int) -> WindowKey:
        return WindowKey(self.settings.name, self.settings.operator, partition)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if batch_id is None:
            raise OutputError(
                f"{type(self).__name__}: no micro-batch id in the task (Spark property "
                f"{BATCH_ID_PROPERTY!r}); this sink works only in streaming queries"
            )
        batch, partition = int(batch_id), ctx.partitionId()
        key = self.key(partition)
        committer = self.committer(key)
        committer.refresh()
        verify = bool(self.settings.verify_reruns)
        if committer.committed >= batch and not verify:
            committer.is_committed(batch)  # raises for a regression
            for _ in iterator:  # the batch is replayed: its rows are already written
                pass
            return SinkCommit(partition, batch, skipped=True)
        batches = [b for b in iterator if b.num_rows]
        data = pa.Table.from_batches(batches) if batches else pa.table({})
        digest = batch_digest(data) if verify else None
        if committer.is_committed(batch):
            verified = committer.verify(batch, digest)
            return SinkCommit(partition, batch, skipped=True, verified=verified, digest=digest)
        store = committer.store
        if verify and store.stages_batches and self._partial(committer, batch, partition):
            committer.retrying(f"staging batch {batch}", lambda: store.stage(batch, self.run, data))
            return SinkCommit(partition, batch, staged=self.run, digest=digest)
        if not data.num_rows:
            return SinkCommit(partition, batch)
        result = self._apply(committer, batch, data, digest, self.run, staged=False)
        return SinkCommit(
            partition, batch, result.written, len(result.rejected), result.skipped, digest=digest
        )

    def _partial(self, committer: WindowCommitter[Any], batch: int, partition: int) -> bool:
        """True when other partitions committed ``batch`` in an earlier execution."""
        store = committer.store
        found = committer.retrying(
            f"reading the partitions of batch {batch}",
            lambda: store.committed_partitions(batch),
        )
        return any(p != partition and run != self.run for p, run in found.items())

    def _apply(
        self,
        committer: WindowCommitter[Any],
        batch: int,
        data: pa.Table,
        digest: str | None,
        run: str,
        *,
        staged: bool,
    ) -> WindowResult:
        store = committer.store
        rows, bad = self.batch_rows(store, data)

        def before(txn: Any, window: int) -> None:
            if staged:
                store.drop_staged(txn, window)
            self.before_commit(txn, window)

        return committer.commit_window(
            batch,
            rows,
            rejected=bad,
            digest=digest,
            run=run,
            on_rejected=None if store.records_rejected else self.on_rejected,
            before_commit=before,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        staged = [m for m in done if m.staged]
        if staged:
            self._apply_staged(batchId, done, staged)
        log.info(
            "%s %s: batch %d committed: %d rows written, %d rejected, %d partitions skipped, "
            "%d applied from staging",
            type(self).__name__,
            self.settings.name,
            batchId,
            sum(m.written for m in done),
            sum(m.rejected for m in done),
            sum(m.skipped for m in done),
            len(staged),
        )

    def _apply_staged(self, batch: int, done: list[SinkCommit], staged: list[SinkCommit]) -> None:
        """The driver's half of a partial batch: apply the staged partitions once every
        partition that committed the batch in an earlier execution has matched."""
        run = staged[0].staged
        assert run is not None
        first = self.committer(self.key(staged[0].partition))
        earlier = first.retrying(
            f"reading the partitions of batch {batch}",
            lambda: first.store.committed_partitions(batch),
        )
        matched = {m.partition for m in done if m.verified}
        unverified = sorted(p for p, r in earlier.items() if r != run and p not in matched)
        if unverified:
            raise WindowContentMismatchError(
                f"{self.settings.name}: batch {batch} was partly committed by an earlier "
                f"execution (partitions {sorted(earlier)}), and partitions {unverified} of it "
                "did not re-run with the same rows, so the rows still to write cannot be "
                f"known; the staged partitions {sorted(m.partition for m in staged)} are not "
                "applied. The re-run of a micro-batch must have the same partitions and rows"
            )
        for m in staged:
            committer = self.committer(self.key(m.partition))
            store = committer.store
            data = committer.retrying(
                f"reading the staged rows of batch {batch}",
                functools.partial(store.staged, batch, run),
            )
            if data is None:
                raise OutputError(
                    f"{self.key(m.partition)}: the staged rows of batch {batch} (run {run}) are "
                    f"missing from {store.describe()}"
                )
            m.digest = m.digest or (batch_digest(data) if self.settings.verify_reruns else None)
            result = self._apply(committer, batch, data, m.digest, run, staged=True)
            m.written, m.rejected, m.skipped = result.written, len(result.rejected), result.skipped

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Partitions that committed keep their rows: the re-run of batchId skips them.
        log.warning("%s %s: batch %d aborted", type(self).__name__, self.settings.name, batchId)
