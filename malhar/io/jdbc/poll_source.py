"""``spark.readStream.format("malhar_jdbc_poll")``: the JDBC poll input as a PySpark data
source, on the operator's reading core (the same SQL, server-side cursors and types).

Offsets are the largest key read, with what it is a key of, ``{"key": <encoded key or
null>, "source": <JdbcPollSettings.source_identity()>}`` (table, query, key column,
where): an offset of another source is refused, one without the record (an older
checkpoint) accepted. Spark writes a micro-batch's ``(start, end]`` to its offset log
before reading it and re-runs an unfinished batch with the same offsets after a restart,
and :meth:`JdbcPollStreamReader.read` returns exactly the rows with ``start < key <= end``:
a replayed micro-batch has the same rows (unless rows were deleted from, or committed late
into, its range: the ``commit_lag_ms`` rule of docs/connectors/jdbc-poll.md applies here
too). A batch's range is split into ``num_partitions`` key ranges of about equal row
counts, read by as many tasks.

Not run: the example needs a SparkSession and a database (docs/connectors/jdbc-poll.md has
a runnable one).

>>> from malhar.io.jdbc import JdbcPollSource
>>> spark.dataSource.register(JdbcPollSource)                     # doctest: +SKIP
>>> df = (spark.readStream.format("malhar_jdbc_poll")             # doctest: +SKIP
...       .option("url", "postgresql://app@db/shop").option("password", "${env:PW}")
...       .option("table", "orders").option("key_column", "id")
...       .option("max_rows_per_batch", 50000).option("num_partitions", 4)
...       .load())

Options: the properties of :class:`~malhar.io.jdbc.JdbcPollSettings` (names
case-insensitive, unknown ones fail with "did you mean"), plus ``max_rows_per_batch`` and
``num_partitions``. The password must be a reference, ``${env:NAME}`` / ``${file:/path}``
(option ``password``, or the whole ``url``), read where the connection is made: a literal
one (in ``password`` or in the URL) is refused, as it would travel in clear in the reader
Spark ships to every task. A row with a value that cannot be converted fails the batch, naming its
key (a source has no error port; ``column_types`` or a ``query`` that casts fixes it).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from malhar.io.base.output import RetryPolicy
from malhar.io.jdbc.errors import JdbcConfigError, JdbcError
from malhar.io.jdbc.poll_keys import decode_key, encode_key, start_key
from malhar.io.jdbc.poll_operator import JdbcPollInputOperator
from malhar.io.jdbc.poll_reader import params, rows_to_batch
from malhar.io.jdbc.poll_settings import JdbcPollSettings, describe_source, source_changes
from malhar.io.jdbc.range_reader import RangeReader
from malhar.properties import Property, properties_of

__all__ = ["SOURCE_NAME", "JdbcPollSource", "JdbcPollSourceSettings", "JdbcPollStreamReader"]

SOURCE_NAME = "malhar_jdbc_poll"


class JdbcPollSourceSettings(JdbcPollSettings):
    """The data source's options: :class:`JdbcPollSettings` and the batch shape."""

    max_rows_per_batch = Property(
        int, default=None, min=1, doc="rows per micro-batch at most (default: all available)"
    )
    num_partitions = Property(int, default=1, min=1, doc="tasks (key ranges) per micro-batch")

    def poll_problems(self) -> list[str]:
        """:meth:`JdbcPollSettings.poll_problems`, no literal password: the reader
        travels pickled to every task (:meth:`literal_password_problems`), and no
        ``bounded`` (the operator's: the data source does not end)."""
        out = super().poll_problems() + self.literal_password_problems()
        if self.bounded:
            out.append(
                "bounded is a setting of JdbcPollInputOperator (a malhar application), not of "
                "this data source: a Spark query reads until it is stopped; remove the option"
            )
        return out


class _Core(JdbcPollInputOperator):
    """The operator's connection, inspection and cursor code, without a DAG around it."""

    def __init__(
        self, settings: JdbcPollSettings, label: str, *, retry: RetryPolicy | None = None
    ) -> None:
        own = properties_of(JdbcPollSettings)
        self.configure(**{n: getattr(settings, n) for n in own})
        self._label = label
        self._retry = retry or self.retry_policy()
        from malhar.io.jdbc.connection import create_engine

        self._engine = create_engine(self)
        self._conn: Any = None
        self._raw = False
        self._cursor = None
        try:
            self._retrying("connecting", self._connect)
            self._setup_query()
        except BaseException:
            self.close()  # the engine and its connection go with the failure
            raise
        self._typed = None

    def nth_key(self, low: Any, high: Any, offset: int) -> Any:
        sql = self._query.nth_key_sql(low is not None, high is not None)
        args = params(_dec(low), _dec(high), offset=offset)
        value = self._retrying("planning", lambda: self._scalar(sql, args))
        return None if value is None else encode_key(value)

    def count(self, low: Any, high: Any) -> int:
        return int(self._retrying("counting", lambda: self._count(low, high)))

    def max_key(self) -> Any:
        return self._retrying("reading the largest key", self._max_key)

    def batches(self, low: Any, high: Any) -> Iterator[pa.RecordBatch]:
        reader = RangeReader(self, low, high, "reading")  # reopened after a lost connection
        try:
            while not reader.exhausted:
                chunk = reader.fetch(self.fetch_size)
                if not chunk:
                    break
                batch, errors = rows_to_batch(chunk, self._names, self._types, self._key_index)
                if errors:
                    e = errors[0]
                    fix = (
                        ""
                        if "column_types" in e["error"]
                        else "; set column_types or cast in a query"
                    )
                    raise JdbcError(
                        f"{SOURCE_NAME}: the row with {self.key_column} = {e['key']} of "
                        f"{self.source} cannot be read ({len(errors)} such row(s) in this "
                        f"chunk; a data source has no error port, so the query fails): "
                        f"{e['error']}{fix}"
                    )
                yield batch
        finally:
            reader.close()
            self._end_read()

    def close(self) -> None:
        self._drop_connection()
        self._engine.dispose()


