"""Serializers of the Kafka output: a window's rows (one Arrow table) into record keys and
values, in bulk, with the rows that cannot be encoded and why.

A serializer turns a table (one column, or the whole row) into one ``bytes`` value per row
(``None`` for a null value: a tombstone) and reports the rows it cannot encode
(index -> reason); the output sends those rows to its error port and writes the others.

Built in, by name:

- ``bytes``: a ``binary`` column as it is (a ``string`` column as its UTF-8 bytes);
- ``string``: any scalar column as UTF-8 text (Arrow's cast: numbers, dates, decimals ...);
- ``json``: one column's values, or the whole row as an object, as compact UTF-8 JSON.
  Dates and times are ISO 8601 text, decimals are strings (exact: ``"12.30"``),
  ``bytes`` and non-finite floats (NaN, infinity) cannot be encoded. Each row is encoded as
  itself: its own fields and value types, whatever the other rows of the window hold.

Hooks (Avro, Protobuf, anything): a :class:`Serializer` instance, or ``"module:factory"``
whose factory (called where the output runs, with no argument) returns a
:class:`Serializer` or a callable ``value -> bytes`` (wrapped in
:class:`FunctionSerializer`). :func:`confluent_serializer` adapts confluent-kafka's
serializers (``confluent_kafka.schema_registry.avro.AvroSerializer``,
``...protobuf.ProtobufSerializer``, ``confluent_kafka.serialization.StringSerializer``),
which take ``(value, SerializationContext)``.

Example:
    >>> import pyarrow as pa
    >>> from malhar.io.kafka.serializers import get_serializer
    >>> rows = pa.table({"word": ["a", "b"], "n": [1, float("nan")]})
    >>> get_serializer("json").serialize(rows)
    ([b'{"word":"a","n":1.0}', None], {1: 'cannot encode as JSON: Out of range float values are not JSON compliant'})
    >>> get_serializer("string").serialize(rows.select(["word"]))
    ([b'a', b'b'], {})
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from decimal import Decimal
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from malhar.io.kafka.errors import KafkaOutputConfigError
from malhar.util.arrow_types import is_binary, is_text

__all__ = [
    "BytesSerializer",
    "FunctionSerializer",
    "JsonSerializer",
    "Serializer",
    "StringSerializer",
    "confluent_serializer",
    "get_serializer",
]

#: (values, errors): one ``bytes`` (or None) per row, and reasons by row index
Encoded = tuple[list[bytes | None], dict[int, str]]


class Serializer(ABC):
    """Encodes a table's rows into record keys or values, in bulk."""

    #: the name used in properties and Spark options (hooks: their class name)
    name: ClassVar[str] = "?"
    #: True when :meth:`serialize` takes one column; False when it takes whole rows
    single_column: ClassVar[bool] = True

    @abstractmethod
    def serialize(self, data: pa.Table) -> Encoded:
        """One value per row of ``data`` (None for a null), and the rows that cannot be
        encoded (index -> reason; their value is None)."""

    def serialize_values(self, values: list[Any], column: str) -> Encoded:
        """Python values of ``column`` (the tuples of a window that Arrow cannot hold as they
        are), each encoded as itself: one Arrow column when it gives the values back exactly,
        otherwise one value at a time. A value Arrow cannot hold is refused with the reason."""
        name = column if self.single_column else _SINGLE
        return self._by_tables(values, lambda vs: pa.table({name: pa.array(vs)}), column)

    def serialize_rows(self, rows: list[dict[str, Any]]) -> Encoded:
        """Whole rows (dicts), each encoded as itself (its own fields and value types): one
        table when Arrow gives every row back exactly, otherwise one row at a time."""
        return self._by_tables(rows, pa.Table.from_pylist, None)

    def _by_tables(
        self, items: list[Any], table: Callable[[list[Any]], pa.Table], column: str | None
    ) -> Encoded:
        if not items:
            return [], {}
        try:
            data = table(items)
            back = data.column(0).to_pylist() if column is not None else data.to_pylist()
            if same_values(back, items):
                return self.serialize(data)
        except ARROW_ERRORS:
            pass
        out: list[bytes | None] = []
        errors: dict[int, str] = {}
        for i, item in enumerate(items):
            try:
                one = table([item])
            except ARROW_ERRORS as exc:
                out.append(None)
                errors[i] = f"cannot be an Arrow value for the {self.name} serializer: {exc}"
                continue
            values, bad = self.serialize(one)
            out.append(values[0])
            if 0 in bad:
                errors[i] = bad[0]
        return out, errors

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _one_column(data: pa.Table, who: str) -> pa.ChunkedArray:
    if data.num_columns != 1:
        raise KafkaOutputConfigError(
            f"the {who} serializer encodes one column, got {data.num_columns} "
            f"({data.column_names}): name it with value_column / key_column"
        )
    return data.column(0)


