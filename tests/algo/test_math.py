"""Math operators: semantics per key and global, batches, unifiers, bad input."""

from __future__ import annotations

import decimal
import itertools

import pyarrow as pa
import pytest

from malhar import PropertyError
from malhar.algo import (
    Average,
    Change,
    ChangeAlert,
    CountKeyVal,
    Margin,
    Max,
    Min,
    Quotient,
    Range,
    RunningAverage,
    Sum,
)
from malhar.algo.math import MathUnifier
from malhar.testing.harness import OperatorHarness, deliveries

ROWS = [{"k": "a", "v": 2}, {"k": "b", "v": 5}, {"k": "a", "v": -4}]


def _run(op, rows, port="data"):
    h = OperatorHarness(op)
    h.run_window([(port, r) for r in rows])
    return h


@pytest.mark.parametrize(
    "cls,port,expected",
    [
        (Sum, "sum", {"a": {"sum": -2}, "b": {"sum": 5}}),
        (Min, "min", {"a": {"min": -4}, "b": {"min": 5}}),
        (Max, "max", {"a": {"max": 2}, "b": {"max": 5}}),
        (
            Average,
            "average",
            {
                "a": {"average": -1.0, "sum": -2, "count": 2},
                "b": {"average": 5.0, "sum": 5, "count": 1},
            },
        ),
        (Range, "range", {"a": {"low": -4, "high": 2}, "b": {"low": 5, "high": 5}}),
        (CountKeyVal, "count", {"a": {"count": 2}, "b": {"count": 1}}),
    ],
)
def test_per_key_tuples_and_batches_agree(cls, port, expected) -> None:
    by_tuple = _run(cls(key="k", value="v"), ROWS).sink(port).tuples
    batch = pa.RecordBatch.from_pylist(ROWS)
    by_batch = _run(cls(key="k", value="v"), [batch]).sink(port).tuples
    for got in (by_tuple, by_batch):
        assert {r["k"]: {f: v for f, v in r.items() if f != "k"} for r in got} == expected


def test_global_sum_of_plain_numbers_resets_each_window() -> None:
    h = OperatorHarness(Sum())
    h.run_window([("data", 1), ("data", 2.5)])
    h.run_window([("data", 4)])
    assert h.sink("sum").per_window == {0: [{"sum": 3.5}], 1: [{"sum": 4}]}


def test_cumulative_sum_keeps_totals() -> None:
    h = OperatorHarness(Sum(key=0, value=1, cumulative=True))
    h.run_window([("data", ("x", 1))])
    h.run_window([("data", ("x", 2)), ("data", ("y", 1))])
    assert h.sink("sum").per_window[1] == [{"key": "x", "sum": 3}, {"key": "y", "sum": 1}]


def test_bad_tuples_go_to_the_error_port_with_the_reason() -> None:
    h = _run(
        Sum(key="k", value="v"),
        [{"k": "a", "v": "12"}, {"v": 1}, {"k": "a", "v": True}, {"k": "a", "v": 1}],
    )
    reasons = [e["reason"] for e in h.sink("error").tuples]
    assert reasons == ["value '12' is not a number", "no field 'k'", "value True is not a number"]
    assert h.sink("sum").tuples == [{"k": "a", "sum": 1}]
    assert h.operator.metrics() == {"errors": 3.0}


def test_batch_with_nulls_and_wrong_types() -> None:
    h = OperatorHarness(Max(key="k", value="v"))
    h.run_window([("data", pa.RecordBatch.from_pydict({"k": ["a", "a"], "v": [3, None]}))])
    assert h.sink("max").tuples == [{"k": "a", "max": 3}]
    assert h.sink("error").tuples == [
        {"tuple": {"k": "a", "v": None}, "reason": "value None is not a number"}
    ]
    h.run_window([("data", pa.RecordBatch.from_pydict({"k": ["a"], "v": ["x"]}))])
    assert h.sink("error").per_window[1][0]["reason"] == "value 'x' is not a number"


