"""Distinct values and value filters (Malhar's ``lib/algo``): Distinct, UniqueValueCount,
FilterValues, FilterKeys, InvertIndex and Sampler."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    FIELD_TYPES,
    AlgoOperator,
    FieldCodec,
    FieldSpec,
    KeyValueOperator,
    Partitioning,
    SchemaProperty,
    TypedOutputs,
    column,
    emit_table,
    getter,
    key_bytes,
    order_key,
    rows_of,
    unreadable,
)
from malhar.operator import Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State

__all__ = [
    "Distinct",
    "DistinctUnifier",
    "FilterKeys",
    "FilterValues",
    "InvertIndex",
    "InvertIndexUnifier",
    "Sampler",
    "UniqueValueCount",
]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


class DistinctUnifier(Unifier):
    """Emits each value once over every partition's distinct values of the window."""

    def begin_window(self, window_id: int) -> None:
        self._seen: dict[bytes, Any] = {}

    def process(self, value: Any) -> None:
        self._seen.setdefault(key_bytes(value), value)

    def end_window(self) -> None:
        for value in self._seen.values():
            self.output.emit(value)


class Distinct(AlgoOperator):
    """Each distinct value once per application window (Malhar's ``Distinct``).

    ``field`` picks the value of dict or tuple tuples (None: the tuple itself). Output
    ``distinct``: the distinct values in order of first arrival, at the end of the window.

    Example:
        >>> from malhar.algo import Distinct
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Distinct())
        >>> h.run_window([("data", "a"), ("data", "b"), ("data", "a")])
        >>> h.sink("distinct").tuples
        ['a', 'b']
    """

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; the unifier drops repeats)"

    data = InputPort()
    distinct = OutputPort(unifier=DistinctUnifier)
    error = OutputPort(error=True)

    FIELDS_READ = {"data": ("field",)}

    field = Property(FIELD_TYPES, default=None, doc="the field whose values are distinct")

    #: value bytes -> value, of the open application window
    seen = State(dict)

    def __init__(self, field: FieldSpec = None) -> None:
        self.configure(field=field)

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def setup(self, context: Any) -> None:
        self._get = getter(self.field)

    def process(self, t: Any) -> None:
        try:
            v = self._get(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.field))
            return
        self.seen.setdefault(key_bytes(v), v)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            if self.field is None and batch.num_columns > 1:
                table = pa.Table.from_batches([batch])
                values = table.group_by(table.column_names, use_threads=False).aggregate([])
                rows = values.select(batch.schema.names).to_pylist()
            else:
                rows = pc.unique(column(batch, self.field)).to_pylist()
        except (KeyError, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            # a field missing, a list column: the rows as the tuples they were
            for row in rows_of(batch, self.field):
                self.process(row)
            return
        for v in rows:
            self.seen.setdefault(key_bytes(v), v)

    def end_window(self) -> None:
        for v in self.seen.values():
            self.distinct.emit(v)
        self.seen = {}


class UniqueValueCount(KeyValueOperator):
    """How many distinct values each key had in each application window.

    Output ``count``: ``{key_name: key, "count": distinct values}``. Partition it by key.

    Example:
        >>> from malhar.algo import UniqueValueCount
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(UniqueValueCount(key="user", value="page"))
        >>> h.run_window(
        ...     [
        ...         ("data", {"user": "u", "page": 1}),
        ...         ("data", {"user": "u", "page": 2}),
        ...         ("data", {"user": "u", "page": 1}),
        ...     ]
        ... )
        >>> h.sink("count").tuples
        [{'user': 'u', 'count': 2}]
    """

    PARTITIONING: ClassVar[str] = "keyed by `key`"

    data = InputPort()
    count = OutputPort()
    error = OutputPort(error=True)

    FIELDS_READ = {"data": ("key", "value")}

    key = Property(FIELD_TYPES, default=0, doc="key field")
    value = Property(FIELD_TYPES, default=1, doc="value field")
    key_name = Property(str, default=None, pattern=_NAME, doc="key field of the output")

    #: key bytes -> [key, set of value bytes], of the open application window
    values = State(dict)

    def __init__(
        self, key: FieldSpec = 0, value: FieldSpec = 1, key_name: str | None = None
    ) -> None:
        self.configure(key=key, value=value, key_name=key_name)

    def partitioning(self) -> Partitioning:
        return Partitioning("keyed", {"data": FieldCodec(self.key)})

    def setup(self, context: Any) -> None:
        super().setup(context)
        self._name = self.key_name or (self.key if isinstance(self.key, str) else "key")

    def _add(self, k: Any, v: Any) -> None:
        entry = self.values.setdefault(key_bytes(k), [k, set()])
        entry[1].add(key_bytes(v))

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0 or (kv := self._columns(batch)) is None:
            return
        for key, value in self._distinct_pairs(*kv):
            self._add(key, value)

    def end_window(self) -> None:
        for k, vs in self.values.values():
            self.count.emit({self._name: k, "count": len(vs)})
        self.values = {}


class FilterValues(TypedOutputs, AlgoOperator):
    """Passes the tuples whose value is (or with ``inverse``, is not) in ``values``.

    ``field`` picks the value (None: the tuple itself). Batches are filtered with
    ``pyarrow.compute.is_in``; set ``schema`` (Spark DDL) to type the ``filter`` port so
    that batches stay Arrow between tasks.

    Example:
        >>> from malhar.algo import FilterValues
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(FilterValues(values=[1, 3]))
        >>> h.run_window([("data", 1), ("data", 2), ("data", 3)])
        >>> h.sink("filter").tuples
        [1, 3]
    """

    PARTITIONING: ClassVar[str] = "stateless"

    data = InputPort()
    filter = OutputPort()
    error = OutputPort(error=True)

    values = Property(list, default=[], doc="the values that pass")
    inverse = Property(bool, default=False, doc="pass the values not in the list instead")
    FIELDS_READ = {"data": ("field",)}

    field = Property(FIELD_TYPES, default=None, doc="the field compared; None: the tuple")
    schema = SchemaProperty("filter", doc="Spark DDL of the output (types the filter port)")

    def __init__(
        self,
        values: list | None = None,
        inverse: bool = False,
        field: FieldSpec = None,
        **props: Any,
    ) -> None:
        self.configure(values=list(values or []), inverse=inverse, field=field, **props)

    def setup(self, context: Any) -> None:
        self._get = getter(self.field)
        self._set = {key_bytes(v) for v in self.values}

    def process(self, t: Any) -> None:
        try:
            v = self._get(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.field))
            return
        if (key_bytes(v) in self._set) != self.inverse:
            self.filter.emit(t)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            col = column(batch, self.field)
            values = pa.array(self.values, type=col.type)
            if pa.types.is_floating(col.type):  # -0.0 + 0 is 0.0: -0.0 finds 0.0 as in tuples
                zero = pa.scalar(0, col.type)
                col, values = pc.add(col, zero), pc.add(values, zero)
            mask = pc.is_in(col, value_set=values)
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            for row in rows_of(batch, self.field):
                self.process(row)
            return
        mask = pc.fill_null(mask, False)
        if self.inverse:
            mask = pc.invert(mask)
        kept = batch.filter(mask)
        if self.field is None and batch.num_columns == 1 and self.filter.port.schema is None:
            for v in kept.column(0).to_pylist():
                self.filter.emit(v)
        else:
            emit_table(self.filter, kept)


