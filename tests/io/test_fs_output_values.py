"""The values a file output writes: Hive partition directories named as Spark names them
(one directory, one file per name), schemas the settings refuse because no file could hold
them, and values that go to the error port rather than being written altered (a fraction
into an integer, a float32 overflow, a time of day into a date, an unknown struct field,
CSV text with a newline or bytes that are no text)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from malhar.io.fs import (
    CsvFileOutput,
    FileOutputConfigError,
    FileOutputOperator,
    JsonLinesFileOutput,
    LinesFileOutput,
    ParquetFileOutput,
)
from malhar.io.fs import conform as conform_module
from malhar.io.fs.conform import conform
from malhar.io.fs.encoders import json_encoder
from malhar.io.fs.settings import parse_schema
from tests.io.fs_support import Place, place_fixture  # noqa: F401
from tests.io.test_fs_output import DDL, out_harness, rows, visible

pytestmark = pytest.mark.integration


def _by_folder(place: Place, column: str = "w") -> dict[str, list[Any]]:
    """The values of ``column`` in each visible file, by the file's folder."""
    out: dict[str, list[Any]] = {}
    for f in visible(place):
        table = pq.read_table(pa.BufferReader(place.read(f)))
        out.setdefault(f.split("/")[1], []).extend(table.column(column).to_pylist())
    return out


def _partitioned(place: Place, ddl: str, values: list[Any]) -> dict[str, list[Any]]:
    h = out_harness(ParquetFileOutput(place.url("h"), schema=ddl, partition_by="k", roll_windows=1))
    h.run_window([("input", {"k": v, "w": i}) for i, v in enumerate(values)], window=0)
    h.committed(0)
    assert h.sink("error").tuples == []
    return _by_folder(place)


# -- Hive partition directories --------------------------------------------------------------------
def test_rows_whose_values_name_one_folder_share_one_file(place: Place) -> None:
    # a null, "" and the text "__HIVE_DEFAULT_PARTITION__" named one folder and one file:
    # the second publication found it there and was skipped (rows lost); "" named `k=`,
    # which Spark refuses to read (it writes "" as the default partition too)
    got = _partitioned(place, "k string, w int", ["", None, "__HIVE_DEFAULT_PARTITION__", "a"])
    assert got == {"k=__HIVE_DEFAULT_PARTITION__": [0, 1, 2], "k=a": [3]}
    files = [f for f in visible(place) if "__HIVE_DEFAULT_PARTITION__" in f]
    assert len(files) == 1


def test_zero_and_negative_zero_rows_are_written_once(place: Place) -> None:
    # 0.0 == -0.0: each folder's filter selected both rows, so each row was written twice
    values = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0]
    got = _partitioned(place, "k double, w int", values)
    assert got == {
        "k=-0.0": [1],
        "k=-Infinity": [3],
        "k=0.0": [0],
        "k=1.0": [5],
        "k=Infinity": [2],
        "k=NaN": [4],
    }


