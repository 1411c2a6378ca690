"""What every catalogue operator shares: how it partitions, field access, stable key codecs,
error tuples, and output ports typed from configuration.

Partitioning (``Operator.partitioning()``, shown by ``malhar info`` and ``docs/operators.md``):

- ``stateless``: any partitioning; the partitions' outputs together are the one-partition output;
- ``unifier``: any partitioning; the output ports' unifiers merge the partial results into the
  one-partition result;
- ``keyed``: each key must reach one partition: on more than one partition a route into an
  input port goes by ``partitioning().codecs`` unless the port's ``STREAM_CODEC`` says
  otherwise; fused behind an upstream of as many partitions not routed by the same key it
  is refused (``malhar validate``, the launch) unless the port says
  ``PARALLEL_PARTITION=True`` (each key comes from one upstream partition);
  :func:`malhar.algo.partition_by_key` routes by key always; with a unifier where one is
  declared;
- ``single``: one partition only (the result depends on every tuple in order); more is
  refused by ``DAG.validate()``.
"""

from __future__ import annotations

import decimal
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.codec import StreamCodec
from malhar.dag import declared_codecs
from malhar.errors import ConfigError
from malhar.operator import Operator
from malhar.ports import BoundOutput, OutputPort
from malhar.properties import Property
from malhar.util.total_order import order_key, sorted_items

KINDS = ("stateless", "unifier", "keyed", "single")

#: a field of a tuple: a dict key / attribute name, a position in a tuple, or None (the tuple)
FieldSpec = str | int | None
FIELD_TYPES = (str, int)


@dataclass(frozen=True)
class Partitioning:
    """How an operator instance may be partitioned (see the module docstring)."""

    kind: str
    #: input port -> the stream codec its tuples must be partitioned with (kind ``keyed``)
    codecs: dict[str, StreamCodec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"partitioning kind {self.kind!r} is not one of {KINDS}")


class AlgoOperator(Operator):
    """Base of the catalogue's operators (internal): partitioning and error helpers."""

    #: ``malhar info`` / docs: how the class partitions, in one line
    PARTITIONING: ClassVar[str] = "stateless"
    #: input port -> the properties that name fields of its tuples (:meth:`fields_read`)
    FIELDS_READ: ClassVar[dict[str, tuple[str, ...]]] = {}

    def partitioning(self) -> Partitioning:
        """How this configured instance partitions."""
        return Partitioning(self.PARTITIONING.split()[0])

    def fields_read(self, port: str) -> list[str]:
        """The field names set in the properties :attr:`FIELDS_READ` lists for ``port``
        (a position in a tuple or None names no field)."""
        out: list[str] = []
        for prop in self.FIELDS_READ.get(port, ()):
            value = getattr(self, prop, None)
            for name in value if isinstance(value, list | tuple) else [value]:
                if isinstance(name, str) and name not in out:
                    out.append(name)
        return out

    def _error(self, value: Any, reason: str) -> None:
        """Send a bad tuple to the ``error`` port: ``{"tuple": value, "reason": reason}``."""
        self.error.emit({"tuple": value, "reason": reason})

    def metrics(self) -> dict[str, float]:
        error = getattr(self, "error", None)
        return {"errors": float(error.count)} if isinstance(error, BoundOutput) else {}


