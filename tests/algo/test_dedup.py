"""Dedup on managed state: expiry by event time, bounded memory of keys, spilling, replay."""

from __future__ import annotations

import datetime as dt
import pickle
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malhar import OperatorContext
from malhar.algo import BoundedDedup, TimeBasedDedup
from malhar.algo._base import arrow_schema_of
from malhar.testing.harness import OperatorHarness, deliveries


def _harness(op, tmp_path: Path) -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="dedup", checkpoint=str(tmp_path)))


def test_time_based_unique_duplicate_expired_and_bad(tmp_path: Path) -> None:
    h = _harness(
        TimeBasedDedup(key="id", time="t", expire_after=10_000, bucket_span=1_000), tmp_path
    )
    t0 = dt.datetime(2024, 1, 1, 12, 0, 0)
    h.run_window(
        [
            ("input", {"id": "a", "t": t0}),
            ("input", {"id": "a", "t": t0}),
            ("input", {"id": "b", "t": t0}),
        ]
    )
    later = t0 + dt.timedelta(seconds=30)
    h.run_window([("input", {"id": "c", "t": later})])
    h.run_window(
        [
            ("input", {"id": "a", "t": t0}),  # 30 s behind the newest event: expired
            ("input", {"id": "c", "t": later}),
            ("input", {"id": "d"}),
            ("input", {"id": "e", "t": "noon"}),
        ]
    )
    assert [r["id"] for r in h.sink("unique").tuples] == ["a", "b", "c"]
    assert [r["id"] for r in h.sink("duplicate").tuples] == ["a", "c"]
    assert [r["id"] for r in h.sink("expired").tuples] == ["a"]
    assert [e["reason"] for e in h.sink("error").tuples] == [
        "no field 't'",
        "str 'noon' is not an event time",
    ]
    h.teardown()


