"""Parse Spark DDL schema strings without a SparkContext (executors, unit tests).

PySpark's own parser calls into the JVM; ports are declared at import time
and resolved inside Python workers, where there is none. Covers the types a
port schema uses: atomic types, ``decimal(p,s)``, ``array<>``, ``map<,>``,
``struct<>``, and ``NOT NULL``.
"""

from __future__ import annotations

import re

from pyspark.sql import types as T

from malhar.errors import MalharError

_ATOMIC: dict[str, T.DataType] = {
    "string": T.StringType(),
    "varchar": T.StringType(),
    "char": T.StringType(),
    "int": T.IntegerType(),
    "integer": T.IntegerType(),
    "bigint": T.LongType(),
    "long": T.LongType(),
    "smallint": T.ShortType(),
    "short": T.ShortType(),
    "tinyint": T.ByteType(),
    "byte": T.ByteType(),
    "double": T.DoubleType(),
    "float": T.FloatType(),
    "real": T.FloatType(),
    "boolean": T.BooleanType(),
    "bool": T.BooleanType(),
    "binary": T.BinaryType(),
    "timestamp": T.TimestampType(),
    "timestamp_ltz": T.TimestampType(),
    "timestamp_ntz": T.TimestampNTZType(),
    "date": T.DateType(),
}
_PUNCTUATION = frozenset("<>(),:")
_TOKEN = re.compile(r"\s*(`[^`]*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


class DDLError(MalharError, ValueError):
    pass


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise DDLError(f"unexpected character {text[pos:].strip()[:1]!r} at {pos}")
            self.tokens.append(m.group(1))
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok.lower() != expected):
            raise DDLError(f"expected {expected or 'a token'} but found {tok!r}")
        self.i += 1
        return tok

    def fields(self, end: str | None) -> T.StructType:
        out = []
        while True:
            tok = self.peek()
            if tok is None or tok in _PUNCTUATION:
                found = "the end" if tok is None else repr(tok)
                raise DDLError(
                    f"expected a field name but found {found} (an empty field, or a comma "
                    "too many?)"
                )
            name = self.take().strip("`")
            if self.peek() == ":":
                self.take(":")
            if self.peek() is None or self.peek() in _PUNCTUATION:
                raise DDLError(f"field {name!r} has no type")
            dtype = self.dtype()
            nullable = True
            if self.peek() and self.peek().lower() == "not":
                self.take("not")
                self.take("null")
                nullable = False
            out.append(T.StructField(name, dtype, nullable))
            if self.peek() == ",":
                self.take(",")
                continue
            if self.peek() == end:
                return T.StructType(out)
            raise DDLError(f"expected ',' or the end after field {name!r}, found {self.peek()!r}")

    def dtype(self) -> T.DataType:
        word = self.take().lower()
        if word == "decimal" or word == "numeric":
            if self.peek() == "(":
                self.take("(")
                p = int(self.take())
                s = 0
                if self.peek() == ",":
                    self.take(",")
                    s = int(self.take())
                self.take(")")
                return T.DecimalType(p, s)
            return T.DecimalType(10, 0)
        if word in ("varchar", "char") and self.peek() == "(":
            self.take("(")
            self.take()
            self.take(")")
            return T.StringType()
        if word == "array":
            self.take("<")
            inner = self.dtype()
            self.take(">")
            return T.ArrayType(inner, True)
        if word == "map":
            self.take("<")
            k = self.dtype()
            self.take(",")
            v = self.dtype()
            self.take(">")
            return T.MapType(k, v, True)
        if word == "struct":
            self.take("<")
            st = self.fields(">")
            self.take(">")
            return st
        if word in _ATOMIC:
            return _ATOMIC[word]
        raise DDLError(f"unknown type {word!r}")


def parse_ddl(text: str) -> T.StructType:
    """``"word string, count bigint NOT NULL"`` -> ``StructType``."""
    parser = _Parser(text)
    if parser.peek() and parser.peek().lower() == "struct" and "<" in text:
        parser.take()
        parser.take("<")
        result = parser.fields(">")
        parser.take(">")
    else:
        result = parser.fields(None)
    if parser.peek() is not None:
        raise DDLError(f"unexpected {parser.peek()!r} after the schema")
    return result
