"""A window's rows (one Arrow table) as Kafka records: keys, values, partitions, headers, and
the rows that cannot become records (with the reason).

Used by the Kafka output's store (:mod:`malhar.io.kafka.producer`); the serializers are in
:mod:`malhar.io.kafka.serializers`. Work is per column where Arrow allows it (the key and
value serializers encode whole columns; the column partitioner hashes each distinct value
once).

A window of tuples that Arrow cannot hold as they are (rows with other fields, values of
other types in one field, integers past 64 bits ...: one table would drop fields, invent
nulls or change types) reaches the encoder as the tuples themselves, in the hidden column
:data:`ROWS` (see :func:`pack_rows`): each row is then encoded as itself, and a row lacking
the key / value / partition column is refused, whatever the window's other rows are.

A window whose pieces have different schemas (Arrow batches of a typed stream next to runs of
tuples) reaches it as :class:`WindowPieces`: each piece is encoded as it is, a batch with its
declared Arrow types, so that a row's record (its key's bytes, hence its partition) never
depends on the window's other rows or on the order the pieces arrived in.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.io.kafka.output_settings import KafkaOutputSettings
from malhar.io.kafka.serializers import _SINGLE, Serializer

__all__ = [
    "ROWS",
    "WINDOW_HEADER",
    "WRITER_HEADER",
    "EncodedRecords",
    "RecordEncoder",
    "Window",
    "WindowPieces",
    "murmur2_partition",
    "pack_rows",
    "row_at",
    "unpack_rows",
]

#: the header holding the window id (ASCII digits), on every record in every delivery mode
WINDOW_HEADER = "malhar.window"
#: the header naming the writer, ``<application>/<operator>/<partition>`` (scan recovery)
WRITER_HEADER = "malhar.writer"

Header = tuple[str, bytes | None]

#: the only column of a window table that carries its rows as Python objects (pickled dicts,
#: made and read in the same process): rows Arrow would not give back as they are
ROWS = "__malhar_rows__"


class WindowPieces:
    """A window's rows as pieces of different schemas, in arrival order: Arrow tables (a
    typed stream's batches, runs of tuples Arrow holds as they are) and :data:`ROWS` tables.
    Row ``i`` of the window is row ``i`` of the pieces one after another."""

    def __init__(self, tables: Sequence[pa.Table]) -> None:
        self.tables = tuple(tables)
        #: the window's rows, as :attr:`pyarrow.Table.num_rows` (what the committer counts)
        self.num_rows = sum(t.num_rows for t in self.tables)

    def locate(self, i: int) -> tuple[pa.Table, int]:
        """The piece holding window row ``i``, and the row's index in it."""
        for table in self.tables:
            if i < table.num_rows:
                return table, i
            i -= table.num_rows
        raise IndexError(f"row {i} is past the window's {self.num_rows} rows")

    def __repr__(self) -> str:
        return f"WindowPieces({[t.num_rows for t in self.tables]} rows)"


#: what the encoder takes for a window: one table, or pieces of different schemas
Window = pa.Table | WindowPieces


#: the schema metadata that marks a :data:`ROWS` table (a user's column of that name is none)
_PACKED = {b"malhar.rows": b"pickled"}


def _is_packed(table: pa.Table) -> bool:
    return table.column_names == [ROWS] and table.schema.metadata == _PACKED


def pack_rows(rows: list[dict[str, Any]]) -> tuple[pa.Table, dict[int, str]]:
    """``rows`` as a :data:`ROWS` table, and those that cannot be kept (index -> reason)."""
    packed: list[bytes] = []
    refused: dict[int, str] = {}
    dumps, protocol = pickle.dumps, pickle.HIGHEST_PROTOCOL
    for i, row in enumerate(rows):
        try:
            packed.append(dumps(row, protocol))
        except Exception as exc:  # an object that cannot be copied cannot be a record either
            refused[i] = f"cannot be a record: {type(exc).__name__}: {exc}"
    return pa.table({ROWS: pa.array(packed, pa.binary())}, metadata=_PACKED), refused


