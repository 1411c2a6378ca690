"""The reading core of the JDBC poll input, shared by the operator and the Spark data source:
SQL for key ranges, server-side cursors and database types to Arrow (key values, as
positions and offsets keep them: :mod:`malhar.io.jdbc.poll_keys`).

**Ranges.** Every read is ``key > low AND key <= high ORDER BY key`` (``low`` None: no lower
bound; ``high`` None: none above) through a server-side cursor (psycopg2's named cursor;
SQLAlchemy's ``stream_results`` elsewhere), ``fetch_size`` rows at a time, so memory stays
flat whatever the range holds. Identifiers are quoted by the dialect, the bounds are bound
parameters.

**Types** (PostgreSQL, by the result's type OIDs; a typed output port or ``column_types``
decides instead where given): integers, floats, booleans, text (``varchar``, ``char``,
``text``, ``uuid``, ``json`` and ``jsonb`` as their JSON text), ``bytea`` as binary,
``numeric(p,s)`` as ``decimal128(p,s)`` (unconstrained ``numeric`` as ``decimal128(38,18)``,
Spark's default), ``date``, ``time``, ``timestamp`` (naive), ``timestamptz`` (UTC),
``interval`` as a duration, one-dimensional arrays of these as lists; NULLs stay null. A
value that does not fit its type (``NaN`` or too many digits for the decimal, a
multi-dimensional array) makes its row an error row, with its key.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from malhar.io.jdbc.config import split_table
from malhar.io.jdbc.errors import JdbcConfigError

__all__ = [
    "PollQuery",
    "arrow_type_of",
    "rows_to_batch",
]

log = logging.getLogger("malhar.io.jdbc.poll")

#: PostgreSQL type OID -> Arrow type (see the module doc)
PG_TYPES: dict[int, pa.DataType] = {
    16: pa.bool_(),
    17: pa.binary(),
    18: pa.string(),
    19: pa.string(),
    20: pa.int64(),
    21: pa.int16(),
    23: pa.int32(),
    25: pa.string(),
    26: pa.int64(),
    114: pa.string(),
    142: pa.string(),
    700: pa.float32(),
    701: pa.float64(),
    1042: pa.string(),
    1043: pa.string(),
    1082: pa.date32(),
    1083: pa.time64("us"),
    1114: pa.timestamp("us"),
    1184: pa.timestamp("us", tz="UTC"),
    1186: pa.duration("us"),
    2950: pa.string(),
    3802: pa.string(),
}
#: PostgreSQL array type OID -> its element's OID
PG_ARRAYS: dict[int, int] = {
    1000: 16,
    1001: 17,
    1005: 21,
    1007: 23,
    1016: 20,
    1009: 25,
    1014: 1042,
    1015: 1043,
    1021: 700,
    1022: 701,
    1231: 1700,
    1115: 1114,
    1185: 1184,
    1182: 1082,
    1183: 1083,
    1187: 1186,
    199: 114,
    3807: 3802,
    2951: 2950,
}
NUMERIC = 1700
#: unconstrained numeric (Spark's default decimal)
DEFAULT_DECIMAL = pa.decimal128(38, 18)


def arrow_type_of(type_code: Any, precision: Any = None, scale: Any = None) -> pa.DataType | None:
    """The Arrow type of a PostgreSQL result column (None: not known, read as text)."""
    if not isinstance(type_code, int):
        return None
    if type_code == NUMERIC:
        return _decimal(precision, scale)
    if type_code in PG_TYPES:
        return PG_TYPES[type_code]
    element = PG_ARRAYS.get(type_code)
    if element is not None:
        inner = DEFAULT_DECIMAL if element == NUMERIC else PG_TYPES.get(element)
        return pa.list_(inner) if inner is not None else None
    return None


def _decimal(precision: Any, scale: Any) -> pa.DataType:
    if isinstance(precision, int) and 0 < precision <= 38 and isinstance(scale, int):
        return pa.decimal128(precision, max(0, min(scale, precision)))
    return DEFAULT_DECIMAL


def arrow_type_of_sqlalchemy(typ: Any) -> pa.DataType | None:
    """The Arrow type of a reflected SQLAlchemy column type (other databases than
    PostgreSQL; None: inferred from the values)."""
    if isinstance(typ, sa.Boolean):
        return pa.bool_()
    if isinstance(typ, sa.BigInteger | sa.Integer):
        return pa.int64()
    if isinstance(typ, sa.Numeric) and not isinstance(typ, sa.Float):
        return _decimal(typ.precision, typ.scale)
    if isinstance(typ, sa.Float):
        return pa.float64()
    if isinstance(typ, sa.DateTime):
        return pa.timestamp("us", tz="UTC") if typ.timezone else pa.timestamp("us")
    if isinstance(typ, sa.Date):
        return pa.date32()
    if isinstance(typ, sa.LargeBinary):
        return pa.binary()
    if isinstance(typ, sa.String | sa.JSON):
        return pa.string()
    return None


# -- conversion ---------------------------------------------------------------------------------
_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    OverflowError,
    ValueError,
    TypeError,
)


def _fix_memoryviews(values: list[Any]) -> list[Any]:
    return [bytes(v) if isinstance(v, memoryview) else v for v in values]


def _column(values: list[Any], typ: pa.DataType | None) -> tuple[pa.Array | None, Exception | None]:
    """``values`` as an Arrow array of ``typ`` (None: inferred), or the conversion error."""
    if typ is None:
        try:
            return pa.array(_fix_memoryviews(values)), None
        except _CONVERSION_ERRORS:
            return pa.array([None if v is None else str(v) for v in values], pa.string()), None
    try:
        return pa.array(values, typ), None
    except _CONVERSION_ERRORS as exc:
        if pa.types.is_string(typ):
            return pa.array([None if v is None else str(v) for v in values], pa.string()), None
        if pa.types.is_binary(typ) or pa.types.is_list(typ):
            try:
                return pa.array(_fix_memoryviews(values), typ), None
            except _CONVERSION_ERRORS:
                pass
        if pa.types.is_list(typ) and pa.types.is_string(typ.value_type):
            # uuid[] and the like: elements arrive as uuid.UUID (a nested list, from a
            # multi-dimensional array, stays one and fails below)
            try:
                return pa.array([_str_elements(v) for v in values], typ), None
            except _CONVERSION_ERRORS:
                pass
        return None, exc


def _str_elements(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [e if e is None or isinstance(e, str | list | tuple) else str(e) for e in value]


def _shown(value: Any) -> str:
    shown = str(value) if isinstance(value, Decimal) else repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def misfit(name: str, value: Any, typ: pa.DataType | None, why: Any) -> str:
    """Why ``value`` of column ``name`` does not fit ``typ``, and the fix: for a decimal in
    the column's and the value's words (its digits against the type's), else with Arrow's
    reason.

    Example:
        >>> print(misfit("big", Decimal("1E+30"), DEFAULT_DECIMAL, "(Arrow's reason)"))
        column 'big': 1E+30 has 31 digits before the decimal point; an unbounded numeric maps to decimal128(38, 18) by default, which holds at most 20. Set column_types={"big": "string"} (or a "decimal(P,S)" with P-S >= 31, P <= 38), or cast the column in the query
    """
    if typ is None or not pa.types.is_decimal(typ) or not isinstance(value, Decimal):
        return f"column {name!r}: cannot convert {_shown(value)} to {typ}: {why}"
    precision, scale = typ.precision, typ.scale
    if typ == DEFAULT_DECIMAL:
        held = f"an unbounded numeric maps to {typ} by default, which"
    else:
        held = typ
    wider = ""
    if not value.is_finite():
        what = f"{value} has no decimal form; {held} holds numbers only"
    else:
        digits, exponent = value.as_tuple()[1:]
        before = max(len(digits) + int(exponent), 0)
        after = max(-int(exponent), 0)
        if before > precision - scale:
            what = (
                f"{_shown(value)} has {before} digits before the decimal point; {held} "
                f"holds at most {precision - scale}"
            )
            if before <= 38:
                wider = f' (or a "decimal(P,S)" with P-S >= {before}, P <= 38)'
        elif after > scale:
            what = (
                f"{_shown(value)} has {after} digits after the decimal point; {held} "
                f"holds at most {scale}"
            )
            if before + after <= 38:
                wider = f' (or a "decimal(P,S)" with S >= {after}, P-S >= {before}, P <= 38)'
        else:
            what = f"{_shown(value)} does not fit {typ}"
    return (
        f'column {name!r}: {what}. Set column_types={{{json.dumps(name)}: "string"}}'
        f"{wider}, or cast the column in the query"
    )


def rows_to_batch(
    rows: Sequence[Sequence[Any]],
    names: Sequence[str],
    types: Sequence[pa.DataType | None],
    key_index: int,
) -> tuple[pa.RecordBatch, list[dict[str, Any]]]:
    """The rows as one Arrow batch of ``types`` (None: inferred from the values), and an error row
    ``{"key", "error"}`` for each row with a value that does not fit its column's type
    (left out of the batch)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays: list[pa.Array | None] = []
    bad: dict[int, str] = {}
    for name, values, typ in zip(names, columns, types, strict=True):
        values = list(values)
        array, exc = _column(values, typ)
        if array is None:
            for i, v in enumerate(values):
                if i in bad:
                    continue
                one, why = _column([v], typ)
                if one is None:
                    odd = _unconvertible(v)
                    if odd is not None:
                        bad[i] = (
                            f"column {name!r}: the driver cannot convert {odd.text!r} to "
                            f"Python ({odd.reason})"
                        )
                        continue
                    bad[i] = misfit(name, v, typ, why)
        arrays.append(array)
    if bad:
        keep = [i for i in range(len(rows)) if i not in bad]
        arrays = [_column([columns[c][i] for i in keep], types[c])[0] for c in range(len(names))]
    batch = pa.RecordBatch.from_arrays(arrays, names=list(names))  # type: ignore[arg-type]
    errors = [
        {"key": _key_text(rows[i][key_index]), "error": why} for i, why in sorted(bad.items())
    ]
    return batch, errors


def _key_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


# -- SQL ------------------------------------------------------------------------------------------
class PollQuery:
    """The statements of one source (table or query) on one database.

    Args:
        settings: the poll settings (source, key, columns, where).
        dialect: the database's SQLAlchemy dialect (quoting).
        raw: the statements run on a raw psycopg2 cursor (``%(name)s`` parameters);
            otherwise through ``sqlalchemy.text`` (``:name``, whatever the driver's own
            style: SQLAlchemy translates it, and escaped ``%(name)s`` for pyformat drivers
            such as psycopg 3 and PyMySQL, binding nothing).
    """

    def __init__(self, settings: Any, dialect: sa.Dialect, raw: bool = False) -> None:
        self.settings = settings
        self.dialect = dialect
        self.pyformat = raw
        prep = dialect.identifier_preparer
        self.q = lambda name: self._sql_text(prep.quote(name))
        if settings.table:
            schema, name = split_table(settings.table)
            self.source = self._sql_text(
                (f"{prep.quote_schema(schema)}." if schema else "") + prep.quote(name)
            )
        else:
            self.source = f"({self._sql_text(settings.query)}) AS malhar_q"
        cols = settings.column_names
        self.select_list = ", ".join(self.q(c) for c in cols) if cols else "*"
        self.key = self.q(settings.key_column)
        self.user_where = self._sql_text(settings.where) if settings.where else None
        #: the key column's SQL type the bounds are cast to (None: no cast)
        self.key_type: str | None = None
        #: a condition that leaves out keys with no usable place in key order (NaN, infinity)
        self.key_guard: str | None = None

    def _sql_text(self, text: str) -> str:
        """SQL text of the user or the catalog, as the statement carries it: psycopg2's
        ``%(name)s`` parameters make every other ``%`` a format character (``LIKE 'paid%'``
        failed with "dict is not a sequence"), so it is doubled there."""
        return text.replace("%", "%%") if self.pyformat else text

    def set_key_type(self, sql_type: str | None, guard: str | None) -> None:
        """Cast the key bounds to ``sql_type`` (the key column's type as the database names
        it: a position read back through Python, a ``real`` 0.2 as the float8
        0.20000000298..., compared below the row it came from, which was read again every
        window), and add ``guard`` (a condition on the key, ``{key}`` in it) to every read."""
        if sql_type is not None and not _TYPE_NAME.fullmatch(sql_type):
            raise JdbcConfigError(f"not a type name the key bounds can be cast to: {sql_type!r}")
        self.key_type = sql_type
        self.key_guard = None if guard is None else guard.format(key=self.key)

    def _param(self, name: str) -> str:
        return f"%({name})s" if self.pyformat else f":{name}"

    def _bound(self, name: str) -> str:
        param = self._param(name)
        return f"CAST({param} AS {self.key_type})" if self.key_type else param

    def where(self, low: bool, high: bool) -> str:
        # a NULL key has no place in key order: without this a read with no lower bound
        # ended on it (NULLs sort last) and the next one read everything again
        parts = [f"{self.key} IS NOT NULL"]
        if self.key_guard:
            parts.append(self.key_guard)
        if low:
            parts.append(f"{self.key} > {self._bound('low')}")
        if high:
            parts.append(f"{self.key} <= {self._bound('high')}")
        if self.user_where:
            parts.append(f"({self.user_where})")
        return " WHERE " + " AND ".join(parts)

    def null_keys_sql(self) -> str:
        """How many rows (of ``where``) have a NULL key: they are never read."""
        extra = f" AND ({self.user_where})" if self.user_where else ""
        return f"SELECT count(*) FROM {self.source} WHERE {self.key} IS NULL{extra}"

    def bad_keys_sql(self) -> str | None:
        """How many rows (of ``where``) have a key the guard leaves out (NaN, infinite; None:
        no guard): they are never read."""
        if not self.key_guard:
            return None
        extra = f" AND ({self.user_where})" if self.user_where else ""
        return (
            f"SELECT count(*) FROM {self.source} WHERE {self.key} IS NOT NULL "
            f"AND NOT ({self.key_guard}){extra}"
        )

    def range_sql(self, low: bool, high: bool) -> str:
        """Rows of ``(low, high]`` in key order."""
        return (
            f"SELECT {self.select_list} FROM {self.source}{self.where(low, high)} "
            f"ORDER BY {self.key}"
        )

    def count_sql(self, low: bool, high: bool) -> str:
        return f"SELECT count(*) FROM {self.source}{self.where(low, high)}"

    def max_sql(self) -> str:
        return f"SELECT max({self.key}) FROM {self.source}{self.where(False, False)}"

    def nth_key_sql(self, low: bool, high: bool) -> str:
        """The key at ``offset`` in key order (the plan's boundaries)."""
        offset = self._param("offset")
        return (
            f"SELECT {self.key} FROM {self.source}{self.where(low, high)} ORDER BY {self.key} "
            f"LIMIT 1 OFFSET {offset}"
        )

    def probe_sql(self) -> str:
        """No rows, every column: the result's description."""
        return f"SELECT {self.select_list} FROM {self.source} WHERE 1 = 0"


#: a type name as PostgreSQL's format_type() gives it (quoted names, schema, array, modifier)
_TYPE_NAME = re.compile(r'[A-Za-z0-9_ ."$\[\](),]+')

#: key type OIDs whose special values have no usable place in key order -> the guard
_FLOATS = frozenset({700, 701})
_DATES = frozenset({1082, 1114, 1184})


def pg_key_guard(oid: Any, server_version: tuple[int, ...] | None) -> str | None:
    """The condition (``{key}`` in it) that leaves out the PostgreSQL key values a position
    cannot hold: ``NaN`` (sorted above every number: once the position, ``key > NaN`` never
    matched again and polling stopped for good), ``numeric`` ±Infinity (psycopg2 binds a
    Decimal infinity as NaN) and infinite dates and timestamps (psycopg2 gives
    ``datetime.max``, below ``'infinity'``: that row was read again every window)."""
    if oid in _FLOATS:
        return "{key} < 'NaN'"  # NaN is the largest float; infinities round-trip
    if oid == NUMERIC:
        if server_version is not None and server_version >= (14,):
            return "{key} > '-Infinity' AND {key} < 'Infinity'"
        return "{key} < 'NaN'"
    if oid in _DATES:
        return "{key} > '-infinity' AND {key} < 'infinity'"
    return None


def params(low: Any = None, high: Any = None, **more: Any) -> dict[str, Any]:
    out = {k: v for k, v in (("low", low), ("high", high)) if v is not None}
    out.update(more)
    return out


class Cursor:
    """A server-side cursor over one statement: ``fetch(n)`` returns up to ``n`` rows
    (tuples); fewer means the statement is exhausted."""

    def __init__(
        self,
        conn: Any,
        sql: str,
        args: dict[str, Any],
        fetch_size: int,
        *,
        raw: bool,
        server_side: bool = True,
    ) -> None:
        self.raw = raw
        if raw:  # psycopg2: a named (server-side) cursor
            if server_side:
                self.cur = conn.cursor(name=f"malhar_poll_{time.monotonic_ns()}")
                self.cur.itersize = fetch_size
            else:  # a named cursor has no description before its first fetch
                self.cur = conn.cursor()
            self.cur.execute(sql, args)
            self.result = None
        else:
            self.cur = None
            self.result = conn.execution_options(
                stream_results=True, max_row_buffer=fetch_size
            ).execute(sa.text(sql), args)

    @property
    def description(self) -> Any:
        if self.raw:
            return self.cur.description
        return self.result.cursor.description if self.result.cursor is not None else None

    def fetch(self, n: int) -> list[Sequence[Any]]:
        if self.raw:
            return self.cur.fetchmany(n)
        return self.result.fetchmany(n)

    def rows(self, n: int) -> Iterator[list[Sequence[Any]]]:
        while True:
            chunk = self.fetch(n)
            if chunk:
                yield chunk
            if len(chunk) < n:
                return

    def close(self) -> None:
        try:
            if self.raw:
                self.cur.close()
            else:
                self.result.close()
        except Exception:  # the connection may be gone: the transaction ends with it
            pass


def json_text(conn: Any) -> None:
    """Make psycopg2 return ``json`` / ``jsonb`` as their text (no parse and dump again)."""
    from psycopg2.extras import register_default_json, register_default_jsonb

    register_default_json(conn, loads=_identity)
    register_default_jsonb(conn, loads=_identity)


def _identity(text: str) -> str:
    return text


class Unconvertible:
    """A value psycopg2 could not convert to Python (a ``date`` after the year 9999 or
    before year 1, an ``interval`` beyond ``timedelta``): its text and why. Its row goes to
    the error port (:func:`rows_to_batch`) instead of failing the whole fetch."""

    __slots__ = ("reason", "text")

    def __init__(self, text: str, reason: str) -> None:
        self.text, self.reason = text, reason

    def __repr__(self) -> str:
        return f"Unconvertible({self.text!r})"


#: psycopg2's casters of the date and time types (and their arrays), by name
_TIME_CASTERS = ("PYDATE", "PYTIME", "PYDATETIME", "PYDATETIMETZ", "PYINTERVAL")


def lenient_time_casts(conn: Any) -> None:
    """Make psycopg2 on ``conn`` give an :class:`Unconvertible` for a date or time value
    Python cannot hold, rather than raising for the whole fetch (which failed the window,
    and every replay of it)."""
    import psycopg2.extensions as ext

    for name in _TIME_CASTERS:
        base = getattr(ext, name)

        def cast(value: str | None, cur: Any, base: Any = base) -> Any:
            if value is None:
                return None
            try:
                return base(value, cur)
            except (ValueError, OverflowError) as exc:
                return Unconvertible(value, f"{type(exc).__name__}: {exc}")

        lenient = ext.new_type(base.values, f"MALHAR_{name}", cast)
        ext.register_type(lenient, conn)
        array = getattr(ext, f"{name}ARRAY")
        ext.register_type(ext.new_array_type(array.values, f"MALHAR_{name}ARRAY", lenient), conn)


def _unconvertible(value: Any) -> Unconvertible | None:
    """The first :class:`Unconvertible` in ``value`` (itself, or an element of a list)."""
    if isinstance(value, Unconvertible):
        return value
    if isinstance(value, list | tuple):
        for v in value:
            if (found := _unconvertible(v)) is not None:
                return found
    return None
