"""The reasons of the file input's error rows for values that do not fit the schema: in the
schema's terms (column or field, its DDL type, the value), without pyarrow's row numbers
(counted within a parsed chunk, not the file: the row's offset says where); and a CSV row
that is neither UTF-8 nor of the right field count reported without pyarrow printing an
ignored exception. Local files, driven window by window with the operator harness."""

from __future__ import annotations

import re
import sys
from typing import Any

from malhar.io.fs import CsvFileInput, JsonLinesFileInput
from malhar.io.fs.decoders import CsvDecoder, JsonLinesDecoder
from malhar.io.fs.settings import parse_schema
from tests.io.fs_support import drain, harness

#: what pyarrow's messages number rows with (within the chunk it parsed)
CHUNK_ROW = re.compile(r"\brow\b|Row #", re.IGNORECASE)


def _errors(op: Any, tmp_path: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    h = harness(op, str(tmp_path / "ck"))
    drain(h)
    return h.sink("output").tuples, h.sink("error").tuples


def test_a_csv_value_that_does_not_convert_names_its_column_type_and_value(tmp_path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    text = (
        "sku,qty,day,at,price\n"
        "a,1,2026-11-23,2026-11-23 10:00:00,1.50\n"
        "b,abc,2026-11-23,2026-11-23 10:00:00,1.50\n"  # not a number
        "c,3,2026-11-23,2026-11-23 10:00:00,1.50\n"
        "d,99999999999999999999,2026-11-23,2026-11-23 10:00:00,1.50\n"  # past bigint
        "e,5,nope,2026-11-23 10:00:00,1.50\n"
        "f,6,2026-11-23,later,1.50\n"  # a zoned timestamp: a cast that names no column
        'g,7,2026-11-23,2026-11-23T10:00:00Z,"1,5"\n'
        "h,8,2026-11-23,2026-11-23T10:00:00Z,2.50\n"
    )
    (folder / "a.csv").write_text(text)
    ddl = "sku string, qty bigint, day date, at timestamp, price decimal(10,2)"
    rows, errors = _errors(CsvFileInput(str(folder), schema=ddl, scan_interval_ms=0), tmp_path)
    assert [r["sku"] for r in rows] == ["a", "c", "h"]
    assert [(e["offset"], e["error"]) for e in errors] == [
        (text.index("b,abc"), "column 'qty' (bigint): cannot convert 'abc'"),
        (text.index("d,9"), "column 'qty' (bigint): cannot convert '99999999999999999999'"),
        (text.index("e,5"), "column 'day' (date): cannot convert 'nope'"),
        (text.index("f,6"), "column 'at' (timestamp): cannot convert 'later'"),
        (text.index("g,7"), "column 'price' (decimal(10,2)): cannot convert '1,5'"),
    ]
    assert not any(CHUNK_ROW.search(e["error"]) for e in errors)


def test_a_csv_reason_is_the_same_wherever_the_chunk_starts() -> None:
    # pyarrow said "Row #1" of the failing sub-chunk; the reason now depends on the line only
    decoder = CsvDecoder(parse_schema("k string, n int"))
    good = b"".join(b"k%d,%d\n" % (i, i) for i in range(50))
    for data in (b"x,1.5\n", good + b"x,1.5\n" + good, good + good + b"x,1.5\n"):
        got = decoder.decode(data, 1000, "f")
        assert [(e["offset"], e["error"]) for e in got.errors] == [
            (1000 + data.index(b"x,1.5"), "column 'n' (int): cannot convert '1.5'")
        ]
        assert got.items == data.count(b"\n")


def test_a_json_value_of_another_kind_names_the_field_expected_and_found(tmp_path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [
        '{"ts": "a", "n": 1}',
        '{"ts": 5, "n": 2}',
        '{"ts": "b", "n": "x"}',
        '{"ts": "c", "n": 1.5}',
        '{"ts": "d", "day": "nope"}',
        '{"ts": "e", "s": {"a": "x"}}',
        '{"ts": "f", "s": {"b": ["x"]}}',
        "[1, 2]",
        "not json",
        '{"ts": "g", "n": 3}',
    ]
    text = "".join(f"{x}\n" for x in lines)
    (folder / "a.jsonl").write_text(text)
    ddl = "ts string, n bigint, day date, s struct<a: int, b: array<int>>"
    rows, errors = _errors(
        JsonLinesFileInput(str(folder), schema=ddl, scan_interval_ms=0), tmp_path
    )
    assert [r["ts"] for r in rows] == ["a", "g"]
    assert [(e["offset"], e["error"]) for e in errors] == [
        (text.index(lines[1]), "field 'ts' (string): expected a string, found a number (5)"),
        (text.index(lines[2]), "field 'n' (bigint): expected a number, found a string (\"x\")"),
        (text.index(lines[3]), "field 'n' (bigint): cannot convert 1.5"),
        (text.index(lines[4]), "field 'day' (date): cannot convert \"nope\""),
        (text.index(lines[5]), "field 's.a' (int): expected a number, found a string (\"x\")"),
        (text.index(lines[6]), "field 's.b[]' (int): expected a number, found a string"),
        (text.index(lines[7]), "not a JSON object but an array"),
        (text.index(lines[8]), "JSON parse error: a line does not start with an object ({)"),
    ]
    assert not any(CHUNK_ROW.search(e["error"]) for e in errors)


def test_a_json_reason_is_the_same_wherever_the_chunk_starts() -> None:
    decoder = JsonLinesDecoder(parse_schema("ts string, n bigint"))
    good = b"".join(b'{"ts": "t", "n": %d}\n' % i for i in range(50))
    bad = b'{"ts": 7, "n": 1}\n'
    for data in (bad, good + bad + good, good + good + bad):
        got = decoder.decode(data, 0, "f")
        assert [(e["offset"], e["error"]) for e in got.errors] == [
            (data.index(bad), "field 'ts' (string): expected a string, found a number (7)")
        ]


def test_a_csv_row_neither_utf8_nor_of_the_right_width_is_reported_silently(
    tmp_path, monkeypatch, capfd
) -> None:
    # pyarrow decodes an invalid row's text before calling the handler: bytes that are not
    # UTF-8 raised there, were printed as "Exception ignored in: ..." and failed the read
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    folder = tmp_path / "in"
    folder.mkdir()
    data = b"a,b\n1,x\n2,\xff,extra\n3,y\n4\n"
    (folder / "a.csv").write_bytes(data)
    for i, schema in enumerate(("a bigint, b string", None)):
        rows, errors = _errors(CsvFileInput(str(folder), schema=schema), tmp_path / str(i))
        assert [str(r["a"]) for r in rows] == ["1", "3"]
        assert [(e["offset"], e["error"]) for e in errors] == [
            (8, "not valid utf-8 at byte 10: invalid start byte"),
            (data.index(b"4\n"), "1 field(s) where 2 are expected"),
        ]
    assert unraisable == []
    assert "Exception ignored" not in capfd.readouterr().err


def test_json_timestamps_as_spark_reads_them(tmp_path) -> None:
    """An empty string is no timestamp (an error row, as Spark's JSON reader, not a null
    the windowed operator later calls "a null timestamp"); digits past microseconds are
    truncated, as Spark does; a missing field is null. CSV keeps "" as null (nullValue)."""
    folder = tmp_path / "in"
    folder.mkdir()
    text = (
        '{"u":"a","ts":"2026-11-29T10:00:05.123456789Z"}\n'
        '{"u":"b","ts":""}\n'
        '{"u":"c","ts":"2026-11-29T10:00:05.1234567"}\n'
        '{"u":"d"}\n'
        '{"u":"e","ts":"1969-12-31T23:59:59.9999999Z"}\n'  # cut toward earlier, as Spark
    )
    (folder / "a.jsonl").write_text(text)
    op = JsonLinesFileInput(str(folder), schema="u string, ts timestamp", scan_interval_ms=0)
    rows, errors = _errors(op, tmp_path)
    shown = [(r["u"], r["ts"] and r["ts"].isoformat()) for r in rows]
    assert shown == [
        ("a", "2026-11-29T10:00:05.123456+00:00"),
        ("c", "2026-11-29T10:00:05.123456+00:00"),
        ("d", None),
        ("e", "1969-12-31T23:59:59.999999+00:00"),
    ]
    assert [(e["offset"], e["error"]) for e in errors] == [
        (text.index('{"u":"b"'), "field 'ts' (timestamp): cannot convert \"\""),
    ]
    csv = tmp_path / "csv"
    csv.mkdir()
    (csv / "a.csv").write_text("u,ts\ne,\nf,2026-11-29T10:00:05.123456789Z\n")
    op = CsvFileInput(str(csv), schema="u string, ts timestamp", scan_interval_ms=0)
    rows, errors = _errors(op, tmp_path / "c")
    assert [(r["u"], r["ts"] and r["ts"].isoformat()) for r in rows] == [
        ("e", None),
        ("f", "2026-11-29T10:00:05.123456+00:00"),
    ]
    assert errors == []
