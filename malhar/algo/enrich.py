"""Enrichment (Malhar's ``lib/enrich``): add fields looked up in a JDBC table or a file.

:class:`Enricher` takes each tuple's ``lookup_fields``, finds the row with those values in
the ``store_fields`` of its source, and adds the row's ``include_fields``. Sources:

- :class:`FileLookup`: a CSV, JSON-lines or Parquet file, loaded whole and reloaded when
  it changed (checked every ``refresh_ms``); batches are joined with Arrow's hash join;
- :class:`JdbcLookup`: a table (or view) read through SQLAlchemy, one ``IN`` query per
  batch of missing keys, with a cache of ``cache_size`` keys whose entries expire after
  ``refresh_ms`` (misses are cached too).

``miss_policy`` says what happens to a tuple without a row: ``null`` (the included fields
are None), ``pass`` (the tuple goes on unchanged), ``drop``, or ``error`` (to the error
port). The source is outside malhar's checkpoint: a replayed window sees the source as it
is then.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from malhar import secrets
from malhar.algo._base import AlgoOperator, SchemaProperty, TypedOutputs, emit_table
from malhar.errors import ConfigError
from malhar.ports import InputPort, OutputPort
from malhar.properties import Configurable, Property
from malhar.util.arrow_types import is_binary, is_text

__all__ = ["Enricher", "FileLookup", "JdbcLookup"]

MISS_POLICIES = ("null", "pass", "drop", "error")
_HIT = "__malhar_hit"
_POS = "__malhar_pos"


class FileLookup(Configurable):
    """A lookup table in a file: ``csv`` (with a header), ``json`` (one object per line) or
    ``parquet``; ``format`` defaults to the file's extension."""

    path = Property(str, default=None, not_null=True, doc="the file (local path)")
    format = Property(str, default=None, one_of=("csv", "json", "parquet"), doc="the file format")

    def __init__(self, path: str, format: str | None = None) -> None:
        self.configure(path=path, format=format)

    def _format(self) -> str:
        if self.format:
            return self.format
        ext = os.path.splitext(self.path)[1].lower().lstrip(".")
        return {"jsonl": "json", "ndjson": "json", "pq": "parquet"}.get(ext, ext)

    def version(self) -> Any:
        st = os.stat(self.path)
        return (st.st_mtime_ns, st.st_size)

    def load(self) -> pa.Table:
        fmt = self._format()
        if fmt == "csv":
            import pyarrow.csv as pacsv

            return pacsv.read_csv(self.path, read_options=pacsv.ReadOptions(use_threads=False))
        if fmt == "json":
            import pyarrow.json as pajson

            return pajson.read_json(self.path)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(self.path)
        raise ConfigError(f"FileLookup {self.path!r}: unknown format {fmt!r}; give format=")


class JdbcLookup(Configurable):
    """A lookup table in a database, read with SQLAlchemy (``url`` as for the JDBC output,
    e.g. ``postgresql+psycopg2://user@host/db``; ``password`` may be a secret reference)."""

    url = Property(
        str, default=None, not_null=True, references=True, doc="SQLAlchemy URL (or a reference)"
    )
    table = Property(str, default=None, not_null=True, doc="table or view (schema.table)")
    password = Property(str, default=None, secret=True, doc="password, if not in the url")

    def __init__(self, url: str, table: str, password: str | None = None) -> None:
        self.configure(url=url, table=table, password=password)

    def engine(self) -> Any:
        import sqlalchemy as sa
        from sqlalchemy.engine import make_url

        url = make_url(secrets.resolve(self.url, "url"))
        password = secrets.resolve(self.password, "password")
        if password:
            url = url.set(password=password)
        return sa.create_engine(url, pool_pre_ping=True, hide_parameters=True)

    def reflect(self, engine: Any) -> Any:
        """The table's metadata (a SQLAlchemy ``Table``: its columns), read from the
        database."""
        import sqlalchemy as sa

        schema, _, name = self.table.rpartition(".")
        return sa.Table(name, sa.MetaData(), schema=schema or None, autoload_with=engine)

    def fetch(
        self, engine: Any, columns: list[str], keys: list[tuple], table: Any = None
    ) -> list[dict[str, Any]]:
        """The rows whose ``columns`` equal one of ``keys`` (read only); ``table``: the
        metadata :meth:`reflect` gave (reflected again when not given)."""
        import sqlalchemy as sa

        if table is None:
            table = self.reflect(engine)
        cols = [table.c[c] for c in columns]
        cond = cols[0].in_([k[0] for k in keys]) if len(cols) == 1 else sa.tuple_(*cols).in_(keys)
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.select(table).where(cond))]