def _dec(key: Any) -> Any:
    return None if key is None else decode_key(key)


def _after(a: Any, b: Any) -> bool:
    """Key ``a`` is after key ``b`` (None: before everything)."""
    if a is None:
        return False
    return b is None or decode_key(a) > decode_key(b)


@dataclass
class JdbcRange(InputPartition):
    """Rows with ``low < key <= high`` (encoded keys; low None: from the start)."""

    low: Any
    high: Any


class JdbcPollStreamReader(DataSourceStreamReader):
    """Micro-batches of key ranges (see the module doc)."""

    def __init__(self, settings: JdbcPollSourceSettings) -> None:
        self.settings = settings
        self._core: _Core | None = None
        self._observed: deque[tuple[float, Any]] = deque()

    def __getstate__(self) -> dict[str, Any]:  # the driver's connection stays on the driver
        return {"settings": self.settings, "_core": None, "_observed": deque()}

    @property
    def core(self) -> _Core:
        if self._core is None:
            self._core = _Core(self.settings, f"{SOURCE_NAME} driver")
        return self._core

    def _offset(self, key: Any) -> dict:
        return {"key": key, "source": self.settings.source_identity()}

    def _check_offset(self, offset: dict) -> None:
        """Refuse an offset (from the query's checkpoint) that is a key of another source."""
        recorded = offset.get("source")
        now = self.settings.source_identity()
        changed = source_changes(recorded, now)
        if changed:
            raise JdbcConfigError(
                f"{SOURCE_NAME}: the query's checkpoint holds the offset {offset.get('key')!r} "
                f"of {describe_source(recorded)}, but the options now name "
                f"{describe_source(now)} (changed: {', '.join(changed)}): continuing from that "
                "key position would skip or misread rows. Restore the options the checkpoint "
                "was written with, or start the query with a new checkpointLocation "
                "(start_after leaves out the keys already read)"
            )

    def initialOffset(self) -> dict:
        start = self.settings.start_after
        if start is None:
            return self._offset(None)
        core = self.core
        key_type = core._types[core._key_index]
        return self._offset(encode_key(start_key(start, key_type, f"{SOURCE_NAME} source")))

    def _safe_max(self) -> Any:
        """The largest key the batch may read: with ``commit_lag_ms``, the largest key
        that was in the table that long ago."""
        newest = self.core.max_key()
        lag = self.settings.commit_lag_ms / 1000
        if not lag:
            return newest
        now = time.monotonic()
        self._observed.append((now, newest))
        safe: Any = None
        while self._observed and self._observed[0][0] <= now - lag:
            safe = self._observed.popleft()[1]
        if safe is not None:
            self._observed.appendleft((now - lag, safe))
        return safe

    def latestOffset(self, start: dict, limit: Any) -> dict:  # type: ignore[override]
        self._check_offset(start)
        low = start["key"]
        high = self._safe_max()
        if not _after(high, low):
            return self._offset(low)
        cap = self.settings.max_rows_per_batch
        if cap:
            nth = self.core.nth_key(low, None, cap - 1)
            if nth is not None and _after(high, nth):
                high = nth
        return self._offset(high)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # a batch Spark runs again after a restart comes here, not through latestOffset
        self._check_offset(start)
        self._check_offset(end)
        low, high = start["key"], end["key"]
        if not _after(high, low):
            return []
        n = int(self.settings.num_partitions)
        bounds = [low]
        if n > 1:
            count = self.core.count(low, high)
            for i in range(1, n):
                key = self.core.nth_key(low, high, max(0, (i * count) // n - 1))
                if key is not None and _after(key, bounds[-1]) and _after(high, key):
                    bounds.append(key)
        bounds.append(high)
        return [JdbcRange(a, b) for a, b in itertools.pairwise(bounds)]

    def read(self, partition: JdbcRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        core = _Core(self.settings, f"{SOURCE_NAME} task")
        try:
            yield from core.batches(partition.low, partition.high)
        finally:
            core.close()

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None


class JdbcPollSource(DataSource):
    """``readStream.format("malhar_jdbc_poll")``: a table or query read incrementally by a
    growing key, each micro-batch a key range (replayed exactly)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _settings(self) -> JdbcPollSourceSettings:
        settings = JdbcPollSourceSettings()
        settings.from_options(dict(self.options))
        return settings

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_type
        from pyspark.sql.types import StringType, StructField, StructType

        core = _Core(self._settings(), f"{SOURCE_NAME} schema")
        try:
            return StructType(
                [
                    StructField(n, StringType() if t is None else from_arrow_type(t), True)
                    for n, t in zip(core._names, core._types, strict=True)
                ]
            )
        finally:
            core.close()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return JdbcPollStreamReader(self._settings())