class KeyValueOperator(AlgoOperator):
    """Base of operators fed a ``key`` and a ``value`` field per tuple (internal): a tuple
    without one goes to the ``error`` port; subclasses fill ``_add(key, value)`` and their
    columnar path from :meth:`_columns`."""

    def setup(self, context: Any) -> None:
        self._k, self._v = getter(self.key), getter(self.value)

    def _add(self, k: Any, v: Any) -> None:
        raise NotImplementedError

    def process(self, t: Any) -> None:
        try:
            k, v = self._k(t), self._v(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.key, self.value))
            return
        self._add(k, v)

    @staticmethod
    def _distinct_pairs(
        k: pa.Array, v: pa.Array, by_value: bool = False
    ) -> Iterable[tuple[Any, Any]]:
        """The distinct (key, value) pairs of two columns (ordered by key, or by value);
        every pair when Arrow cannot group a column's type (a list): ``_add`` sees a
        pair again as the per-tuple path does."""
        try:
            pairs = (
                pa.table({"k": k, "v": v})
                .group_by(["v", "k"] if by_value else ["k", "v"], use_threads=False)
                .aggregate([])
            )
        except pa.ArrowNotImplementedError:
            return zip(k.to_pylist(), v.to_pylist(), strict=True)
        return zip(pairs.column("k").to_pylist(), pairs.column("v").to_pylist(), strict=True)

    def _columns(self, batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array] | None:
        """The key and value columns of ``batch``; None when one is missing (the batch was
        then processed row by row, each row without the field going to the error port)."""
        try:
            return column(batch, self.key), column(batch, self.value)
        except KeyError:  # a named field is missing: rows as dicts, as the tuples were
            for row in rows_of(batch, self.value if self.key is None else self.key):
                self.process(row)
            return None


# -- field access --------------------------------------------------------------------------------
def getter(spec: FieldSpec) -> Callable[[Any], Any]:
    """A function reading field ``spec`` of a tuple (raises KeyError/IndexError if missing);
    for None the tuple itself, or the value of a dict of one entry."""
    if spec is None:
        return _identity
    if isinstance(spec, int):

        def at(t: Any) -> Any:
            if type(t) is BatchRow:  # a batch's row: its fields in column order
                return list(t.values())[spec]
            return t[spec]

        return at

    def get(t: Any) -> Any:
        if isinstance(t, dict):
            return t[spec]
        try:
            return getattr(t, spec)
        except AttributeError:
            raise KeyError(spec) from None

    return get


def _identity(t: Any) -> Any:
    # a record of one field is its value, as a one-column batch's row is (rows_of): a typed
    # one-column stream's tuples are such dicts when the operator is fused behind their
    # writer and a batch when they cross a route, and the two gave different results
    if type(t) in (dict, BatchRow) and len(t) == 1:
        return next(iter(t.values()))
    return t


class BatchRow(dict):
    """A row of an Arrow batch read row by row: a dict whose fields are in the batch's
    column order, so a field given by position reads the column there, as on the batch
    (a plain dict has no positions: its keys' order is the writer's)."""


def batch_rows(batch: pa.RecordBatch) -> list[BatchRow]:
    """A batch's rows as :class:`BatchRow` dicts."""
    return [BatchRow(row) for row in batch.to_pylist()]


def column(batch: pa.RecordBatch, spec: FieldSpec) -> pa.Array:
    """The column of ``batch`` that field ``spec`` names (the first one for None)."""
    if spec is None:
        return batch.column(0)
    if isinstance(spec, int):
        return batch.column(spec)
    index = batch.schema.get_field_index(spec)
    if index < 0:
        raise KeyError(spec)
    return batch.column(index)


def missing(spec: FieldSpec) -> str:
    return f"no field {spec!r}"


def unreadable(exc: BaseException, t: Any, *specs: Any) -> str:
    """Why the fields ``specs`` could not be read from tuple ``t``, from the getter's
    exception: the missing field, or what ``t`` is instead of a record."""
    if isinstance(exc, KeyError) and exc.args:
        return missing(exc.args[0])
    if isinstance(exc, IndexError):
        size = len(t) if isinstance(t, Sequence) else 0
        flat = [p for s in specs for p in (s if isinstance(s, list | tuple) else (s,))]
        gone = [p for p in flat if isinstance(p, int) and not -size <= p < size]
        return missing(gone[0] if gone else specs[0])
    return f"cannot read {', '.join(repr(s) for s in specs)} of a {type(t).__name__}: {exc}"


# -- stable keys ---------------------------------------------------------------------------------
#: the NaN every NaN key is replaced by (see one_nan)
NAN = float("nan")


def one_nan(key: Any) -> Any:
    """``key``, with any float NaN replaced by one NaN object: a dict finds a key by identity
    or equality, and NaN equals nothing, so every NaN (each a new object, from a tuple or
    from Arrow) was a group of its own, while Arrow's grouping (and Spark's) puts them in
    one."""
    return NAN if key.__class__ is float and key != key else key


