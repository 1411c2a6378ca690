"""The settings of the file connectors, each declared once as a
:class:`~malhar.properties.Property`.

- :class:`FileInputSettings`: what every file input reads and how (scanner, blocks,
  decoding, bad input, what happens to files once their windows are committed). The input
  operators inherit it, with their format's own settings.
- :class:`FileOutputSettings`: where and how an output writes (format, schema, rolling,
  Hive partitioning). The output operators inherit it; the Spark sink configures a
  :class:`FileSinkSettings` from its options, so an option and a property share their
  type, default, checks and documentation.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
from typing import Any

import pyarrow as pa

from malhar.io.base.output import TransactionalSettings
from malhar.io.base.spark_sink import TransactionalSinkSettings
from malhar.io.fs.decoders import DECODE_POLICIES
from malhar.io.fs.errors import FileConfigError, FileOutputConfigError
from malhar.io.fs.paths import is_hidden, location, split_glob
from malhar.properties import Configurable, Property, PropertyError
from malhar.redaction import redact_url
from malhar.schema import SchemaError, arrow_schema, to_struct_type
from malhar.suggest import did_you_mean
from malhar.util.arrow_types import is_binary

__all__ = [
    "FORMATS",
    "FileInputSettings",
    "FileOutputSettings",
    "FileSinkSettings",
    "parse_schema",
    "partition_columns",
]

#: the record formats of the connectors
FORMATS = ("lines", "csv", "jsonl", "parquet")
INPUT_CODECS = ("infer", "none", "gzip", "bz2", "zstd", "lz4", "brotli")
PARQUET_CODECS = ("snappy", "zstd", "gzip", "lz4", "brotli", "none")
#: a file_prefix: not hidden from readers (no leading '_' or '.'), no separator
_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _nested(kind: pa.DataType) -> bool:
    return pa.types.is_nested(kind)


def _binary(kind: pa.DataType) -> bool:
    return is_binary(kind) or pa.types.is_fixed_size_binary(kind) or pa.types.is_binary_view(kind)


def parse_schema(ddl: str | None, who: str = "schema") -> pa.Schema | None:
    """The Arrow schema of a Spark DDL string (``"id bigint, day date"``), None for None."""
    if ddl is None:
        return None
    try:
        return arrow_schema(to_struct_type(ddl, where=who))
    except SchemaError as exc:
        raise FileConfigError(str(exc)) from None


def _check_ddl(value: Any) -> str | None:
    try:
        parse_schema(value)
    except FileConfigError as exc:
        return str(exc)
    return None


def _check_regex(value: Any) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"not a regular expression: {exc}"
    return None


def _check_encoding(value: Any) -> str | None:
    try:
        if "\n".encode(value) != b"\n":
            return f"{value!r} is not ASCII-compatible (lines are found by their newline byte)"
    except LookupError:
        return f"unknown encoding {value!r}"
    return None


def _rescanned(path: str, move_to: str, recursive: bool) -> str | None:
    """Why files moved to ``move_to`` would be listed again by the scanner of ``path``
    (``"inside the ... path"``), None if they would not. The scanner skips hidden names and
    matches a glob per component, from the directory before its first glob character."""
    where, scanned = location(path)
    there, target = location(move_to)
    if where != there:
        return None
    if where == "local":  # through symbolic links: a link to the scanned folder is it
        scanned, target = _real(scanned), _real(target)
    if target == scanned:
        return "the scanned path itself"
    below = [p for p in target[len(scanned) :].split("/") if p]
    if (
        recursive
        and target.startswith(scanned.rstrip("/") + "/")
        and not any(is_hidden(p) for p in below)
    ):
        # a directory's subdirectories (also a path with glob characters that exists as
        # written, which the scanner takes literally)
        return "inside the recursively scanned path"
    base, globs = split_glob(scanned)
    if not globs or (target != base and not target.startswith(base.rstrip("/") + "/")):
        return None
    rel = [p for p in target[len(base) :].split("/") if p]
    if any(is_hidden(p) for p in rel):
        return None
    if any(not fnmatch.fnmatchcase(d, g) for d, g in zip(rel, globs, strict=False)):
        return None
    # a moved file is at depth len(rel) + 1: matched by the last glob, in a directory the
    # last glob matched, or deeper in one when recursive
    if len(rel) + 1 == len(globs) or len(rel) == len(globs):
        return "inside the scanned path, whose glob matches it"
    if len(rel) > len(globs) and recursive:
        return "inside the recursively scanned path"
    return None


def _real(path: str) -> str:
    """``path`` with its symbolic links resolved, glob characters kept as written."""
    base, globs = split_glob(path)
    real = os.path.realpath(base)
    return posixpath.join(real, *globs) if globs else real


def partition_columns(value: Any) -> tuple[str, ...]:
    """The columns of a ``partition_by`` value, outermost directory first: a str is one
    column (as Spark's ``partitionBy("a")``), a list or tuple its columns in order.

    Example:
        >>> partition_columns("day"), partition_columns(["user", "d"]), partition_columns(None)
        (('day',), ('user', 'd'), ())
    """
    if not value:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _check_partition_by(value: Any) -> str | None:
    if isinstance(value, str):
        return None
    if not value:
        return "an empty list names no column: give one or more (or None)"
    for column in value:
        if not isinstance(column, str) or not column:
            return f"{list(value)!r} holds {column!r}: each item must be a column name (a str)"
    twice = sorted({c for c in value if list(value).count(c) > 1})
    if twice:
        return f"{list(value)!r} names {', '.join(map(repr, twice))} more than once"
    return None


class _ColumnsProperty(Property[Any]):
    """A str or a list of column names; as text (``-c``, Spark options, JSON config given
    a string) a JSON array or ``"a,b"`` is a list, a plain name one column (the base class
    keeps any text as it is when ``str`` is one of the types)."""

    def parse(self, text: Any) -> Any:
        if not isinstance(text, str):
            return text
        raw = text.strip()
        if raw.startswith("["):
            try:
                return list(json.loads(raw))
            except (ValueError, TypeError):
                raise PropertyError(
                    f"property {self.name!r}: cannot read {text!r} as a JSON array"
                ) from None
        if "," in raw:
            return [p.strip() for p in raw.split(",") if p.strip()]
        return text


class FileInputSettings(Configurable):
    """Where a file input finds its files and how it reads them."""

    path = Property(
        str,
        not_null=True,
        doc="a file, a directory or a glob (/in/*.csv); a local path, hdfs:// or webhdfs:// URL",
    )
    recursive = Property(bool, default=False, doc="also read the files of subdirectories")
    pattern = Property(
        str, default=None, check=_check_regex, doc="regex the whole file name matches"
    )
    scan_interval_ms = Property(
        int, default=1_000, min=0, doc="a partition lists the path at most this often"
    )
    max_file_age_ms = Property(
        int,
        default=None,
        min=1,
        doc="ignore files older than the newest one seen by this much, and forget them "
        "(bounds the record of files read; None: remember every file); decided by each "
        "partition when it lists the path, so keep it well above how late files arrive",
    )
    block_size = Property(
        int,
        default=64 << 20,
        min=1,
        doc="files larger than this are read in blocks by several partitions "
        "(uncompressed text by bytes, Parquet by row groups)",
    )
    chunk_bytes = Property(
        int, default=8 << 20, min=1, doc="bytes read (and emitted as one batch) per read call"
    )
    compression = Property(
        str,
        default="infer",
        one_of=INPUT_CODECS,
        doc="compression of text files; infer: from the suffix (.gz, .bz2, .zst, .lz4, .br), "
        "else from the first bytes (gzip, bzip2, zstd, lz4)",
    )
    encoding = Property(str, default="utf-8", check=_check_encoding, doc="text encoding")
    decode_errors = Property(
        str,
        default="error",
        one_of=DECODE_POLICIES,
        doc="a line that is not valid text: error (to the error port), replace, ignore, fail",
    )
    on_unreadable = Property(
        str,
        default="skip",
        one_of=("skip", "fail"),
        doc="a file that vanished or cannot be read: skip (reported on the error port) or fail",
    )
    post_action = Property(
        str,
        default="none",
        one_of=("none", "delete", "move"),
        doc="what happens to a file once every window that read it is committed (not to "
        "one a part of which could not be read)",
    )
    move_to = Property(str, default=None, doc="directory files are moved to (post_action=move)")
    schema = Property(
        str,
        default=None,
        check=_check_ddl,
        doc="Spark DDL of the records (CSV, JSON lines, Parquet): typed Arrow batches; "
        "without it, dicts",
    )

    config_error = FileConfigError

    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work."""
        out = self.property_problems()
        if self.post_action == "move" and not self.move_to:
            out.append("post_action 'move' needs move_to (a directory)")
        if self.move_to and self.post_action != "move":
            out.append(f"move_to is set but post_action is {self.post_action!r}")
        if self.move_to and self.path and self.post_action == "move":
            why = _rescanned(self.path, self.move_to, bool(self.recursive))
            if why:
                base, globs = split_glob(location(self.path)[1])
                fix = posixpath.join(base if globs else location(self.path)[1], "_done")
                out.append(
                    f"move_to {redact_url(self.move_to)!r} is {why} (path "
                    f"{redact_url(self.path)!r}): moved files would be read again (set move_to "
                    f"to a directory outside {base!r}, or to one whose name starts with '_', "
                    f"such as {fix!r})"
                )
        return out

    def check_settings(self) -> None:
        """Raise :class:`~malhar.io.fs.errors.FileConfigError` listing every problem."""
        problems = self.settings_problems()
        if problems:
            raise FileConfigError(f"invalid {type(self).__name__} settings: " + "; ".join(problems))

    @property
    def shown_path(self) -> str:
        return redact_url(self.path or "")


class FileOutputSettings(TransactionalSettings):
    """Where and how a file output writes: one set of files per operator partition."""

    config_error = FileOutputConfigError

    path = Property(
        str, not_null=True, doc="output directory; a local path, hdfs:// or webhdfs:// URL"
    )
    format = Property(str, default="parquet", one_of=FORMATS, doc="lines, csv, jsonl or parquet")
    schema = Property(
        str,
        default=None,
        check=_check_ddl,
        doc="Spark DDL of the rows (required for csv and parquet); rows that do not fit go "
        "to the error port",
    )
    partition_by = _ColumnsProperty(
        (str, list, tuple),
        default=None,
        check=_check_partition_by,
        doc="a column, or a list of columns, whose values name Hive-style directories, "
        "nested in that order (user=ann/date=2026-11-23/...); they are not stored in the "
        "files (as text: a JSON array or 'user,date')",
    )
    roll_bytes = Property(
        int,
        default=128 << 20,
        min=1,
        doc="a file is closed once its rows hold this many bytes (as staged, uncompressed; "
        "None: no byte limit)",
    )
    roll_records = Property(int, default=None, min=1, doc="... or this many records")
    roll_windows = Property(int, default=None, min=1, doc="... or spans this many windows")
    roll_ms = Property(
        int, default=60_000, min=1, doc="... or has been open this long (checked every window)"
    )
    compression = Property(
        str,
        default=None,
        doc="parquet: snappy (default), zstd, gzip, lz4, brotli, none; text: none (default) or gzip",
    )
    header = Property(bool, default=True, doc="csv: a header line in every file")
    delimiter = Property(str, default=",", doc="csv: the field delimiter (one character)")
    file_prefix = Property(str, default="part", doc="the start of every file name")

    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work."""
        out = self.property_problems()
        if self.format in ("csv", "parquet") and not self.schema:
            out.append(f"format {self.format!r} needs a schema (Spark DDL)")
        if self.compression is not None:
            allowed = PARQUET_CODECS if self.format == "parquet" else ("none", "gzip")
            if self.compression not in allowed:
                out.append(
                    f"compression {self.compression!r} is not one of {list(allowed)} "
                    f"(the codecs of format {self.format!r})"
                )
        if self.delimiter is not None and len(self.delimiter) != 1:
            out.append(f"delimiter must be one character, got {self.delimiter!r}")
        rolls = (self.roll_bytes, self.roll_records, self.roll_windows, self.roll_ms)
        if all(r is None for r in rolls):
            out.append(
                "roll_bytes, roll_records, roll_windows and roll_ms are all None: no file would "
                "ever close, and its rows would never become visible (set at least one)"
            )
        if self.file_prefix is not None and not _PREFIX.fullmatch(self.file_prefix):
            # readers (Spark, Hive, Hadoop) skip names starting with '_' or '.': every file
            # would be hidden
            out.append(
                f"file_prefix {self.file_prefix!r} must start with a letter, then letters, "
                "digits, '_' or '-' (readers skip names starting with '_' or '.')"
            )
        schema = None
        if self.schema:
            try:
                schema = parse_schema(self.schema)
            except FileConfigError:
                schema = None
        if self.partition_by:
            if not self.schema:
                out.append("partition_by needs a schema")
            if self.format == "lines":
                out.append("format 'lines' writes one column: it cannot be partitioned")
            if schema is not None:
                out.extend(self.partition_problems(schema))
        if self.format == "lines" and schema is not None and len(schema) != 1:
            out.append("format 'lines' writes one string column: give a one-column schema")
        if self.format in ("csv", "lines") and schema is not None:
            for field in schema:
                if _nested(field.type):
                    out.append(
                        f"format {self.format!r} cannot write column {field.name!r} of type "
                        f"{field.type} (a list, struct or map): use jsonl or parquet"
                    )
        return out

    def partition_problems(self, schema: pa.Schema) -> list[str]:
        """Why ``partition_by`` cannot name directories for rows of ``schema``."""
        columns = partition_columns(self.partition_by)
        missing = [c for c in columns if c not in schema.names]
        out = [
            f"partition_by {c!r} is not a column of the schema (columns: {schema.names})"
            + did_you_mean(c, schema.names)
            for c in missing
        ]
        if not missing and len(schema) <= len(set(columns)):
            out.append("partition_by needs at least one other column to write")
        for column in (c for c in columns if c not in missing):
            kind = schema.field(column).type
            if _nested(kind) or _binary(kind):
                out.append(
                    f"partition_by column {column!r} is of type {kind}: a directory name "
                    "holds a number, a date, a timestamp, a boolean or a string, not a "
                    "list, struct, map or binary value"
                )
        return out

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The ``partition_by`` columns, outermost directory first (none: not partitioned)."""
        return partition_columns(self.partition_by)

    @property
    def codec(self) -> str:
        """The compression in effect."""
        if self.compression is not None:
            return self.compression
        return "snappy" if self.format == "parquet" else "none"

    @property
    def arrow_schema(self) -> pa.Schema | None:
        return parse_schema(self.schema)


class FileSinkSettings(FileOutputSettings, TransactionalSinkSettings):
    """The ``malhar_files`` Spark sink's options: :class:`FileOutputSettings` plus ``name``,
    ``operator`` and ``verify_reruns``. Without ``schema`` the query's schema is used.

    Example:
        >>> s = FileSinkSettings().from_options(
        ...     {"path": "/tmp/out", "format": "csv", "roll_windows": "3", "name": "q"})
        >>> (s.format, s.roll_windows, s.operator)
        ('csv', 3, 'sink')
    """

    def settings_problems(self) -> list[str]:
        # the query's schema stands in for a missing one (see FileSink.streamWriter)
        return [p for p in super().settings_problems() if "needs a schema" not in p]
