"""Port schemas: Spark DDL strings, ``StructType`` or dataclasses, normalized to one form."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import types
import typing
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from malhar.ddl import DDLError, parse_ddl
from malhar.errors import MalharError

SchemaSpec = str | StructType | type | None

_PY_TO_SPARK: dict[Any, DataType] = {
    int: LongType(),
    float: DoubleType(),
    str: StringType(),
    bool: BooleanType(),
    bytes: BinaryType(),
    dt.datetime: TimestampType(),
    dt.date: DateType(),
    decimal.Decimal: DecimalType(38, 18),
}


class SchemaError(MalharError, ValueError):
    """A port schema that cannot be understood, or rows that do not fit one."""


def to_struct_type(spec: SchemaSpec, *, where: str = "schema") -> StructType | None:
    """Normalize a port schema; ``None`` means an untyped (pickled Python object) port."""
    if spec is None or isinstance(spec, StructType):
        return spec
    if isinstance(spec, str):
        try:
            return parse_ddl(spec)
        except DDLError as exc:
            raise SchemaError(
                f"{where}: cannot parse DDL {spec!r}: {exc}; write it like 'word string, n bigint'"
            ) from exc
    if dataclasses.is_dataclass(spec) and isinstance(spec, type):
        hints = typing.get_type_hints(spec)
        fields = []
        for f in dataclasses.fields(spec):
            tp, nullable = _unwrap_optional(hints[f.name])
            if tp not in _PY_TO_SPARK:
                raise SchemaError(f"{where}: field {f.name!r} has unsupported type {tp!r}")
            fields.append(StructField(f.name, _PY_TO_SPARK[tp], nullable))
        return StructType(fields)
    raise SchemaError(
        f"{where}: expected a DDL string, a StructType or a dataclass, got {type(spec).__name__}"
    )


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def arrow_schema(struct: StructType | None) -> pa.Schema:
    """The Arrow schema of a port; untyped ports carry one pickled ``value`` column."""
    if struct is None:
        return pa.schema([pa.field("value", pa.binary())])
    return to_arrow_schema(struct, timezone="UTC", prefers_large_types=False)


def compatible(upstream: StructType | None, downstream: StructType | None) -> str | None:
    """None if a stream from ``upstream`` can feed ``downstream``; else why not."""
    if downstream is None:
        return None  # an untyped input port takes anything: dict rows or Arrow batches
    if upstream is None:
        return (
            "the upstream port is untyped (Python objects) but the downstream port expects columns"
        )
    up = {f.name: f.dataType for f in upstream.fields}
    for f in downstream.fields:
        if f.name not in up:
            return f"column {f.name!r} is missing upstream"
        if up[f.name] != f.dataType:
            return f"column {f.name!r} is {up[f.name].simpleString()} upstream but {f.dataType.simpleString()} downstream"
    return None
