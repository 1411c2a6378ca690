"""Edge cases of the dedup and join operators found in review: keys the state cannot store
in a batch, uint64 times, typed keys in one window, key subclasses, field clashes and lone
surrogates."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import tempfile
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.algo import BoundedDedup, FieldCodec, LookupJoin, StreamJoin, TimeBasedDedup
from malhar.algo._base import key_bytes, stable_hash
from malhar.testing.harness import OperatorHarness, deliveries


def harness(op: Any) -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="x", checkpoint=tempfile.mkdtemp()))


def outputs(make: Any, rows: list[dict], schema: pa.Schema | None = None) -> list[dict]:
    """The sinks' tuples for the rows delivered one at a time, as one batch, as two."""
    out = []
    for inputs in deliveries("input", rows, schema):
        h = harness(make())
        h.run_window(inputs)
        out.append({p: s.tuples for p, s in h.sinks.items()})
        h.teardown()
    return out


# -- finding 1: a key the state cannot store costs its row, in a batch too -----------------------
UNSTORABLE = [
    pytest.param(
        [{"id": decimal.Decimal("1.5"), "t": 5}, {"id": decimal.Decimal("2.5"), "t": 5}],
        None,
        id="decimal",
    ),
    pytest.param(
        [{"id": dt.date(2020, 1, 1), "t": 5}, {"id": dt.date(2020, 1, 2), "t": 5}], None, id="date"
    ),
    pytest.param(
        [{"id": 2**64 - 1, "t": 5}, {"id": 1, "t": 5}, {"id": 1, "t": 5}],
        pa.schema([("id", pa.uint64()), ("t", pa.int64())]),
        id="uint64",
    ),
]


@pytest.mark.parametrize("rows, schema", UNSTORABLE)
@pytest.mark.parametrize("kind", ["time", "bounded"])
def test_an_unstorable_key_in_a_batch_goes_to_error_alone(kind, rows, schema) -> None:
    def make() -> Any:
        return TimeBasedDedup(key="id", time="t") if kind == "time" else BoundedDedup(key="id")

    one, batch, two = outputs(make, rows, schema)
    assert batch == one and two == one, "a batch decides as its rows one at a time"
    bad = [r for r in rows if type(r["id"]) is not int or r["id"] >= 2**63]
    assert [e["tuple"] for e in one["error"]] == bad
    assert all("cannot be stored" in e["reason"] for e in one["error"])
    good = [r for r in rows if r not in bad]
    assert one["unique"] + one["duplicate"] == good


# -- finding 2: a uint64 time past 2**63 - 1 ------------------------------------------------------
def test_a_uint64_time_past_int64_goes_to_error_alone() -> None:
    rows = [{"k": 1, "t": 2**64 - 1}, {"k": 2, "t": 5}, {"k": 2, "t": 5}]
    schema = pa.schema([("k", pa.int64()), ("t", pa.uint64())])
    one, batch, two = outputs(lambda: TimeBasedDedup(key="k", time="t"), rows, schema)
    assert batch == one and two == one
    assert [e["tuple"] for e in one["error"]] == rows[:1]
    assert one["unique"] == rows[1:2] and one["duplicate"] == rows[2:]


# -- finding 3: table updates of one window keep 1, 1.0 and True apart ---------------------------
@pytest.mark.parametrize(
    "keys", [pytest.param([1, 1.0, True], id="1-1.0-True"), pytest.param([0.0, -0.0], id="zeros")]
)
def test_lookup_updates_in_one_window_are_keyed_as_the_table_keys_them(keys) -> None:
    def joined(windows: list[list]) -> list[dict]:
        h = harness(LookupJoin("k", join_type="left"))
        for w in windows:
            h.run_window(w)
        h.run_window([("stream", {"k": k}) for k in keys])
        out = h.sink("output").tuples
        h.teardown()
        return out

    updates = [("table", {"k": k, "v": repr(k)}) for k in keys]
    apart = joined([[u] for u in updates])
    assert [r["v"] for r in apart] == [repr(k) for k in keys]
    assert joined([updates]) == apart, "one window or one window each: the same table"


def test_lookup_updates_of_a_key_in_one_window_the_last_wins() -> None:
    h = harness(LookupJoin("k"))
    h.run_window([("table", {"k": "a", "v": 1}), ("table", {"k": "a", "v": 2})])
    h.run_window([("stream", {"k": "a"})])
    assert h.sink("output").tuples == [{"k": "a", "v": 2}]
    h.teardown()


def test_lookup_updates_of_an_older_checkpoint_still_apply() -> None:
    # checkpointed inside a window before the updates were keyed by bytes: key -> row
    h = harness(LookupJoin("k"))
    h.run_window([])
    h.operator.updates = {"a": {"k": "a", "v": 1}}
    h.run_window([])
    h.run_window([("stream", {"k": "a"})])
    assert h.sink("output").tuples == [{"k": "a", "v": 1}]
    h.teardown()