class FilterKeys(TypedOutputs, AlgoOperator):
    """Keeps only the named fields of dict tuples (with ``inverse``: drops them).

    Malhar's ``FilterKeysMap``: a tuple left with none of the fields is not emitted. Batches
    keep (or drop) columns. ``schema`` types the output port.

    Example:
        >>> from malhar.algo import FilterKeys
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(FilterKeys(keys=["a"]))
        >>> h.run_window([("data", {"a": 1, "b": 2}), ("data", {"b": 3})])
        >>> h.sink("filter").tuples
        [{'a': 1}]
    """

    PARTITIONING: ClassVar[str] = "stateless"

    data = InputPort()
    filter = OutputPort()
    error = OutputPort(error=True)

    keys = Property(list, default=[], doc="the fields kept")
    inverse = Property(bool, default=False, doc="drop the fields instead")
    schema = SchemaProperty("filter", doc="Spark DDL of the output (types the filter port)")

    def __init__(self, keys: list[str] | None = None, inverse: bool = False, **props: Any) -> None:
        self.configure(keys=list(keys or []), inverse=inverse, **props)

    def setup(self, context: Any) -> None:
        self._keys = set(self.keys)

    def process(self, t: Any) -> None:
        if not isinstance(t, dict):
            self._error(t, f"expected a dict, got {type(t).__name__}")
            return
        kept = {k: v for k, v in t.items() if (k in self._keys) != self.inverse}
        if kept:
            self.filter.emit(kept)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        names = [n for n in batch.schema.names if (n in self._keys) != self.inverse]
        if names and batch.num_rows:
            emit_table(self.filter, batch.select(names))


class InvertIndexUnifier(Unifier):
    """Unites every partition's key lists per value."""

    value_name = Property(str, default="value")

    def __init__(self, value_name: str = "value") -> None:
        self.configure(value_name=value_name)

    def begin_window(self, window_id: int) -> None:
        self._index: dict[bytes, list] = {}

    def process(self, row: dict[str, Any]) -> None:
        v = row[self.value_name]
        entry = self._index.setdefault(key_bytes(v), [v, {}])
        for k in row["keys"]:
            entry[1].setdefault(key_bytes(k), k)

    def end_window(self) -> None:
        for v, keys in self._index.values():
            self.output.emit({self.value_name: v, "keys": sorted(keys.values(), key=order_key)})