def unpack_rows(table: pa.Table) -> list[dict[str, Any]] | None:
    """The rows of a :data:`ROWS` table (None for any other table)."""
    if not _is_packed(table):
        return None
    loads = pickle.loads
    return [loads(b) for b in table.column(0).to_pylist()]


def row_at(table: Window, i: int) -> dict[str, Any]:
    """Row ``i`` of a window, as a dict (a :data:`ROWS` table's row as it came)."""
    if isinstance(table, WindowPieces):
        table, i = table.locate(i)
    if _is_packed(table):
        return pickle.loads(table.column(0)[i].as_py())
    return table.slice(i, 1).to_pylist()[0]


@dataclass
class EncodedRecords:
    """The records of a window, by row index; rows in ``rejected`` are not records."""

    keys: list[bytes | None]
    values: list[bytes | None]
    #: explicit partitions (None: the producer's partitioner decides), or None for all rows
    partitions: list[int | None] | None
    #: extra headers per row (None: only the common ones), or None for all rows
    headers: list[list[Header] | None] | None
    rejected: dict[int, str] = field(default_factory=dict)

    def size(self, i: int, common_headers: int) -> int:
        """Bytes of record ``i``: key + value + headers (as librdkafka counts them, roughly)."""
        n = len(self.keys[i] or b"") + len(self.values[i] or b"") + common_headers
        extra = self.headers[i] if self.headers is not None else None
        if extra:
            n += sum(len(k) + len(v or b"") for k, v in extra)
        return n


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed int32."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def murmur2_partition(data: bytes, partitions: int) -> int:
    """The partition Kafka's Java ``DefaultPartitioner`` (and librdkafka's
    ``murmur2_random``) gives the key ``data``.

    Example (Kafka's own test vector: ``Utils.murmur2("21".getBytes()) == -973932308``):
        >>> murmur2(b"21"), murmur2_partition(b"21", 4)
        (-973932308, 0)
    """
    return (murmur2(data) & 0x7FFFFFFF) % partitions


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


