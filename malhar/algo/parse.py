"""Parsers (Malhar's ``lib/parser``): CSV, JSON (with an optional JSON Schema check),
fixed-width and regex records to Arrow-typed tuples.

Input: text records (``str`` or ``bytes``, one record per tuple, or a one-column Arrow
batch of them). Output ``out``: rows typed by ``schema`` (Spark DDL: the port is typed,
so parsed batches travel as Arrow). Every record that does not parse goes to ``error``
as ``{"tuple": record, "reason": why}``; ``metrics()`` counts them per window.

A batch is parsed in one vectorized pass (``pyarrow.csv``, ``pyarrow.json``,
``pyarrow.compute``); when that pass fails, the records are parsed one by one to tell
the bad ones from the good. A single record goes through the same Arrow converters, so
both paths give the same values.
"""

from __future__ import annotations

import io
import json
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from malhar.algo._base import (
    AlgoOperator,
    SchemaProperty,
    TypedOutputs,
    arrow_schema_of,
    emit_table,
    one_character,
)
from malhar.errors import ConfigError
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.util.arrow_types import is_binary, is_text

__all__ = ["CsvParser", "FixedWidthParser", "JsonParser", "RegexParser"]


class _Parser(TypedOutputs, AlgoOperator):
    PARTITIONING: ClassVar[str] = "stateless"
    SCHEMA_REQUIRED: ClassVar[bool] = True

    input = InputPort()
    out = OutputPort()
    error = OutputPort(error=True)

    schema = SchemaProperty("out", doc="Spark DDL of the parsed rows (types the out port)")
    FIELDS_READ = {"input": ("field",)}

    field = Property(
        str, default=None, doc="the field holding the record (e.g. Kafka's value); None: the tuple"
    )

    def setup(self, context: Any) -> None:
        if self.schema is None and self.SCHEMA_REQUIRED:
            raise ConfigError(f"{context.name}: {type(self).__name__} needs a schema (Spark DDL)")
        self._schema = arrow_schema_of(self.schema) if self.schema else None
        self._parsed = 0

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "parsed": float(getattr(self, "_parsed", 0))}

    def begin_window(self, window_id: int) -> None:
        self._parsed = 0

    # one record / many records -----------------------------------------------------------
    def parse_many(self, records: list[str]) -> pa.RecordBatch:
        """Parse every record at once (raise on any bad one)."""
        raise NotImplementedError

    def parse_one(self, record: str) -> pa.RecordBatch:
        return self.parse_many([record])

    def _not_text(self, t: Any) -> str:
        """Why a tuple holds no record to parse."""
        if self.field is not None and isinstance(t, dict):
            if self.field not in t:
                return f"no field {self.field!r} (the record's text) in a tuple with fields {sorted(t)}"
            return f"field {self.field!r}: {_not_text(t[self.field])}"
        return _not_text(t)

    def _record(self, t: Any) -> str | None:
        if self.field is not None and isinstance(t, dict):
            return _text(t.get(self.field))
        return _text(t)

    def process(self, record: Any) -> None:
        text = self._record(record)
        if text is None:
            self._error(record, self._not_text(record))
            return
        try:
            row = self.parse_one(text)
        except (pa.ArrowException, ValueError, TypeError, KeyError) as exc:
            self._error(record, _reason(exc))
            return
        self._parsed += row.num_rows
        emit_table(self.out, row)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.field is not None and self.field in batch.schema.names:
            col = batch.column(self.field)
        elif self.field is not None:
            for row in batch.to_pylist():
                self.process(row)
            return
        else:
            col = batch.column(0)
        # record by record, with the tuples the per-tuple path sees (the whole row when the
        # record is a field of it): bad ones go to the error port as they were
        tuples = batch.to_pylist if self.field is not None else col.to_pylist
        if col.null_count or not (is_text(col.type) or is_binary(col.type)):
            for value in tuples():
                self.process(value)
            return
        try:
            records = col.cast(pa.string()).to_pylist() if is_binary(col.type) else col.to_pylist()
            parsed = self.parse_many(records)
            if parsed.num_rows != len(records):
                raise ValueError("record count changed")
        except (pa.ArrowException, ValueError, TypeError, KeyError, UnicodeDecodeError):
            # (bytes that are not UTF-8 do not cast to a string column)
            for value in tuples():
                self.process(value)
            return
        self._parsed += parsed.num_rows
        emit_table(self.out, parsed)


