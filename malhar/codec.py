"""Stream codecs: how tuples of a stream are spread over downstream partitions."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa


class StreamCodec:
    """Assigns each tuple a partition key (Apex's ``StreamCodec.getPartition``).

    Override ``partition`` for tuple-at-a-time keys, or ``partition_batch`` for a
    vectorized one. Keys must be stable across processes: never Python's ``hash()``
    of a string, which differs per process.
    """

    def partition(self, value: Any) -> int:
        raise NotImplementedError

    def partition_batch(self, batch: pa.RecordBatch) -> np.ndarray:
        """Non-negative int64 keys, one per row; the runtime takes them modulo the partitions.
        Used for the batches of a typed stream (one with an Arrow schema)."""
        return np.fromiter(
            (self.partition(row) for row in batch.to_pylist()), dtype=np.int64, count=batch.num_rows
        )

    def partition_rows(self, batch: pa.RecordBatch) -> np.ndarray:
        """The keys of an untyped stream's batch: each row's key as :meth:`partition` gives
        it for the same row as a Python object, since such a stream may carry both and a
        key's tuples (and its state) must reach one partition. Default: row by row."""
        return StreamCodec.partition_batch(self, batch)

    def hash_keys(self, keys: list[Any], typed: bool | pa.Schema | None) -> np.ndarray:
        """The hashes :meth:`partition` / :meth:`partition_batch` give tuples whose key is
        each of ``keys``. ``typed``: the stream's Arrow schema when it carries Arrow
        batches (true), None when it carries Python objects. Repartitioning uses it to send
        keyed state where its tuples go; a codec that can say how a state key maps to its
        tuples' hash implements it."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot place state keys: implement hash_keys(keys, typed) "
            "(KeyCodec and FieldCodec do); the engine moves keyed and managed state by it"
        )


class KeyCodec(StreamCodec):
    """Partition by the value of one or more columns (sticky key partitioning).

    A typed stream's batches hash by the columns' Arrow values. An untyped stream's
    tuples, and the rows of its batches, hash by the ``repr`` of their key (a key's dicts
    and rows go to one partition): equal values of different types (``1``, ``1.0``,
    ``True``) are different keys there and may reach different partitions.
    Give such a key one type, or use ``malhar.algo.FieldCodec``, which hashes equal
    numbers alike as Python's ``==`` does.
    """

    def __init__(self, *columns: str) -> None:
        if not columns:
            raise ValueError("KeyCodec needs at least one column name")
        self.columns: Sequence[str] = columns

    def partition_batch(self, batch: pa.RecordBatch) -> np.ndarray:
        self._check_columns(batch)
        import pandas as pd  # here: pandas adds ~0.3 s to every process that imports malhar

        frame = pd.DataFrame({c: _hashable(batch.column(c)) for c in self.columns})
        hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy()
        return (hashed >> np.uint64(1)).astype(np.int64)

    def partition(self, value: Any) -> int:
        # Untyped streams only (typed ones use partition_batch); stable across processes.
        try:
            key = repr(tuple(value[c] for c in self.columns)).encode()
        except (KeyError, IndexError, TypeError) as exc:
            raise KeyError(self._unkeyed(value, exc)) from None
        return zlib.crc32(key)

    def partition_rows(self, batch: pa.RecordBatch) -> np.ndarray:
        """An untyped stream's batch: :meth:`partition` of each row's key, computed once
        per distinct key (dictionary-encoded columns)."""
        import pyarrow.compute as pc

        self._check_columns(batch)
        columns = [batch.column(c) for c in self.columns]
        # a dictionary column is returned as it is by dictionary_encode, null indices and
        # repeated values included: its values first
        columns = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in columns]
        try:
            encoded = [pc.dictionary_encode(c, null_encoding="encode") for c in columns]
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # e.g. a list column
            keys = zip(*(c.to_pylist() for c in columns), strict=True)
            return np.fromiter(
                (zlib.crc32(repr(k).encode()) for k in keys), dtype=np.int64, count=batch.num_rows
            )
        values = [e.dictionary.to_pylist() for e in encoded]
        if len(encoded) == 1:
            codes = np.asarray(encoded[0].indices, dtype=np.int64)
            hashes = np.fromiter(
                (zlib.crc32(repr((v,)).encode()) for v in values[0]), dtype=np.int64
            )
            return hashes[codes] if len(hashes) else np.zeros(len(codes), dtype=np.int64)
        stacked = np.stack([np.asarray(e.indices, dtype=np.int64) for e in encoded], axis=1)
        combos, inverse = np.unique(stacked, axis=0, return_inverse=True)
        hashes = np.fromiter(
            (
                zlib.crc32(repr(tuple(v[i] for v, i in zip(values, row, strict=True))).encode())
                for row in combos.tolist()
            ),
            dtype=np.int64,
            count=len(combos),
        )
        return hashes[inverse.reshape(-1)]

    def _check_columns(self, batch: pa.RecordBatch) -> None:
        missing = [c for c in self.columns if c not in batch.schema.names]
        if missing:
            raise KeyError(
                f"KeyCodec: columns {missing} not in the stream's schema {batch.schema.names}"
            )

    def _unkeyed(self, value: Any, exc: BaseException) -> str:
        """Why ``value`` has no key: a missing field, or a tuple that is not a record."""
        shown = repr(value)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        if isinstance(value, dict):
            absent = [c for c in self.columns if c not in value]
            why = f"it has no field {', '.join(map(repr, absent))} (fields: {list(value)})"
        else:
            why = f"{type(value).__name__} is not a record of named fields ({exc})"
        return (
            f"{self!r} cannot route {shown}: {why}; the codec is the STREAM_CODEC of the "
            "input port this stream feeds"
        )

    def hash_keys(self, keys: list[Any], typed: bool | pa.Schema | None) -> np.ndarray:
        """State keys: the column's value, or a tuple of the columns' values. On a typed
        stream they are hashed as columns of the stream's types (an int32 -5 and an int64
        -5 hash apart), which the schema says; without it the types are inferred."""
        one = len(self.columns) == 1  # a one-column key may itself be a tuple
        rows = [(k,) if one else tuple(k) for k in keys]
        if not typed:
            return np.array([zlib.crc32(repr(r).encode()) for r in rows], dtype=np.int64)
        types = (
            {c: typed.field(c).type for c in self.columns} if isinstance(typed, pa.Schema) else {}
        )
        columns = {
            c: pa.array([r[i] for r in rows], type=types.get(c)) for i, c in enumerate(self.columns)
        }
        return self.partition_batch(pa.RecordBatch.from_pydict(columns))

    def __repr__(self) -> str:
        return f"KeyCodec{tuple(self.columns)!r}"


def _hashable(column: pa.Array | pa.ChunkedArray) -> Any:
    """``column`` as pandas hashes it the same with and without nulls: pandas turns an
    integer column with nulls into floats and a boolean one into objects, which hash
    apart, so there the nulls are filled first (they go where 0 or False goes)."""
    kind = column.type
    if column.null_count and (pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
        column = column.fill_null(pa.scalar(False if pa.types.is_boolean(kind) else 0, kind))
    return column.to_pandas()