class BytesSerializer(Serializer):
    """A ``binary`` (or ``string``: UTF-8) column, as it is."""

    name = "bytes"

    def serialize(self, data: pa.Table) -> Encoded:
        column = _one_column(data, self.name)
        if is_text(column.type):
            column = pc.cast(column, pa.binary())
        if not (
            is_binary(column.type)
            or pa.types.is_fixed_size_binary(column.type)
            or pa.types.is_null(column.type)
        ):
            reason = f"the bytes serializer takes binary or string values, not {column.type}"
            return [None] * len(column), {
                i: reason for i, v in enumerate(column.is_valid().to_pylist()) if v
            }
        return column.to_pylist(), {}


class StringSerializer(Serializer):
    """Any scalar column as UTF-8 text (Arrow's cast to string)."""

    name = "string"

    def serialize(self, data: pa.Table) -> Encoded:
        column = _one_column(data, self.name)
        try:
            text = pc.cast(column, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            reason = f"cannot encode a {column.type} value as text: {exc}"
            return [None] * len(column), {
                i: reason for i, v in enumerate(column.is_valid().to_pylist()) if v
            }
        return pc.cast(text, pa.binary()).to_pylist(), {}


class _JsonEncoder(json.JSONEncoder):
    def default(self, o: Any) -> Any:
        if isinstance(o, dt.datetime | dt.date | dt.time):
            return o.isoformat()
        if isinstance(o, dt.timedelta):
            return o.total_seconds()
        if isinstance(o, Decimal):
            if not o.is_finite():
                raise ValueError(f"the decimal {o} has no JSON form")
            return str(o)  # exact: a JSON number would go through a binary float
        if isinstance(o, bytes | bytearray | memoryview):
            raise TypeError(
                "a bytes value cannot be encoded as JSON (convert it to text, e.g. base64, "
                "or use the bytes serializer on its column)"
            )
        if type(o).__module__ == "numpy" and callable(getattr(o, "tolist", None)):
            return o.tolist()  # a numpy scalar or array: as Arrow would have given it
        return super().default(o)


class JsonSerializer(Serializer):
    """Compact UTF-8 JSON: one column's values, or each row as an object (a tuple of the
    window: itself, its own fields and value types, whatever the window's other rows are)."""

    name = "json"
    single_column = False

    def __init__(self) -> None:
        self._encoder = _JsonEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)

    def serialize(self, data: pa.Table) -> Encoded:
        if data.num_columns == 1 and data.column_names[0] == _SINGLE:
            items: list[Any] = data.column(0).to_pylist()
            nulls = True
        else:
            items = data.to_pylist()
            nulls = False
        return self._encode(items, nulls)

    def serialize_values(self, values: list[Any], column: str) -> Encoded:
        return self._encode(values, True)

    def serialize_rows(self, rows: list[dict[str, Any]]) -> Encoded:
        return self._encode(rows, False)

    def _encode(self, items: list[Any], nulls: bool) -> Encoded:
        encode = self._encoder.encode
        out: list[bytes | None] = []
        errors: dict[int, str] = {}
        for i, item in enumerate(items):
            if nulls and item is None:
                out.append(None)
                continue
            try:
                out.append(encode(item).encode("utf-8"))
            except (TypeError, ValueError, RecursionError, OverflowError) as exc:
                out.append(None)
                errors[i] = f"cannot encode as JSON: {exc}"
        return out, errors

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


#: the column name under which a single value column reaches a whole-row serializer (JSON of
#: the value, not of ``{"value": ...}``)
_SINGLE = "__malhar_value__"