def _text(record: Any) -> str | None:
    if isinstance(record, str):
        return record
    if isinstance(record, bytes | bytearray):
        try:
            return bytes(record).decode()
        except UnicodeDecodeError:
            return None
    if isinstance(record, dict) and len(record) == 1:
        return _text(next(iter(record.values())))
    return None


def _not_text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return "the record's bytes are not valid UTF-8"
    return f"expected text, got {type(value).__name__}"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def cast_strings(columns: dict[str, pa.Array], schema: pa.Schema) -> pa.RecordBatch:
    """String columns to ``schema``'s types (an empty field is null); raises when a value
    does not convert."""
    arrays = []
    for f in schema:
        s = columns[f.name]
        if pa.types.is_string(f.type):
            arrays.append(s)
            continue
        s = pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)
        if pa.types.is_boolean(f.type):
            low = pc.utf8_lower(s)
            ok = pc.or_(
                pc.is_null(low), pc.is_in(low, value_set=pa.array(["true", "false", "1", "0"]))
            )
            if not pc.all(ok).as_py():
                raise ValueError(f"field {f.name!r}: not a boolean")
            arrays.append(
                pc.is_in(low, value_set=pa.array(["true", "1"])).cast(pa.bool_())
                if len(low)
                else pa.array([], pa.bool_())
            )
            arrays[-1] = pc.if_else(pc.is_null(low), pa.scalar(None, pa.bool_()), arrays[-1])
            continue
        try:
            arrays.append(pc.cast(s, f.type))
        except pa.ArrowException as exc:
            raise ValueError(f"field {f.name!r}: {_reason(exc)}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class CsvParser(_Parser):
    """Parses delimited text records into typed rows (Malhar's ``CsvParser``).

    The fields of ``schema`` are the record's columns in order; an empty field is null
    (a quoted empty field ``""`` is an empty string). A record with another number of
    fields, or a value that does not convert to its column's type, goes to ``error``.

    Example:
        >>> from malhar.algo import CsvParser
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(CsvParser(schema="id bigint, name string, price double"))
        >>> h.run_window([("input", "1,tea,2.5"), ("input", "x,jam,1"), ("input", "2,oat")])
        >>> h.sink("out").tuples
        [{'id': 1, 'name': 'tea', 'price': 2.5}]
        >>> [e["tuple"] for e in h.sink("error").tuples]
        ['x,jam,1', '2,oat']
    """

    delimiter = Property(
        str, default=",", check=one_character, doc="the field separator (one character)"
    )
    quote = Property(str, default='"', check=one_character, doc="the quote character")

    def __init__(
        self,
        schema: str | None = None,
        delimiter: str = ",",
        quote: str = '"',
        field: str | None = None,
    ) -> None:
        self.configure(schema=schema, delimiter=delimiter, quote=quote, field=field)

    def setup(self, context: Any) -> None:
        super().setup(context)
        names = self._schema.names
        # one thread: a task has its core, and pyarrow's thread pool can abort the process
        # at exit when it is still tearing down (apache/arrow#34314)
        self._read = pacsv.ReadOptions(
            column_names=names, autogenerate_column_names=False, use_threads=False
        )
        self._parse = pacsv.ParseOptions(
            delimiter=self.delimiter, quote_char=self.quote, ignore_empty_lines=False
        )
        # an empty field is null, a quoted one ("") the empty string: what CsvFormatter
        # writes for each (other null spellings, such as NA, stay text)
        self._convert = pacsv.ConvertOptions(
            column_types={f.name: pa.string() for f in self._schema},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        )

    def parse_many(self, records: list[str]) -> pa.RecordBatch:
        if any("\n" in r or "\r" in r for r in records):
            raise ValueError("a record holds a line break")
        if len(self._schema) > 1 and "" in records:
            # pyarrow reads an empty line as a row of empty fields: a row of nulls
            raise ValueError(f"an empty record (the schema has {len(self._schema)} fields)")
        data = ("\n".join(records) + "\n").encode()
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=self._read,
            parse_options=self._parse,
            convert_options=self._convert,
        )
        strings = {n: table.column(n).combine_chunks() for n in table.column_names}
        if table.num_rows != len(records):
            raise ValueError(f"{len(records)} records gave {table.num_rows} rows")
        return cast_strings(strings, self._schema)


