"""The settings of a transactional JDBC output, shared by the operator and the Spark sink."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from malhar import secrets
from malhar.io.jdbc.errors import JdbcConfigError
from malhar.redaction import redact_url

#: how rows are applied to the table
MODES = ("insert", "upsert", "merge_add")
DEFAULT_META_TABLE = "malhar_meta"
DEFAULT_BATCH_SIZE = 10_000


def names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Column names from a list, a tuple, or a comma-separated string."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(n.strip() for n in value.split(",") if n.strip())
    return tuple(str(n) for n in value)


def split_table(name: str) -> tuple[str | None, str]:
    """``"schema.table"`` -> ``("schema", "table")``; ``"table"`` -> ``(None, "table")``."""
    schema, dot, table = name.rpartition(".")
    return (schema or None, table) if dot else (None, name)


@dataclass(frozen=True, repr=False)
class JdbcOptions:
    """Where and how a window's rows are written.

    Attributes:
        url: SQLAlchemy URL (``postgresql+psycopg2://user@host:5432/db``, ``sqlite:///f.db``).
            May hold the password; it is only ever shown redacted. May be a reference
            ``${env:NAME}`` / ``${file:/path}`` (see :mod:`malhar.secrets`).
        password: the password, when it is not in the URL (never shown). A reference
            ``${env:PGPASSWORD}`` keeps it out of checkpoints and the plan.
        table: the target table (``schema.table`` allowed). Must exist.
        mode: ``insert``, ``upsert`` (on ``key_columns``) or ``merge_add`` (adds every
            non-key column to the stored value, inserting new keys).
        key_columns: the conflict key for ``upsert`` / ``merge_add``.
        columns: the columns to write (tuples are positional in this order); by default
            the fields of the rows.
        statement: a user statement with SQLAlchemy ``:name`` binds, run for every row
            instead of ``table`` + ``mode``.
        batch_size: rows per COPY / multi-row statement.
        meta_table: the table holding (application, operator, partition) -> window.
        retry_attempts: tries of a window transaction while the database is unavailable.
        retry_backoff: first wait between tries, in seconds (doubles every try).
        max_backoff: the longest wait between tries, in seconds.
        connect_timeout: seconds to wait for a connection (PostgreSQL).
        skip_older_windows: skip windows *older* than the committed one (Apex's behaviour).
            Off by default: window ids only go backwards when an application restarts with
            a new checkpoint under an old name, and skipping would silently drop its rows,
            so such a window raises :class:`~malhar.io.jdbc.errors.WindowRegressionError`.
    """

    url: str
    table: str | None = None
    mode: str = "insert"
    key_columns: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    statement: str | None = None
    password: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    meta_table: str = DEFAULT_META_TABLE
    retry_attempts: int = 8
    retry_backoff: float = 0.5
    max_backoff: float = 10.0
    connect_timeout: int = 10
    skip_older_windows: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_columns", names(self.key_columns))
        object.__setattr__(self, "columns", names(self.columns))

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["url"] = self.redacted_url
        shown["password"] = "***" if self.password else None
        inner = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"JdbcOptions({inner})"

    @property
    def redacted_url(self) -> str:
        """The URL with its password masked: safe for logs and errors."""
        return redact_url(self.url or "")

    @property
    def target(self) -> str:
        """What errors name: the table (or the statement) and the redacted URL."""
        what = f"table {self.table!r}" if self.table else "the user statement"
        return f"{what} at {self.redacted_url}"

    def problems(self) -> list[str]:
        """Every reason these options cannot work (empty when they can)."""
        out: list[str] = []
        if not self.url:
            out.append("url is required (a SQLAlchemy URL such as postgresql+psycopg2://...)")
        elif not secrets.is_reference(self.url):  # a reference is read on the workers
            try:
                self.sqlalchemy_url()
            except Exception as exc:
                out.append(f"url {self.redacted_url!r} is not a SQLAlchemy URL: {exc}")
        if self.mode not in MODES:
            out.append(f"mode {self.mode!r} is not one of {list(MODES)}")
        if self.statement:
            if self.mode != "insert":
                out.append(
                    f"mode {self.mode!r} does not apply to a user statement: write the "
                    "conflict handling into the statement, or use table + mode"
                )
        elif not self.table:
            out.append("either table (with mode) or statement is required")
        if self.mode in ("upsert", "merge_add") and not self.key_columns:
            out.append(f"mode {self.mode!r} needs key_columns (the conflict key)")
        if self.columns and self.key_columns:
            missing = [k for k in self.key_columns if k not in self.columns]
            if missing:
                out.append(f"key_columns {missing} are not among columns {list(self.columns)}")
        if self.batch_size < 1:
            out.append(f"batch_size must be at least 1, got {self.batch_size}")
        if self.retry_attempts < 1:
            out.append(f"retry_attempts must be at least 1, got {self.retry_attempts}")
        if not self.meta_table:
            out.append("meta_table is required")
        return out

    def check(self) -> JdbcOptions:
        """Raise :class:`JdbcConfigError` listing every problem; return self when fine."""
        problems = self.problems()
        if problems:
            raise JdbcConfigError("invalid JDBC output settings: " + "; ".join(problems))
        return self

    def sqlalchemy_url(self) -> Any:
        """The ``sqlalchemy.URL`` to connect to (with the password, if given separately)."""
        from sqlalchemy.engine import make_url

        try:
            url = make_url(secrets.resolve(self.url, "url"))
            password = secrets.resolve(self.password, "password")
        except secrets.SecretReferenceError as exc:
            raise JdbcConfigError(str(exc)) from None
        if password:
            url = url.set(password=password)
        return url

    def with_(self, **changes: Any) -> JdbcOptions:
        return replace(self, **changes)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> JdbcOptions:
        """Options from strings (Spark's ``.option(...)``, case-insensitive keys)."""
        lower = {str(k).lower(): v for k, v in options.items()}
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, f in known.items():
            if name not in lower or lower[name] is None:
                continue
            value = lower[name]
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            try:
                if kind.startswith("bool") and isinstance(value, str):
                    if value.strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(value)
                    value = value.strip().lower() in ("true", "1", "yes")
                elif kind.startswith("int"):
                    value = int(value)
                elif kind.startswith("float"):
                    value = float(value)
            except ValueError:
                raise JdbcConfigError(f"option {name!r} must be a {kind}, got {value!r}") from None
            kwargs[name] = value
        if "url" not in kwargs:
            raise JdbcConfigError("option 'url' is required (a SQLAlchemy URL)")
        return cls(**kwargs)