#: what a key stored in managed state may be (the error-port reason says it)
STORABLE_KEYS = "use a string, a number (an integer within 64 bits) or a tuple of them"


def rekey_nan(mapping: dict[Any, Any]) -> None:
    """Make the NaN key of ``mapping`` :data:`NAN` again, in place. A restored checkpoint's
    NaN key is a copy (pickle keeps floats by value), which a dict finds only by identity:
    the NaN keys that came later were counted apart. Called after a restore (``setup``)."""
    for k in mapping:
        if k.__class__ is float and k != k:
            if k is not NAN:
                mapping[NAN] = mapping.pop(k)
            return


#: a lone surrogate ("\ud800") is encoded as managed state encodes it (the same bytes as
#: strict UTF-8 for every other str), so such a key partitions instead of raising
_SURROGATES = "surrogatepass"


def key_bytes(value: Any) -> bytes:
    """Bytes that identify a key the same way in every process (never Python's ``hash``);
    equal numbers give equal bytes whatever their type (``1 == 1.0 == True ==
    Decimal("1.00")`` as dict keys)."""
    if isinstance(value, bool | int):
        return b"n%d" % int(value)
    if isinstance(value, float):
        if value.is_integer():
            return b"n%d" % int(value)
        return b"f" + repr(value).encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", _SURROGATES)
    if isinstance(value, bytes):
        return b"b" + value
    if isinstance(value, tuple | list):
        return b"t(" + b",".join(_item_bytes(v) for v in value) + b")"
    if isinstance(value, dict):
        return b"d{" + b",".join(_item_bytes((k, v)) for k, v in sorted_items(value)) + b"}"
    if isinstance(value, decimal.Decimal):
        return _decimal_bytes(value)
    return b"r" + repr(value).encode("utf-8", _SURROGATES)


#: what separates the items of a tuple or dict in key_bytes: escaped in a string item, so
#: that ("x,n1",) and ("x", 1) differ (a key without them keeps its bytes)
_DELIMITERS = re.compile(rb"[\\,(){}]")


def _item_bytes(value: Any) -> bytes:
    """key_bytes of an item of a tuple, list or dict."""
    if isinstance(value, str):
        return b"s" + _DELIMITERS.sub(rb"\\\g<0>", value.encode("utf-8", _SURROGATES))
    if isinstance(value, bytes):
        return b"b" + _DELIMITERS.sub(rb"\\\g<0>", value)
    return key_bytes(value)


#: exact Decimal arithmetic (the default context rounds to 28 digits)
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def _decimal_bytes(value: decimal.Decimal) -> bytes:
    """A Decimal as the int or float it equals (Python's ``==``), else by its normalized
    repr: 1.0 and 1.00 (a batch's column scale) are one key."""
    if value.is_infinite():
        return key_bytes(float(value))
    if value.is_finite():
        if value.adjusted() < _INT_DIGITS:
            if value == value.to_integral_value(context=_EXACT):
                return b"n%d" % int(value)
            as_float = float(value)
            if as_float == value:
                return key_bytes(as_float)
        value = value.normalize(_EXACT)
    return b"r" + repr(value).encode()


#: a Decimal integer with more digits keeps its repr (no huge int from one data value)
_INT_DIGITS = 4000


def stable_hash(value: Any) -> int:
    return zlib.crc32(key_bytes(value))


