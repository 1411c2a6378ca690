"""The many-key API (``get_many``/``contains_many``/``put_many``/``delete_many`` and the
manager's ``get_many_raw``/``put_many_raw``): the same answers and the same state as the
one-key loop, whichever layer holds a key (overlay, spilled writes, range deletes, read
cache, local store), in several buckets, with repeated keys."""

from __future__ import annotations

import random
import tempfile

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malhar.util.state import (
    AUTO_KEY,
    BYTES,
    INT,
    INT_VALUE,
    STR,
    ManagedState,
    StateCodecError,
)
from malhar.util.state import manager as manager_module
from malhar.util.state.arrow_keys import encode_keys


def _tb(ms):
    return ms.time_buckets("tb", 10, STR, INT_VALUE)


def test_time_buckets_many_in_several_buckets_with_repeats(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    tb = _tb(ms)
    keys = ["a", "b", "a", "c", "a"]
    times = [5, 5, 15, 25, 5]  # "a" in buckets 0 and 1, and twice in bucket 0
    assert tb.put_many(keys, times, [1, 2, 3, 4, 5]) == [True] * 5
    assert tb.get("a", 5) == 5 and tb.get("a", 15) == 3  # in order: the last put wins
    assert tb.get_many(["a", "a", "b", "b", "zz"], [9, 19, 0, 10, 0], -1) == [5, 3, 2, -1, -1]
    assert tb.contains_many(["c", "c"], [20, 30]) == [True, False]
    assert tb.contains_many(["a", "b"], 5) == [True, True], "one time for every key"
    assert tb.put_many(["d", "e"], 35, fill=7) == [True, True]
    assert tb.get_many(["d", "e"], [30, 39]) == [7, 7]
    tb.expire_before(10)  # bucket 0 expires: puts refused, gets answer the default
    assert tb.put_many(["x", "y"], [3, 13], [1, 1]) == [False, True]
    assert tb.get_many(["a", "a", "y"], [5, 15, 13], None) == [None, 3, 1]
    assert tb.put_many([], []) == [] and tb.get_many([], 0) == []
    ms.checkpoint(0)
    assert sorted(tb.items()) == [
        (10, "a", 3),
        (10, "y", 1),
        (20, "c", 4),
        (30, "d", 7),
        (30, "e", 7),
    ]


def test_encoded_keys_are_the_codec_bytes(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    tb, m = _tb(ms), ms.map("m", AUTO_KEY, INT_VALUE)
    eks = encode_keys(STR, pa.array(["p", "q\x00"]))
    assert tb.put_many(eks, [1, 2], fill=1, encoded=True) == [True, True]
    assert tb.contains_many(["p", "q\x00", "q"], [0, 0, 0]) == [True, True, False]
    m.put_many(encode_keys(AUTO_KEY, pa.array([3, -4])), [30, -40], encoded=True)
    assert m.get_many([3, -4, 5]) == [30, -40, None] and len(m) == 2


def test_map_many_keeps_len_exact(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    m = ms.map("m", INT, INT_VALUE)
    m[1] = 10
    m.put_many([1, 2, 2, 3], [11, 20, 21, 30])
    assert len(m) == 3 and m.get_many([1, 2, 3, 4], 0) == [11, 21, 30, 0]
    assert m.contains_many([3, 4, 3]) == [True, False, True]
    ms.checkpoint(0)
    assert m.delete_many([2, 4, 2]) == 1 and len(m) == 2 and dict(m.items()) == {1: 11, 3: 30}
    with pytest.raises(ValueError):
        m.put_many([1], [1, 2])
    with pytest.raises(StateCodecError):
        m.put_many([5, "six"], [5, 6])
    assert 5 not in m, "a key the codec refuses fails the call before anything is written"
    ms.checkpoint(1)
    ms.restore(0)
    assert dict(m.items()) == {1: 11, 2: 21, 3: 30} and len(m) == 3


def test_spilled_checkpointed_and_cached_keys(new_state) -> None:
    """Keys in every layer at once: checkpointed (local store, cached or not), spilled
    writes of this window (values and deletes), the in-memory overlay, a range delete."""
    ms = new_state(budget_bytes=8 << 20)
    ms._py_budget = 16 << 10  # spills every ~50 writes
    ms.restore(-1)
    tb, m = _tb(ms), ms.map("m", INT, INT_VALUE)
    tb.put_many([f"k{i}" for i in range(300)], [i % 40 for i in range(300)], list(range(300)))
    m.put_many(list(range(300)), list(range(300)))
    ms.checkpoint(0)
    ms._cache.clear()
    assert m.get_many([0, 1]) == [0, 1]  # now cached; the others are only in the store
    spills = ms.stats["spills"]
    m.put_many(list(range(300, 600)), [-1] * 300)  # spills: in the pending area
    assert m.delete_many(list(range(0, 600, 3))) == 200  # spilled deletes of stored keys
    assert ms.stats["spills"] > spills and ms._pending
    m[1000] = 1  # in the overlay
    tb.expire_before(20)  # a range delete over the first two buckets
    keys = [0, 1, 2, 3, 299, 300, 301, 303, 599, 1000, 5000, 1, 1]
    expect = [m.get(k) for k in keys]
    assert m.get_many(keys) == expect == [None, 1, 2, None, 299, None, -1, None, -1, 1, None, 1, 1]
    assert m.contains_many(keys) == [v is not None for v in expect]
    names = [f"k{i}" for i in range(0, 300, 7)]
    times = [i % 40 for i in range(0, 300, 7)]
    assert tb.get_many(names, times) == [tb.get(k, t) for k, t in zip(names, times, strict=True)]
    assert len(m) == 300 + 300 - 200 + 1 == sum(1 for _ in m)
    ms.checkpoint(1)
    ms.restore(1)
    assert m.get_many(keys) == expect and len(m) == 401


def test_absences_can_stay_out_of_the_read_cache(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    tb = _tb(ms)
    tb.put_many(["a"], [1], [1])
    ms.checkpoint(0)
    ms._cache.clear()
    assert tb.contains_many(["a", "b"], 1, cache_absent=False) == [True, False]
    assert len(ms._cache) == 1, "the found key is cached, the absent one is not"
    assert tb.contains_many(["a", "b"], 1) == [True, False] and len(ms._cache) == 2
    with pytest.raises(ValueError):
        tb.get_many(["a", "b"], [1])


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "delete", "get", "expire", "checkpoint", "clear_cache"]),
            st.lists(st.tuples(st.integers(0, 40), st.integers(0, 60)), max_size=30),
        ),
        max_size=25,
    ),
    seed=st.integers(0, 1000),
)
def test_many_equals_the_one_key_loop(ops, seed) -> None:
    """Two managers with tiny overlays (they spill) get the same history, one key at a time
    and many at a time: every answer and the final state are equal."""
    rng = random.Random(seed)
    # the many-key reads consult the key filter whatever their size (by default from 32 keys)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(manager_module, "_FILTER_MIN_KEYS", 1)
        pair = [
            ManagedState(f"{tmp}/ckpt", f"op{i}", 0, local_dir=f"{tmp}/local{i}") for i in (1, 2)
        ]
        try:
            _replay(pair, ops, rng)
        finally:
            for ms in pair:
                ms.close()


