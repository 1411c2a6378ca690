"""How catalogue operators partition: codecs agree between tuples and batches; declarations."""

from __future__ import annotations

import pickle

import pyarrow as pa
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