class FieldCodec(StreamCodec):
    """Partitions by the value of one field (dict key, tuple position, or the tuple itself).

    Single tuples and Arrow batches give the same partition for the same key value (a
    batch is hashed per distinct value), so a keyed operator stays correct on a stream that
    carries both.

    Example:
        >>> from malhar.algo import FieldCodec
        >>> c = FieldCodec("user")
        >>> c.partition({"user": "ann", "n": 1}) == c.partition({"user": "ann", "n": 7})
        True
    """

    def __init__(self, spec: FieldSpec) -> None:
        self.spec = spec
        self._get = getter(spec)

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])

    def partition(self, value: Any) -> int:
        try:
            return stable_hash(self._get(value))
        except (KeyError, IndexError, TypeError):
            return 0  # a tuple without the key: the operator sends it to its error port

    def hash_keys(self, keys: list[Any], typed: Any = None) -> np.ndarray:
        """The hash of tuples whose key is each of ``keys``, typed stream or not (state
        keys are the key values: repartitioning moves state by it)."""
        return np.fromiter((stable_hash(k) for k in keys), dtype=np.int64, count=len(keys))

    def partition_batch(self, batch: pa.RecordBatch) -> np.ndarray:
        col = column(batch, self.spec)
        encoded = pc.dictionary_encode(col)
        hashes = np.fromiter(
            (stable_hash(v) for v in encoded.dictionary.to_pylist()), dtype=np.int64
        )
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        if encoded.indices.null_count:
            filled = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)
            out = hashes[filled] if len(hashes) else np.zeros(len(filled), dtype=np.int64)
            out[np.asarray(encoded.indices.is_null())] = stable_hash(None)
            return out
        return hashes[indices] if len(hashes) else np.zeros(len(indices), dtype=np.int64)

    #: an untyped stream's batches hash alike: by each key's value, as its tuples do
    partition_rows = partition_batch

    def __repr__(self) -> str:
        return f"FieldCodec({self.spec!r})"


# -- output ports typed by configuration ---------------------------------------------------------
class SchemaProperty(Property):
    """A Spark DDL property that types an output port: setting it re-types the instance."""

    def __init__(self, *ports: str, doc: str = "") -> None:
        super().__init__(str, default=None, check=_ddl_problem, doc=doc)
        self.ports = ports

    def __set__(self, instance: Any, value: Any) -> None:
        super().__set__(instance, value)
        retype(instance)


def _ddl_problem(value: str) -> str | None:
    from malhar.schema import SchemaError, to_struct_type

    try:
        to_struct_type(value, where="schema")
    except SchemaError as exc:
        return str(exc).removeprefix("schema: ")  # the property's name leads the message
    return None


def arrow_schema_of(ddl: str) -> pa.Schema:
    from malhar.schema import arrow_schema, to_struct_type

    return arrow_schema(to_struct_type(ddl))


_VARIANTS: dict[tuple[type, tuple[tuple[str, str], ...]], type] = {}


def _base_class(cls: type) -> type:
    return cls.__dict__.get("_malhar_base", cls)


def typed_variant(base: type, schemas: tuple[tuple[str, str], ...]) -> type:
    """``base`` with the output ports named in ``schemas`` typed (cached per schema set)."""
    key = (base, schemas)
    cls = _VARIANTS.get(key)
    if cls is None:
        ns: dict[str, Any] = {
            "_malhar_base": base,
            "_malhar_schemas": schemas,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        }
        for port, ddl in schemas:
            old = getattr(base, port)
            ns[port] = OutputPort(
                ddl,
                optional=old.optional,
                error=old.error,
                control_aware=old.control_aware,
                unifier=old.unifier,
            )
        cls = _VARIANTS[key] = type(base.__name__, (base,), ns)
    return cls


def _rebuild_variant(base: type, schemas: tuple[tuple[str, str], ...]) -> Any:
    return object.__new__(typed_variant(base, schemas))


def retype(op: Any) -> None:
    """Give ``op`` the class whose output ports carry its configured schemas."""
    base = _base_class(type(op))
    schemas: dict[str, str] = {}
    for name in dir(base):
        prop = getattr(base, name, None)
        if isinstance(prop, SchemaProperty):
            value = op.__dict__.get(name)
            if value is not None:
                for port in prop.ports:
                    schemas[port] = value
    items = tuple(sorted(schemas.items()))
    op.__class__ = typed_variant(base, items) if items else base


class TypedOutputs:
    """Mixin: an operator whose output ports may be typed by a :class:`SchemaProperty`.

    Typed outputs travel as Arrow batches between Spark tasks; untyped ones as pickled
    Python objects. The instance's class becomes a cached subclass with the typed ports
    (pickled by reference to the base class and the schemas)."""

    def __reduce_ex__(self, protocol: int) -> Any:
        schemas = type(self).__dict__.get("_malhar_schemas")
        if schemas is None:
            return super().__reduce_ex__(protocol)
        return (_rebuild_variant, (_base_class(type(self)), schemas), self.__getstate__())