def _replay(pair: list[ManagedState], ops: list, rng: random.Random) -> None:
    one, many = pair
    for ms in pair:
        ms._py_budget = 4 << 10
        ms.restore(-1)
    w = 0
    for op, pairs in ops:
        keys = [k for k, _ in pairs]
        times = [t for _, t in pairs]
        vals = [rng.randint(-9, 9) for _ in pairs]
        m1, m2 = one.map("m", INT, INT_VALUE), many.map("m", INT, INT_VALUE)
        t1, t2 = _tb(one), _tb(many)
        if op == "put":
            for k, v in zip(keys, vals, strict=True):
                m1[k] = v
            m2.put_many(keys, vals)
            got = [t1.put(str(k), t, v) for k, t, v in zip(keys, times, vals, strict=True)]
            assert t2.put_many([str(k) for k in keys], times, vals) == got
        elif op == "delete":
            gone = 0
            for k in keys:
                if k in m1:
                    del m1[k]
                    gone += 1
            assert m2.delete_many(keys) == gone
        elif op == "get":
            assert m2.get_many(keys, "d") == [m1.get(k, "d") for k in keys]
            assert m2.contains_many(keys) == [k in m1 for k in keys]
            names = [str(k) for k in keys]
            assert t2.get_many(names, times) == [
                t1.get(k, t) for k, t in zip(names, times, strict=True)
            ]
        elif op == "expire" and times:
            t1.expire_before(times[0])
            t2.expire_before(times[0])
        elif op == "checkpoint":
            one.checkpoint(w)
            many.checkpoint(w)
            w += 1
        else:
            one._cache.clear()
            many._cache.clear()
        assert len(m1) == len(m2)
    for ms in (one, many):
        ms.checkpoint(w)
        ms.restore(w)
    assert dict(one.map("m", INT, INT_VALUE).items()) == dict(many.map("m", INT, INT_VALUE).items())
    assert list(_tb(one).items()) == list(_tb(many).items())


