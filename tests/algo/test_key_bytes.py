"""key_bytes: stable key identity (partition hashes, checkpoints, distinct sets)."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from malhar.algo import Distinct, MostFrequentKey, UniqueValueCount
from malhar.algo._base import key_bytes
from malhar.testing.harness import OperatorHarness, deliveries

D = decimal.Decimal


@pytest.mark.parametrize(
    "a,b",
    [
        (("x,n1",), ("x", 1)),
        (("a", ""), ("a,s",)),
        (("a)", "b"), ("a", ")b")),  # hypothetical: a closing parenthesis inside a string
        ((b"x,n1",), (b"x", 1)),
        (("a\\",), ("a\\,",)),
        ({"k": "v,sw"}, {"k": "v", "w": ""}),
    ],
)
def test_strings_inside_tuples_cannot_imitate_other_items(a, b) -> None:
    assert key_bytes(a) != key_bytes(b)


def test_keys_without_delimiters_keep_their_bytes() -> None:
    # checkpoints and partition hashes of existing keys depend on these
    assert key_bytes("a,b") == b"sa,b"  # a whole key is never escaped: nothing follows it
    assert key_bytes(("x", 1, 1.5)) == b"t(sx,n1,f1.5)"
    assert key_bytes(("a b", ("c", b"d"))) == b"t(sa b,t(sc,bd))"
    assert key_bytes({"k": "v"}) == b"d{t(sk,sv)}"


def test_equal_decimals_and_numbers_give_equal_bytes() -> None:
    assert key_bytes(D("1.0")) == key_bytes(D("1.00")) == key_bytes(1) == key_bytes(True)
    assert key_bytes(D("1.50")) == key_bytes(1.5)
    assert key_bytes(D("0.10")) == key_bytes(D("0.1")) != key_bytes(0.1)
    assert key_bytes(D("-Infinity")) == key_bytes(float("-inf"))
    assert key_bytes(D("1E+5000")) == key_bytes(D("10E+4999"))


def test_distinct_tuple_keys_are_distinct_in_operators() -> None:
    h = OperatorHarness(Distinct())
    h.run_window([("data", ("x", 1)), ("data", ("x,n1",))])
    assert h.sink("distinct").tuples == [("x", 1), ("x,n1",)]
    h = OperatorHarness(MostFrequentKey())
    h.run_window([("data", ("a", "")), ("data", ("a,s",)), ("data", ("b",))])
    assert len(h.sink("list").tuples[0]) == 3


def test_a_decimal_batch_counts_values_as_its_tuples() -> None:
    # the batch carries the column's scale (1.00 for both): per tuple 1.0 and 1.00 differed
    schema = pa.schema([("k", pa.string()), ("v", pa.decimal128(5, 2))])
    rows = [{"k": "a", "v": D("1.0")}, {"k": "a", "v": D("1.00")}]
    got = []
    for inputs in deliveries("data", rows, schema):
        h = OperatorHarness(UniqueValueCount(key="k", value="v"))
        h.run_window(inputs)
        got.append(h.sink("count").tuples)
    assert got == [[{"k": "a", "count": 1}]] * 3
