"""Key sets (sorted runs per time bucket): merges, views, what each kind holds.

The random histories against a model are in ``test_state_properties.py`` and the
repartitioning in ``test_state_repartition.py``; these are the paths a model run may
take too rarely to show a cost or an error message.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from malhar.util.state import key_sets as key_sets_module
from malhar.util.state.key_sets import MAX_RUNS, TimeBucketedKeySets


def test_merges_keep_few_runs_and_rewrite_each_key_a_few_times(root, monkeypatch) -> None:
    """200 runs of 100 keys into one bucket: the binary-counter merges keep a few runs and
    write each key about log2(200) = 7.6 times in all (7.5 here), not once per run added."""
    monkeypatch.setattr(key_sets_module, "SMALL_BATCH", 1)
    written = []
    real = TimeBucketedKeySets._store_run

    def counting(self, b, v, keys):
        written.append(len(keys))
        return real(self, b, v, keys)

    monkeypatch.setattr(TimeBucketedKeySets, "_store_run", counting)
    ms = root.new()
    ms.restore(-1)
    sets = ms.int_sets("ints", 100)
    for i in range(200):
        keys = np.arange(i * 100, i * 100 + 100, dtype=np.int64)
        assert sets.add_many(keys, np.zeros(100, np.int64)).all()
        assert len(sets._bucket(0).runs) <= MAX_RUNS
    assert 20_000 * 7 <= sum(written) <= 20_000 * 8
    ms.checkpoint(0)
    ms.restore(0)
    assert len(sets.items()) == 20_000
    again = np.arange(0, 40_000, 100, dtype=np.int64)
    assert sets.add_many(again, np.zeros(400, np.int64)).sum() == 200


def test_a_dropped_bucket_keeps_its_tail_and_is_read_again(root) -> None:
    ms = root.new()
    ms.restore(-1)
    sets = ms.str_sets("strs", 10)
    sets.view_bytes = 1  # every bucket but the one in use is dropped
    assert sets.add("a", 5) and sets.add("b\x00", 5)  # tails of bucket 0
    assert sets.add("a", 15)  # bucket 1 in use: bucket 0's tail becomes a run, dropped
    assert [b for b, _ in ms.key_set_views.of(sets._prefix)] == [1]
    assert not sets.add("a", 5) and not sets.add("b\x00", 5) and sets.add("b", 5)
    ms.checkpoint(0)
    ms.restore(0)
    assert sets.items() == [(0, "a"), (0, "b"), (0, "b\x00"), (10, "a")]


def test_each_kind_holds_its_own_keys_and_says_which_it_cannot(root) -> None:
    ms = root.new()
    ms.restore(-1)
    ints, strs, raw = ms.int_sets("i", 10), ms.str_sets("s", 10), ms.bytes_sets("b", 10)
    assert ints.key(True) is None and ints.key(2**63) is None and ints.key(1.0) is None
    assert strs.key(b"a") is None and raw.key("a") is None
    assert strs.key("x" * 65) is None and strs.key("x" * 64) is not None
    assert strs.key("\u00e9" * 33) is None and strs.key("\u00e9" * 32) is not None  # UTF-8
    with pytest.raises(TypeError, match=r"TimeBucketedIntSets 'i' cannot hold the key 1\.5"):
        ints.add(1.5, 0)
    assert strs.add("a", 0) and raw.add(b"a", 0) and ints.add(1, 0)  # three different keys
    with pytest.raises(ValueError, match="3 keys but 2 buckets"):
        ints.add_many(np.arange(3, dtype=np.int64), np.zeros(2, np.int64))
    # arrays that are not held keys are refused, not stored garbled
    with pytest.raises(TypeError, match="an int64 array of keys, got float64"):
        ints.add_many(np.array([1.5, 1.0]), np.zeros(2, np.int64))
    with pytest.raises(TypeError, match=r"the held keys that keys_of makes .* got <U1"):
        strs.add_many(np.array(["a"]), np.zeros(1, np.int64))
    with pytest.raises(TypeError, match="at most 65 bytes per key"):
        raw.add_many(np.array([b"x" * 70]), np.zeros(1, np.int64))


def test_a_pickled_structure_carries_no_views(root) -> None:
    ms = root.new()
    ms.restore(-1)
    sets = ms.int_sets("i", 10)
    sets.add(1, 0)
    assert ms.key_set_views.held[(sets._prefix, 0)][1].tail == {1}
    copy = pickle.loads(pickle.dumps(sets))  # as inside an operator's pickled configuration
    views = copy._state.key_set_views
    assert not views.held and views.total == 0 and copy.name == "i"


def test_the_views_stay_within_their_bound_while_buckets_are_written(root) -> None:
    """The bound holds after writes too, not only when a bucket is read, and it is one bound
    for all the key sets of a state (the dedup has three)."""
    ms = root.new()
    ms.restore(-1)
    ints, strs = ms.int_sets("i", 10), ms.str_sets("s", 10)
    assert ms.key_set_views.limit == ms.budget_bytes // 4
    ints.view_bytes = 200_000  # one bound: the str sets see it too
    assert strs.view_bytes == 200_000
    for i in range(40):  # two buckets of each, written in turns: nothing is read again
        keys = np.arange(i * 5_000, i * 5_000 + 5_000, dtype=np.int64)
        ints.add_many(keys, np.full(5_000, i % 2, np.int64))
        for k in range(i * 50, i * 50 + 50):
            strs.add(f"k{k}", 10 * (i % 2))
        views = ms.key_set_views
        in_use = max(v.nbytes for _, v in views.held.values())
        assert views.total <= 200_000 + in_use
        assert views.total == sum(v.nbytes for _, v in views.held.values())
    ms.checkpoint(0)
    ms.restore(0)
    assert len(ints.items()) == 200_000 and len(strs.items()) == 2_000


def test_a_bucket_at_the_end_of_the_int64_range(root) -> None:
    ms = root.new()
    ms.restore(-1)
    sets = ms.int_sets("i", 1)
    top = 2**63 - 1
    assert sets.add(5, top) and not sets.add(5, top) and sets.contains(5, top)
    assert sets.add_many(np.array([5, 6], np.int64), np.array([top, top], np.int64)).tolist() == [
        False,
        True,
    ]
    ms.checkpoint(0)
    ms.restore(0)
    assert sets.items() == [(top, 5), (top, 6)]