class JsonParser(_Parser):
    """Parses JSON object records (Malhar's ``JsonParser``), optionally checked against a
    JSON Schema (``json_schema``, a dict; needs the ``jsonschema`` extra).

    With ``schema`` (Spark DDL) the rows are typed: fields not in it are dropped, missing
    ones are null, a value of another type is an error. Without it, the parsed dicts go
    out as they are (untyped port).

    Example:
        >>> from malhar.algo import JsonParser
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(JsonParser(schema="id bigint, tags array<string>"))
        >>> h.run_window([("input", '{"id": 7, "tags": ["a"], "x": 1}'), ("input", "{oops")])
        >>> h.sink("out").tuples
        [{'id': 7, 'tags': ['a']}]
        >>> h.sink("error").tuples[0]["reason"]
        'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)'
    """

    SCHEMA_REQUIRED = False

    json_schema = Property(dict, default=None, doc="a JSON Schema every record must satisfy")

    def __init__(
        self, schema: str | None = None, json_schema: dict | None = None, field: str | None = None
    ) -> None:
        self.configure(schema=schema, json_schema=json_schema, field=field)

    def setup(self, context: Any) -> None:
        super().setup(context)
        self._validator = None
        if self.json_schema is not None:
            try:
                import jsonschema
            except ImportError as exc:
                raise ConfigError(
                    f"{context.name}: json_schema needs the jsonschema package "
                    "(pip install jsonschema: malhar's 'jsonschema' extra)"
                ) from exc
            cls = jsonschema.validators.validator_for(self.json_schema)
            cls.check_schema(self.json_schema)
            self._validator = cls(self.json_schema)

    def _load(self, record: str) -> dict[str, Any]:
        value = json.loads(record)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        if self._validator is not None:
            errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
            if errors:
                where = "/".join(str(p) for p in errors[0].path) or "the record"
                raise ValueError(f"JSON Schema: {where}: {errors[0].message}")
        return value

    def process(self, record: Any) -> None:
        text = self._record(record)
        if text is None:
            self._error(record, self._not_text(record))
            return
        try:
            value = self._load(text)
            if self._schema is None:
                self._parsed += 1
                self.out.emit(value)
                return
            # pyarrow's JSON reader, as for a batch: it parses timestamps and decimals from
            # strings, which converting the loaded dict did not (they went to ``error``).
            # The record's own text, not json.dumps of what json.loads made of it (a
            # decimal through a float lost its digits); on one line: a valid JSON text
            # holds line breaks only as whitespace
            row = self._read([text.replace("\r", " ").replace("\n", " ")])
        except (pa.ArrowException, ValueError, TypeError) as exc:
            self._error(record, _reason(exc))
            return
        self._parsed += 1
        emit_table(self.out, row)

    def parse_many(self, records: list[str]) -> pa.RecordBatch:
        if self._schema is None or self._validator is not None:
            raise ValueError("parsed record by record")
        return self._read(records)

    def _read(self, records: list[str]) -> pa.RecordBatch:
        table = pajson.read_json(
            io.BytesIO("\n".join(records).encode()),
            parse_options=pajson.ParseOptions(
                explicit_schema=self._schema, unexpected_field_behavior="ignore"
            ),
        )
        return (
            table.combine_chunks().to_batches()[0]
            if table.num_rows
            else pa.RecordBatch.from_pylist([], schema=self._schema)
        )