def test_average_unifier_merges_partials_exactly() -> None:
    u = OperatorHarness(MathUnifier("average", "k"))
    u.run_window(
        [
            ("input", {"k": "a", "average": 1.0, "sum": 1, "count": 1}),
            ("input", {"k": "a", "average": 4.0, "sum": 8, "count": 2}),
        ]
    )
    assert u.sink("output").tuples == [{"k": "a", "average": 3.0, "sum": 9, "count": 3}]


def test_running_average_spans_windows() -> None:
    h = OperatorHarness(RunningAverage(key="k", value="v"))
    h.run_window([("data", {"k": "a", "v": 1})])
    h.run_window([("data", {"k": "b", "v": 4}), ("data", {"k": "a", "v": 3})])
    assert h.sink("average").per_window[1] == [
        {"k": "a", "average": 2.0, "sum": 4, "count": 2},
        {"k": "b", "average": 4.0, "sum": 4, "count": 1},
    ]


def test_quotient_and_margin_with_zero_denominator() -> None:
    h = _run(Quotient(key="k", value="v"), [{"k": "a", "v": 3}], port="numerator")
    assert h.sink("quotient").tuples == [
        {"k": "a", "numerator": 3, "denominator": 0, "quotient": None}
    ]
    h = OperatorHarness(Margin())
    h.run_window([("numerator", 1), ("denominator", 4), ("denominator", "x")])
    assert h.sink("margin").tuples == [{"numerator": 1, "denominator": 4, "margin": 0.75}]
    assert len(h.sink("error").tuples) == 1


def test_change_uses_the_base_of_the_previous_window() -> None:
    h = OperatorHarness(Change(key="k", value="v"))
    h.run_window(
        [("data", {"k": "a", "v": 5}), ("base", {"k": "a", "v": 10}), ("data", {"k": "a", "v": 7})]
    )
    assert h.sink("change").tuples == []  # no base in force yet
    assert h.operator.metrics()["no_base"] == 2
    h.run_window([("data", {"k": "a", "v": 15}), ("base", {"k": "a", "v": 0})])
    assert h.sink("change").per_window[1] == [
        {"k": "a", "value": 15, "base": 10, "change": 5, "percent": 50.0}
    ]
    h.run_window([("data", pa.RecordBatch.from_pylist([{"k": "a", "v": 3}]))])
    assert h.sink("change").per_window[2] == [
        {"k": "a", "value": 3, "base": 0, "change": 3, "percent": None}
    ]


def test_change_alert_per_key_on_tuples_and_batches() -> None:
    rows = [
        {"k": "a", "v": 10},
        {"k": "b", "v": 1},
        {"k": "a", "v": 12},
        {"k": "b", "v": 1},
        {"k": "a", "v": 0},
        {"k": "a", "v": 5},
    ]
    by_tuple = _run(ChangeAlert(key="k", value="v", threshold=15), rows).sink("alert").tuples
    by_batch = (
        _run(ChangeAlert(key="k", value="v", threshold=15), [pa.RecordBatch.from_pylist(rows)])
        .sink("alert")
        .tuples
    )
    assert (
        by_tuple
        == by_batch
        == [
            {"k": "a", "value": 12, "previous": 10, "percent": 20.0},
            {"k": "a", "value": 0, "previous": 12, "percent": 100.0},
        ]
    )


def test_keyed_change_declares_its_codec_and_global_is_single() -> None:
    assert ChangeAlert(key="k").partitioning().kind == "keyed"
    assert set(Change(key="k").partitioning().codecs) == {"data", "base"}
    assert ChangeAlert().partitioning().kind == "single"
    assert Sum().partitioning().kind == "unifier"


def test_bad_property_values_are_refused() -> None:
    with pytest.raises(PropertyError, match="threshold"):
        ChangeAlert(threshold=-1)
    with pytest.raises(PropertyError, match="key"):
        Sum(key=1.5)


def test_nan_keys_are_one_group_in_tuples_and_batches() -> None:
    nan = float("nan")
    rows = [{"k": nan, "v": 1}, {"k": nan, "v": 2}, {"k": 1.0, "v": 3}]
    for inputs in deliveries("data", rows):
        h = OperatorHarness(Sum(key="k", value="v"))
        h.run_window(inputs)
        assert sorted((str(r["k"]), r["sum"]) for r in h.sink("sum").tuples) == [
            ("1.0", 3),
            ("nan", 3),
        ]