@settings(max_examples=40, deadline=None)
@given(
    rounds=st.lists(
        st.lists(st.tuples(st.integers(0, 30), st.integers(0, 60)), max_size=40), max_size=6
    ),
    expire=st.integers(0, 30),
    one_time=st.booleans(),
)
def test_add_many_equals_the_one_key_loop(rounds, expire, one_time) -> None:
    """``add_many`` (stored where absent) against contains/put one key at a time, with
    repeats, expired buckets, spills (tiny overlays) and checkpoints between the rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        pair = [
            ManagedState(f"{tmp}/ckpt", f"op{i}", 0, local_dir=f"{tmp}/local{i}") for i in (1, 2)
        ]
        try:
            for ms in pair:
                ms._py_budget = 4 << 10
                ms.restore(-1)
            t1, t2 = _tb(pair[0]), _tb(pair[1])
            for t in (t1, t2):
                t.expire_before(expire)
            for w, pairs in enumerate(rounds):
                names = [str(k) for k, _ in pairs]
                times = [t for _, t in pairs]
                if one_time:
                    times = 42
                each = times if isinstance(times, list) else [times] * len(names)
                got = t2.add_many(names, times, 7)
                want = [
                    not t1.contains(k, t) and t1.put(k, t, 7)
                    for k, t in zip(names, each, strict=True)
                ]
                assert got == want
                for ms in pair:
                    ms.checkpoint(w)
            assert list(t1.items()) == list(t2.items())
        finally:
            for ms in pair:
                ms.close()


@pytest.mark.parametrize("fill", [0, 3 << 10, 40 << 10])
def test_bulk_writes_of_new_keys_spill_where_the_loop_does(new_state, fill) -> None:
    """``put_many_raw`` of many new keys (dict updates between the spill points) leaves the
    same overlay, spill count and stored state as ``put_raw`` one at a time."""
    pair = [new_state(budget_bytes=8 << 20) for _ in range(2)]
    for ms in pair:
        ms._py_budget = 64 << 10
        ms.restore(-1)
        ms.put_raw(b"\x09pad", b"x" * fill)  # the overlay does not start empty
    rng = random.Random(fill)
    items = [(b"\x09" + rng.randbytes(rng.randint(1, 30)), rng.randbytes(3)) for _ in range(3000)]
    items = list(dict(items).items())
    loop, bulk = pair
    for ik, v in items:
        loop.put_raw(ik, v)
    bulk.put_many_raw(items)
    assert bulk.stats["spills"] == loop.stats["spills"] > 0
    assert bulk._overlay == loop._overlay and bulk._overlay_bytes == loop._overlay_bytes
    assert bulk.get_many_raw([ik for ik, _ in items]) == [v for _, v in items]
    # repeated keys, keys already in the overlay, deletes: the loop's path
    again = [(ik, None) for ik, _ in items[:300]] + items[:300]
    for ik, v in again:
        loop.put_raw(ik, v)
    bulk.put_many_raw(again)
    assert bulk._overlay == loop._overlay and bulk.stats["spills"] == loop.stats["spills"]
    # one value for many keys: new keys in bulk, then keys already there (the loop's path)
    fresh = [b"\x0a" + rng.randbytes(rng.randint(1, 30)) for _ in range(3000)]
    fresh = list(dict.fromkeys(fresh))
    for keys in (fresh, fresh[:500] + [b"\x0b"] * 300):
        for ik in keys:
            loop.put_raw(ik, b"v")
        bulk.put_fill_many_raw(keys, b"v")
        assert bulk._overlay == loop._overlay and bulk._overlay_bytes == loop._overlay_bytes
        assert bulk.stats["spills"] == loop.stats["spills"]


# -- Arrow arrays to codec bytes ------------------------------------------------------------
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50))
def test_arrow_ints_encode_as_the_codecs(values) -> None:
    arr = pa.array(values, pa.int64())
    for codec in (AUTO_KEY, INT):
        assert encode_keys(codec, arr) == [codec.encode(v) for v in values]


@given(st.lists(st.text(), max_size=30), st.booleans())
def test_arrow_strings_encode_as_the_codecs(values, large) -> None:
    arr = pa.array(values, pa.large_string() if large else pa.string())
    for codec in (AUTO_KEY, STR):
        assert encode_keys(codec, arr) == [codec.encode(v) for v in values]
    raw = pa.array([v.encode() for v in values], pa.binary())
    for codec in (AUTO_KEY, BYTES):
        assert encode_keys(codec, raw) == [codec.encode(v.encode()) for v in values]


def test_arrow_types_without_a_vectorized_form() -> None:
    assert encode_keys(AUTO_KEY, pa.array([1, None])) is None  # nulls: the Python path
    assert encode_keys(AUTO_KEY, pa.array([2**64 - 1], pa.uint64())) is None  # overflow
    assert encode_keys(AUTO_KEY, pa.array([1.5])) is None
    assert encode_keys(STR, pa.array([1])) is None and encode_keys(INT, pa.array(["a"])) is None
    small = pa.array([0, 200], pa.uint8())
    assert encode_keys(AUTO_KEY, small) == [AUTO_KEY.encode(0), AUTO_KEY.encode(200)]
    chunked = pa.chunked_array([[1], [2, 3]])
    assert encode_keys(INT, chunked) == [INT.encode(v) for v in (1, 2, 3)]
