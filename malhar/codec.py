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
        """Non-negative int64 keys, one per row; the runtime takes them modulo the partitions."""
        return np.fromiter(
            (self.partition(row) for row in batch.to_pylist()), dtype=np.int64, count=batch.num_rows
        )

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
    tuples hash by the ``repr`` of their key: equal values of different types (``1``,
    ``1.0``, ``True``) are different keys there and may reach different partitions.
    Give such a key one type, or use ``malhar.algo.FieldCodec``, which hashes equal
    numbers alike as Python's ``==`` does.
    """

    def __init__(self, *columns: str) -> None:
        if not columns:
            raise ValueError("KeyCodec needs at least one column name")
        self.columns: Sequence[str] = columns

    def partition_batch(self, batch: pa.RecordBatch) -> np.ndarray:
        missing = [c for c in self.columns if c not in batch.schema.names]
        if missing:
            raise KeyError(
                f"KeyCodec: columns {missing} not in the stream's schema {batch.schema.names}"
            )
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
