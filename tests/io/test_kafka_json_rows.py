"""The Kafka output's JSON value serializer writes each dict tuple as itself: its own fields
and value types, whatever the other rows of the window hold (one Arrow table per window is
only the fast path, used when it gives every row back as it is), and a row that cannot be
encoded goes to the error port with its reason.

The first tests need no broker (the operator's window rows through the record encoder); the
others write through the operator to the session's Kafka broker and read the topic back as
a ``read_committed`` consumer."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

from malhar import DAG, run
from malhar.io.base.output_operator import WindowBuffer
from malhar.io.kafka import KafkaOutputOperator
from malhar.io.kafka.encoding import EncodedRecords, RecordEncoder
from malhar.io.kafka.serializers import get_serializer
from malhar.testing.operators import ListInput
from tests.io.conftest import kafka_unique
from tests.io.test_kafka_output import harness, quick, read_topic


def records_of(tuples: list[Any], **props: Any) -> tuple[Any, EncodedRecords]:
    """The window's rows (as the operator gives them to its store) and their records."""
    op = KafkaOutputOperator("localhost:1", "t", **props)
    buffer = WindowBuffer()
    buffer.begin(0, False)
    for t in tuples:
        buffer.add(t)
    table, refused = op.window_rows(buffer)
    assert refused == []
    s = op.settings()
    key = get_serializer(s.key_serializer) if s.key_column else None
    return table, RecordEncoder(s, key, get_serializer(s.value_serializer), 3).encode(table)


def encode(tuples: list[Any], **props: Any) -> tuple[pa.Table, list[Any], dict[int, str]]:
    """The window's table, each row's value (JSON text, or None) and the rejected rows (by
    index of the rows that are not refused before the encoder)."""
    table, records = records_of(tuples, **props)
    values = [None if v is None else v.decode() for v in records.values]
    return table, values, records.rejected


def as_json(row: Any) -> str:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


# -- without a broker ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rows",
    [
        pytest.param([{"id": 1, "price": 10}, {"id": 2, "note": "gift"}], id="other-fields"),
        pytest.param([{"id": 1, "price": 10}, {"id": 3, "tags": {"a": 1}}], id="nested-dict"),
        pytest.param([{"id": 1, "price": 10}, {"id": 4, "big": 2**62}], id="new-field"),
        pytest.param([{"v": 2**70}, {"v": -(2**65)}], id="int-past-64-bits"),
        pytest.param([{"k": 1, "v": 1.5}, {"k": 2, "v": 1}], id="int-after-float"),
        pytest.param([{"v": 1}, {"v": "x"}, {"v": True}], id="number-str-bool"),
        pytest.param([{"t": {"a": 1}}, {"t": {"b": [1, 2.5]}}], id="nested-fields"),
        pytest.param([{"a": 1, "b": 2}, {"b": 2, "a": 1}], id="field-order"),
        pytest.param([{"d": Decimal("1.5")}, {"d": Decimal("2.25")}], id="decimal-scale"),
    ],
)
def test_each_row_is_its_own_json_whatever_the_window(rows: list[dict[str, Any]]) -> None:
    _, values, rejected = encode(rows)
    assert rejected == {}
    expected = [
        as_json({k: str(v) if isinstance(v, Decimal) else v for k, v in r.items()}) for r in rows
    ]
    assert values == expected


def test_a_str_tuple_is_the_field_value_not_a_row_of_nulls() -> None:
    _, values, rejected = encode([{"id": 1, "price": 10}, "plain text line"])
    assert (values, rejected) == (['{"id":1,"price":10}', '{"value":"plain text line"}'], {})


def test_a_nan_row_is_refused_and_changes_no_other_row() -> None:
    _, values, rejected = encode([{"k": 1, "v": math.nan}, {"k": None, "v": 1}])
    assert values == [None, '{"k":null,"v":1}']
    assert list(rejected) == [0] and "cannot encode as JSON" in rejected[0]


def test_rows_of_one_shape_keep_the_arrow_fast_path() -> None:
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    rows = [
        {"w": f"w{i}", "n": i, "f": i / 2, "ok": i % 2 == 0, "at": when, "x": None}
        for i in range(50)
    ]
    table, values, rejected = encode(rows, key_column="w")
    assert table.column_names == ["w", "n", "f", "ok", "at", "x"]
    assert rejected == {}
    assert values == [as_json({**r, "at": when.isoformat()}) for r in rows]


def test_a_wall_clock_time_in_a_dst_gap_keeps_its_own_text() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    rows = [{"at": dt.datetime(2026, 3, 29, h, 30, tzinfo=berlin)} for h in (1, 2, 4)]
    _, values, rejected = encode(rows)
    assert rejected == {}
    assert values == [as_json({"at": r["at"].isoformat()}) for r in rows]
    assert '"2026-03-29T02:30:00+01:00"' in values[1]


def test_a_row_lacking_the_key_column_is_refused_alone() -> None:
    _, values, rejected = encode([{"w": "a", "n": 1}, {"n": 2}, {"w": 3, "n": 4}], key_column="w")
    assert [values[0], values[2]] == ['{"w":"a","n":1}', '{"w":3,"n":4}']
    assert list(rejected) == [1] and "no key_column 'w'" in rejected[1]