class FixedWidthParser(_Parser):
    """Parses fixed-width records (Malhar's ``FixedWidthParser``): ``widths`` gives each
    field of ``schema`` its number of characters, in order; values are stripped of spaces.
    A record shorter or longer than the widths together (as in Malhar), or a value that
    does not convert, is an error.

    Example:
        >>> from malhar.algo import FixedWidthParser
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(FixedWidthParser(schema="code string, qty int", widths=[4, 3]))
        >>> h.run_window([("input", "AB12 42"), ("input", "XY")])
        >>> h.sink("out").tuples, len(h.sink("error").tuples)
        ([{'code': 'AB12', 'qty': 42}], 1)
    """

    widths = Property(list, default=None, doc="characters of each field, in schema order")

    def __init__(
        self, schema: str | None = None, widths: list[int] | None = None, field: str | None = None
    ) -> None:
        self.configure(schema=schema, widths=widths, field=field)

    def setup(self, context: Any) -> None:
        super().setup(context)
        if not self.widths or len(self.widths) != len(self._schema):
            raise ConfigError(
                f"{context.name}: give one width per schema field ({len(self._schema)})"
            )
        self._total = sum(self.widths)

    def parse_many(self, records: list[str]) -> pa.RecordBatch:
        col = pa.array(records, pa.string())
        lengths = pc.utf8_length(col)
        if pc.any(pc.less(lengths, self._total)).as_py():
            raise ValueError(f"a record is shorter than {self._total} characters")
        if pc.any(pc.greater(lengths, self._total)).as_py():
            # characters past the widths are a field the schema does not have: a record
            # of another layout, not one to cut silently
            raise ValueError(f"a record is longer than {self._total} characters")
        columns, start = {}, 0
        for f, w in zip(self._schema, self.widths, strict=True):
            columns[f.name] = pc.utf8_trim_whitespace(
                pc.utf8_slice_codeunits(col, start, start + w)
            )
            start += w
        return cast_strings(columns, self._schema)


class RegexParser(_Parser):
    """Parses records with a regular expression (Malhar's ``RegexParser``): its named groups
    (``(?P<name>...)``) are the fields of ``schema``. A record the pattern does not match is
    an error. Uses RE2 syntax (``pyarrow.compute.extract_regex``) on both paths.

    Example:
        >>> from malhar.algo import RegexParser
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(
        ...     RegexParser(schema="ip string, status int", pattern=r"^(?P<ip>\\S+) .* (?P<status>\\d{3})$")
        ... )
        >>> h.run_window([("input", "10.0.0.1 GET / 200"), ("input", "garbage")])
        >>> h.sink("out").tuples, h.sink("error").tuples[0]["reason"]
        ([{'ip': '10.0.0.1', 'status': 200}], 'the pattern does not match')
    """

    pattern = Property(str, default=None, doc="a regular expression with a named group per field")

    def __init__(
        self, schema: str | None = None, pattern: str | None = None, field: str | None = None
    ) -> None:
        self.configure(schema=schema, pattern=pattern, field=field)

    def setup(self, context: Any) -> None:
        super().setup(context)
        if not self.pattern:
            raise ConfigError(f"{context.name}: RegexParser needs a pattern")
        try:
            probe = pc.extract_regex(pa.array([""], pa.string()), pattern=self.pattern)
        except pa.ArrowException as exc:
            raise ConfigError(
                f"{context.name}: bad pattern {self.pattern!r}: {_reason(exc)}"
            ) from None
        groups = {f.name for f in probe.type}
        absent = [n for n in self._schema.names if n not in groups]
        if absent:
            raise ConfigError(f"{context.name}: the pattern has no group named {absent[0]!r}")

    def parse_many(self, records: list[str]) -> pa.RecordBatch:
        matched = pc.extract_regex(pa.array(records, pa.string()), pattern=self.pattern)
        if matched.null_count:
            raise ValueError("the pattern does not match")
        return cast_strings({n: matched.field(n) for n in self._schema.names}, self._schema)
