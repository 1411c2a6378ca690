"""Stream codecs: a key goes to one partition whatever else its batch holds, and state keys
hash as their tuples do (repartitioning moves state by it)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from malhar import KeyCodec
from malhar.algo import FieldCodec

# a value of each type, and the Python value a state key of that column holds
TYPED = [
    (pa.int64(), 5),
    (pa.int32(), -5),
    (pa.int16(), 7),
    (pa.uint64(), 5),
    (pa.float32(), 1.5),
    (pa.float64(), -2.25),
    (pa.bool_(), True),
    (pa.string(), "ann"),
    (pa.large_string(), "ann"),
    (pa.binary(), b"\x00k"),
    (pa.timestamp("ms"), dt.datetime(2026, 11, 27, 12, 0, 0, 123000)),
    (pa.timestamp("us", tz="UTC"), dt.datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=dt.UTC)),
    (pa.date32(), dt.date(2026, 11, 27)),
    (pa.decimal128(10, 2), decimal.Decimal("12.34")),
]


@pytest.mark.parametrize(("kind", "value"), TYPED, ids=[str(t) for t, _ in TYPED])
def test_a_key_hashes_the_same_in_a_batch_with_nulls_and_as_a_state_key(kind, value) -> None:
    # pandas made an int64 column with a null float64 (and a bool one object): the key 5
    # went to another partition in such a batch; and state keys were hashed as the types
    # Arrow infers (an int32 -5 as an int64), so repartitioning sent them away from their
    # tuples
    codec = KeyCodec("k")
    schema = pa.schema([("k", kind)])
    alone = codec.partition_batch(pa.record_batch([pa.array([value], kind)], schema=schema))[0]
    with_null = codec.partition_batch(
        pa.record_batch([pa.array([value, None], kind)], schema=schema)
    )[0]
    assert alone == with_null
    assert codec.hash_keys([value], schema)[0] == alone


def test_two_key_columns_hash_as_their_tuple_state_key() -> None:
    codec = KeyCodec("a", "b")
    schema = pa.schema([("a", pa.int32()), ("b", pa.string())])
    batch = pa.record_batch([pa.array([-1, None], pa.int32()), pa.array(["x", "y"])], schema=schema)
    assert codec.hash_keys([(-1, "x")], schema)[0] == codec.partition_batch(batch)[0]


def test_an_untyped_stream_hashes_state_keys_as_its_tuples() -> None:
    codec = KeyCodec("k")
    assert codec.hash_keys(["ann", 3], None).tolist() == [
        codec.partition({"k": "ann"}),
        codec.partition({"k": 3}),
    ]


def test_a_field_codec_places_state_keys_where_their_tuples_go() -> None:
    # FieldCodec (the catalogue's keyed operators) had no hash_keys: a dedup or a join could
    # not be repartitioned at all
    codec = FieldCodec("k")
    keys = ["ann", 3, 2.5, None, (1, "x")]
    rows = [{"k": k} for k in keys]
    assert codec.hash_keys(keys, None).tolist() == [codec.partition(r) for r in rows]
    batch = pa.record_batch({"k": pa.array(["ann", None, "bo"])})
    assert codec.hash_keys(["ann", None, "bo"], batch.schema).tolist() == (
        codec.partition_batch(batch).tolist()
    )


def test_a_batch_emitted_in_other_types_is_hashed_as_the_stream_types() -> None:
    # routing hashes a batch's keys as the stream's schema types, as repartitioning hashes
    # state keys; a column that does not cast, or columns in another order, do not fail it
    from malhar.engine.routing import _typed

    codec = KeyCodec("k")
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    emitted = pa.record_batch({"v": ["a"], "k": pa.array([-5], pa.int32())})
    assert codec.partition_batch(_typed(emitted, schema))[0] == codec.hash_keys([-5], schema)[0]
    odd = pa.record_batch({"k": pa.array(["x"]), "v": ["a"]})  # "x" is no int64
    assert _typed(odd, schema).equals(odd)


def test_a_tuple_without_the_key_codecs_field_is_named_with_the_codec() -> None:
    # was a bare KeyError: 'k', reported as the upstream operator's failure
    with pytest.raises(
        KeyError, match=r"KeyCodec\('k',\) cannot route \{'x': 1\}: it has no field 'k'"
    ):
        KeyCodec("k").partition({"x": 1})
    with pytest.raises(KeyError, match="str is not a record of named fields"):
        KeyCodec("k").partition("plain")


def test_a_one_column_key_whose_values_are_tuples_hashes_as_its_tuples() -> None:
    # its state went where the tuples do not: a window fired twice, split (review finding)
    codec = KeyCodec("pair")
    key = ("x", 1)
    assert codec.hash_keys([key], None).tolist() == [codec.partition({"pair": key})]
    two = KeyCodec("a", "b")
    assert two.hash_keys([("x", 1)], None).tolist() == [two.partition({"a": "x", "b": 1})]


@pytest.mark.parametrize(("kind", "value"), TYPED, ids=[str(t) for t, _ in TYPED])
def test_an_untyped_streams_batch_row_goes_where_the_same_dict_goes(kind, value) -> None:
    # an untyped stream may carry dicts and Arrow batches (a file input's batches through
    # WatermarkGenerator): batches were hashed by pandas and dicts by the repr of their key,
    # so a key's tuples reached two partitions, and a repartitioning (which places state as
    # the dicts hash) moved its state away from its batches' rows (walkthrough: two on-time
    # panes of one window, 25 and 39 instead of 64)
    codec = KeyCodec("k")
    batch = pa.record_batch({"k": pa.array([value, None, value], kind), "v": [1, 2, 3]})
    rows = batch.to_pylist()
    expected = [codec.partition(r) for r in rows]
    assert codec.partition_rows(batch).tolist() == expected
    # a state key is the row's value as Python sees it (a tz-aware timestamp's tzinfo is
    # Arrow's, whose repr is not datetime.UTC's)
    assert codec.hash_keys([rows[0]["k"], None], None).tolist() == expected[:2]


def test_an_untyped_streams_batch_with_two_key_columns_and_unencodable_ones() -> None:
    two = KeyCodec("a", "b")
    batch = pa.record_batch({"a": [1, 1, 2, None], "b": ["x", "y", "x", "x"]})
    assert two.partition_rows(batch).tolist() == [two.partition(r) for r in batch.to_pylist()]
    assert two.hash_keys([(1, "y")], None)[0] == two.partition_rows(batch)[1]
    nested = KeyCodec("l")  # a list column cannot be dictionary-encoded: row by row
    lists = pa.record_batch({"l": pa.array([[1, 2], None, [3]])})
    assert nested.partition_rows(lists).tolist() == [nested.partition(r) for r in lists.to_pylist()]
    empty = pa.record_batch({"k": pa.array([], pa.string())})
    assert KeyCodec("k").partition_rows(empty).tolist() == []
    field = FieldCodec("k")
    mixed = pa.record_batch({"k": ["ann", None]})
    assert field.partition_rows(mixed).tolist() == [field.partition(r) for r in mixed.to_pylist()]


def test_routing_an_untyped_route_sends_a_keys_dicts_and_rows_to_one_partition() -> None:
    from malhar.engine.routing import RouteBuffer

    class Route:
        arrow_schema = None
        codec = KeyCodec("user")

    buffer = RouteBuffer.__new__(RouteBuffer)
    buffer.route, buffer.fixed, buffer.n, buffer.table, buffer.mask = Route(), None, 3, None, 0
    buffer.tuples, buffer.batches, buffer.rows = {}, {}, {}
    buffer.tuples = {d: [] for d in range(3)}
    buffer.batches = {d: [] for d in range(3)}
    buffer._count = lambda d, n: None
    users = [f"u{i}" for i in range(12)]
    for user in users:
        buffer.tuple({"user": user, "n": 1})
    buffer.batch(pa.record_batch({"user": users, "n": [2] * len(users)}))
    where: dict[str, set[int]] = {}
    for d in range(3):
        for row in buffer.tuples[d]:
            where.setdefault(row["user"], set()).add(d)
        for batch in buffer.batches[d]:
            for row in batch.to_pylist():
                where.setdefault(row["user"], set()).add(d)
    assert all(len(parts) == 1 for parts in where.values()), where
    assert len({d for parts in where.values() for d in parts}) > 1  # spread, not all on one


def test_an_untyped_streams_dictionary_column_routes_as_its_values() -> None:
    # dictionary_encode returns a dictionary column as it is: its null indices became
    # INT64_MIN and failed the routing (review)
    codec = KeyCodec("k")
    column = pa.array(["a", None, "b", "a"]).dictionary_encode()
    repeated = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0]), pa.array(["x", "x"]))
    for values in (column, repeated, column.slice(1)):
        batch = pa.record_batch({"k": values})
        assert codec.partition_rows(batch).tolist() == [
            codec.partition(r) for r in batch.to_pylist()
        ]
    two = KeyCodec("k", "n")
    batch = pa.record_batch({"k": column, "n": [1, 1, 2, None]})
    assert two.partition_rows(batch).tolist() == [two.partition(r) for r in batch.to_pylist()]