@pytest.mark.parametrize(
    ("ddl", "values", "folders"),
    [
        # as Spark writes them (with spark.sql.session.timeZone UTC)
        ("k boolean", [True, False], ["k=false", "k=true"]),
        (
            "k timestamp",
            [
                dt.datetime(2026, 1, 1, 12),
                dt.datetime(2026, 1, 1, 12, 0, 0, 500000),
                dt.datetime(2026, 1, 1, 7, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            ],
            ["k=2026-01-01 12%3A00%3A00", "k=2026-01-01 12%3A00%3A00.5"],
        ),
        (
            "k timestamp_ntz",
            [dt.datetime(2026, 1, 1, 0, 0, 0, 10)],
            ["k=2026-01-01 00%3A00%3A00.00001"],
        ),
        # unchanged: the names of existing outputs
        ("k bigint", [7, -3], ["k=-3", "k=7"]),
        ("k date", [dt.date(2026, 11, 23)], ["k=2026-11-23"]),
        ("k double", [1.5, 1e20], ["k=1.5", "k=1e+20"]),
        ("k string", ["a/b:c", "x y"], ["k=a%2Fb%3Ac", "k=x y"]),
        ("k decimal(5,2)", [decimal.Decimal("1.50")], ["k=1.50"]),
    ],
)
def test_folder_names_of_each_type(tmp_path: Path, ddl: str, values: list[Any], folders) -> None:
    place = Place(str(tmp_path / "data"), "local")
    got = _partitioned(place, f"{ddl}, w int", values)
    assert sorted(got) == folders
    assert sorted(w for ws in got.values() for w in ws) == list(range(len(values)))


def test_hive_values_read_back_by_spark(tmp_path: Path, spark) -> None:
    cases = [
        ("k boolean", [True, False, None], "string", ["None", "false", "true"]),
        ("k double", [float("nan"), float("inf"), 1.5], "double", ["1.5", "inf", "nan"]),
        ("k string", ["", None, "a"], "string", ["None", "None", "a"]),
        ("k timestamp", [dt.datetime(2026, 1, 1, 12)], "timestamp", ["2026-01-01 12:00:00"]),
    ]
    for i, (ddl, values, kind, back) in enumerate(cases):
        place = Place(str(tmp_path / f"d{i}"), "local")
        _partitioned(place, f"{ddl}, w int", values)
        df = spark.read.parquet(place.url("h"))
        assert dict(df.dtypes)["k"] == kind, ddl
        assert sorted(str(r.k) for r in df.collect()) == back, ddl


# -- schemas no file can hold ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("props", "why"),
    [
        ({"format": "csv", "schema": "id int, tags array<string>"}, "'tags' of type list"),
        ({"format": "csv", "schema": "id int, s struct<x:int>"}, "'s' of type struct"),
        ({"format": "csv", "schema": "id int, m map<string,int>"}, "'m' of type map"),
        ({"format": "lines", "schema": "tags array<string>"}, "'tags' of type list"),
        ({"schema": "k array<int>, w string", "partition_by": "k"}, "'k' is of type list"),
        ({"schema": "k struct<x:int>, w string", "partition_by": "k"}, "'k' is of type struct"),
        ({"schema": "k map<string,int>, w string", "partition_by": "k"}, "'k' is of type map"),
        ({"schema": "k binary, w string", "partition_by": "k"}, "'k' is of type binary"),
    ],
)
def test_schemas_no_file_can_hold_are_refused(tmp_path: Path, props, why) -> None:
    # accepted before: every window was staged, then its publication failed on every restart
    h = out_harness(FileOutputOperator(str(tmp_path), **props))
    with pytest.raises(FileOutputConfigError, match=why):
        h.setup()


@pytest.mark.parametrize("prefix", ["_out", "-out", ".out"])
def test_a_file_prefix_that_hides_the_files_is_refused(tmp_path: Path, prefix: str) -> None:
    # readers skip names starting with '_' or '.': every file written was invisible
    h = out_harness(ParquetFileOutput(str(tmp_path), schema=DDL, file_prefix=prefix))
    with pytest.raises(FileOutputConfigError, match=f"file_prefix {prefix!r} must start"):
        h.setup()
    ok = out_harness(ParquetFileOutput(str(tmp_path / "ok"), schema=DDL, file_prefix="out_2-x"))
    ok.run_window(rows(1), window=0)


# -- values written as they are, or refused -----------------------------------------------------------
def test_csv_values_that_are_no_one_line_text_go_to_the_error_port(place: Place) -> None:
    # a newline made a record of two lines (line readers see two); bytes that are no UTF-8
    # failed the publication on every restart
    h = out_harness(
        CsvFileOutput(place.url("c"), schema="id int, note string, b binary", roll_windows=1)
    )
    batch = pa.RecordBatch.from_pylist(
        [{"id": 5, "note": "five", "b": b"5"}, {"id": 6, "note": "six\r", "b": b"6"}],
        schema=parse_schema("id int, note string, b binary"),
    )
    h.run_window(
        [
            ("input", {"id": 1, "note": "one", "b": b"1"}),
            ("input", {"id": 2, "note": "two\nlines", "b": b"2"}),
            ("input", {"id": 3, "note": "three", "b": b"\xff\xfe"}),
            ("input", {"id": 4, "note": None, "b": b"line\n"}),
            ("input", batch),
        ],
        window=0,
    )
    errors = {e["id"]: e["error"] for e in h.sink("error").tuples}
    assert errors == {
        2: "'note': a CSV value cannot hold a newline",
        3: "'b': a CSV value must be UTF-8 text",
        4: "'b': a CSV value cannot hold a newline",
        6: "'note': a CSV value cannot hold a newline",
    }
    h.committed(0)
    (name,) = [f for f in visible(place) if f.startswith("c/")]
    assert place.read(name) == b'"id","note","b"\n1,"one","1"\n5,"five","5"\n'