def test_time_based_batches_with_timestamps(tmp_path: Path) -> None:
    h = _harness(TimeBasedDedup(key="id", time="t", schema="id bigint, t timestamp"), tmp_path)
    ts = [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 3
    batch = pa.RecordBatch.from_pydict(
        {"id": [1, 2, 1], "t": pa.array(ts, pa.timestamp("us", tz="UTC"))}
    )
    seen = []
    h.sink("unique").batch = seen.append
    h.run_window([("input", batch)])
    assert len(seen) == 1 and seen[0].column("id").to_pylist() == [1, 2]
    assert [r["id"] for r in h.sink("duplicate").tuples] == [1]
    h.teardown()


def test_fields_by_position_read_a_batch_as_its_rows_one_by_one(tmp_path: Path) -> None:
    # a batch off the fast path (a float or a null time) was re-run as dict rows, which a
    # position did not read: every row went to error as "no field 0"
    batch = pa.RecordBatch.from_pydict({"id": [1, 1, 2], "t": [5.0, 5.0, None]})
    h = _harness(TimeBasedDedup(key=0, time=1, expire_after=10_000), tmp_path / "t")
    h.run_window([("input", batch)])
    assert [r["id"] for r in h.sink("unique").tuples] == [1]
    assert [r["id"] for r in h.sink("duplicate").tuples] == [1]
    assert [e["reason"] for e in h.sink("error").tuples] == ["NoneType None is not an event time"]
    h.teardown()
    # a dict tuple has no positions: refused, not read in its keys' order
    b = _harness(BoundedDedup(key=0), tmp_path / "b")
    b.run_window([("input", None), ("input", (7,)), ("input", ()), ("input", {"id": 1})])
    assert [r for r in b.sink("unique").tuples] == [(7,)]
    # a tuple that is no record says so, not 'no field "<the exception's text>"'
    assert [e["reason"] for e in b.sink("error").tuples] == [
        "cannot read 0 of a NoneType: 'NoneType' object is not subscriptable",
        "no field 0",
        "no field 0",
    ]
    b.teardown()


def test_a_batch_read_row_by_row_reads_a_position_as_its_column() -> None:
    # operators whose batch path falls back to rows (a null, a NaN, an overflow, a list
    # column, a non-string field) read a position on those rows as on the batch
    from malhar.algo import Distinct, MergeSort, Min, Sum, TopN

    def run(op: Any, batch: pa.RecordBatch) -> tuple[list[Any], list[str]]:
        h = OperatorHarness(op, OperatorContext(name="op"))
        h.run_window([(sorted(h.inputs)[0], batch)])
        out = [t for n, s in sorted(h.sinks.items()) if n != "error" for t in s.tuples]
        return out, [e["reason"] for e in h.sink("error").tuples]

    scores = pa.RecordBatch.from_pydict({"name": ["a", "b", "c"], "score": [3, 1, 2]})
    assert run(TopN(n=2, order_by=1), scores)[0] == [
        {"name": "a", "score": 3, "rank": 1},
        {"name": "c", "score": 2, "rank": 2},
    ]
    assert [r["name"] for r in run(MergeSort(order_by=1), scores)[0]] == ["b", "c", "a"]
    lists = pa.RecordBatch.from_pydict({"l": [[1], [2], [1]], "x": [1, 2, 3]})
    assert run(Distinct(field=0), lists) == ([[1], [2]], [])
    big = pa.RecordBatch.from_pydict({"k": ["a", "a"], "v": [2**62, 2**62]})
    assert run(Sum(key=0, value=1), big) == ([{"key": "a", "sum": 2**63}], [])
    nan = pa.RecordBatch.from_pydict({"k": ["a", "a"], "v": [1.0, float("nan")]})
    assert run(Min(key=0, value=1), nan) == ([{"key": "a", "min": 1.0}], [])


def test_a_reason_names_the_missing_field_of_those_read() -> None:
    from malhar.algo import Sum, UniqueValueCount

    for op, t, why in [
        (Sum(key=2, value=0), (5, "k"), "no field 2"),
        (UniqueValueCount(key=0, value=1), {"k": 1}, "no field 0"),
        (UniqueValueCount(key="k", value="v"), {"k": 1}, "no field 'v'"),
    ]:
        h = OperatorHarness(op, OperatorContext(name="op"))
        h.run_window([(sorted(h.inputs)[0], t)])
        assert [e["reason"] for e in h.sink("error").tuples] == [why], op


def test_bounded_forgets_the_oldest_key(tmp_path: Path) -> None:
    h = _harness(BoundedDedup(key=0, max_keys=3), tmp_path)
    h.run_window([("input", (k, i)) for i, k in enumerate("abcab")])
    h.run_window([("input", (k, 0)) for k in "da"])  # d pushes a out: a is unique again
    assert [t[0] for t in h.sink("unique").tuples] == ["a", "b", "c", "d", "a"]
    assert [t[0] for t in h.sink("duplicate").tuples] == ["a", "b"]
    h.run_window([("input", ({"x": 1}, 0)), ("input", ())])
    assert len(h.sink("error").tuples) == 2
    h.teardown()


def test_a_crash_replays_the_window_with_the_same_decisions(tmp_path: Path) -> None:
    make = lambda: TimeBasedDedup(key="id", time="t", expire_after=5_000)  # noqa: E731
    ctx = OperatorContext(name="dedup", checkpoint=str(tmp_path))
    h = OperatorHarness(make(), ctx)
    h.run_window([("input", {"id": i, "t": 1_000}) for i in range(5)], window=0)
    saved = h.checkpoint()
    window1 = [("input", {"id": i, "t": 1_000}) for i in range(3, 8)]
    h.run_window(window1, window=1)
    first = (h.sink("unique").per_window[1], h.sink("duplicate").per_window[1])
    h.teardown()  # the worker is lost after window 1 was written but before it completed
    again = OperatorHarness.restored(make(), saved, ctx)
    again.run_window(window1, window=1)
    assert (again.sink("unique").per_window[1], again.sink("duplicate").per_window[1]) == first
    assert [r["id"] for r in first[0]] == [5, 6, 7]
    again.teardown()


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("text", [False, True])
def test_keys_of_a_checkpoint_from_before_the_key_sets_are_still_known(
    tmp_path: Path, batch: bool, text: bool
) -> None:
    """Before the key sets, int and str keys were entries of ``seen``: a checkpoint of that
    time restores with ``keys_in_seen_to`` missing (its default), and those keys stay
    duplicates until their buckets expire; then ``seen`` is no longer read for them."""
    ddl = f"id {'string' if text else 'bigint'}, t bigint"
    make = lambda: TimeBasedDedup(  # noqa: E731
        key="id", time="t", expire_after=5_000, bucket_span=1_000, schema=ddl
    )
    key = (lambda i: f"k{i}") if text else (lambda i: i)
    ctx = OperatorContext(name="dedup", checkpoint=str(tmp_path))
    h = OperatorHarness(make(), ctx)
    h.begin_window(0)
    op = h.operator
    for k in (7, 8):  # what the older operator wrote for two keys
        assert op._seen.put(key(k), 1_500, 1)
    op.window_max = 1_500
    h.end_window()
    snapshot = pickle.loads(h.checkpoint())
    del snapshot["operator"]["fields"]["keys_in_seen_to"]  # the older operator had no such field
    saved = pickle.dumps(snapshot)
    h.teardown()
    again = OperatorHarness.restored(make(), saved, ctx)
    rows = [{"id": key(k), "t": 1_200} for k in (7, 8, 9, 9)]
    items = [("input", r) for r in rows]
    if batch:
        items = [("input", pa.RecordBatch.from_pylist(rows, schema=arrow_schema_of(ddl)))]
    again.run_window(items, window=1)
    assert [r["id"] for r in again.sink("unique").tuples] == [key(9)]
    assert [r["id"] for r in again.sink("duplicate").tuples] == [key(7), key(8), key(9)]
    assert again.operator.keys_in_seen_to == 1
    again.run_window([("input", {"id": key(1), "t": 7_000})], window=2)  # bucket 1 expires
    assert again.operator.keys_in_seen_to is None
    again.teardown()


def test_str_keys_of_every_length_decide_as_tuples(tmp_path: Path) -> None:
    """Keys up to 64 bytes (held in the key sets) and longer ones (kept in seen, each one
    entry) in one batch: it decides them as its tuples one at a time."""
    ids = ["a", "a\x00", "x" * 64, "x" * 65, "y" * 70_000, "a", "x" * 65, "y" * 70_000, ""]
    ids += ["x" * 64, "\u00e9" * 33]
    rows = [{"id": k, "t": 1_000} for k in ids]
    schema = pa.schema([("id", pa.string()), ("t", pa.int64())])

    def make():
        return TimeBasedDedup(key="id", time="t", schema="id string, t bigint")

    tuples, batches = _both_ways(make, [rows, rows[:4]], tmp_path, schema)
    assert batches == tuples
    unique = ["a", "a\x00", "x" * 64, "x" * 65, "y" * 70_000, "", "\u00e9" * 33]
    assert [r["id"] for r in tuples["unique"][0]] == unique
    assert len(tuples["duplicate"][0]) == 4 and len(tuples["duplicate"][1]) == 4


def test_one_long_key_does_not_widen_the_runs(tmp_path: Path) -> None:
    """A run is as wide as its longest key: a key over 64 bytes is kept in seen, so the
    runs of its bucket stay as narrow as the short keys (it once made 20k keys 1.2 GB)."""
    h = _harness(TimeBasedDedup(key="id", time="t", schema="id string, t bigint"), tmp_path)
    ids = [f"k{i}" for i in range(20_000)] + ["z" * 60_000]
    batch = pa.RecordBatch.from_pydict({"id": ids, "t": [1_000] * len(ids)})
    h.run_window([("input", batch)])
    strs = h.operator._strs
    runs = [r for _, v in strs._state.key_set_views.of(strs._prefix) for r in v.runs]
    assert sum(len(r) for r in runs) == 20_000 and max(r.dtype.itemsize for r in runs) == 7
    assert h.operator._seen.contains("z" * 60_000, 1_000)
    assert len(h.sink("unique").tuples) == len(ids)
    h.teardown()


def test_a_checkpoint_from_before_the_key_sets_inside_an_application_window(
    tmp_path: Path,
) -> None:
    """A checkpoint taken inside an application window holds keys up to its window_max (past
    max_time, or with no max_time yet): those are looked up in seen too."""
    make = lambda: TimeBasedDedup(key="id", time="t", expire_after=5_000, bucket_span=1_000)  # noqa: E731
    ctx = OperatorContext(name="dedup", checkpoint=str(tmp_path))
    h = OperatorHarness(make(), ctx)
    h.begin_window(0)
    op = h.operator
    assert op._seen.put(7, 1_500, 1)  # what the older operator wrote
    op.window_max = 1_500
    h.end_window()  # the managed state's checkpoint of the streaming window
    snapshot = pickle.loads(h.checkpoint())
    fields = snapshot["operator"]["fields"]
    # as the operator's fields are inside an application window: no max_time yet
    fields.update(max_time=None, window_max=1_500)
    del fields["keys_in_seen_to"]
    h.teardown()
    again = OperatorHarness.restored(make(), pickle.dumps(snapshot), ctx)
    again.run_window([("input", {"id": 7, "t": 1_500}), ("input", {"id": 8, "t": 1_500})])
    assert [r["id"] for r in again.sink("duplicate").tuples] == [7]
    assert [r["id"] for r in again.sink("unique").tuples] == [8]
    again.teardown()


@pytest.mark.slow
def test_keys_beyond_the_memory_budget_spill_and_still_dedup(tmp_path: Path) -> None:
    # 150k keys * ~146 bytes of overhead each is well past an 8 MiB budget
    h = _harness(BoundedDedup(key="id", max_keys=1_000_000, budget_bytes=8 << 20), tmp_path)
    n = 150_000
    batch = pa.RecordBatch.from_pydict({"id": list(range(n))})
    h.run_window([("input", batch)])
    h.run_window([("input", pa.RecordBatch.from_pydict({"id": [0, 1, n - 1, n]}))])
    assert len(h.sink("unique").per_window[0]) == n
    assert [r["id"] for r in h.sink("duplicate").per_window[1]] == [0, 1, n - 1]
    assert [r["id"] for r in h.sink("unique").per_window[1]] == [n]
    assert n * 146 > (8 << 20)
    h.teardown()


# -- the batch paths decide exactly as one tuple at a time -----------------------------------
_EVENTS = st.lists(
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 30_000)), max_size=40),
    min_size=1,
    max_size=4,
)


