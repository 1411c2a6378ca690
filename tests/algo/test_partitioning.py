"""How catalogue operators partition: codecs agree between tuples and batches; declarations."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malhar import DAG
from malhar.algo import FieldCodec, TimeBasedDedup, TopN, partition_by_key

VALUES = st.one_of(
    st.none(), st.integers(-(2**40), 2**40), st.text(max_size=5), st.floats(allow_nan=False)
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(keys=st.lists(st.one_of(st.integers(-50, 50), st.none()), min_size=1, max_size=40))
def test_a_key_goes_to_the_same_partition_as_a_tuple_and_in_a_batch(keys) -> None:
    codec = FieldCodec("k")
    batch = pa.RecordBatch.from_pydict(
        {"k": pa.array(keys, pa.int64()), "n": list(range(len(keys)))}
    )
    by_batch = codec.partition_batch(batch).tolist()
    by_tuple = [codec.partition({"k": k, "n": i}) for i, k in enumerate(keys)]
    assert by_batch == by_tuple


@settings(max_examples=60, deadline=None, derandomize=True)
@given(value=VALUES)
def test_equal_keys_hash_equal_across_types_and_processes(value) -> None:
    codec = pickle.loads(pickle.dumps(FieldCodec(0)))
    assert codec.partition((value, "x")) == FieldCodec(0).partition((value, "y"))
    if isinstance(value, int) and not isinstance(value, bool):
        assert codec.partition((value,)) == codec.partition((float(value),))


def test_partition_by_key_sets_the_declared_codecs_only_where_keyed() -> None:
    dag = DAG("p")
    partition_by_key(dag.add_operator("top", TopN(order_by="v"), PARTITIONS=3))
    partition_by_key(dag.add_operator("dedup", TimeBasedDedup(key="id", time="t"), PARTITIONS=3))
    assert dag.operators["top"].port_attributes == {}
    assert (
        repr(dag.operators["dedup"].port_attributes["input"]["STREAM_CODEC"]) == "FieldCodec('id')"
    )


def test_every_catalogue_operator_declares_how_it_partitions() -> None:
    from malhar.ports import ports_of
    from tests.algo.cases import CASES
    from tests.algo.partitions import partitioning_of

    for case in CASES:
        op = case.make()
        declared = type(op).PARTITIONING
        how = partitioning_of(op)
        assert how.kind in ("stateless", "unifier", "keyed", "single"), case.name
        assert declared.split(" ")[0] in (how.kind, "keyed"), (case.name, declared, how.kind)
        if how.kind == "keyed":  # every input port has the codec that keys it
            assert set(how.codecs) == set(ports_of(type(op))[0]), case.name


def _dedup_dag(
    parts: int, *, codec: object = None, src_parts: int = 1, parallel: bool = False
) -> DAG:
    from malhar.algo import BoundedDedup
    from malhar.testing.operators import Collector, ListInput

    dag = DAG("keyed")
    rows = [[{"id": i % 7, "n": i} for i in range(40)], [{"id": i % 9} for i in range(30)]]
    src = dag.add_operator("src", ListInput(rows), PARTITIONS=src_parts)
    dedup = dag.add_operator("dedup", BoundedDedup(key="id"), PARTITIONS=parts)
    if codec is not None:
        dedup.input.set_attribute("STREAM_CODEC", codec)
    if parallel:
        dedup.input.set_attribute("PARALLEL_PARTITION", True)
    out = dag.add_operator("out", Collector())
    dag.add_stream("rows", src.output, dedup.input)
    dag.add_stream("unique", dedup.unique, out.input)
    return dag


def test_a_keyed_operator_on_several_partitions_routes_by_its_declared_codec() -> None:
    from malhar import KeyCodec
    from malhar.engine.plan import build_plan

    def route_codec(dag: DAG) -> object:
        return {str(r.sink): r.codec for r in build_plan(dag).routes}.get("dedup.input")

    # without partition_by_key, the rows went round robin (or fused) and a key was kept
    # by several partitions: each partition let its own first copy through
    assert repr(route_codec(_dedup_dag(2))) == "FieldCodec('id')"
    # one partition needs no routing (fused behind its upstream as before)
    assert route_codec(_dedup_dag(1)) is None
    # a codec the user sets wins
    assert repr(route_codec(_dedup_dag(2, codec=KeyCodec("id")))) == "KeyCodec('id',)"


def test_a_keyed_operator_fused_by_equal_counts_is_refused_unless_said_parallel(caplog) -> None:
    """Fused behind an upstream of as many partitions, a dedup let a key through once per
    upstream partition that sent it (a walkthrough: 72 of 180 panes wrong), with a warning
    only."""
    from malhar.algo import BoundedDedup, UniqueValueCount, partition_by_key
    from malhar.engine.plan import build_plan
    from malhar.testing.operators import Collector, ListInput
    from malhar.validation import ValidationError

    with pytest.raises(
        ValidationError,
        match=r"operator 'dedup' \(BoundedDedup\) needs each key on one partition, but runs "
        r"fused behind 'src' \(2 partitions each\).*partition_by_key.*PARALLEL_PARTITION=True",
    ):
        build_plan(_dedup_dag(2, src_parts=2), strict=True)
    # said to come from one upstream partition per key: fused, as a checkpoint's groups were
    said = _dedup_dag(2, src_parts=2, parallel=True)
    assert build_plan(said, strict=True).groups[0].operators == ["src", "dedup"]
    # the plan a checkpoint ran with, or a running repartitioning: warned of, not refused
    with caplog.at_level("WARNING", logger="malhar"):
        assert build_plan(_dedup_dag(2, src_parts=2)).groups[0].operators == ["src", "dedup"]
    assert "needs each key on one partition" in caplog.text

    # behind an operator routed by the same key, each key is on one partition already
    dag = DAG("keyed-twice")
    src = dag.add_operator("src", ListInput([[{"id": 1}]]))
    dedup = partition_by_key(dag.add_operator("dedup", BoundedDedup(key="id"), PARTITIONS=2))
    count = dag.add_operator("count", UniqueValueCount(key="id"), PARTITIONS=2)
    dag.add_stream("rows", src.output, dedup.input)
    dag.add_stream("unique", dedup.unique, count.data)
    dag.add_stream("counts", count.count, dag.add_operator("out", Collector()).input)
    plan = build_plan(dag, strict=True)
    assert plan.groups[plan.group_of["count"]].operators == ["dedup", "count"]


def test_an_operator_of_one_partition_only_is_refused_on_several() -> None:
    from malhar.algo import Change
    from malhar.testing.operators import Collector, ListInput
    from malhar.validation import ValidationError

    dag = DAG("single")
    src = dag.add_operator("src", ListInput([[1, 2]]))
    base = dag.add_operator("base", ListInput([[1]]))
    change = dag.add_operator("change", Change(), PARTITIONS=2)
    out = dag.add_operator("out", Collector())
    dag.add_stream("data", src.output, change.data)
    dag.add_stream("base", base.output, change.base)
    dag.add_stream("changes", change.change, out.input)
    with pytest.raises(ValidationError, match=r"'change' \(Change\) runs on one partition only"):
        dag.validate()


@pytest.mark.integration
def test_dedup_on_two_partitions_without_partition_by_key_is_exact(spark, tmp_path) -> None:
    from malhar import run
    from malhar.testing.operators import collected

    ckpt = str(tmp_path / "ckpt")
    run(_dedup_dag(2), windows=2, spark=spark, checkpoint=ckpt, window_ms=100)
    got = collected(ckpt, "out")
    # BoundedDedup remembers the ids of earlier windows: each of the 9 ids once
    assert sorted(r["id"] for w in got.values() for r in w) == list(range(9))
