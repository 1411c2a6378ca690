"""The transactional JDBC output operator (Malhar's ``AbstractJdbcTransactionableOutputOperator``
and ``JdbcPOJOInsertOutputOperator``, with upsert and merge-add modes), on
:class:`~malhar.io.base.output_operator.TransactionalOutputOperator`."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from malhar.io.base.output import WindowKey
from malhar.io.base.output_operator import TransactionalOutputOperator, WindowBuffer
from malhar.io.jdbc.config import JdbcSettings
from malhar.io.jdbc.errors import db_message, is_timeout
from malhar.io.jdbc.rows import Originals, window_table
from malhar.io.jdbc.store import JdbcStore, timeout_hint
from malhar.operator import OperatorContext
from malhar.properties import properties_of

__all__ = ["JdbcOutputOperator"]

log = logging.getLogger("malhar.io.jdbc")


class JdbcOutputOperator(TransactionalOutputOperator, JdbcSettings):
    """Writes tuples to a database table exactly once: one transaction per window.

    Each partition buffers its window's tuples and, at the end of the window, writes
    them in **one** transaction together with its row in the meta table
    (application name, operator, partition -> last window, and the table it writes).
    A window replayed after a failure finds itself already committed and is skipped,
    so every window lands in the table exactly once; readers never see part of a window.

    The properties are those of :class:`~malhar.io.jdbc.config.JdbcSettings`.

    Input ``input``: dicts (by column), tuples (positional in ``columns``), or Arrow
    record batches from a typed stream (written without per-row work).
    Output ``error`` (error port): each row that cannot be written, as a dict of the
    row (its values as they were emitted, even when they went to the database as
    text) plus ``"error"``: the reason (a tuple of the wrong shape, an unknown column, a
    value with no text form, or the database's message). The other rows of the window
    still commit. With ``error_table`` set, the rows are also kept with the window, and
    a replay of the window re-emits them.

    Example:
        >>> from malhar.io.jdbc import JdbcOutputOperator
        >>> out = JdbcOutputOperator(
        ...     "postgresql+psycopg2://app@db:5432/shop", table="word_counts",
        ...     mode="merge_add", key_columns=["word"])
        >>> out.mode
        'merge_add'
    """

    def __init__(self, url: str | None = None, table: str | None = None, **properties: Any) -> None:
        if url is not None:
            self.url = url
        if table is not None:
            self.table = table
        known = properties_of(type(self))
        for name, value in properties.items():
            if name not in known:
                self.configure(**{name: value})  # raises, naming the closest properties
            if value is not None:
                setattr(self, name, value)

    def settings(self) -> JdbcSettings:
        """This operator's configuration as the plain :class:`JdbcSettings` its store takes."""
        return self.settings_of(JdbcSettings)

    def preflight(
        self, label: str, timeout: float, inputs: Mapping[str, Sequence[str]] | None = None
    ) -> str:
        """The table and its columns, and that a typed input's rows fit them (see
        :mod:`malhar.io.jdbc.preflight`)."""
        from malhar.io.jdbc.preflight import check_output

        self.check_settings()
        return check_output(self.settings(), label, timeout, (inputs or {}).get("input"))

    def fields_read(self, port: str) -> list[str]:
        """The conflict key and the configured ``columns``: a typed stream must have them."""
        if port != "input":
            return []
        return list(dict.fromkeys([*self.keys, *self.column_names]))

    # -- TransactionalOutputOperator --------------------------------------------------------
    def create_store(self, context: OperatorContext) -> JdbcStore:
        """The partition's transactional store: its connection, table and meta table."""
        return JdbcStore(
            self.settings(), WindowKey(context.application, context.name, context.partition)
        )

    def window_rows(self, buffer: WindowBuffer) -> tuple[pa.Table, list[dict[str, Any]]]:
        """The window's tuples as a table of the target's columns, and the rows that do not
        fit them (for the error port)."""
        store: JdbcStore = self._store
        columns = store.info.columns
        store.originals = Originals()  # a rejected row goes out as it was emitted
        return window_table(
            buffer.pieces,
            columns=self.column_names,
            default=columns,
            allowed=columns if store.target is not None else None,
            required=store.required_fields(),
            originals=store.originals,
        )

    def end_window(self) -> None:
        try:
            super().end_window()
        finally:
            store = getattr(self, "_store", None)
            if store is not None:
                store.originals = None  # the window's tuples are not kept past it

    def on_retry(self, attempt: int, delay: float, error: BaseException) -> None:
        """Called when the database is unavailable (or a bounded wait ran out), before
        waiting ``delay`` s to retry."""
        what = "database unavailable"
        if is_timeout(error):
            what = f"timed out waiting ({timeout_hint(self)})"
        log.warning(
            "malhar.io.jdbc: %s %s (attempt %d of %d), retrying in %.2fs: %s",
            getattr(getattr(self, "_store", None), "key", "?"),
            what,
            attempt,
            self.retry_attempts,
            delay,
            db_message(error),
        )