def test_values_arrow_would_alter_go_to_the_error_port(place: Place) -> None:
    ddl = "i bigint, f float, d date, s struct<x:int>, l array<struct<x:int>>, t timestamp"
    h = out_harness(ParquetFileOutput(place.url("p"), schema=ddl, roll_windows=1))
    when = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    good = {"i": 1.0, "f": 0.5, "d": dt.datetime(2026, 1, 1), "s": {"x": 1}, "l": [{"x": 2}]}
    good["t"] = when
    bad = [
        ({"i": 2.7}, "i: 2.7 is not an integer"),
        ({"i": decimal.Decimal("2.5")}, "i: Decimal('2.5') is not an integer"),
        ({"i": float("nan")}, "i: nan is not an integer: give None for a missing value"),
        ({"i": float("inf")}, "i: inf is not an integer: give None for a missing value"),
        ({"i": decimal.Decimal("NaN")}, "i: Decimal('NaN') is not an integer: give None"),
        ({"f": 1e300}, "f: 1e+300 is out of the range of float"),
        ({"d": dt.datetime(2026, 1, 1, 23, 59)}, "d: datetime.datetime(2026, 1, 1, 23, 59) is"),
        ({"s": {"x": 1, "y": 2}}, "s: unknown struct field(s) ['y']"),
        ({"l": [{"x": 1}, {"x": 2, "z": 3}]}, "l: element: unknown struct field(s) ['z']"),
        ({"t": 1_795_000_000.5}, "t: 1795000000.5 is a number, which Arrow would take as micro"),
        ({"d": 20_000}, "d: 20000 is a number, which Arrow would take as days since 1970"),
        ({"t": "noon"}, "field 't' (timestamp[us, tz=UTC]): object of type"),  # named the field
    ]
    h.run_window([("input", good)] + [("input", {**good, **b}) for b, _ in bad], window=0)
    h.committed(0)
    errors = [e["error"] for e in h.sink("error").tuples]
    assert len(errors) == len(bad)
    for error, (_, why) in zip(errors, bad, strict=True):
        assert error.startswith(f"does not fit the schema: {why}")
    assert place.parquet_rows("p") == [
        {"i": 1, "f": 0.5, "d": dt.date(2026, 1, 1), "s": {"x": 1}, "l": [{"x": 2}], "t": when}
    ]


@pytest.mark.parametrize(
    ("ddl", "array", "why"),
    [
        ("a bigint", pa.array([1.5, 2.0]), "a: 1.5 is not an integer"),
        ("a float", pa.array([1e300, 0.5]), "a: 1e+300 is out of the range of float"),
        ("a date", pa.array([dt.datetime(2026, 1, 1, 12), dt.datetime(2026, 1, 2)]), "a: dat"),
        (
            "a struct<x:int>",
            pa.array([{"x": 1, "y": 2}, {"x": 2, "y": None}]),
            "a: unknown struct field(s) ['y']",
        ),
        ("a decimal(5,0)", pa.array([1.5, 2.0]), "int or Decimal object expected"),
        ("a bigint", pa.array([True, False]), "Expected integer, got bool"),
        ("a bigint", pa.array([float("nan"), 2.0]), "a: nan is not an integer: give None"),
        ("a bigint", pa.array([float("-inf"), 2.0]), "a: -inf is not an integer: give None"),
    ],
)
def test_batches_are_refused_as_their_rows_are(ddl: str, array: pa.Array, why: str) -> None:
    # the batch cast stored 1.5 as 1 (via the row path), 1e300 as inf, dropped a time of
    # day or a struct field, rounded into a decimal, made booleans numbers
    batch = pa.RecordBatch.from_arrays([array], ["a"])
    table, bad = conform([batch], parse_schema(ddl), "parquet")
    rows_table, rows_bad = conform([batch.to_pylist()], parse_schema(ddl), "parquet")
    assert [b["error"] for b in bad] == [b["error"] for b in rows_bad]
    assert table.equals(rows_table)
    assert why in bad[0]["error"] and len(bad) + table.num_rows == 2


