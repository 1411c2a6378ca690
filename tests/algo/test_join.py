"""Joins on managed state: stream-stream within windows and event time, stream-table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.algo import LookupJoin, StreamJoin
from malhar.errors import ConfigError
from malhar.testing.harness import OperatorHarness


def _harness(op, tmp_path: Path) -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="join", checkpoint=str(tmp_path)))


def test_stream_join_types_expiry_and_unmatched_rows(tmp_path: Path) -> None:
    got = {}
    for how in ("inner", "left", "right", "outer"):
        h = _harness(StreamJoin("id", join_type=how, expiry_windows=2), tmp_path / how)
        h.run_window([("left", {"id": 1, "a": "x"}), ("left", {"id": 2, "a": "y"})])
        h.run_window([("right", {"id": 1, "b": "p"}), ("right", {"id": 3, "b": "q"})])
        h.run_window([("right", {"id": 2, "b": "late"})])  # id 2 left the join: expired
        h.run_window([])
        h.run_window([])
        got[how] = h.sink("output").tuples
        h.teardown()
    pair = {"id": 1, "a": "x", "b": "p"}
    assert got["inner"] == [pair]
    assert got["left"] == [pair, {"id": 2, "a": "y"}]
    assert sorted(got["right"], key=lambda r: r["b"]) == [
        {"id": 2, "b": "late"},
        pair,
        {"id": 3, "b": "q"},
    ]
    assert len(got["outer"]) == 4 and pair in got["outer"]


def test_stream_join_within_event_time_and_bad_tuples(tmp_path: Path) -> None:
    h = _harness(
        StreamJoin("k", expiry_windows=5, within=100, left_time="t", right_time="t"), tmp_path
    )
    h.run_window([("left", {"k": "a", "t": 1_000}), ("left", {"k": "a", "t": 5_000})])
    h.run_window(
        [
            ("right", {"k": "a", "t": 1_050, "n": 1}),  # 50 ms from the first left tuple only
            ("right", {"k": "a"}),
            ("right", {"k": ["x"], "t": 1}),
            ("left", "text"),
        ]
    )
    assert h.sink("output").tuples == [{"k": "a", "t": 1_000, "right_t": 1_050, "n": 1}]
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "no field 't'",
        "the key ['x'] cannot be stored: use a string, a number (an integer within 64 bits) or a tuple of them",
        "expected a dict tuple, got str",
    ]
    h.teardown()
    with pytest.raises(ConfigError, match="within needs left_time and right_time"):
        _harness(StreamJoin("k", within=5), tmp_path / "bad").setup()


def test_lookup_join_sees_the_table_as_of_the_previous_window(tmp_path: Path) -> None:
    h = _harness(LookupJoin("sku", right_key="id", join_type="left"), tmp_path)
    h.run_window([("table", {"id": 7, "name": "tea"}), ("stream", {"sku": 7, "qty": 1})])
    h.run_window([("stream", {"sku": 7, "qty": 2}), ("table", {"id": 7, "name": "green tea"})])
    h.run_window([("stream", {"sku": 7, "qty": 3}), ("stream", {"qty": 4})])
    assert h.sink("output").tuples == [
        {"sku": 7, "qty": 1},  # the table row arrives with it: in force at the window's end
        {"sku": 7, "qty": 2, "id": 7, "name": "tea"},
        {"sku": 7, "qty": 3, "id": 7, "name": "green tea"},
    ]
    assert [e["reason"] for e in h.sink("error").tuples] == ["no field 'sku'"]
    h.teardown()


@pytest.mark.parametrize("how", ["inner", "left"])
def test_lookup_join_batches_equal_tuples(tmp_path: Path, how: str) -> None:
    schema = "k bigint, v bigint, name string, right_v double"
    table = [{"k": k, "name": f"n{k}", "v": k / 2} for k in range(0, 6, 2)]
    stream = [{"k": k % 7 if k % 5 else None, "v": k} for k in range(30)]
    outputs, emitted = [], []
    for as_batch in (False, True):
        h = _harness(LookupJoin("k", join_type=how, schema=schema), tmp_path / f"{as_batch}")
        h.run_window([("table", t) for t in table])
        feed = [pa.RecordBatch.from_pylist(stream)] if as_batch else stream
        seen: list[pa.RecordBatch] = []
        h.sink("output").batch = seen.append
        h.run_window([("stream", t) for t in feed])
        outputs.append([r for b in seen for r in b.to_pylist()])
        emitted.append(len(seen))
        h.teardown()
    assert outputs[1] == outputs[0]
    assert emitted[1] == 1  # the batch was joined at once (Arrow), not row by row
    assert {r["name"] for r in outputs[0]} - {None} == {"n0", "n2", "n4"}
    assert all(r["right_v"] == r["k"] / 2 for r in outputs[0] if r["name"] is not None)
    assert len(outputs[0]) == (
        30 if how == "left" else sum(1 for t in stream if t["k"] in (0, 2, 4))
    )


def test_an_integer_key_beyond_64_bits_goes_to_the_error_port(tmp_path: Path) -> None:
    # the state's key codec holds 64-bit integers: StreamJoin failed in process and
    # LookupJoin at the end of the window, on every replay
    big = {"k": 2**64, "a": 1}
    for n, (op, port) in enumerate(
        [(StreamJoin("k"), "left"), (LookupJoin("k"), "table"), (LookupJoin("k"), "stream")]
    ):
        h = _harness(op, tmp_path / str(n))
        h.run_window([(port, big)])
        (error,) = h.sink("error").tuples
        assert "cannot be" in error["reason"] and "an integer within 64 bits" in error["reason"]
        h.teardown()


# -- null keys: SQL semantics (a None key matches nothing), null_keys_match opts out ---------
NULL_TABLE = [{"id": None, "name": "NULLROW"}, {"id": 1, "name": "one"}]
NULL_STREAM = [{"sku": None, "n": 1}, {"sku": 1, "n": 2}, {"sku": None, "n": 3}]


@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize("how", ["inner", "left"])
def test_lookup_join_null_keys_match_nothing(tmp_path: Path, how: str, as_batch: bool) -> None:
    schema = "sku bigint, n bigint, id bigint, name string"
    h = _harness(LookupJoin("sku", right_key="id", join_type=how, schema=schema), tmp_path)
    h.run_window([("table", pa.RecordBatch.from_pylist(NULL_TABLE) if as_batch else NULL_TABLE[0])])
    if not as_batch:
        h.run_window([("table", NULL_TABLE[1])])
    h.run_window(
        [("stream", pa.RecordBatch.from_pylist(NULL_STREAM))]
        if as_batch
        else [("stream", t) for t in NULL_STREAM]
    )
    got = [{k: v for k, v in r.items() if v is not None} for r in h.sink("output").tuples]
    one = {"sku": 1, "n": 2, "id": 1, "name": "one"}
    # a None key is a stream tuple without a row: dropped (inner), alone (left)
    assert got == ([one] if how == "inner" else [{"n": 1}, one, {"n": 3}])
    assert h.sink("error").tuples == []
    assert h.operator._table.get(None) is None  # the None row was not even stored
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_lookup_join_null_keys_match_when_asked(tmp_path: Path, as_batch: bool) -> None:
    h = _harness(LookupJoin("sku", right_key="id", null_keys_match=True), tmp_path)
    h.run_window([("table", NULL_TABLE[0])])
    feed = [pa.RecordBatch.from_pylist(NULL_STREAM[:1])] if as_batch else NULL_STREAM[:1]
    h.run_window([("stream", t) for t in feed])
    assert h.sink("output").tuples == [{"sku": None, "n": 1, "id": None, "name": "NULLROW"}]
    h.teardown()


def test_lookup_join_a_key_tuple_with_a_none_matches_nothing(tmp_path: Path) -> None:
    h = _harness(LookupJoin("k", join_type="left"), tmp_path)
    h.run_window([("table", {"k": (1, None), "name": "half"})])
    h.run_window([("stream", {"k": (1, None), "n": 1})])
    assert h.sink("output").tuples == [{"k": (1, None), "n": 1}]
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_stream_join_null_keys_match_nothing(tmp_path: Path, as_batch: bool) -> None:
    left = [{"k": None, "a": 1}, {"k": 1, "a": 2}]
    right = [{"k": None, "b": 3}, {"k": 1, "b": 4}, {"k": None, "b": 5}]
    got = {}
    for how in ("inner", "left", "right", "outer"):
        h = _harness(StreamJoin("k", join_type=how, expiry_windows=2), tmp_path / how)
        if as_batch:
            h.run_window([("left", pa.RecordBatch.from_pylist(left))])
            h.run_window([("right", pa.RecordBatch.from_pylist(right))])
        else:
            h.run_window([("left", t) for t in left])
            h.run_window([("right", t) for t in right])
        for _ in range(3):
            h.run_window([])
        got[how] = h.sink("output").tuples
        h.teardown()
    pair = {"k": 1, "a": 2, "b": 4}
    alone_left = [{"k": None, "a": 1}]
    alone_right = [{"k": None, "b": 3}, {"k": None, "b": 5}]
    # emitted alone exactly once, when they expire, as any unmatched tuple of an outer side
    assert got["inner"] == [pair]
    assert got["left"] == [pair, *alone_left]
    assert got["right"] == [pair, *alone_right]
    assert got["outer"] == [pair, *alone_left, *alone_right]


def test_stream_join_null_keys_match_when_asked(tmp_path: Path) -> None:
    h = _harness(StreamJoin("k", null_keys_match=True), tmp_path)
    h.run_window([("left", {"k": None, "a": 1}), ("right", {"k": None, "b": 2})])
    assert h.sink("output").tuples == [{"k": None, "a": 1, "b": 2}]
    h.teardown()


def test_stream_join_null_keys_of_an_inner_side_are_not_stored(tmp_path: Path) -> None:
    h = _harness(StreamJoin("k", join_type="left", expiry_windows=3), tmp_path)
    h.run_window([("left", {"k": None, "a": 1}), ("right", {"k": None, "b": 2})])
    left, right = h.operator._sides
    assert left.get(None, 0) == [[{"k": None, "a": 1}, False, None]]  # emitted at expiry
    assert not right.get(None, 0)  # an inner side's null key: kept nowhere
    h.teardown()


# -- typed output: every declared field, whatever fields the first row of a batch has ---------
@pytest.mark.parametrize("as_batch", [False, True])
def test_stream_join_typed_outer_rows_keep_every_declared_field(
    tmp_path: Path, as_batch: bool
) -> None:
    # the unmatched left and right tuples expiring in one window were one batch built from
    # the first row's fields: the right-only row lost its own ('b': None)
    schema = "k long, a string, b string"
    h = _harness(StreamJoin("k", join_type="outer", expiry_windows=1, schema=schema), tmp_path)
    left, right = [{"k": 1, "a": "L"}], [{"k": 2, "b": "R", "undeclared": 0}]
    if as_batch:
        h.run_window(
            [
                ("left", pa.RecordBatch.from_pylist(left)),
                ("right", pa.RecordBatch.from_pylist(right)),
            ]
        )
    else:
        h.run_window([("left", left[0]), ("right", right[0])])
    assert h.sink("output").tuples == [
        {"k": 1, "a": "L", "b": None},
        {"k": 2, "a": None, "b": "R"},  # an undeclared field is left out, as before
    ]
    h.teardown()


def test_lookup_join_typed_row_path_keeps_the_fields_of_later_rows(tmp_path: Path) -> None:
    # a stream batch the Arrow join cannot take (table rows of different fields) is joined
    # row by row and was emitted as a batch of the first row's fields: when that row was a
    # miss, every hit lost its table fields
    schema = "k long, n long, name string, extra long"
    rows = [{"k": 9, "n": 0}, {"k": 1, "n": 1}, {"k": 2, "n": 2}]
    out = []
    for as_batch in (True, False):
        h = _harness(LookupJoin("k", join_type="left", schema=schema), tmp_path / f"{as_batch}")
        h.run_window(
            [("table", {"k": 1, "name": "tea"}), ("table", {"k": 2, "name": "jam", "extra": 7})]
        )
        feed = [pa.RecordBatch.from_pylist(rows)] if as_batch else rows
        h.run_window([("stream", t) for t in feed])
        out.append(h.sink("output").tuples)
        assert h.operator.metrics()["misses"] == 1
        h.teardown()
    assert (
        out[0]
        == out[1]
        == [
            {"k": 9, "n": 0, "name": None, "extra": None},
            {"k": 1, "n": 1, "name": "tea", "extra": None},
            {"k": 2, "n": 2, "name": "jam", "extra": 7},
        ]
    )
