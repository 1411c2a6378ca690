"""Transactional outputs: the contract a connector author fills.

An output is exactly once when each partition writes a window's rows **and** the id of
that window in one atomic step of the external system, and skips a window whose id it
finds already there (Apex Malhar's ``TransactionableStore`` +
``AbstractTransactionableStoreOutputOperator``). The parts:

- :class:`TransactionalStore` (here): one output partition's view of the external
  system; the connector author implements it (a database transaction, a Kafka
  transaction whose ``send_offsets_to_transaction`` stores the window id, a file written
  in progress and renamed when the window commits);
- :class:`~malhar.io.base.committer.WindowCommitter`: runs the protocol for one window on
  any store: skip if committed, re-check under the transaction (fencing a zombie writer),
  write, record the window (and the rejected rows), commit, retry the whole window while
  the system is unavailable (:class:`RetryPolicy`), :class:`WindowRegressionError` for
  ids that went backwards;
- :class:`~malhar.io.base.output_operator.TransactionalOutputOperator`: the malhar
  operator base (buffers an application window, writes it at ``end_window``, error port
  ``error``);
- :class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`: the Spark sink base
  (``df.writeStream.format(...)``), on the same store and committer; a micro-batch is a
  window, ``batchId`` its id, the task's partition the output partition.

Settings are :class:`~malhar.properties.Property` declarations on one
:class:`~malhar.properties.Configurable` class (:class:`TransactionalSettings` and the
connector's subclass), shared by the operator (as its properties) and the Spark sink
(from its string options); the running partition (connections, clients) is built from
them where it runs. All of these are importable from :mod:`malhar.io.base`. See
``docs/howto-output.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.attributes import APPLICATION_NAME
from malhar.errors import ConfigError, MalharError
from malhar.properties import Configurable, Property, properties_of
from malhar.redaction import Scrubber

__all__ = [
    "NO_WINDOW",
    "CommitMark",
    "OutputConfigError",
    "OutputError",
    "OutputUnavailableError",
    "RetryPolicy",
    "TransactionalSettings",
    "TransactionalStore",
    "WindowContentMismatchError",
    "WindowKey",
    "WindowRegressionError",
    "batch_digest",
    "check_application_name",
    "checkpoint_run",
    "is_checkpoint_run",
    "rejected_row",
]

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
        run: who committed it: the Spark sink's per-execution token, or an output
            operator's checkpoint (:func:`checkpoint_run`).
    """

    window: int = NO_WINDOW
    digest: str | None = None
    run: str | None = None

    def by_other_checkpoint(self, run: str | None) -> bool:
        """True when this window was committed by another checkpoint than the one ``run``
        (a :func:`checkpoint_run`) names; False when either does not name a checkpoint
        (marks written before checkpoints were recorded, the Spark sink's runs)."""
        return is_checkpoint_run(run) and is_checkpoint_run(self.run) and run != self.run


#: how a checkpoint's identity is written as a :attr:`CommitMark.run` (the Spark sink's
#: tokens are plain hex: never taken for one)
_CHECKPOINT_RUN = "checkpoint:"


def checkpoint_run(identity: str | None) -> str | None:
    """The :attr:`CommitMark.run` an output operator records for the checkpoint of identity
    ``identity`` (:mod:`malhar.engine.checkpoint_identity`); None without one."""
    return None if identity is None else f"{_CHECKPOINT_RUN}{identity}"


def is_checkpoint_run(run: str | None) -> bool:
    """True when ``run`` names a checkpoint (:func:`checkpoint_run`), not a Spark sink's run."""
    return run is not None and run.startswith(_CHECKPOINT_RUN)


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


def rows_json(value: Any, default: Callable[[Any], Any] = str) -> str:
    """JSON of error-port rows that a store keeps with their window: ``default`` gives the
    values JSON has no form for, and a key JSON has no form for (a tuple) becomes its
    ``str`` (``json.dumps`` refuses such a key whatever ``default`` is: the window failed
    on every replay); past 100 levels (or a cycle) a value is its ``repr``."""
    try:
        return json.dumps(value, default=default)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(_json_plain(value, 0), default=default)


def _json_plain(value: Any, depth: int) -> Any:
    if depth > 100:
        return repr(value)
    if isinstance(value, Mapping):
        return {
            (k if k is None or isinstance(k, str | int | float) else str(k)): _json_plain(
                v, depth + 1
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_json_plain(v, depth + 1) for v in value]
    return value


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


# -- names that moved to their own modules -------------------------------------------------------
_MOVED = {
    "WindowCommitter": "malhar.io.base.committer",
    "WindowResult": "malhar.io.base.committer",
    "WindowBuffer": "malhar.io.base.output_operator",
    "TransactionalOutputOperator": "malhar.io.base.output_operator",
    "SinkCommit": "malhar.io.base.spark_sink",
    "TransactionalSinkSettings": "malhar.io.base.spark_sink",
    "TransactionalStreamWriter": "malhar.io.base.spark_sink",
}


def __getattr__(name: str) -> Any:
    """The names this module held before the operator, committer and sink got modules of
    their own: old imports keep working, and so do checkpoints that pickled an output's
    ``WindowBuffer`` under this module's name (a pickle names the class's module)."""
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
