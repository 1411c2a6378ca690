"""The committer: the one implementation of "every window lands exactly once" that all
transactional outputs share, on any :class:`~malhar.io.base.output.TransactionalStore`:
skip a committed window, re-check under the transaction (fencing a zombie writer), write,
record the window (and its rejected rows), commit; retry the whole window while the
system is unavailable; :class:`~malhar.io.base.output.WindowRegressionError` for ids that
went backwards. Used by the operator (:mod:`malhar.io.base.output_operator`) and the Spark
sink (:mod:`malhar.io.base.spark_sink`) alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pyarrow as pa

from malhar.io.base.output import (
    CommitMark,
    OutputError,
    RetryPolicy,
    TransactionalStore,
    WindowContentMismatchError,
    WindowRegressionError,
)

log = logging.getLogger("malhar.io.output")

T = TypeVar("T")
Txn = TypeVar("Txn")


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

    def is_committed(self, window: int, committed: CommitMark | None = None) -> bool:
        """True when ``window`` is already committed (a replay: skip it); ``committed``:
        the mark to compare with (default: the last one read or written).

        Raises:
            WindowRegressionError: ``window`` is older than the committed one, or the same
                one committed by another checkpoint, and ``skip_older_windows`` is off.
        """
        mark = self.mark if committed is None else committed
        done = mark.window
        if self.skip_older_windows or window > done:
            return window <= done
        if window < done:
            why = f"window {window} is older than window {done}, already committed"
        elif mark.by_other_checkpoint(self.run):
            why = (
                f"window {window} was already committed by another checkpoint "
                f"({mark.run}; this one is {self.run})"
            )
        else:
            return True  # a replay
        raise WindowRegressionError(
            f"{self.store.key}: {why} in {self.store.describe()}. Window ids went backwards: "
            "the application restarted with a new checkpoint under a name that already has "
            "committed windows. Keep the checkpoint, give the application a new name, or "
            "delete its committed-window records (or set skip_older_windows to skip such "
            "windows)"
        )

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
                "refused. Either the input of a micro-batch changed when it re-ran (a "
                "round-robin repartition() or other nondeterministic step before the sink: "
                "use repartition(n, columns) or write without repartitioning), or the "
                "application restarted with a new checkpoint under a name that already has "
                "committed windows, so its window (batch) ids started again from 0 (keep the "
                "checkpoint, or give the application or query a new name)"
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
                if self.is_committed(window, found):
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


__all__ = ["WindowCommitter", "WindowResult"]
