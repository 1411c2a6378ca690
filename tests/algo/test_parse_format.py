"""Parsers and formatters: batch and tuple paths agree, every bad record reaches the error port."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from malhar import ConfigError
from malhar.algo import (
    CsvFormatter,
    CsvParser,
    FixedWidthParser,
    JsonFormatter,
    JsonParser,
    RegexParser,
)
from malhar.testing.harness import OperatorHarness, deliveries


def _both(make, records):
    one = OperatorHarness(make())
    one.run_window([("input", r) for r in records])
    many = OperatorHarness(make())
    many.run_window([("input", pa.RecordBatch.from_pydict({"line": records}))])
    assert one.sink("out").tuples == many.sink("out").tuples
    assert one.sink("error").tuples == many.sink("error").tuples
    return one


def test_csv_parser_types_quotes_and_bad_records() -> None:
    records = ['1,"a,b",2.5', "2,tea,", "x,jam,1", "3,oat", "4,rye,1,9", "5,egg,1e3"]
    h = _both(lambda: CsvParser(schema="id bigint, name string, price double"), records)
    assert h.sink("out").tuples == [
        {"id": 1, "name": "a,b", "price": 2.5},
        {"id": 2, "name": "tea", "price": None},
        {"id": 5, "name": "egg", "price": 1000.0},
    ]
    assert [e["tuple"] for e in h.sink("error").tuples] == ["x,jam,1", "3,oat", "4,rye,1,9"]
    assert all(e["reason"] for e in h.sink("error").tuples)
    assert h.operator.metrics() == {"errors": 3.0, "parsed": 3.0}
    assert (
        type(h.operator).out.schema.simpleString() == "struct<id:bigint,name:string,price:double>"
    )


def test_csv_parser_needs_a_schema_and_reads_bytes() -> None:
    with pytest.raises(ConfigError, match="needs a schema"):
        OperatorHarness(CsvParser()).setup()
    h = OperatorHarness(CsvParser(schema="a int, b boolean", delimiter="|"))
    h.run_window([("input", b"7|true"), ("input", b"\xff|x"), ("input", 12)])
    assert h.sink("out").tuples == [{"a": 7, "b": True}]
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "the record's bytes are not valid UTF-8",
        "expected text, got int",
    ]


def test_json_parser_typed_and_with_json_schema() -> None:
    records = ['{"id": 1, "t": "a", "extra": 1}', '{"id": "x"}', "[1]", "{", '{"t": "b"}']
    h = _both(lambda: JsonParser(schema="id bigint, t string"), records)
    assert h.sink("out").tuples == [{"id": 1, "t": "a"}, {"id": None, "t": "b"}]
    assert len(h.sink("error").tuples) == 3
    checked = OperatorHarness(JsonParser(json_schema={"type": "object", "required": ["id"]}))
    checked.run_window([("input", '{"id": 1}'), ("input", '{"t": 2}')])
    assert checked.sink("out").tuples == [{"id": 1}]
    assert (
        checked.sink("error").tuples[0]["reason"]
        == "JSON Schema: the record: 'id' is a required property"
    )


def test_json_parser_reads_timestamps_and_decimals_record_by_record_as_in_a_batch() -> None:
    # one bad record in a batch makes it parse record by record: the good ones went to error
    schema = "t timestamp, d decimal(10,2), n bigint"
    good = [
        '{"t":"2024-01-01T00:00:00","d":"1.25","n":1}',
        '{"t":"2024-01-02T00:00:00","d":"2.50","n":2}',
    ]
    per_tuple = OperatorHarness(JsonParser(schema=schema))
    per_tuple.run_window([("input", good[0]), ("input", "{oops"), ("input", good[1])])
    batched = OperatorHarness(JsonParser(schema=schema))
    batched.run_window(
        [("input", pa.RecordBatch.from_pylist([{"value": v} for v in [good[0], "{oops", good[1]]]))]
    )
    clean = OperatorHarness(JsonParser(schema=schema))
    clean.run_window([("input", pa.RecordBatch.from_pylist([{"value": v} for v in good]))])
    expected = clean.sink("out").tuples
    assert [r["n"] for r in expected] == [1, 2]
    assert per_tuple.sink("out").tuples == expected
    assert batched.sink("out").tuples == expected
    assert len(per_tuple.sink("error").tuples) == len(batched.sink("error").tuples) == 1


def test_fixed_width_and_regex() -> None:
    h = _both(
        lambda: FixedWidthParser(schema="code string, n int", widths=[4, 3]),
        ["AB   12", "CD  xx", "E", "GH   3499"],
    )
    assert h.sink("out").tuples == [{"code": "AB", "n": 12}]
    assert [e["reason"] for e in h.sink("error").tuples][1:] == [
        "a record is shorter than 7 characters",
        "a record is longer than 7 characters",
    ]
    r = _both(
        lambda: RegexParser(
            schema="host string, status int", pattern=r"^(?P<host>\S+) \w+ (?P<status>\d+)$"
        ),
        ["h1 GET 200", "nope", "h2 PUT 99999999999"],
    )
    assert r.sink("out").tuples == [{"host": "h1", "status": 200}]
    assert len(r.sink("error").tuples) == 2
    with pytest.raises(ConfigError, match="no group named 'status'"):
        OperatorHarness(RegexParser(schema="status int", pattern=r"(?P<code>\d+)")).setup()


def test_formatters_rows_and_batches_agree() -> None:
    rows = [{"id": 1, "name": 'say "hi"', "p": 1.5}, {"id": 2, "name": None, "p": None}]
    for fmt, expected in (
        (lambda: CsvFormatter(), ['1,"say ""hi""",1.5', "2,,"]),
        (lambda: JsonFormatter(fields=["id", "p"]), ['{"id":1,"p":1.5}', '{"id":2,"p":null}']),
    ):
        one = OperatorHarness(fmt())
        one.run_window([("input", r) for r in rows])
        many = OperatorHarness(fmt())
        many.run_window([("input", pa.RecordBatch.from_pylist(rows))])
        assert one.sink("out").tuples == many.sink("out").tuples == expected
    bad = OperatorHarness(JsonFormatter())
    bad.run_window([("input", {"b": b"\x00"}), ("input", "text"), ("input", {"n": float("nan")})])
    assert len(bad.sink("error").tuples) == 3 and bad.sink("out").tuples == []