class Enricher(TypedOutputs, AlgoOperator):
    """Adds fields looked up in a JDBC table or a file to each tuple (Malhar's
    ``POJOEnricher``/``MapEnricher`` with the JDBC and file loaders).

    Output ``output``: the tuple (a dict) with ``include_fields`` of its row (all the
    source's columns but the store fields when not given: the file's, or the table's as
    its metadata tells, so a miss gets the same None fields on every worker and replay).
    A tuple without a row follows ``miss_policy``; a tuple without the lookup fields, or
    whose lookup value cannot be a key (a list or a dict: no row has it), goes to
    ``error`` with the reason.

    Example:
        >>> import pathlib, tempfile
        >>> from malhar.algo import Enricher, FileLookup
        >>> from malhar.testing.harness import OperatorHarness
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "products.csv"
        >>> _ = path.write_text("id,name\\n1,tea\\n2,jam\\n")
        >>> h = OperatorHarness(
        ...     Enricher(
        ...         FileLookup(str(path)), lookup_fields=["product"], store_fields=["id"], miss_policy="null"
        ...     )
        ... )
        >>> h.run_window([("input", {"product": 2, "qty": 3}), ("input", {"product": 9, "qty": 1})])
        >>> h.sink("output").tuples
        [{'product': 2, 'qty': 3, 'name': 'jam'}, {'product': 9, 'qty': 1, 'name': None}]
    """

    PARTITIONING: ClassVar[str] = "stateless"

    input = InputPort()
    output = OutputPort()
    error = OutputPort(error=True)

    source = Property(
        (FileLookup, JdbcLookup), default=None, not_null=True, doc="where rows come from"
    )
    FIELDS_READ = {"input": ("lookup_fields",)}

    lookup_fields = Property(list, default=None, not_null=True, doc="the tuple's key fields")
    store_fields = Property(
        list, default=None, doc="the source's key columns (default: lookup_fields)"
    )
    include_fields = Property(
        list, default=None, doc="the source's columns added (default: all others)"
    )
    miss_policy = Property(
        str, default="null", one_of=MISS_POLICIES, doc="null, pass, drop or error"
    )
    refresh_ms = Property(int, default=60_000, min=0, doc="reload / cache expiry in ms (0: never)")
    cache_size = Property(int, default=100_000, min=1, doc="JDBC rows cached (hits and misses)")
    schema = SchemaProperty("output", doc="Spark DDL of the enriched rows (types output)")

    def __init__(self, source: FileLookup | JdbcLookup | None = None, **props: Any) -> None:
        self.configure(source=source, **props)

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self, context: Any) -> None:
        self._store = list(self.store_fields or self.lookup_fields)
        if len(self._store) != len(self.lookup_fields):
            raise ConfigError(f"{context.name}: store_fields must match lookup_fields one to one")
        self.clock = time.monotonic  # runtime (tests use a fake clock)
        self._loaded_at: float | None = None
        self._version: Any = None
        self._rows: dict[tuple, dict] = {}
        self._table: pa.Table | None = None
        self._cache: OrderedDict[tuple, tuple[float, dict | None]] = OrderedDict()
        self._engine = None
        self._sa_table = None  # the JDBC table's metadata, reflected with the engine
        #: the source's columns a tuple gets (include_fields, or all but the store fields):
        #: from the file's or the table's columns, never from the rows found
        self._cols: list[str] = list(self.include_fields or [])
        self.lookups = 0  # source round trips (metrics)

    def teardown(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def begin_window(self, window_id: int) -> None:
        self._refresh_file()

    def _refresh_file(self) -> None:
        """(Re)load the lookup file when due: at each application window's start, and on
        the first tuple of a partition restored inside an application window."""
        if isinstance(self.source, FileLookup):
            now = self.clock()
            due = self._loaded_at is None or (
                self.refresh_ms and now - self._loaded_at >= self.refresh_ms / 1000
            )
            if due:
                self._loaded_at = now
                version = self.source.version()
                if version != self._version:
                    self._load_file(version)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "lookups": float(self.lookups)}

    # -- sources -----------------------------------------------------------------------------
    def _include(self, columns: list[str]) -> list[str]:
        if self.include_fields is not None:
            return list(self.include_fields)
        return [c for c in columns if c not in self._store]

    def _load_file(self, version: Any) -> None:
        table = self.source.load()
        self.lookups += 1
        absent = [c for c in self._store if c not in table.column_names]
        if absent:
            raise ConfigError(f"lookup file {self.source.path!r} has no column {absent[0]!r}")
        self._cols = self._include(table.column_names)
        rows: dict[tuple, dict] = {}
        for r in table.select(self._store + self._cols).to_pylist():
            rows[tuple(r[c] for c in self._store)] = r  # the last row of a key wins
        self._rows, self._version = rows, version
        self._table = pa.Table.from_pylist(
            list(rows.values()), schema=table.select(self._store + self._cols).schema
        )

    def _connect(self) -> None:
        """The JDBC engine, and the table's columns from its metadata (once per worker):
        the fields a miss gets with ``miss_policy="null"`` are the table's, whatever
        rows were found before (a replay on a fresh worker gives the same tuples)."""
        if self._engine is not None:
            return
        engine = self.source.engine()
        table = self.source.reflect(engine)
        columns = [c.name for c in table.columns]
        absent = [c for c in self._store if c not in columns]
        if absent:
            engine.dispose()
            raise ConfigError(f"lookup table {self.source.table!r} has no column {absent[0]!r}")
        self._engine, self._sa_table, self._cols = engine, table, self._include(columns)

    def _lookup(self, keys: list[tuple]) -> dict[tuple, dict | None]:
        if isinstance(self.source, FileLookup):
            return {k: self._rows.get(k) for k in keys}
        now, ttl, cache = self.clock(), self.refresh_ms / 1000, self._cache
        out: dict[tuple, dict | None] = {}
        todo = []
        for k in keys:
            hit = cache.get(k)
            if hit is not None and (not ttl or now - hit[0] < ttl):
                cache.move_to_end(k)
                out[k] = hit[1]
            else:
                todo.append(k)
        if todo:
            self._connect()
            self.lookups += 1
            found = {}
            for r in self.source.fetch(self._engine, self._store, todo, self._sa_table):
                found[tuple(r[c] for c in self._store)] = r
            for k in todo:
                row = found.get(k)
                out[k] = row
                cache[k] = (now, row)
                cache.move_to_end(k)
            while len(cache) > self.cache_size:
                cache.popitem(last=False)
        return out

    # -- tuples ------------------------------------------------------------------------------
    def _key(self, t: Any) -> tuple:
        if not isinstance(t, dict):
            raise TypeError(f"expected a dict tuple, got {type(t).__name__}")
        return tuple(t[f] for f in self.lookup_fields)

    def _unhashable(self, key: tuple) -> str | None:
        """The error-port reason for a key no source can look up (a list or a dict in a
        lookup field: no row has such a key); None for a key that can be looked up."""
        for f, v in zip(self.lookup_fields, key, strict=True):
            try:
                hash(v)
            except TypeError:
                return (
                    f"the lookup field {f!r} is a {type(v).__name__} ({v!r}), which cannot be "
                    "looked up: use a string, a number or a tuple of them (convert the "
                    "value, or pick another lookup field)"
                )
        return None

    def _enriched(self, t: dict, row: dict | None) -> dict | None:
        if row is not None:
            cols = (
                self.include_fields
                if self.include_fields is not None
                else [c for c in row if c not in self._store]
            )
            return {**t, **{c: row.get(c) for c in cols}}
        policy = self.miss_policy
        if policy == "null":
            return {**t, **dict.fromkeys(self._cols)}
        if policy == "pass":
            return t
        if policy == "error":
            self._error(t, f"no row for {dict(zip(self.lookup_fields, self._key(t), strict=True))}")
        return None

    def process(self, t: Any) -> None:
        if self._loaded_at is None:
            self._refresh_file()
        try:
            k = self._key(t)
        except KeyError as exc:
            self._error(t, f"no field {exc.args[0]!r}")
            return
        except TypeError as exc:
            self._error(t, str(exc))
            return
        reason = self._unhashable(k)
        if reason is not None:
            self._error(t, reason)
            return
        out = self._enriched(t, self._lookup([k])[k])
        if out is not None:
            self.output.emit(out)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if self._loaded_at is None:
            self._refresh_file()
        if batch.num_rows == 0:
            return
        if any(f not in batch.schema.names for f in self.lookup_fields) or any(
            batch.column(f).null_count for f in self.lookup_fields
        ):  # a missing field, or a null key (the hash join matches no null): per tuple
            for row in batch.to_pylist():
                self.process(row)
            return
        if isinstance(self.source, JdbcLookup):
            try:
                keys = (
                    pa.Table.from_batches([batch.select(self.lookup_fields)])
                    .group_by(self.lookup_fields, use_threads=False)
                    .aggregate([])
                )
            except pa.ArrowNotImplementedError:
                # a key column Arrow cannot group (lists, structs): no row has such a key,
                # each tuple goes to the error port with the reason
                for row in batch.to_pylist():
                    self.process(row)
                return
            wanted = [tuple(r[f] for f in self.lookup_fields) for r in keys.to_pylist()]
            rows = [r for r in self._lookup(wanted).values() if r is not None]
            cols = self._cols
            right = (
                pa.Table.from_pylist([{c: r.get(c) for c in self._store + cols} for r in rows])
                if rows
                else None
            )
        else:
            right, cols = self._table, self._cols
        try:
            joined = self._join(batch, right, cols)
        except (pa.ArrowException, TypeError, ValueError):
            for row in batch.to_pylist():
                self.process(row)
            return
        hit = pc.fill_null(joined.column(_HIT), False)
        policy = self.miss_policy
        if policy == "null" or (policy == "pass" and self.output.port.schema is not None):
            emit_table(self.output, joined.drop_columns([_HIT, _POS]))  # in arrival order
            return
        if policy == "pass":
            originals = batch.to_pylist()
            flags = hit.to_pylist()
            for row, ok, orig in zip(
                joined.drop_columns([_HIT, _POS]).to_pylist(), flags, originals, strict=True
            ):
                self.output.emit(row if ok else orig)
            return
        found = joined.filter(hit).drop_columns([_HIT, _POS])
        if found.num_rows:
            emit_table(self.output, found)
        if policy == "error":
            missed = joined.filter(pc.invert(hit))
            for row in batch.take(missed.column(_POS).combine_chunks()).to_pylist():
                self._error(row, f"no row for {dict((f, row[f]) for f in self.lookup_fields)}")

    def _join(self, batch: pa.RecordBatch, right: pa.Table | None, cols: list[str]) -> pa.Table:
        """``batch`` left-joined with ``right``, in batch order, with the hit flag and the
        row position; a looked-up column replaces a tuple field of the same name."""
        n = batch.num_rows
        left = pa.Table.from_batches([batch]).append_column(_POS, pa.array(range(n), pa.int64()))
        added = [c for c in cols if c not in self._store]
        if right is None or right.num_rows == 0:
            out = left.drop_columns([c for c in added if c in batch.schema.names])
            for c in added:
                out = out.append_column(c, pa.nulls(n))
            joined = out.append_column(_HIT, pa.nulls(n, pa.bool_()))
        else:
            right = right.select(self._store + added)
            for lf, sf in zip(self.lookup_fields, self._store, strict=True):
                i = right.schema.get_field_index(sf)
                want = batch.schema.field(lf).type
                if _kind(right.column(sf).type) != _kind(want):
                    # a cast would make "2" find 2, which a tuple's lookup does not
                    raise TypeError(
                        f"lookup field {lf!r} is {want}, the store's {right.column(sf).type}"
                    )
                right = right.set_column(i, sf, right.column(sf).cast(want))
            left = left.drop_columns(
                [c for c in added if c in batch.schema.names and c not in self.lookup_fields]
            )
            if len(self.lookup_fields) == 1:  # one key column: a vectorized index, no hash join
                where = pc.index_in(
                    left.column(self.lookup_fields[0]), value_set=right.column(self._store[0])
                )
                joined = left
                for c in added:
                    joined = joined.append_column(c, right.column(c).take(where))
                joined = joined.append_column(_HIT, pc.is_valid(where))
            else:
                right = right.append_column(_HIT, pa.array([True] * right.num_rows))
                joined = left.join(
                    right,
                    keys=self.lookup_fields,
                    right_keys=self._store,
                    join_type="left outer",
                    coalesce_keys=True,
                ).sort_by(_POS)
        order = [
            *batch.schema.names,
            *[c for c in added if c not in batch.schema.names],
            _HIT,
            _POS,
        ]
        return joined.select([c for c in order if c in joined.column_names])


def _kind(t: pa.DataType) -> str:
    """The kind of value a key type holds: widths may differ (int32 finds int64), kinds not."""
    for name, test in (
        ("int", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("text", is_text),
        ("bytes", is_binary),
    ):
        if test(t):
            return name
    return str(t)