def test_tuples_and_an_arrow_batch_of_other_fields_keep_their_own_fields() -> None:
    batch = pa.RecordBatch.from_pylist([{"a": 1}])
    _, values, rejected = encode([{"b": "x"}, batch, {"b": "y"}])
    assert (values, rejected) == (['{"b":"x"}', '{"a":1}', '{"b":"y"}'], {})


def keys_of(pieces: list[Any], **props: Any) -> list[bytes | None]:
    _, records = records_of(pieces, key_column="k", **props)
    assert records.rejected == {}
    return records.keys


def test_a_batch_next_to_tuples_keeps_its_declared_types_in_either_order() -> None:
    """A float32 key encodes as Arrow gives it (``1.1``), not as the Python float it would
    become in a row (``1.100000023841858``): a replay whose pieces arrive in another order
    writes the same keys, hence the same partitions."""
    batch = pa.RecordBatch.from_pydict(
        {"k": pa.array([1.1, 2.5], pa.float32()), "n": pa.array([1, 2], pa.int8())}
    )
    alone = keys_of([batch])
    assert alone == [b"1.1", b"2.5"]
    assert keys_of([{"k": "a"}, batch]) == [b"a", *alone]
    assert keys_of([batch, {"k": "a", "x": 1}]) == [*alone, b"a"]
    odd = [{"k": "x", "v": 1.5}, {"k": 1, "v": 1}]  # Arrow cannot hold it: each row as itself
    assert keys_of([*odd, batch, {"k": "b"}]) == [b"x", b"1", *alone, b"b"]


def test_mixed_pieces_keep_each_rows_value_and_reject_by_window_index() -> None:
    batch = pa.RecordBatch.from_pydict({"k": pa.array([0.5], pa.float32()), "v": [None]})
    table, values, rejected = encode([{"k": "a", "v": math.nan}, batch, {"k": "b"}], key_column="k")
    assert values == [None, '{"k":0.5,"v":null}', '{"k":"b"}']
    assert list(rejected) == [0] and "cannot encode as JSON" in rejected[0]


# -- through the operator, with a broker ---------------------------------------------------------
@pytest.mark.integration
def test_harness_writes_each_row_as_itself_and_refuses_what_json_cannot_hold(
    kafka_client: Any,
) -> None:
    topic = kafka_client.topic("jrows")
    h = harness(KafkaOutputOperator(kafka_client.bootstrap, topic, **quick()), kafka_unique("jr"))
    window0 = [
        {"id": 1, "price": 10},
        {"id": 2, "note": "gift"},
        "plain text line",
        {"id": 3, "tags": {"x": 1, "y": [1, 2]}},
        {"id": 4, "big": 2**62},
        {"v": 2**70},
    ]
    window1 = [
        {"k": 1, "v": math.nan},
        {"k": None, "v": 1},
        {"v": "text"},
        {"v": 2.5},
        {"v": b"\x00"},
    ]
    h.run_window([("input", t) for t in window0], 0)
    h.run_window([("input", t) for t in window1], 1)
    h.teardown()

    got = [(r.window, r.value.decode()) for r in read_topic(kafka_client.bootstrap, topic)]
    expected = [(0, as_json(r if isinstance(r, dict) else {"value": r})) for r in window0]
    expected += [(1, as_json(r)) for r in (window1[1], window1[2], window1[3])]
    assert got == expected
    errors = h.sink("error").tuples
    assert [e["k"] for e in errors if "k" in e] == [1]
    assert [e["v"] for e in errors if "k" not in e] == [b"\x00"]
    assert all(e["error"].startswith("value: cannot encode as JSON") for e in errors)


@pytest.mark.integration
def test_application_writes_mixed_rows_read_committed(
    kafka_client: Any, spark: Any, tmp_path: Path
) -> None:
    """The user's walkthrough: a window of rows with other fields and a text line."""
    topic = kafka_client.topic("km3")
    windows = [[{"id": 1, "price": 10}, {"id": 2, "note": "gift"}, "plain text line"]]
    dag = DAG(kafka_unique("km3"))
    src = dag.add_operator("src", ListInput(windows))
    out = dag.add_operator("out", KafkaOutputOperator(kafka_client.bootstrap, topic, **quick()))
    dag.add_stream("rows", src.output, out.input)
    result = run(dag, windows=1, spark=spark, checkpoint=str(tmp_path))

    records = read_topic(kafka_client.bootstrap, topic, committed=True)
    assert [r.json() for r in records] == [
        {"id": 1, "price": 10},
        {"id": 2, "note": "gift"},
        {"value": "plain text line"},
    ]
    assert {k: n for k, n in result.error_counts(0).items() if n} == {}


def test_a_users_column_named_like_the_hidden_one_is_written_as_a_column() -> None:
    batch = pa.RecordBatch.from_pydict({"__malhar_rows__": pa.array([b"x"], pa.binary())})
    _, values, rejected = encode([batch], value_serializer="bytes", value_column="__malhar_rows__")
    assert (values, rejected) == (["x"], {})
