"""UniqueCounter: harness tests of its logic, and partitioned runs on Spark."""

from __future__ import annotations

import pickle
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar import DAG, InputPort, KeyCodec, MalharError, Operator, OutputPort, run
from malhar.algo import UniqueCounter
from malhar.testing.harness import OperatorHarness, deliveries
from malhar.testing.operators import Collector, ListInput, collected


def _counts(rows: list[dict]) -> dict:
    return {r["key"]: r["count"] for r in rows}


def test_counts_per_window_and_resets() -> None:
    h = OperatorHarness(UniqueCounter())
    h.run_window([("data", "a"), ("data", "b"), ("data", "a")])
    h.run_window([("data", "b")])
    assert _counts(h.sink("count").per_window[0]) == {"a": 2, "b": 1}
    assert _counts(h.sink("count").per_window[1]) == {"b": 1}


def test_cumulative_keeps_totals() -> None:
    h = OperatorHarness(UniqueCounter(cumulative=True))
    h.run_window([("data", "a"), ("data", "b")])
    h.run_window([("data", "a")])
    assert _counts(h.sink("count").per_window[1]) == {"a": 2, "b": 1}


def test_arrow_batches_are_counted_vectorized() -> None:
    h = OperatorHarness(UniqueCounter(key_name="word", key_column="word"))
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3, 4], "word": ["x", "y", "x", "x"]})
    h.run_window([("data", batch)])
    assert {r["word"]: r["count"] for r in h.sink("count").tuples} == {"x": 3, "y": 1}


def test_dict_tuples_use_key_column() -> None:
    h = OperatorHarness(UniqueCounter(key_column="w"))
    h.run_window([("data", {"w": "a", "x": 1}), ("data", {"w": "a", "x": 2})])
    assert _counts(h.sink("count").tuples) == {"a": 2}


def test_bad_property_is_rejected() -> None:
    from malhar import PropertyError

    with pytest.raises(PropertyError, match="key_name"):
        UniqueCounter(key_name="bad name")


class Words(Operator):
    """Splits lines into typed word rows, so the counter gets Arrow batches after a shuffle."""

    input = InputPort()
    output = OutputPort("word string")

    def process(self, line: str) -> None:
        for w in line.split():
            self.output.emit({"word": w})


@pytest.mark.integration
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lines=st.lists(
        st.lists(st.text("abc ", min_size=0, max_size=12), min_size=0, max_size=6),
        min_size=2,
        max_size=3,
    ),
    parts=st.integers(1, 4),
    keyed=st.booleans(),
)
def test_partitioned_counts_equal_ground_truth(
    spark, tmp_path_factory, lines, parts, keyed
) -> None:
    ckpt = str(tmp_path_factory.mktemp("uc"))
    dag = DAG("uc")
    src = dag.add_operator("src", ListInput(lines), PARTITIONS=2)
    words = dag.add_operator("words", Words(), PARTITIONS=2)
    counter = dag.add_operator("counter", UniqueCounter(key_name="word"), PARTITIONS=parts)
    out = dag.add_operator("out", Collector())
    dag.add_stream("lines", src.output, words.input)
    dag.add_stream("words", words.output, counter.data)
    dag.add_stream("counts", counter.count, out.input)
    if keyed:
        counter.data.set_attribute("STREAM_CODEC", KeyCodec("word"))
    run(dag, windows=len(lines), spark=spark, checkpoint=ckpt, window_ms=50)
    got = collected(ckpt, "out")
    for w, window_lines in enumerate(lines):
        truth = Counter(word for line in window_lines for word in line.split())
        assert {r["word"]: r["count"] for r in got.get(w, [])} == dict(truth)
        assert len(got.get(w, [])) == len(truth)  # the unifier merged: one row per word


def test_unique_counter_is_registered() -> None:
    from malhar import registry

    assert registry.load("UniqueCounter") is UniqueCounter


def test_nan_keys_are_one_key_in_tuples_and_batches() -> None:
    # NaN equals nothing: each NaN key (a new object per tuple and per batch) was its own
    # group, while a batch's value counts put them in one
    nan = float("nan")
    rows = [{"k": nan}, {"k": nan}, {"k": 1.0}]
    for inputs in deliveries("data", rows):
        h = OperatorHarness(UniqueCounter(key_column="k"))
        h.run_window(inputs)
        counts = sorted((str(r["key"]), r["count"]) for r in h.sink("count").tuples)
        assert counts == [("1.0", 1), ("nan", 2)]


def test_a_tuple_without_the_key_fails_with_what_to_set() -> None:
    # UniqueCounter has no error port: a KeyError or a StopIteration said neither what nor how
    for make, value, why in [
        (
            lambda: UniqueCounter(key_column="word"),
            {"w": "a"},
            r"no field 'word' .* \['w'\]; set key_column",
        ),
        (lambda: UniqueCounter(), {}, "an empty dict has no key"),
        (
            lambda: UniqueCounter(key_column="word"),
            pa.RecordBatch.from_pylist([{"w": "a"}]),
            "no field 'word'",
        ),
    ]:
        with pytest.raises(MalharError, match=why):
            OperatorHarness(make()).run_window([("data", value)])


def test_cumulative_nan_keys_stay_one_key_across_a_restore() -> None:
    # a restored checkpoint's NaN key was a copy, found by no later NaN key: two groups
    from pyspark import cloudpickle

    nan = float("nan")
    for inputs in deliveries("data", [{"k": nan}, {"k": nan}]):
        h = OperatorHarness(UniqueCounter(key_column="k", cumulative=True))
        h.run_window(inputs)
        # the engine's checkpoints are cloudpickled; the harness's are pickled
        for saved in (h.checkpoint(), cloudpickle.dumps(pickle.loads(h.checkpoint()))):
            again = OperatorHarness.restored(UniqueCounter(key_column="k", cumulative=True), saved)
            again.run_window(inputs)
            last = again.sink("count").per_window[max(again.sink("count").per_window)]
            assert [(str(r["key"]), r["count"]) for r in last] == [("nan", 4)]


def test_a_nan_key_is_emitted_as_a_plain_float() -> None:
    # state codecs and Spark take floats by their exact type (a float subclass failed there)
    h = OperatorHarness(UniqueCounter(key_column="k"))
    h.run_window([("data", {"k": float("nan")})])
    (row,) = h.sink("count").tuples
    assert type(row["key"]) is float and row["key"] != row["key"]
