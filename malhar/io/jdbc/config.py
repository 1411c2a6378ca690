"""The settings of the transactional JDBC output: one :class:`~malhar.properties.Property`
per setting, declared once on :class:`JdbcSettings`.

The operator is a :class:`JdbcSettings` (its properties are these), the Spark sink reads
them from its string options (:class:`JdbcSinkSettings`), and the running partition
(:class:`~malhar.io.jdbc.store.JdbcStore`) takes a plain :class:`JdbcSettings`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from malhar import secrets
from malhar.io.base.output import TransactionalSettings
from malhar.io.base.spark_sink import TransactionalSinkSettings
from malhar.io.jdbc.errors import JdbcConfigError
from malhar.properties import Configurable, Property
from malhar.redaction import redact_url, url_password

#: how rows are applied to the table
MODES = ("insert", "upsert", "merge_add")
DEFAULT_META_TABLE = "malhar_meta"
DEFAULT_BATCH_SIZE = 10_000
_NAMES = (list, tuple, str)


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


class JdbcConnectionSettings(Configurable):
    """Where the database is: the connection settings every JDBC connector shares (the
    output's :class:`JdbcSettings`, the poll input's ``JdbcPollSettings``).

    ``url`` may hold the password (only ever shown redacted); ``password`` and ``url`` may
    be references ``${env:NAME}`` / ``${file:/path}`` read where the connection is made
    (:mod:`malhar.secrets`), which keeps the secret out of the plan and the checkpoints.
    """

    url = Property(
        str,
        not_null=True,
        references=True,
        doc="SQLAlchemy URL; its password is never shown",
    )
    password = Property(str, secret=True, doc="password, when not in the URL")
    connect_timeout = Property(int, default=10, min=1, doc="connection timeout (s)")
    lock_timeout = Property(
        (int, float),
        default=30,
        min=0,
        doc="longest wait for a lock, e.g. a zombie writer's meta row (s; 0: no limit)",
    )
    statement_timeout = Property(
        (int, float), default=300, min=0, doc="longest statement (s; 0: no limit)"
    )

    @property
    def redacted_url(self) -> str:
        """The URL with its password masked (``postgresql://app:***@db:5432/shop``): what
        logs and errors name. A reference ``${env:NAME}`` / ``${file:/path}`` (the user's,
        or the one the engine ships a literal password to the executors in) is read first:
        messages name the database, not the reference; one that cannot be read is shown as
        it is (it holds no secret). Query parameters with a secret name
        (``?password=...``) are masked too.

        Example:
            >>> import os
            >>> os.environ["DEMO_DB_URL"] = "postgresql://app:pw@db:5432/shop?sslpassword=k3y!"
            >>> JdbcConnectionSettings().configure(url="${env:DEMO_DB_URL}").redacted_url
            'postgresql://app:***@db:5432/shop?sslpassword=***'
            >>> JdbcConnectionSettings().configure(url="${env:DEMO_UNSET_URL}").redacted_url
            '${env:DEMO_UNSET_URL}'
        """
        url = self.url or ""
        if secrets.is_reference(url):
            try:
                url = str(secrets.resolve(url, "url"))
            except secrets.SecretReferenceError:
                return url
        return redact_url(url)

    def connection_key(self) -> tuple:
        """What identifies the connection settings (engines are shared per process by it)."""
        return (
            self.url,
            self.password,
            self.connect_timeout,
            self.lock_timeout,
            self.statement_timeout,
        )

    def connection_problems(self) -> list[str]:
        """Why the URL cannot work (a reference is read where it is used: not checked)."""
        if self.url and not secrets.is_reference(self.url):
            try:
                url = self.sqlalchemy_url()
            except Exception as exc:
                return [f"url {self.redacted_url!r} is not a SQLAlchemy URL: {exc}"]
            try:
                url.get_dialect()  # a misspelled database name (postgress://) fails here
            except Exception as exc:
                return [
                    f"url {self.redacted_url!r} names no database SQLAlchemy knows "
                    f"({url.drivername!r}: {exc}); write it like "
                    "'postgresql://user@host:5432/db'"
                ]
        return []

    def literal_password_problems(self) -> list[str]:
        """A Spark data source's settings travel pickled in what Spark ships to every task:
        a literal password there (option ``password``, or in ``url``) would travel in clear.
        Such a password must be a reference ``${env:NAME}`` / ``${file:/path}``, read where
        the connection is made (the operators need not: the engine ships their secrets
        as references itself)."""
        literal = []
        if self.password not in (None, "") and not secrets.is_reference(self.password):
            literal.append("option 'password'")
        if self.url and not secrets.is_reference(self.url) and url_password(self.url):
            literal.append("the password in option 'url'")
        if not literal:
            return []
        return [
            f"{' and '.join(literal)} must be a secret reference, not the password itself "
            "(it would travel in clear in what Spark ships to every task): give the URL "
            "without its password and option 'password' as '${env:NAME}' or "
            "'${file:/path}', or the whole URL as such a reference; it is read where the "
            "connection is made (the executors' environment or filesystem)"
        ]

    def sqlalchemy_url(self) -> Any:
        """The ``sqlalchemy.URL`` to connect to (with the password, if given separately); a
        libpq URL (``postgresql://``, ``postgres://``) connects through psycopg2."""
        from sqlalchemy.engine import make_url

        try:
            url = make_url(secrets.resolve(self.url, "url"))
            password = secrets.resolve(self.password, "password")
        except secrets.SecretReferenceError as exc:
            raise JdbcConfigError(str(exc)) from None
        if url.drivername in ("postgresql", "postgres"):
            # a libpq URL: use psycopg2, the driver malhar[jdbc] installs (SQLAlchemy 2.1
            # defaults to psycopg 3)
            url = url.set(drivername="postgresql+psycopg2")
        if password:
            url = url.set(password=password)
        return url


class JdbcSettings(TransactionalSettings, JdbcConnectionSettings):
    """Where and how a window's rows are written: the connection settings of
    :class:`JdbcConnectionSettings`, the retry settings of
    :class:`~malhar.io.base.output.TransactionalSettings`, and the target.

    Example:
        >>> s = JdbcSettings().configure(url="postgresql+psycopg2://app:pw@db/shop",
        ...                              table="words", mode="merge_add", key_columns="word")
        >>> s
        JdbcSettings(url='postgresql+psycopg2://app:***@db/shop', table='words', mode='merge_add', key_columns='word')
        >>> s.keys
        ('word',)
    """

    config_error = JdbcConfigError

    table = Property(str, doc="target table (schema.table allowed); must exist")
    mode = Property(str, default="insert", one_of=MODES, doc="insert, upsert or merge_add")
    key_columns = Property(_NAMES, doc="conflict key of upsert / merge_add (list or 'a,b')")
    columns = Property(_NAMES, doc="columns written (positional order of tuples)")
    statement = Property(str, doc="a user statement with :name binds, instead of table + mode")
    batch_size = Property(int, default=DEFAULT_BATCH_SIZE, min=1, doc="rows per COPY / batch")
    meta_table = Property(
        str, default=DEFAULT_META_TABLE, not_null=True, doc="committed windows (created if missing)"
    )
    error_table = Property(
        str, doc="rejected rows, kept with their window (created if missing); replays re-emit them"
    )

    # -- derived -------------------------------------------------------------------------
    @property
    def keys(self) -> tuple[str, ...]:
        """``key_columns`` as a tuple."""
        return names(self.key_columns)

    @property
    def column_names(self) -> tuple[str, ...]:
        """``columns`` as a tuple (empty: the rows' fields)."""
        return names(self.columns)

    @property
    def target(self) -> str:
        """What errors name: the table (or the statement) and the redacted URL."""
        what = f"table {self.table!r}" if self.table else "the user statement"
        return f"{what} at {self.redacted_url}"

    # -- checks ----------------------------------------------------------------------------
    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work (empty when they can)."""
        out = self.property_problems() + self.connection_problems()
        if self.statement:
            if self.mode != "insert":
                out.append(
                    f"mode {self.mode!r} does not apply to a user statement: write the "
                    "conflict handling into the statement, or use table + mode"
                )
        elif not self.table:
            out.append("either table (with mode) or statement is required")
        if self.mode in ("upsert", "merge_add") and not self.keys:
            out.append(f"mode {self.mode!r} needs key_columns (the conflict key)")
        if self.column_names and self.keys:
            missing = [k for k in self.keys if k not in self.column_names]
            if missing:
                out.append(f"key_columns {missing} are not among columns {list(self.column_names)}")
        if self.error_table and self.error_table == self.meta_table:
            out.append("error_table and meta_table must be different tables")
        return out

    def check(self) -> JdbcSettings:
        """Raise :class:`JdbcConfigError` listing every problem; return self when fine."""
        self.check_settings()
        return self


class JdbcSinkSettings(JdbcSettings, TransactionalSinkSettings):
    """The ``malhar_jdbc`` Spark sink's options: :class:`JdbcSettings` plus ``name``,
    ``operator`` and ``verify_reruns`` (:class:`~malhar.io.base.spark_sink.TransactionalSinkSettings`).

    Example:
        >>> s = JdbcSinkSettings().from_options({"url": "sqlite:///x.db", "Table": "t",
        ...                                      "name": "q", "batch_size": "500"})
        >>> (s.table, s.batch_size, s.operator)
        ('t', 500, 'sink')
        >>> JdbcSinkSettings().from_options({"url": "sqlite:///x.db", "tabel": "t"})
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        malhar.io.jdbc.errors.JdbcConfigError: JdbcSinkSettings has no option 'tabel'; did you mean 'table'? ...
    """

    def settings_problems(self) -> list[str]:
        """:meth:`JdbcSettings.settings_problems`, and no literal password
        (:meth:`~JdbcConnectionSettings.literal_password_problems`)."""
        return super().settings_problems() + self.literal_password_problems()