class InvertIndex(KeyValueOperator):
    """Inverts key -> values into value -> keys per application window (Malhar's
    ``InvertIndex``).

    Each tuple maps ``key`` to ``value`` (a list value maps the key to each element). Output
    ``index``: ``{value_name: v, "keys": [sorted distinct keys]}`` per value.

    Example:
        >>> from malhar.algo import InvertIndex
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(InvertIndex(key="doc", value="words"))
        >>> h.run_window(
        ...     [("data", {"doc": "d1", "words": ["x", "y"]}), ("data", {"doc": "d2", "words": ["x"]})]
        ... )
        >>> h.sink("index").tuples
        [{'value': 'x', 'keys': ['d1', 'd2']}, {'value': 'y', 'keys': ['d1']}]
    """

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; key lists are united)"

    data = InputPort()
    index = OutputPort()
    error = OutputPort(error=True)

    FIELDS_READ = {"data": ("key", "value")}

    key = Property(FIELD_TYPES, default=0, doc="the key field")
    value = Property(FIELD_TYPES, default=1, doc="the value field (a list: each element)")
    value_name = Property(str, default="value", pattern=_NAME, doc="value field of the output")

    #: value bytes -> [value, {key bytes: key}] of the open application window
    inverted = State(dict)

    def __init__(self, key: FieldSpec = 0, value: FieldSpec = 1, value_name: str = "value") -> None:
        self.configure(key=key, value=value, value_name=value_name)

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def get_unifier(self, port: str) -> InvertIndexUnifier | None:
        return InvertIndexUnifier(self.value_name) if port == "index" else None

    def _add(self, k: Any, v: Any) -> None:
        for x in v if isinstance(v, list | tuple) else [v]:
            entry = self.inverted.setdefault(key_bytes(x), [x, {}])
            entry[1].setdefault(key_bytes(k), k)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if (kv := self._columns(batch)) is None:
            return
        k, v = kv
        if pa.types.is_list(v.type) or pa.types.is_large_list(v.type):
            for key, value in zip(k.to_pylist(), v.to_pylist(), strict=True):
                self._add(key, value)
            return
        for key, value in self._distinct_pairs(k, v, by_value=True):
            self._add(key, value)

    def end_window(self) -> None:
        for v, keys in self.inverted.values():
            self.index.emit({self.value_name: v, "keys": sorted(keys.values(), key=order_key)})
        self.inverted = {}


class Sampler(TypedOutputs, AlgoOperator):
    """Passes a deterministic sample of ``rate`` (0..1) of the tuples (Malhar's ``Sampler``).

    A tuple is kept when a stable hash of its ``field`` (None: the whole tuple) with the
    ``seed`` falls under the rate, so a replay and any partitioning keep the same tuples,
    and with ``field`` set all tuples of one value are kept or dropped together. Batches are
    hashed per distinct value.

    Example:
        >>> from malhar.algo import Sampler
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Sampler(rate=0.5))
        >>> h.run_window([("data", i) for i in range(1000)])
        >>> 400 < len(h.sink("sample").tuples) < 600
        True
    """

    PARTITIONING: ClassVar[str] = "stateless"

    data = InputPort()
    sample = OutputPort()
    error = OutputPort(error=True)

    rate = Property((int, float), default=0.1, min=0, max=1, doc="the share of tuples kept")
    FIELDS_READ = {"data": ("field",)}

    field = Property(FIELD_TYPES, default=None, doc="the field hashed; None: the whole tuple")
    seed = Property(int, default=0, doc="another seed, another sample")
    schema = SchemaProperty("sample", doc="Spark DDL of the output (types the sample port)")

    def __init__(
        self, rate: float = 0.1, field: FieldSpec = None, seed: int = 0, **props: Any
    ) -> None:
        self.configure(rate=rate, field=field, seed=seed, **props)

    def setup(self, context: Any) -> None:
        self._get = getter(self.field)
        self._limit = int(self.rate * (1 << 32))
        self._salt = b"%d:" % self.seed

    def _keep(self, v: Any) -> bool:
        import zlib

        return zlib.crc32(self._salt + key_bytes(v)) < self._limit

    def process(self, t: Any) -> None:
        try:
            v = self._get(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.field))
            return
        if self._keep(v):
            self.sample.emit(t)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.field is None and batch.num_columns > 1:
            keep = np.fromiter((self._keep(r) for r in batch.to_pylist()), dtype=bool)
        else:
            try:
                col = column(batch, self.field)
            except KeyError:
                for row in rows_of(batch, self.field):
                    self.process(row)
                return
            encoded = pc.dictionary_encode(col)
            kept = np.fromiter((self._keep(v) for v in encoded.dictionary.to_pylist()), dtype=bool)
            idx = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
            keep = np.where(
                idx >= 0, kept[np.maximum(idx, 0)] if len(kept) else False, self._keep(None)
            )
        kept_batch = batch.filter(pa.array(keep))
        if self.field is None and batch.num_columns == 1 and self.sample.port.schema is None:
            for v in kept_batch.column(0).to_pylist():
                self.sample.emit(v)
        else:
            emit_table(self.sample, kept_batch)