def test_batches_of_the_schema_s_types_take_no_per_row_work(monkeypatch) -> None:
    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError("rows converted one by one")

    monkeypatch.setattr(conform_module, "_rows", refuse)
    schema = parse_schema("i bigint, f float, d date, s struct<x:int>, t string")
    batch = pa.RecordBatch.from_pylist(
        [{"i": 1, "f": 0.5, "d": dt.date(2026, 1, 1), "s": {"x": 1}, "t": "a"}], schema=schema
    )
    table, bad = conform([batch], schema, "parquet")
    assert bad == [] and table.num_rows == 1
    # a wider batch whose values fit: cast without per-row work too
    wide = pa.RecordBatch.from_arrays(
        [pa.array([1], pa.int32()), pa.array([0.5]), pa.array([dt.date(2026, 1, 1)])],
        ["i", "f", "d"],
    )
    table, bad = conform([wide], parse_schema("i bigint, f float, d date"), "parquet")
    assert bad == [] and table.to_pylist() == [{"i": 1, "f": 0.5, "d": dt.date(2026, 1, 1)}]


def test_json_lines_write_nan_as_spark_does_and_refuse_bytes_that_are_no_text(
    tmp_path: Path, spark
) -> None:
    # NaN was written as a bare NaN token (no JSON reader takes it) and bytes that are
    # no UTF-8 as U+FFFD: altered, not refused
    nan, inf = float("nan"), float("inf")
    rows = [
        {"id": 1, "x": nan, "l": [1.0, -inf], "b": b"ok"},
        {"id": 2, "x": inf, "l": [], "b": b"\xff"},
        {"id": 3, "x": 0.5, "l": None, "b": None},
        {"id": 4, "x": np.float64("nan"), "l": [np.float32("inf")], "b": None},  # pandas'
    ]
    typed = "id int, x double, l array<double>, b binary"
    for folder, props in (("typed", {"schema": typed}), ("schemaless", {})):
        h = out_harness(JsonLinesFileOutput(str(tmp_path / folder), roll_windows=1, **props))
        h.run_window([("input", r) for r in rows], window=0)
        h.committed(0)
        ((error,),) = [[e["id"] for e in h.sink("error").tuples]]
        assert error == 2
        (written,) = [p for p in (tmp_path / folder).iterdir() if p.is_file()]
        first = written.read_text().splitlines()[0]
        assert json.loads(first)["x"] == "NaN" and json.loads(first)["l"] == [1.0, "-Infinity"]
    back = spark.read.schema("id int, x double, l array<double>").json(str(tmp_path / "typed"))
    got = {r.id: (r.x, r.l) for r in back.collect()}
    assert math.isnan(got[1][0]) and got[1][1] == [1.0, -inf] and got[3] == (0.5, None)
    assert math.isnan(got[4][0]) and got[4][1] == [inf]
    # numpy's other values as before: times as text, not their integers
    dumps = json_encoder(compact=True)
    when = np.datetime64("2026-01-01T00:00:00.123456789")
    assert dumps({"t": when, "d": np.timedelta64(5, "s"), "b": np.True_}) == (
        '{"t":"2026-01-01T00:00:00.123456789","d":"5 seconds","b":true}'
    )
    nested = "id int, s struct<b: binary>"
    h = out_harness(JsonLinesFileOutput(str(tmp_path / "nested"), schema=nested, roll_windows=1))
    h.run_window([("input", {"id": 1, "s": {"b": b"\xfe"}}), ("input", {"id": 2})], window=0)
    h.committed(0)
    assert [e["error"] for e in h.sink("error").tuples] == ["'s': bytes in JSON must be UTF-8 text"]