def test_a_batchs_integer_sum_does_not_wrap_where_its_tuples_do_not() -> None:
    # Arrow sums int64 in 64 bits and wraps; the tuples' Python ints do not
    rows = [{"k": "a", "v": 2**62}, {"k": "a", "v": 2**62}]
    for make, port, field in [
        (lambda: Sum(key="k", value="v"), "sum", "sum"),
        (lambda: Average(key="k", value="v"), "average", "sum"),
    ]:
        for inputs in deliveries("data", rows):
            h = OperatorHarness(make())
            h.run_window(inputs)
            assert [r[field] for r in h.sink(port).tuples] == [2**63]


def test_nan_is_above_every_number_in_any_order_from_tuples_and_batches() -> None:
    # min and max of tuples depended on the order of arrival; Arrow's skip NaN
    values = [float("nan"), 1.0, None, 2.0]
    for cls, port, want in [
        (Min, "min", "[{'k': 'a', 'min': 1.0}]"),
        (Max, "max", "[{'k': 'a', 'max': nan}]"),
        (Range, "range", "[{'k': 'a', 'low': 1.0, 'high': nan}]"),
    ]:
        got = set()
        for order in itertools.permutations(values):
            rows = [{"k": "a", "v": v} for v in order]
            for inputs in deliveries("data", rows):
                h = OperatorHarness(cls(key="k", value="v"))
                h.run_window(inputs)
                got.add(str(h.sink(port).tuples))
        assert got == {want}, cls.__name__


def test_a_decimal_after_floats_goes_to_the_error_port() -> None:
    h = OperatorHarness(Sum(value="v"))
    h.run_window(
        [("data", {"v": 1.5}), ("data", {"v": decimal.Decimal("1")}), ("data", {"v": 2.0})]
    )
    assert h.sink("sum").tuples == [{"sum": 3.5}]
    (error,) = h.sink("error").tuples
    assert "Decimal and float do not mix" in error["reason"]


def test_a_decimal_batch_after_floats_refuses_the_rows_its_tuples_would() -> None:
    d = decimal.Decimal
    floats = [("data", {"k": "a", "v": 1.5}), ("data", {"k": "b", "v": 2.5})]
    rows = [{"k": "a", "v": d("1")}, {"k": "c", "v": d("2")}, {"k": "a", "v": d("3")}]
    got = []
    for inputs in deliveries("data", rows):
        h = OperatorHarness(Sum(key="k", value="v"))
        h.run_window(floats + inputs)
        got.append(
            (sorted(map(str, h.sink("sum").tuples)), [e["tuple"] for e in h.sink("error").tuples])
        )
    assert got[0] == got[1] == got[2]
    assert got[0][1] == [{"k": "a", "v": d("1")}, {"k": "a", "v": d("3")}]


def test_cumulative_nan_keys_stay_one_group_across_a_restore() -> None:
    # a restored checkpoint's NaN key was a copy, found by no later NaN key: two groups
    nan = float("nan")
    h = OperatorHarness(Sum(key="k", value="v", cumulative=True))
    h.run_window([("data", {"k": nan, "v": 1})])
    again = OperatorHarness.restored(Sum(key="k", value="v", cumulative=True), h.checkpoint())
    again.run_window([("data", {"k": nan, "v": 2})])
    last = again.sink("sum").per_window[max(again.sink("sum").per_window)]
    assert [(str(r["k"]), r["sum"]) for r in last] == [("nan", 3)]


def _three_ways(make, port, rows, out, schema=None, inputs_before=()):
    """The output and error tuples of ``rows`` delivered as tuples, a batch, two batches."""
    got = []
    for inputs in deliveries(port, rows, schema):
        h = OperatorHarness(make())
        h.run_window(list(inputs_before) + inputs)
        errors = [e["tuple"] for e in h.sink("error").tuples]
        got.append((h.sink(out).tuples, errors))
    assert got[0] == got[1] == got[2], got
    return got[0]