# -- finding 4: subclasses of storable types (the codec checks exact types) ----------------------
class Color(enum.IntEnum):
    RED = 1


SUBCLASS_KEYS = [
    pytest.param(np.float64(1.5), id="numpy-float64"),
    pytest.param(np.str_("a"), id="numpy-str"),
    pytest.param(Color.RED, id="intenum"),
    pytest.param(("a", np.int64(1)), id="tuple-of-numpy-int"),
]


@pytest.mark.parametrize("key", SUBCLASS_KEYS)
def test_stream_join_sends_a_subclass_key_to_error(key) -> None:
    h = harness(StreamJoin("k"))
    h.run_window([("left", {"k": key}), ("right", {"k": "b"}), ("left", {"k": "b"})])
    assert [e["tuple"] for e in h.sink("error").tuples] == [{"k": key}]
    assert "cannot be stored" in h.sink("error").tuples[0]["reason"]
    assert h.sink("output").tuples == [{"k": "b"}]
    h.teardown()


@pytest.mark.parametrize("key", SUBCLASS_KEYS)
def test_lookup_join_sends_a_subclass_key_to_error(key) -> None:
    h = harness(LookupJoin("k", join_type="left"))
    h.run_window([("table", {"k": key, "v": 1}), ("table", {"k": "a", "v": 2})])  # no poison
    h.run_window([("stream", {"k": key}), ("stream", {"k": "a"})])
    errors = h.sink("error").tuples
    assert [e["tuple"] for e in errors] == [{"k": key, "v": 1}, {"k": key}]
    assert h.sink("output").tuples == [{"k": "a", "v": 2}]
    if type(key) is not tuple:
        assert f"a {type(key).__name__} is not" in errors[0]["reason"]
    h.teardown()


# -- finding 8: a left field named right_<f> and a right field f ---------------------------------
LEFT = {"k": 1, "x": "L", "right_x": "left's own"}


def test_stream_join_refuses_a_clashing_pair() -> None:
    h = harness(StreamJoin("k", join_type="outer"))
    h.run_window([("left", LEFT), ("right", {"k": 1, "x": "R"}), ("right", {"k": 1, "y": 2})])
    h.run_window([])
    assert h.sink("output").tuples == [LEFT | {"y": 2}], "the pair without a clash joins"
    [error] = h.sink("error").tuples
    assert error["tuple"] == {"k": 1, "x": "R"}
    assert "the joined field 'right_x' clashes" in error["reason"]
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_lookup_join_refuses_a_clash_row_by_row_as_in_a_batch(as_batch) -> None:
    h = harness(LookupJoin("k", join_type="left", schema="k bigint, x string, right_x string"))
    h.run_window([("table", {"k": 1, "x": "R"})])
    rows = [LEFT, {"k": 2, "x": "L2", "right_x": None}]
    h.run_window(
        [("stream", pa.RecordBatch.from_pylist(rows))]
        if as_batch
        else [("stream", r) for r in rows]
    )
    assert [e["tuple"] for e in h.sink("error").tuples] == [LEFT]
    assert "the joined field 'right_x' clashes" in h.sink("error").tuples[0]["reason"]
    assert h.sink("output").tuples == rows[1:]
    h.teardown()


# -- finding 9: lone surrogates in partition keys ------------------------------------------------
def test_a_lone_surrogate_key_partitions() -> None:
    codec = FieldCodec("k")
    assert codec.partition({"k": "\ud800"}) == zlib.crc32(b"s\xed\xa0\x80")
    assert codec.partition({"k": ("\ud800", 1)}) == zlib.crc32(b"t(s\xed\xa0\x80,n1)")
    h = harness(StreamJoin("k"))
    h.run_window([("left", {"k": "\ud800"}), ("right", {"k": "\ud800", "v": 1})])
    assert h.sink("output").tuples == [{"k": "\ud800", "v": 1}]
    h.teardown()


def test_ordinary_keys_keep_their_bytes() -> None:
    # partition hashes must not move: these are the bytes of strict UTF-8
    assert key_bytes("ann") == b"sann"
    assert key_bytes("é€😀") == b"s" + "é€😀".encode()
    assert key_bytes(("a,b", "é", 1.5, b"x)")) == b"t(sa\\,b,s\xc3\xa9,f1.5,bx\\))"
    assert key_bytes({"n": "ü"}) == b"d{t(sn,s\xc3\xbc)}"
    assert stable_hash("ann") == zlib.crc32(b"sann")
    assert stable_hash(("x", 1)) == zlib.crc32(b"t(sx,n1)")