def _both_ways(make, windows, tmp_path: Path, schema: pa.Schema) -> tuple[list, list]:
    """Per window and port, what a harness fed tuples and one fed one batch per window emit."""
    out = []
    for kind in ("tuples", "batch"):
        h = OperatorHarness(make(), OperatorContext(name="d", checkpoint=str(tmp_path / kind)))
        for rows in windows:
            items = [("input", r) for r in rows]
            if kind == "batch" and rows:
                items = [("input", pa.RecordBatch.from_pylist(rows, schema=schema))]
            h.run_window(items)
        out.append({p: dict(s.per_window) for p, s in h.sinks.items()})
        h.teardown()
    return out[0], out[1]


_KINDS = {  # the key column's type, and the key of an int drawn by _EVENTS
    "int": ("bigint", pa.int64(), lambda i: i),
    # empty, ending in NULs (NumPy's S values drop those), non-ASCII, long-ish
    "str": ("string", pa.string(), lambda i: ["", "a", "a\x00", "\u00e9"][i % 4] + "x" * (i // 4)),
    "bytes": ("binary", pa.binary(), lambda i: b"\x00" * (i % 3) + bytes([i])),
    "float": ("double", pa.float64(), lambda i: i / 2),  # one key at a time, in seen
}


@settings(max_examples=40, deadline=None)
@given(events=_EVENTS, kind=st.sampled_from(sorted(_KINDS)))
def test_time_based_batches_decide_as_tuples(events, kind: str) -> None:
    """Repeats in one bucket and across buckets, late (expired) events, several windows."""
    ddl, arrow, key = _KINDS[kind]
    schema = pa.schema([("id", arrow), ("t", pa.int64())])
    windows = [[{"id": key(i), "t": t} for i, t in rows] for rows in events]
    make = lambda: TimeBasedDedup(  # noqa: E731
        key="id", time="t", expire_after=8_000, bucket_span=2_000, schema=f"id {ddl}, t bigint"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tuples, batches = _both_ways(make, windows, Path(tmp), schema)
    assert batches == tuples
    # and both are right: a model of the semantics, one tuple at a time
    seen, newest, labels = set(), None, {"unique": {}, "duplicate": {}, "expired": {}}
    for w, rows in enumerate(windows):
        top = newest
        for r in rows:
            if newest is not None and r["t"] < newest - 8_000:
                port = "expired"
            else:
                pair = (r["t"] // 2_000, type(r["id"]), r["id"])
                port = "duplicate" if pair in seen else "unique"
                seen.add(pair)
                top = r["t"] if top is None else max(top, r["t"])
            labels[port].setdefault(w, []).append(r)
        newest = top
    assert {p: tuples[p] for p in labels} == labels


@settings(max_examples=40, deadline=None)
@given(events=_EVENTS, max_keys=st.integers(1, 8))
def test_bounded_batches_decide_as_tuples(events, max_keys: int) -> None:
    """With few keys remembered, keys are evicted inside a batch and come back unique."""
    schema = pa.schema([("id", pa.int64()), ("t", pa.int64())])
    windows = [[{"id": i, "t": t} for i, t in rows] for rows in events]

    def make() -> BoundedDedup:
        return BoundedDedup(key="id", max_keys=max_keys, schema="id bigint, t bigint")

    with tempfile.TemporaryDirectory() as tmp:
        tuples, batches = _both_ways(make, windows, Path(tmp), schema)
        assert batches == tuples
        # and the state left behind is the same: a next window of tuples decides alike
        probe = [{"id": i, "t": 0} for i in range(13)]
        after = []
        for kind in ("tuples", "batch"):
            h = OperatorHarness(make(), OperatorContext(name="d", checkpoint=f"{tmp}/{kind}"))
            for rows in windows:
                batch = [("input", pa.RecordBatch.from_pylist(rows, schema=schema))] if rows else []
                h.run_window([("input", r) for r in rows] if kind == "tuples" else batch)
            h.run_window([("input", r) for r in probe])
            after.append((h.sink("unique").per_window[len(windows)], len(h.operator._keys)))
            h.teardown()
    assert after[0] == after[1]


def test_bad_keys_and_times_reach_the_error_port_from_a_batch_as_from_tuples(
    tmp_path: Path,
) -> None:
    # a list key (not storable) failed the whole batch; a NaN time raised a bare ValueError
    t0 = dt.datetime(2024, 1, 1)
    cases = [
        (
            lambda: TimeBasedDedup(key="id", time="t", expire_after=10_000),
            [{"id": [1], "t": t0}, {"id": [1], "t": t0}],
        ),
        (
            lambda: TimeBasedDedup(key="id", time="t"),
            [{"id": 1, "t": float("nan")}, {"id": 2, "t": 5.0}],
        ),
        (lambda: BoundedDedup(key="id", max_keys=3), [{"id": [1]}, {"id": [2]}]),
    ]
    for n, (make, rows) in enumerate(cases):
        got = []
        for m, inputs in enumerate(deliveries("input", rows)):
            h = _harness(make(), tmp_path / f"{n}-{m}")
            h.run_window(inputs)
            got.append(([e["reason"] for e in h.sink("error").tuples], h.sink("unique").tuples))
        assert got[0] == got[1] == got[2], n
        reasons, unique = got[0]
        assert len(reasons) + len(unique) == len(rows) and reasons, n


def test_a_batch_of_microsecond_times_is_deduplicated_as_its_tuples(tmp_path: Path) -> None:
    # a cast to milliseconds refused a sub-millisecond part and failed the batch
    t0 = dt.datetime(2024, 1, 1, 0, 0, 0, 1_500)
    rows = [{"id": 1, "t": t0}, {"id": 1, "t": t0}, {"id": 2, "t": t0}]
    schema = pa.schema([("id", pa.int64()), ("t", pa.timestamp("us"))])
    got = []
    for m, inputs in enumerate(deliveries("input", rows, schema=schema)):
        h = _harness(TimeBasedDedup(key="id", time="t", expire_after=10_000), tmp_path / str(m))
        h.run_window(inputs)
        got.append((len(h.sink("unique").tuples), len(h.sink("duplicate").tuples)))
    assert got[0] == got[1] == got[2] == (2, 1)


def test_an_event_time_beyond_64_bits_goes_to_the_error_port(tmp_path: Path) -> None:
    # its time bucket did not fit the state's 64-bit integers: an OverflowError failed the
    # window on every replay
    h = _harness(TimeBasedDedup(key="id", time="t"), tmp_path)
    h.run_window([("input", {"id": 1, "t": 2**80}), ("input", {"id": 2, "t": 5})])
    (error,) = h.sink("error").tuples
    assert error["reason"] == f"{2**80} ms is outside the 64-bit range of event times"
    assert h.sink("unique").tuples == [{"id": 2, "t": 5}]
    h.teardown()


@pytest.mark.parametrize("fused", [True, False])
def test_a_one_column_stream_is_keyed_by_its_value_fused_or_routed(
    tmp_path: Path, fused: bool
) -> None:
    # a typed one-column stream reaches a fused operator as dicts of one entry and a routed
    # one as a batch: with key=None the dicts went to the error port (a dict is not a key)
    # and the batch's rows were keyed by their value
    words = ["a", "b", "a", "c", "b"]
    h = _harness(BoundedDedup(max_keys=10), tmp_path)
    if fused:
        h.run_window([("input", {"word": w}) for w in words])
    else:
        h.run_window([("input", pa.RecordBatch.from_pydict({"word": words}))])
    assert h.sink("error").tuples == []
    assert [r["word"] for r in h.sink("unique").tuples] == ["a", "b", "c"]
    assert [r["word"] for r in h.sink("duplicate").tuples] == ["a", "b"]
    h.teardown()