def test_lines_bytes_that_are_no_text_go_to_the_error_port(tmp_path: Path) -> None:
    t = out_harness(LinesFileOutput(str(tmp_path / "t"), schema="b binary", roll_windows=1))
    t.run_window([("input", {"b": b"one"}), ("input", {"b": b"\xff"})], window=0)
    t.committed(0)
    assert [e["error"] for e in t.sink("error").tuples] == ["a line must be UTF-8 text"]
    (written,) = [p for p in (tmp_path / "t").iterdir() if p.is_file()]
    assert written.read_bytes() == b"one\n"


def test_a_null_in_a_required_nested_field_goes_to_the_error_port(place: Place) -> None:
    # Arrow builds the column with the null in it and Parquet refuses the table: the window
    # failed on every replay (staged whole), or every later publication did
    ddl = "id int, x struct<a: int not null>, l array<struct<b: string not null>>"
    h = out_harness(ParquetFileOutput(place.url("n"), schema=ddl, roll_windows=2))
    good = {"id": 1, "x": {"a": 1}, "l": [{"b": "z"}]}
    rows = [
        good,
        {"id": 2, "x": {"a": None}, "l": []},
        {"id": 3, "x": None, "l": None},  # the struct itself may be null
        {"id": 4, "x": {"a": 4}, "l": [{"b": "y"}, {"b": None}]},
    ]
    h.run_window([("input", r) for r in rows], window=0)
    h.run_window([], window=1)
    h.committed(1)
    assert [(e["id"], e["error"]) for e in h.sink("error").tuples] == [
        (2, "required field x.a is null"),
        (4, "required field l.element.b is null"),
    ]
    assert sorted(r["id"] for r in place.parquet_rows("n")) == [1, 3]


def test_required_nested_fields_are_checked_in_batches_lists_and_maps() -> None:
    inner = pa.struct([pa.field("a", pa.int32(), nullable=False)])
    schema = pa.schema(
        [
            pa.field("x", inner),
            pa.field("l", pa.list_(pa.field("e", pa.int64(), nullable=False))),
            pa.field("m", pa.map_(pa.string(), pa.field("v", pa.int64(), nullable=False))),
        ]
    )
    rows = [
        {"x": {"a": 1}, "l": [1], "m": [("k", 1)]},
        {"x": {"a": None}, "l": [], "m": []},
        {"x": None, "l": [2, None], "m": None},
        {"x": None, "l": None, "m": [("k", None)]},
    ]
    loose = pa.schema([pa.field(f.name, _loose(f.type)) for f in schema])
    batch = pa.RecordBatch.from_pylist(rows, schema=loose)
    for piece in (rows, batch):
        table, bad = conform([piece], schema, "parquet")
        assert [b["error"] for b in bad] == [
            "required field x.a is null",
            "required field l.element is null",
            "required field m.value is null",
        ]
        assert table.to_pylist() == [rows[0]]
        pq.write_table(table, pa.BufferOutputStream())  # Parquet takes what is left
    # sliced batches, and a table of several chunks (each its own rows)
    chunked = pa.Table.from_batches([batch.slice(0, 2), batch.slice(3)])
    for piece, kept, errors in (
        (batch.slice(2), 0, ["l.element", "m.value"]),
        (chunked, 1, ["x.a", "m.value"]),
    ):
        table, bad = conform([piece], schema, "parquet")
        assert [b["error"] for b in bad] == [f"required field {e} is null" for e in errors]
        assert table.num_rows == kept


def _loose(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every nested field nullable (how a producer's batch comes)."""
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _loose(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_type, _loose(kind.item_type))
    if pa.types.is_list(kind):
        return pa.list_(_loose(kind.value_type))
    return kind