def test_decimal_sums_are_exact_and_never_wrap() -> None:
    d = decimal.Decimal
    schema = pa.schema([("v", pa.decimal128(38, 2))])
    # beyond the default context's 28 digits: rounded per tuple before
    rows = [{"v": d("123456789012345678901234567890.12")}, {"v": d("0.01")}]
    assert _three_ways(lambda: Sum(value="v"), "data", rows, "sum", schema)[0] == [
        {"sum": d("123456789012345678901234567890.13")}
    ]
    # beyond decimal128(38, 2): Arrow's sum wrapped to a negative number
    rows = [{"v": d("9" * 36 + ".99")}] * 20
    out, errors = _three_ways(lambda: Sum(value="v"), "data", rows, "sum", schema)
    assert out == [{"sum": d("19999999999999999999999999999999999999.80")}] and errors == []
    out, _ = _three_ways(lambda: Average(value="v"), "data", rows, "average", schema)
    assert out[0]["sum"] == d("19999999999999999999999999999999999999.80")


@pytest.mark.parametrize("cls,port", [(Quotient, "quotient"), (Margin, "margin")])
def test_decimal_ratios_are_floats_and_a_float_after_decimals_is_refused(cls, port) -> None:
    d = decimal.Decimal
    h = OperatorHarness(cls())
    h.run_window([("numerator", d("1")), ("numerator", 2.5), ("denominator", d("4"))])
    (row,) = h.sink(port).tuples
    assert row["numerator"] == d("1") and row[port] == (0.25 if cls is Quotient else 0.75)
    (error,) = h.sink("error").tuples
    assert error["tuple"] == 2.5 and "Decimal and float do not mix" in error["reason"]
    h = OperatorHarness(cls())
    h.run_window([("numerator", d("1")), ("denominator", 4.0)])
    assert h.sink(port).tuples[0][port] == (0.25 if cls is Quotient else 0.75)


def test_change_and_change_alert_refuse_a_float_after_a_decimal() -> None:
    d = decimal.Decimal
    base = [("base", {"v": d("10")})]
    for make in (lambda: Change(value="v"),):
        h = OperatorHarness(make())
        h.run_window(base)
        for inputs in deliveries("data", [{"v": 12.5}, {"v": 7.5}]):
            h.sink("error").clear()
            h.run_window(inputs)
            assert [e["tuple"] for e in h.sink("error").tuples] == [{"v": 12.5}, {"v": 7.5}]
    out, errors = _three_ways(
        lambda: ChangeAlert(value="v", threshold=1),
        "data",
        [{"v": 12.5}, {"v": 20.0}],
        "alert",
        inputs_before=[("data", {"v": d("10")}), ("data", {"v": d("11")})],
    )
    assert errors == [{"v": 12.5}, {"v": 20.0}] and len(out) == 1  # 10 -> 11


def test_nan_keys_are_one_key_in_ratios_and_changes() -> None:
    nan = float("nan")
    rows = [{"k": nan, "v": 1}, {"k": float("nan"), "v": 3}]
    for inputs in deliveries("numerator", rows):
        h = OperatorHarness(Quotient(key="k", value="v"))
        h.run_window([*inputs, ("denominator", {"k": float("nan"), "v": 4})])
        assert [(r["numerator"], r["quotient"]) for r in h.sink("quotient").tuples] == [(4, 1.0)]
    rows = [{"k": nan, "v": 100}, {"k": float("nan"), "v": 200}]
    out, _ = _three_ways(
        lambda: ChangeAlert(key="k", value="v", threshold=10), "data", rows, "alert"
    )
    assert [(r["value"], r["previous"]) for r in out] == [(200, 100)]
    h = OperatorHarness(Change(key="k", value="v"))
    h.run_window([("base", {"k": nan, "v": 10})])
    again = OperatorHarness.restored(Change(key="k", value="v"), h.checkpoint())
    again.run_window([("data", {"k": float("nan"), "v": 12})])
    assert [r["change"] for r in again.sink("change").tuples] == [2]


def test_change_alert_batches_of_ints_beyond_2_53_alert_as_their_tuples() -> None:
    rows = [{"v": 2**53}, {"v": 2**53 + 1}]
    out, _ = _three_ways(lambda: ChangeAlert(value="v", threshold=0), "data", rows, "alert")
    assert [(r["value"], r["previous"]) for r in out] == [(2**53 + 1, 2**53)]