class RecordEncoder:
    """Turns a window's table into :class:`EncodedRecords` per the output's settings.

    Args:
        settings: the output's settings (columns, partitioner, headers).
        key_serializer: encodes ``key_column`` (None when there is no key).
        value_serializer: encodes ``value_column`` or the whole row.
        partitions: the topic's partition count (explicit partitions are checked against it).
    """

    def __init__(
        self,
        settings: KafkaOutputSettings,
        key_serializer: Serializer | None,
        value_serializer: Serializer,
        partitions: int,
    ) -> None:
        self.settings = settings
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.partitions = partitions
        self.value_source = settings.value_source
        #: columns that are not part of a whole-row value
        self.meta_columns = {c for c in (settings.headers_column,) if c} | (
            {settings.partition_column} if settings.partitioner == "explicit" else set()
        )

    def encode(self, rows: Window) -> EncodedRecords:
        """The records of a window (each piece of :class:`WindowPieces` as it is)."""
        if isinstance(rows, WindowPieces):
            return _joined([self.encode(t) for t in rows.tables])
        items = unpack_rows(rows)
        if items is not None:
            return self.encode_rows(items)
        n = rows.num_rows
        rejected: dict[int, str] = {}
        names = rows.column_names
        keys: list[bytes | None] = [None] * n
        s = self.settings
        if s.key_column and self.key_serializer is not None:
            if s.key_column not in names:
                _reject_all(rejected, n, f"no key_column {s.key_column!r} (the row has {names})")
            else:
                keys, bad = self.key_serializer.serialize(
                    _one(rows, s.key_column, self.key_serializer)
                )
                _merge(rejected, bad, "key")
        values = self._values(rows, rejected)
        partitions = self._partitions(rows, rejected, keys)
        headers = self._headers(rows, rejected)
        return EncodedRecords(keys, values, partitions, headers, rejected)

    def encode_rows(self, items: list[dict[str, Any]]) -> EncodedRecords:
        """:meth:`encode` of rows as Python dicts, each as itself (the window's other rows
        change nothing: a row lacking the key, value or partition column is refused)."""
        n = len(items)
        rejected: dict[int, str] = {}
        s = self.settings
        keys: list[bytes | None] = [None] * n
        if s.key_column and self.key_serializer is not None:
            at, values = _field(items, s.key_column, rejected, "no key_column")
            encoded, bad = self.key_serializer.serialize_values(values, s.key_column)
            _place(keys, at, encoded, rejected, bad, "key")
        values_out: list[bytes | None] = [None] * n
        source = self.value_source
        if source is None:
            meta = self.meta_columns
            whole = [{k: v for k, v in r.items() if k not in meta} if meta else r for r in items]
            encoded, bad = self.value_serializer.serialize_rows(whole)
            _place(values_out, list(range(n)), encoded, rejected, bad, "value")
        else:
            at, values = _field(items, source, rejected, "no value column")
            encoded, bad = self.value_serializer.serialize_values(values, source)
            _place(values_out, at, encoded, rejected, bad, "value")
        partitions: list[int | None] | None = None
        if s.partitioner != "key":
            column = s.partition_column
            assert column is not None
            at, values = _field(items, column, rejected, "no partition_column")
            partitions = [None] * n
            found = self._partition_values(values, column)
            for j, i in enumerate(at):
                p = found[j]
                partitions[i] = p if isinstance(p, int) else None
                if isinstance(p, str):
                    rejected.setdefault(i, p)
        headers: list[list[Header] | None] | None = None
        if s.headers_column and any(s.headers_column in r for r in items):
            headers = self._header_values([r.get(s.headers_column) for r in items], rejected)
        return EncodedRecords(keys, values_out, partitions, headers, rejected)

    def _partition_values(self, values: list[Any], column: str) -> list[int | str | None]:
        """Per value: its partition, None (the producer decides) or the reason it is none."""
        s = self.settings
        out: list[int | str | None] = []
        cache: dict[Any, int] = {}  # by (type, value): 1, 1.0 and True hash alike
        for v in values:
            if v is None:
                out.append(None)
            elif s.partitioner == "explicit":
                if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < self.partitions:
                    out.append(v)
                else:
                    out.append(
                        f"partition {v!r} in column {column!r} is not a partition of topic "
                        f"{s.topic!r} (0..{self.partitions - 1})"
                    )
            else:
                key = (type(v), v)
                try:
                    p = cache.get(key)
                except TypeError:  # unhashable: hashed each time
                    key, p = None, None
                if p is None:
                    p = murmur2_partition(_as_bytes(v), self.partitions)
                    if key is not None:
                        cache[key] = p
                out.append(p)
        return out

    def _values(self, rows: pa.Table, rejected: dict[int, str]) -> list[bytes | None]:
        n = rows.num_rows
        source = self.value_source
        if source is None:
            data = rows.select([c for c in rows.column_names if c not in self.meta_columns])
        elif source not in rows.column_names:
            _reject_all(
                rejected, n, f"no value column {source!r} (the row has {rows.column_names})"
            )
            return [None] * n
        else:
            data = _one(rows, source, self.value_serializer)
        values, bad = self.value_serializer.serialize(data)
        _merge(rejected, bad, "value")
        return values

    def _partitions(
        self, rows: pa.Table, rejected: dict[int, str], keys: list[bytes | None]
    ) -> list[int | None] | None:
        s = self.settings
        if s.partitioner == "key":
            return None
        n = rows.num_rows
        column = s.partition_column
        assert column is not None
        if column not in rows.column_names:
            _reject_all(
                rejected, n, f"no partition_column {column!r} (the row has {rows.column_names})"
            )
            return [None] * n
        data = rows.column(column)
        if s.partitioner == "explicit":
            out: list[int | None] = []
            for i, v in enumerate(data.to_pylist()):
                if v is None:
                    out.append(None)  # the producer's partitioner (on the key) decides
                elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < self.partitions:
                    out.append(v)
                else:
                    out.append(None)
                    rejected.setdefault(
                        i,
                        f"partition {v!r} in column {column!r} is not a partition of topic "
                        f"{s.topic!r} (0..{self.partitions - 1})",
                    )
            return out
        # "column": murmur2 of the value's text, each distinct value hashed once
        encoded = pc.dictionary_encode(data.combine_chunks())
        table = [
            None if v is None else murmur2_partition(_as_bytes(v), self.partitions)
            for v in encoded.dictionary.to_pylist()
        ]
        return [None if i is None else table[i] for i in encoded.indices.to_pylist()]

    def _headers(
        self, rows: pa.Table, rejected: dict[int, str]
    ) -> list[list[Header] | None] | None:
        column = self.settings.headers_column
        if not column:
            return None
        if column not in rows.column_names:
            return None  # no per-row headers in this window
        return self._header_values(rows.column(column).to_pylist(), rejected)

    def _header_values(
        self, values: list[Any], rejected: dict[int, str]
    ) -> list[list[Header] | None]:
        column = self.settings.headers_column
        out: list[list[Header] | None] = []
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            try:
                items = []
                for p in v.items() if isinstance(v, Mapping) else v:
                    if isinstance(p, Mapping):  # Arrow list<struct<key, value>>
                        p = (p.get("key"), p.get("value"))
                    k, val = p
                    if not isinstance(k, str):
                        raise ValueError(f"header key {k!r} is not a string")
                    items.append((k, None if val is None else _as_bytes(val)))
                out.append(items)
            except (TypeError, ValueError) as exc:
                out.append(None)
                rejected.setdefault(i, f"headers in column {column!r} are not usable: {exc}")
        return out