def test_a_record_field_such_as_kafkas_value() -> None:
    rows = [{"topic": "t", "value": b'{"id": 1}'}, {"topic": "t", "value": b"{"}]
    _ = pa  # batches of Kafka records: the value column is parsed, not the first one
    for inputs in (rows, [pa.RecordBatch.from_pylist(rows)]):
        h = OperatorHarness(JsonParser(schema="id bigint", field="value"))
        h.run_window([("input", r) for r in inputs])
        assert h.sink("out").tuples == [{"id": 1}]
        assert h.sink("error").tuples[0]["tuple"] == {"topic": "t", "value": b"{"}


def test_a_tuple_without_the_records_field_says_which_fields_it_has() -> None:
    h = OperatorHarness(JsonParser(field="value"))
    h.run_window([("input", {"v": "{}"}), ("input", {"value": 3}), ("input", 5)])
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "no field 'value' (the record's text) in a tuple with fields ['v']",
        "field 'value': expected text, got int",
        "expected text, got int",
    ]


def test_an_empty_csv_record_goes_to_the_error_port() -> None:
    # pyarrow read an empty line as a row of empty fields: it came out as a row of nulls
    rows = [{"line": ""}, {"line": "1,tea,2.5"}]
    for inputs in deliveries("input", rows):
        h = OperatorHarness(CsvParser(schema="id bigint, name string, price double", field="line"))
        h.run_window(inputs)
        assert h.sink("out").tuples == [{"id": 1, "name": "tea", "price": 2.5}]
        assert [e["reason"] for e in h.sink("error").tuples] == [
            "an empty record (the schema has 3 fields)"
        ]


def test_a_batch_of_bytes_that_are_not_utf8_goes_to_the_error_port_as_its_tuples() -> None:
    # the cast of the binary column raised out of process_batch
    col = pa.array([b"ok", b"\xff\xfe"], pa.binary())
    for inputs in (
        [("input", b"ok"), ("input", b"\xff\xfe")],
        [("input", pa.RecordBatch.from_pydict({"value": col}))],
    ):
        h = OperatorHarness(CsvParser(schema="a string"))
        h.run_window(inputs)
        assert h.sink("out").tuples == [{"a": "ok"}]
        assert [(e["tuple"], e["reason"]) for e in h.sink("error").tuples] == [
            (b"\xff\xfe", "the record's bytes are not valid UTF-8")
        ]


def test_a_record_in_a_field_reaches_the_error_port_with_its_tuple_from_a_batch() -> None:
    rows = [{"key": "k1", "value": "1,a"}, {"key": "k2", "value": None}]
    for inputs in deliveries("input", rows):
        h = OperatorHarness(CsvParser(schema="n int, s string", field="value"))
        h.run_window(inputs)
        assert h.sink("out").tuples == [{"n": 1, "s": "a"}]
        assert [e["tuple"] for e in h.sink("error").tuples] == [rows[1]]


def test_json_decimals_keep_their_digits_per_tuple_as_in_a_batch() -> None:
    h = _both(
        lambda: JsonParser(schema="p decimal(20,2)"),
        ['{"p": 12345678901234567.89}', '{\n  "p": 1.5\n}'],
    )
    assert h.sink("out").tuples == [
        {"p": decimal.Decimal("12345678901234567.89")},
        {"p": decimal.Decimal("1.50")},
    ]


@pytest.mark.parametrize(
    "make,prop", [(CsvParser, "delimiter"), (CsvParser, "quote"), (CsvFormatter, "delimiter")]
)
@pytest.mark.parametrize("value", [";;", "", "\u00a7", "\n"])
def test_csv_delimiter_and_quote_are_one_ascii_character(make, prop, value) -> None:
    with pytest.raises(ConfigError, match=f"{make.__name__}.{prop}: expected one ASCII"):
        make(**{prop: value})


def test_csv_nulls_empty_strings_and_line_breaks_survive_a_round_trip() -> None:
    rows = [{"a": None, "b": 1}, {"a": "", "b": 2}, {"a": "x\ry", "b": 3}, {"a": "NA", "b": 4}]
    for inputs in deliveries("input", rows):
        f = OperatorHarness(CsvFormatter())
        f.run_window(inputs)
        assert [e["tuple"] for e in f.sink("error").tuples] == [rows[2]]
        p = OperatorHarness(CsvParser(schema="a string, b bigint"))
        p.run_window([("input", line) for line in f.sink("out").tuples])
        assert p.sink("out").tuples == [rows[0], rows[1], rows[3]]
        assert p.sink("error").tuples == []
