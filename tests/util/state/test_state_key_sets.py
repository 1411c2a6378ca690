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
    assert list(sets._views) == [1]
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
    assert strs.key("x" * 65_536) is None and strs.key("x" * 65_535) is not None
    with pytest.raises(TypeError, match=r"TimeBucketedIntSets 'i' cannot hold the key 1\.5"):
        ints.add(1.5, 0)
    assert strs.add("a", 0) and raw.add(b"a", 0) and ints.add(1, 0)  # three different keys
    with pytest.raises(ValueError, match="3 keys but 2 buckets"):
        ints.add_many(np.arange(3), np.zeros(2, np.int64))


def test_a_pickled_structure_carries_no_views(root) -> None:
    ms = root.new()
    ms.restore(-1)
    sets = ms.int_sets("i", 10)
    sets.add(1, 0)
    assert sets._views[0].tail == {1}
    copy = pickle.loads(pickle.dumps(sets))  # as inside an operator's pickled configuration
    assert len(copy._views) == 0 and copy._view_total == 0 and copy.name == "i"
