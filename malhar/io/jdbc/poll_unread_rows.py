"""The rows of a JDBC poll input's source that no window reads, reported: rows committed
late into a key range already read (counted again when their window is committed, and
``late_rows_recheck_ms`` later: the metric ``late_rows``), and rows whose key is NULL, NaN
or infinite (no place in key order: the metrics ``null_key_rows`` and
``non_finite_key_rows``). :class:`UnreadRowReports`, a mixin of
:class:`~malhar.io.jdbc.poll_operator.JdbcPollInputOperator`.

Monitoring only: a count that fails is logged, never a window's failure."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from malhar.io.jdbc.poll_keys import show_key

__all__ = ["NULLS_EVERY_S", "UnreadRowReports"]

# the operator's logger: its messages read as the operator's wherever the code lives
log = logging.getLogger("malhar.io.jdbc.poll")

#: how often the polling partition counts the rows with a NULL key again (seconds)
NULLS_EVERY_S = 60.0


class UnreadRowReports:
    """Counts and warnings of rows no window reads (a mixin of
    :class:`~malhar.io.jdbc.poll_operator.JdbcPollInputOperator`, see the module doc).

    The operator calls :meth:`_report_null_keys` from the last partition, and
    :meth:`_report_late` and :meth:`_recheck_due` when windows are committed
    (``release``) and at the end of a window whose second count is due.
    """

    # provided by the operator
    _query: Any  # PollQuery: the counting statements
    _scalar: Any  # (sql, args) -> the first column of the first row (PollDatabase)
    _count: Any  # (low, high) -> the rows in (low, high] (PollDatabase)
    _late: int  # late rows since the last metrics
    #: ranges to count again: (when, low, high, rows counted at the commit), key order
    _recheck: deque[tuple[float, Any, Any, int]]
    _null_keys: int
    _bad_keys: int
    _nulls_at: float  # time.monotonic() of the last NULL-key count

    def _recheck_due(self) -> None:
        """Count again the committed ranges whose second count is due: one query per run
        of adjacent ranges (a window's range starts where the one before ended)."""
        now = time.monotonic()
        pending = getattr(self, "_recheck", ())
        while pending and pending[0][0] <= now:
            _, low, high, known = pending.popleft()
            while pending and pending[0][0] <= now and pending[0][1] == high:
                high, known = pending[0][2], known + pending.popleft()[3]
            try:
                found = self._count(low, high)
            except Exception as exc:  # monitoring only: never fail a window on it
                log.info("%s: counting (%s, %s] again failed: %s", self.label, low, high, exc)
                return
            self._report_late(found - known, low, high, None)

    def _report_late(self, late: int, low: Any, high: Any, window: int | None) -> None:
        if late <= 0:
            return
        self._late += late
        when = (
            f"after window {window} read that range"
            if window is not None
            else f"more than {self.late_rows_recheck_ms} ms after that range was read"
        )
        log.warning(
            "%s: %d row(s) were committed with %s in (%s, %s] %s: they were not read. Rows "
            "reach the table out of key order: raise commit_lag_ms (now %d ms) above the "
            "longest inserting transaction",
            self.label,
            late,
            self.key_column,
            show_key(low),
            show_key(high),
            when,
            self.commit_lag_ms,
        )

    def _report_null_keys(self) -> None:
        """Warn (and keep the metrics ``null_key_rows`` / ``non_finite_key_rows``) when rows
        have a NULL key, or a NaN or infinite one: they have no place in key order, so no
        window reads them."""
        self._nulls_at = time.monotonic()
        found = self._count_unread(
            self._query.null_keys_sql(),
            self._null_keys,
            "a NULL",
            "a NULL has no place in key order): fill the key, filter them out with where=, "
            "or make the column NOT NULL",
        )
        if found is None:
            return
        self._null_keys = found
        bad_sql = self._query.bad_keys_sql()
        if bad_sql is None:
            return
        bad = self._count_unread(
            bad_sql,
            self._bad_keys,
            "a NaN or infinite",
            "such a key has no usable place in key order: a NaN position matched nothing "
            "after it, an infinite timestamp came back as a finite one and was read again "
            "every window): fix the key, filter them out with where=, or add a CHECK "
            "constraint",
        )
        if bad is not None:
            self._bad_keys = bad

    def _count_unread(self, sql: str, known: int, what: str, why: str) -> int | None:
        """How many rows ``sql`` counts (None if counting failed: monitoring only, never a
        window's failure); a warning when that count is new."""
        try:
            found = int(self._scalar(sql, {}) or 0)
        except Exception as exc:
            log.info("%s: counting rows with %s key failed: %s", self.label, what, exc)
            return None
        if found and found != known:
            log.warning(
                "%s: %d row(s) of %s have %s %s and are not read (%s",
                self.label,
                found,
                self.source,
                what,
                self.key_column,
                why,
            )
        return found