def _joined(parts: list[EncodedRecords]) -> EncodedRecords:
    """The records of pieces one after another (row indexes shifted to the window's)."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    partitions: list[int | None] | None = None
    headers: list[list[Header] | None] | None = None
    rejected: dict[int, str] = {}
    for part in parts:
        start, n = len(values), len(part.values)
        keys += part.keys
        values += part.values
        if part.partitions is not None or partitions is not None:
            if partitions is None:
                partitions = [None] * start
            partitions += part.partitions if part.partitions is not None else [None] * n
        if part.headers is not None or headers is not None:
            if headers is None:
                headers = [None] * start
            headers += part.headers if part.headers is not None else [None] * n
        rejected.update((start + i, why) for i, why in part.rejected.items())
    return EncodedRecords(keys, values, partitions, headers, rejected)


def _one(rows: pa.Table, column: str, serializer: Serializer) -> pa.Table:
    """One column for ``serializer`` (a whole-row serializer encodes the column's value, not
    ``{column: value}``)."""
    data = rows.select([column])
    return data if serializer.single_column else data.rename_columns([_SINGLE])


def _field(
    items: list[dict[str, Any]], column: str, rejected: dict[int, str], missing: str
) -> tuple[list[int], list[Any]]:
    """The rows that have ``column`` and their values; the others are refused."""
    at: list[int] = []
    values: list[Any] = []
    for i, row in enumerate(items):
        if column in row:
            at.append(i)
            values.append(row[column])
        else:
            rejected.setdefault(i, f"{missing} {column!r} (the row has {list(row)})")
    return at, values


def _place(
    out: list[bytes | None],
    at: list[int],
    encoded: list[bytes | None],
    rejected: dict[int, str],
    bad: dict[int, str],
    what: str,
) -> None:
    for j, i in enumerate(at):
        out[i] = encoded[j]
    _merge(rejected, {at[j]: reason for j, reason in bad.items()}, what)


def _reject_all(rejected: dict[int, str], n: int, reason: str) -> None:
    for i in range(n):
        rejected.setdefault(i, reason)


def _merge(rejected: dict[int, str], bad: dict[int, str], what: str) -> None:
    for i, reason in bad.items():
        rejected.setdefault(i, f"{what}: {reason}")