#: what converting rows to Arrow raises for rows it cannot hold (UnicodeError: a str with a
#: lone surrogate, json.loads("\"\\ud800\"") or surrogateescape, has no UTF-8)
ARROW_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    OverflowError,
    UnicodeError,
)
#: types whose values Arrow gives back as they are when a column holds only them
_PLAIN = frozenset((str, int, float, bool))
_TEXT_EXACT = frozenset((Decimal, dt.datetime, dt.date, dt.time, dt.timedelta))


def same_value(back: Any, original: Any) -> bool:
    """True when ``back`` (a value that went through Arrow) encodes as ``original`` does:
    same type (a tuple comes back as a list), same fields in the same order, the same text
    for decimals, dates and times (scale, time zone), the same float (``-0.0``, NaN)."""
    kind = type(original)
    if kind is dict:
        return (
            type(back) is dict
            and len(back) == len(original)
            and all(
                type(k) is type(j) and k == j and same_value(v, w)
                for (k, v), (j, w) in zip(back.items(), original.items(), strict=True)
            )
        )
    if kind is list or kind is tuple:
        return (
            type(back) is list
            and len(back) == len(original)
            and all(map(same_value, back, original))
        )
    if type(back) is not kind:
        return False
    if kind is float:
        return repr(back) == repr(original)
    if kind in _TEXT_EXACT:
        return str(back) == str(original)
    return bool(back == original)


def _one_zone(values: list[Any]) -> bool:
    """True when the datetimes (and Nones) of ``values`` share one time zone (or none), with
    no ``fold`` (a repeated wall-clock hour, which Arrow's conversion may not keep) and no
    wall-clock time in a zone's gap (``02:30`` on a spring-forward day comes back ``03:30``)."""
    zones = {v.tzinfo for v in values if v is not None}
    if len(zones) != 1 or any(v.fold for v in values if v is not None):
        return False
    zone = next(iter(zones))
    if zone is None or isinstance(zone, dt.timezone):
        return True  # naive or a fixed offset: no gaps
    # the two readings of a wall-clock time differ only in a gap or a repeated hour
    return all(v is None or v.utcoffset() == v.replace(fold=1).utcoffset() for v in values)


def same_values(back: list[Any], originals: list[Any]) -> bool:
    """:func:`same_value` for every pair."""
    return len(back) == len(originals) and all(map(same_value, back, originals))


def faithful_table(rows: list[dict[str, Any]], table: pa.Table) -> bool:
    """True when ``table`` (``pa.Table.from_pylist(rows)``) gives every row back as it is:
    each row has the table's fields in its order, and each column holds values of one type
    that Arrow keeps (checked value by value only for the columns of other types: dates,
    decimals, nested values ...). Cheap for the usual window (rows of one shape)."""
    fields = tuple(rows[0])
    if tuple(table.column_names) != fields:
        return False
    for row in rows:
        if tuple(row) != fields:
            return False
    for name, column in zip(fields, table.columns, strict=True):
        values = [row[name] for row in rows]
        kinds = set(map(type, values))
        kinds.discard(type(None))
        if not kinds:
            continue
        if len(kinds) > 1:
            return False
        kind = next(iter(kinds))
        if kind in _PLAIN or kind is dt.date:
            continue
        if kind is dt.datetime and _one_zone(values):
            continue  # Arrow keeps the instant and the (one) time zone: the same text
        if not same_values(column.to_pylist(), values):
            return False
    return True


