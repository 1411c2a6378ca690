"""Reading a key range of the JDBC poll input so that a lost connection can resume it:
:class:`RangeReader`, shared by the operator and the Spark data source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from malhar.io.jdbc.errors import JdbcError, sqlstate
from malhar.io.jdbc.poll_keys import encode_key, show_key
from malhar.io.jdbc.poll_reader import Cursor, Unconvertible

if TYPE_CHECKING:
    from malhar.io.jdbc.poll_operator import JdbcPollInputOperator

__all__ = ["RangeReader"]

#: what a driver raises for a value it cannot convert to Python (not a database error)
_CONVERSION = (ValueError, OverflowError, TypeError, ArithmeticError)


class RangeReader:
    """The rows of ``(low, high]`` (encoded keys) in key order, through a server-side cursor
    of ``op``, handed out at key boundaries: the rows sharing the last key fetched are held
    back until a larger key (or the end) shows they are all there. So every row with a key
    up to the last one handed out has been handed out, and after a transient failure (the
    connection lost mid-read) the cursor is reopened at ``key > that key`` under the retry
    policy: the same rows as without the failure, none twice, none lost."""

    def __init__(self, op: JdbcPollInputOperator, low: Any, high: Any, what: str) -> None:
        self.op, self.high, self.what = op, high, what
        self.boundary = low  # every row of the range with a key <= boundary was handed out
        self.cursor: Cursor | None = None
        self.pending: list[Any] = []
        self.exhausted = False

    def fetch(self, n: int) -> list[Any]:
        """At least one row unless the range is exhausted (then maybe none)."""
        if self.exhausted:
            return []
        return self.op._retrying(self.what, lambda: self._fetch(n))

    def _fetch(self, n: int) -> list[Any]:
        op, i = self.op, self.op._key_index
        if self.cursor is None:
            self.pending = []
            self.cursor = op._open_cursor(self.boundary, self.high)
        rows, self.pending = self.pending, []
        try:
            while True:
                chunk = self.cursor.fetch(n)
                rows += chunk
                if len(chunk) < n:
                    self.exhausted = True
                    self.close()
                    break
                last = rows[-1][i]
                cut = len(rows) - 1
                while cut > 0 and rows[cut - 1][i] == last:
                    cut -= 1
                if cut > 0:
                    rows, self.pending = rows[:cut], rows[cut:]
                    break
        except Exception as exc:
            self.close()
            op._end_read(broken=True)
            if isinstance(exc, _CONVERSION) and not sqlstate(exc):
                raise JdbcError(
                    f"{op.label}: a row of {op.source} with {op.key_column} in "
                    f"({show_key(self.boundary)}, "
                    f"{'∞' if self.high is None else show_key(self.high)}] "
                    "has a value the database driver cannot convert to Python "
                    f"({type(exc).__name__}: {exc}; a date beyond the year 9999, say): "
                    "cast that column in query= (e.g. CAST(col AS text) AS col) or leave it "
                    "out with columns="
                ) from exc
            raise
        if rows:
            last = rows[-1][i]
            if isinstance(last, Unconvertible):
                self.close()
                op._end_read()
                raise JdbcError(
                    f"{op.label}: a row of {op.source} has the key {op.key_column} = "
                    f"{last.text!r}, which the database driver cannot convert to Python "
                    f"({last.reason}): a position cannot hold it. Leave such rows out with "
                    "where= (e.g. a range of years), or key on another column"
                )
            self.boundary = encode_key(last)
        return rows

    def close(self) -> None:
        cursor, self.cursor = self.cursor, None
        if cursor is not None:
            cursor.close()
