"""Filter/transform/project and the stream plumbing: semantics, batches, bad input."""

from __future__ import annotations

import pyarrow as pa
import pytest

from malhar import ConfigError, PropertyError
from malhar.algo import (
    Counter,
    FilterOperator,
    ProjectionOperator,
    StreamDuplicater,
    StreamMerger,
    Throttle,
    TransformOperator,
)
from malhar.testing.harness import OperatorHarness

ROWS = [
    {"id": 1, "amount": 50.0, "cur": "eur"},
    {"id": 2, "amount": 150.0, "cur": "usd"},
    {"id": 3, "amount": None, "cur": "eur"},
]


def test_filter_batch_path_equals_tuple_path_and_stays_arrow() -> None:
    by_tuple = OperatorHarness(FilterOperator("amount > 100 or cur == 'eur'"))
    by_tuple.run_window([("input", r) for r in ROWS])
    typed = OperatorHarness(
        FilterOperator(
            "amount > 100 or cur == 'eur'", schema="id bigint, amount double, cur string"
        )
    )
    seen = []
    typed.sink("truePort").batch = lambda b: seen.append(b)  # the typed port gets one Arrow batch
    typed.run_window([("input", pa.RecordBatch.from_pylist(ROWS))])
    assert [r["id"] for r in by_tuple.sink("truePort").tuples] == [1, 2, 3]
    assert len(seen) == 1 and seen[0].column("id").to_pylist() == [1, 2, 3]


def test_filter_none_goes_to_false_and_bad_rows_to_error() -> None:
    h = OperatorHarness(FilterOperator("amount > 100"))
    h.run_window(
        [
            ("input", pa.RecordBatch.from_pylist(ROWS)),
            ("input", {"id": 4}),
            ("input", {"amount": "x"}),
        ]
    )
    assert [r["id"] for r in h.sink("falsePort").tuples] == [1, 3]
    assert h.sink("error").tuples[0]["reason"] == "no field 'amount'"
    assert len(h.sink("error").tuples) == 2


def test_filter_by_callable_and_its_failures() -> None:
    h = OperatorHarness(FilterOperator(predicate=lambda t: t % 2 == 0))
    h.run_window([("input", 2), ("input", 3), ("input", "x")])
    assert h.sink("truePort").tuples == [2] and h.sink("falsePort").tuples == [3]
    assert h.sink("error").tuples[0]["reason"].startswith("predicate failed: TypeError")


def test_filter_configuration_errors() -> None:
    with pytest.raises(PropertyError, match="not allowed"):
        FilterOperator("os.system('rm')")
    with pytest.raises(ConfigError, match="exactly one"):
        OperatorHarness(FilterOperator()).setup()


def test_transform_batch_and_tuple_paths_agree() -> None:
    exprs = {
        "id": "id",
        "eur": "amount * 0.9 if cur == 'usd' else amount",
        "big": "coalesce(amount, 0) > 100",
    }
    a = OperatorHarness(TransformOperator(exprs))
    a.run_window([("input", r) for r in ROWS])
    b = OperatorHarness(TransformOperator(exprs, schema="id bigint, eur double, big boolean"))
    b.run_window([("input", pa.RecordBatch.from_pylist(ROWS))])
    assert (
        a.sink("output").tuples
        == b.sink("output").tuples
        == [
            {"id": 1, "eur": 50.0, "big": False},
            {"id": 2, "eur": 135.0, "big": True},
            {"id": 3, "eur": None, "big": False},
        ]
    )


def test_transform_function_and_copy_fields() -> None:
    h = OperatorHarness(TransformOperator({"n": "id * 10"}, copy_fields=True))
    h.run_window([("input", {"id": 2}), ("input", "not a dict")])
    assert h.sink("output").tuples == [{"id": 2, "n": 20}]
    assert h.sink("error").tuples[0]["reason"] == "expected a dict tuple, got str"
    f = OperatorHarness(TransformOperator(function=lambda t: {"twice": t * 2}))
    f.run_window([("input", 4), ("input", None)])
    assert f.sink("output").tuples == [{"twice": 8}] and len(f.sink("error").tuples) == 1


def test_projection_select_drop_rename_and_missing_fields() -> None:
    h = OperatorHarness(ProjectionOperator(drop_fields=["cur"], rename={"amount": "value"}))
    h.run_window([("input", pa.RecordBatch.from_pylist(ROWS[:1]))])
    assert h.sink("projected").tuples == [{"id": 1, "value": 50.0}]
    assert h.sink("remainder").tuples == [{"cur": "eur"}]
    s = OperatorHarness(ProjectionOperator(select_fields=["id", "zz"]))
    s.run_window([("input", {"id": 1})])
    assert s.sink("error").tuples == [{"tuple": {"id": 1}, "reason": "no field 'zz'"}]


def test_plumbing() -> None:
    m = OperatorHarness(StreamMerger(schema="v bigint"))
    m.run_window([("data1", pa.RecordBatch.from_pydict({"v": [1]})), ("data2", {"v": 2})])
    assert m.sink("out").tuples == [{"v": 1}, {"v": 2}]
    d = OperatorHarness(StreamDuplicater())
    d.run_window([("data", pa.RecordBatch.from_pydict({"v": [1, 2]}))])
    assert d.sink("out1").tuples == d.sink("out2").tuples == [{"v": 1}, {"v": 2}]
    c = OperatorHarness(Counter())
    c.run_window([("input", 1), ("input", pa.RecordBatch.from_pydict({"v": [1, 2]}))])
    c.run_window([])
    assert c.sink("output").tuples == [3, 0]


def test_throttle_waits_for_tokens_on_a_fake_clock() -> None:
    h = OperatorHarness(Throttle(rate=10, burst=5))
    h.setup()
    now = [100.0]
    slept: list[float] = []
    h.operator.clock = lambda: now[0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    h.operator.sleep = sleep
    h.run_window([("data", i) for i in range(8)])  # 5 from the bucket, 3 at 10/s
    assert h.sink("out").tuples == list(range(8))
    assert sum(slept) == pytest.approx(0.3)
    now[0] += 1.0  # a second later the bucket holds 5 again (capped by burst)
    h.run_window([("data", pa.RecordBatch.from_pydict({"v": list(range(5))}))])
    assert sum(slept) == pytest.approx(0.3)
    assert h.operator.metrics()["throttled_seconds"] == pytest.approx(0.3)


def test_a_batch_that_does_not_cast_to_a_typed_port_names_the_port_and_the_field() -> None:
    # pyarrow's bare "Failed to parse string: 'x' as a scalar of type int64" named neither
    from malhar.schema import SchemaError

    h = OperatorHarness(StreamMerger(schema="k string, v bigint, s string"))
    with pytest.raises(SchemaError, match=r"^output port 'out': field 'v' is string, .* int64"):
        h.run_window([("data1", pa.record_batch({"k": ["a"], "v": ["x"], "s": ["q"]}))])