class FunctionSerializer(Serializer):
    """A hook: ``fn(value) -> bytes`` per row; an exception is the row's reason.

    Args:
        fn: called with each value of the column, or with each row as a ``dict`` when
            ``rows`` is true.
        rows: give ``fn`` whole rows (the value serializer without ``value_column``).
        name: how errors and ``repr`` name it.
    """

    def __init__(
        self, fn: Callable[[Any], bytes | None], *, rows: bool = False, name: str = ""
    ) -> None:
        self.fn = fn
        self.rows = rows
        self.label = name or getattr(fn, "__name__", type(fn).__name__)

    @property
    def single_column(self) -> bool:  # type: ignore[override]
        return not self.rows

    def serialize(self, data: pa.Table) -> Encoded:
        items = data.to_pylist() if self.rows else _one_column(data, self.label).to_pylist()
        return self._call(items)

    def serialize_values(self, values: list[Any], column: str) -> Encoded:
        return super().serialize_values(values, column) if self.rows else self._call(values)

    def serialize_rows(self, rows: list[dict[str, Any]]) -> Encoded:
        return self._call(rows) if self.rows else super().serialize_rows(rows)

    def _call(self, items: list[Any]) -> Encoded:
        out: list[bytes | None] = []
        errors: dict[int, str] = {}
        fn = self.fn
        for i, item in enumerate(items):
            try:
                value = fn(item)
                if value is not None and not isinstance(value, bytes):
                    value = bytes(value)
                out.append(value)
            except Exception as exc:
                out.append(None)
                errors[i] = f"{self.label} cannot encode it: {type(exc).__name__}: {exc}"
        return out, errors

    def __repr__(self) -> str:
        return f"FunctionSerializer({self.label})"


def confluent_serializer(
    serializer: Any, topic: str, *, key: bool = False, rows: bool = True
) -> FunctionSerializer:
    """Adapts a confluent-kafka serializer (``AvroSerializer``, ``ProtobufSerializer``,
    ``JSONSerializer`` of ``confluent_kafka.schema_registry``, or any
    ``confluent_kafka.serialization.Serializer``), called as ``serializer(value, ctx)``.

    Use it in a ``"module:factory"`` hook so that the schema registry client (and its
    credentials) is built where the output runs, not shipped with the application::

        # mypkg/codecs.py
        def orders_avro():
            registry = SchemaRegistryClient({"url": os.environ["REGISTRY_URL"]})
            return confluent_serializer(AvroSerializer(registry, SCHEMA), "orders")

        KafkaOutputOperator(..., value_serializer="mypkg.codecs:orders_avro")
    """
    from confluent_kafka.serialization import MessageField, SerializationContext

    ctx = SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)
    name = type(serializer).__name__
    return FunctionSerializer(lambda v: serializer(v, ctx), rows=rows, name=name)


_BY_NAME: dict[str, type[Serializer]] = {
    s.name: s for s in (BytesSerializer, StringSerializer, JsonSerializer)
}
#: the names a serializer setting accepts (besides "module:factory" hooks and instances)
SERIALIZER_NAMES = tuple(sorted(_BY_NAME))


def check_spec(value: Any) -> str | None:
    """Why ``value`` is not a serializer setting (None when it is one)."""
    if isinstance(value, Serializer):
        return None
    if not isinstance(value, str):
        return f"expected a serializer name, 'module:factory' or a Serializer, got {value!r}"
    text = value.strip()
    if text.lower() in _BY_NAME:
        return None
    module, colon, attr = text.partition(":")
    if colon and module and attr:
        return None
    return (
        f"{value!r} is not one of {list(SERIALIZER_NAMES)} nor a hook 'module:factory' "
        "(a factory returning a Serializer or a callable value -> bytes)"
    )


def get_serializer(spec: str | Serializer) -> Serializer:
    """The serializer ``spec`` names: ``bytes``, ``string``, ``json``, a ``"module:factory"``
    hook (imported and called now: in the process that writes), or an instance."""
    if isinstance(spec, Serializer):
        return spec
    problem = check_spec(spec)
    if problem:
        raise KafkaOutputConfigError(f"serializer {problem}")
    text = spec.strip()
    cls = _BY_NAME.get(text.lower())
    if cls is not None:
        return cls()
    module_name, _, attr = text.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise KafkaOutputConfigError(
            f"serializer hook {text!r} cannot be loaded: {type(exc).__name__}: {exc}"
        ) from None
    made = factory() if isinstance(factory, type) or _takes_no_argument(factory) else factory
    if isinstance(made, Serializer):
        return made
    if callable(made):
        return FunctionSerializer(made, name=text)
    raise KafkaOutputConfigError(
        f"serializer hook {text!r} returned {type(made).__name__}: expected a Serializer or a "
        "callable value -> bytes"
    )


def _takes_no_argument(fn: Any) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in params
    )


def b64(value: bytes | None) -> str | None:
    """``bytes`` as base64 text (how error rows show a key or value that was encoded)."""
    return None if value is None else base64.b64encode(value).decode("ascii")
