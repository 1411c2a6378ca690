"""The JDBC poll input's settings: one :class:`~malhar.properties.Property` per setting,
declared once on :class:`JdbcPollSettings` (the operator's properties, the Spark data
source's options)."""

from __future__ import annotations

from typing import Any

from malhar.io.base.output import RetryPolicy
from malhar.io.jdbc.config import JdbcConnectionSettings, names
from malhar.io.jdbc.errors import JdbcConfigError
from malhar.properties import Property, PropertyError, properties_of
from malhar.redaction import Scrubber

__all__ = ["SOURCE_FIELDS", "JdbcPollSettings", "describe_source", "source_changes"]

_NAMES = (list, tuple, str)

#: the settings a key position is meaningful under, recorded with it: a position restored
#: under others would skip or misread rows. Never the URL (it holds credentials, and a
#: database may move to another host).
SOURCE_FIELDS = ("table", "query", "key_column", "where")


def _check_types(value: Any) -> str | None:
    from malhar.schema import to_struct_type

    for column, ddl in value.items():
        try:
            to_struct_type(f"`x` {ddl}")
        except Exception as exc:
            return f"column_types[{column!r}] = {ddl!r} is not a Spark DDL type: {exc}"
    return None


class JdbcPollSettings(JdbcConnectionSettings):
    """What the JDBC poll input reads, and how (the connection settings of
    :class:`~malhar.io.jdbc.config.JdbcConnectionSettings` included).

    ``table`` or ``query`` is the source, read in the order of ``key_column``, a column whose
    values only grow as rows are added (a ``bigserial`` id, an insertion timestamp).

    Example:
        >>> s = JdbcPollSettings().configure(url="postgresql://app:pw@db/shop", table="orders",
        ...                                  key_column="id", commit_lag_ms=2000)
        >>> s
        JdbcPollSettings(url='postgresql://app:***@db/shop', table='orders', key_column='id', commit_lag_ms=2000)
        >>> JdbcPollSettings().configure(url="sqlite://", key_column="id").poll_problems()
        ['either table or query is required']
    """

    table = Property(str, doc="the table to read (schema.table allowed)")
    query = Property(
        str,
        doc="a SELECT to read instead of a table (its columns must include key_column); "
        "trusted SQL, run as a subquery",
    )
    key_column = Property(
        str,
        not_null=True,
        doc="the column rows are read in order of: its values only grow (id, timestamp)",
    )
    columns = Property(_NAMES, doc="the columns read (default: all)")
    where = Property(str, doc="a condition added to every read (trusted SQL)")
    poll_interval_ms = Property(
        int, default=1_000, min=0, doc="how often the polling partition looks for new rows"
    )
    fetch_size = Property(
        int, default=10_000, min=1, doc="rows per fetch from the server-side cursor"
    )
    commit_lag_ms = Property(
        int,
        default=0,
        min=0,
        doc="the late-row rule: read only keys that were already present this long ago "
        "(at least the longest insert transaction; 0: rows are committed in key order)",
    )
    start_after = Property(
        (int, float, str),
        default=None,
        doc="read only keys after this one (a number, or ISO text for a timestamp key)",
    )
    column_types = Property(
        dict,
        default=None,
        check=_check_types,
        doc="Spark DDL types for some columns, e.g. {'amount': 'decimal(20,4)'} (others "
        "follow the database's types)",
    )
    check_late_rows = Property(
        bool,
        default=True,
        doc="count, when windows are committed, rows that arrived later in their key range "
        "(metric late_rows and a warning: raise commit_lag_ms)",
    )
    late_rows_recheck_ms = Property(
        int,
        default=60_000,
        min=0,
        doc="check_late_rows: count a committed window's key range once more this long after "
        "it was committed, for rows of transactions still open then (0: only at the commit)",
    )
    bounded = Property(
        bool,
        default=False,
        doc="read exactly the rows present at launch (up to the largest key then, recorded in "
        "the checkpoint's key-range plan), then end: every partition sends the end-of-input "
        "watermark and the application stops by itself; False: the last partition polls for "
        "new rows for ever",
    )
    retry_attempts = Property(int, default=5, min=1, doc="tries while the database is unavailable")
    retry_backoff = Property(
        (int, float), default=0.5, min=0, doc="first wait between tries (s), doubling"
    )
    max_backoff = Property((int, float), default=10.0, min=0, doc="longest wait (s)")

    def __repr__(self) -> str:
        """The settings that differ from their defaults, secrets (and the URL's password)
        masked."""
        scrub = Scrubber()
        shown = []
        for name, prop in properties_of(type(self)).items():
            value = getattr(self, name)
            if value is None or value == prop.default:
                continue
            scrub.add(value, name, secret=prop.secret)
            shown.append(f"{name}={'***' if prop.secret else repr(value)}")
        return scrub(f"{type(self).__name__}({', '.join(shown)})")

    @property
    def column_names(self) -> tuple[str, ...]:
        """``columns`` as a tuple (empty: all the source's columns)."""
        return names(self.columns)

    @property
    def source(self) -> str:
        """What errors name: the table or the query, and the redacted URL."""
        what = f"table {self.table!r}" if self.table else "the query"
        return f"{what} at {self.redacted_url}"

    def source_identity(self) -> dict[str, str | None]:
        """What is read, as recorded in checkpoints and offsets (:data:`SOURCE_FIELDS`), as
        the SQL uses it: ``query`` and ``where`` without their outer whitespace, and an
        empty text as None (the SQL leaves both out alike); names exactly as given (they
        are quoted as they are)."""
        out: dict[str, str | None] = {}
        for name in SOURCE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str) and name in ("query", "where"):
                value = value.strip()
            out[name] = value if value != "" else None
        return out

    def retry_policy(self) -> RetryPolicy:
        """The retry settings."""
        return RetryPolicy(
            int(self.retry_attempts), float(self.retry_backoff), float(self.max_backoff)
        )

    def poll_problems(self) -> list[str]:
        """Every reason these settings cannot work (empty when they can)."""
        out = self.property_problems() + self.connection_problems()
        if bool(self.table) == bool(self.query):
            out.append(
                "either table or query is required"
                if not self.table
                else "set table or query, not both"
            )
        if self.column_names and self.key_column and self.key_column not in self.column_names:
            out.append(
                f"key_column {self.key_column!r} must be among columns {list(self.column_names)}"
            )
        out += self.bounded_problems()
        return out

    def bounded_problems(self) -> list[str]:
        """Settings that contradict ``bounded`` (it never polls: a poll interval set means
        the configuration expects new rows to be read)."""
        if not self.bounded:
            return []
        default = properties_of(JdbcPollSettings)["poll_interval_ms"].default
        if self.poll_interval_ms is not None and self.poll_interval_ms != default:
            return [
                f"bounded=True reads the rows present at launch and never polls, but "
                f"poll_interval_ms={self.poll_interval_ms} is set: remove poll_interval_ms, "
                "or set bounded=False to keep polling for new rows"
            ]
        return []

    def check_poll(self) -> JdbcPollSettings:
        """Raise :class:`~malhar.io.jdbc.errors.JdbcConfigError` listing every problem."""
        problems = self.poll_problems()
        if problems:
            raise JdbcConfigError(f"invalid {type(self).__name__} settings: " + "; ".join(problems))
        return self

    def from_options(self, options: dict[str, Any]) -> JdbcPollSettings:
        """Settings from Spark's string options (names case-insensitive; unknown ones fail
        with "did you mean")."""
        try:
            self.configure_from_strings(options)
        except PropertyError as exc:
            raise JdbcConfigError(str(exc)) from None
        return self.check_poll()


def source_changes(recorded: Any, now: dict[str, str | None]) -> list[str]:
    """The settings of :data:`SOURCE_FIELDS` whose value ``now`` differs from a recorded
    :meth:`JdbcPollSettings.source_identity` (none: the same source, or nothing recorded, as
    in checkpoints written before the record existed)."""
    if not isinstance(recorded, dict):
        return []
    return [name for name in SOURCE_FIELDS if recorded.get(name) != now.get(name)]


def describe_source(identity: dict[str, Any]) -> str:
    """A :meth:`JdbcPollSettings.source_identity` for messages."""
    text = (
        f"table {identity.get('table')!r}"
        if identity.get("table")
        else f"the query {identity.get('query')!r}"
    )
    text += f" by key {identity.get('key_column')!r}"
    if identity.get("where"):
        text += f" where {identity['where']!r}"
    return text