def emit_table(port: BoundOutput, batch: pa.RecordBatch | pa.Table) -> None:
    """Emit rows of ``batch``: as one Arrow batch on a typed port (cast to its schema), as
    dict rows on an untyped one (an untyped stream carries Python objects)."""
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        if batch is None:
            return
    if batch.num_rows == 0:
        return
    schema = port.port.schema
    if schema is None:
        for row in batch.to_pylist():
            port.emit(row)
        return
    from malhar.schema import arrow_schema

    target = arrow_schema(schema)
    if batch.schema != target:
        batch = conform(batch, target, f"output port {port.port.name!r}")
    port.emit_batch(batch)


def conform(batch: pa.RecordBatch, schema: pa.Schema, where: str = "") -> pa.RecordBatch:
    """``batch`` with exactly the columns of ``schema`` (missing ones null), cast to it; a
    column that does not cast raises a :class:`~malhar.schema.SchemaError` naming ``where``
    (the port), the field and both types."""
    names = batch.schema.names
    arrays = []
    for f in schema:
        if f.name not in names:
            arrays.append(pa.nulls(batch.num_rows, f.type))
            continue
        column = batch.column(f.name)
        try:
            arrays.append(column.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            from malhar.schema import SchemaError

            raise SchemaError(
                f"{where or 'a typed port'}: field {f.name!r} is {column.type}, which does not "
                f"cast to the port's {f.type} ({exc}); fix the operator's schema property "
                "or the rows it is given"
            ) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def rows_of(batch: pa.RecordBatch, spec: FieldSpec = None) -> list[Any]:
    """A batch as the tuples the per-tuple path would see (column values for a one-column
    batch read with ``spec`` None, dict rows otherwise)."""
    if spec is None and batch.num_columns == 1:
        return batch.column(0).to_pylist()
    return batch_rows(batch)


def check_fields(name: str, value: Any) -> str | None:
    """``check=`` of list-of-field-names properties."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return f"{name}: expected a list of field names, got {value!r}"
    return None


def one_character(value: str) -> str | None:
    """``check=`` of a CSV delimiter or quote: pyarrow takes one ASCII character (it failed
    on each tuple, or with an obscure message, on anything else)."""
    if len(value) != 1 or not value.isascii() or value in "\r\n":
        return f"expected one ASCII character other than a line break, got {value!r}"
    return None


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def as_list(value: Iterable[Any] | None) -> list[Any]:
    return [] if value is None else list(value)


def partition_by_key(handle: Any) -> Any:
    """Give the input ports of a keyed operator the stream codecs it declares.

    ``handle`` is what ``DAG.add_operator`` returned; returns it. Operators that are not
    keyed declare no codecs, so this is harmless for them.

    Example:
        >>> from malhar import DAG
        >>> from malhar.algo import UniqueValueCount, partition_by_key
        >>> dag = DAG("x")
        >>> op = partition_by_key(dag.add_operator("uvc", UniqueValueCount("user", "page"), PARTITIONS=4))
        >>> dag.operators["uvc"].port_attributes["data"]["STREAM_CODEC"]
        FieldCodec('user')
    """
    for port, codec in declared_codecs(handle.operator).items():
        getattr(handle, port).set_attribute("STREAM_CODEC", codec)
    return handle


class TieBreak:
    """Orders like ``order_key(value)`` but computes it only when a comparison needs it
    (a tie on the fields ranked before it), then keeps it."""

    __slots__ = ("_key", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._key: tuple | None = None

    def key(self) -> tuple:
        if self._key is None:
            self._key = order_key(self.value)
        return self._key

    def __lt__(self, other: TieBreak) -> bool:
        return self.key() < other.key()

    def __gt__(self, other: TieBreak) -> bool:
        return self.key() > other.key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TieBreak) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(key_bytes(self.value))

    def __reduce__(self) -> tuple:
        return (TieBreak, (self.value,))
