"""The key filter of the managed state (``malhar.util.state.keyfilter``) and its upkeep by the
manager: never a false negative (a key the store holds always passes), rebuilt after every
restore (including a local store caught up or rebuilt from the checkpoint files, whose keys
this instance never wrote), and dropped and retried when it outgrows its budget."""

from __future__ import annotations

import random
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar.util.state import INT, INT_VALUE, ManagedState
from malhar.util.state import manager as manager_module
from malhar.util.state.keyfilter import KeyFilter, key_hashes


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.lists(st.binary(max_size=24), max_size=300), max_size=8),
    first=st.integers(1, 500),
)
def test_no_false_negatives_across_layers(chunks, first) -> None:
    f = KeyFilter(first)
    added: list[bytes] = []
    for chunk in chunks:
        f.add(chunk)
        added += chunk
        assert f.may_contain(added).all()
    assert len(f) == len(added)
    assert f.may_contain([]).shape == (0,)


def test_layers_grow_and_false_positives_stay_rare() -> None:
    rng = random.Random(7)
    f = KeyFilter(1000)
    keys = [rng.randbytes(20) for _ in range(20_000)]
    for i in range(0, len(keys), 3000):
        f.add(keys[i : i + 3000])
    assert f.layers > 1, "a full layer is followed by a bigger one"
    assert f.may_contain(keys).all()
    others = [rng.randbytes(21) for _ in range(20_000)]
    assert f.may_contain(others).mean() < 0.08
    assert np.array_equal(f.may_contain_hashes(key_hashes(keys)), f.may_contain(keys))


@pytest.fixture
def always_filter(monkeypatch):
    """Every many-key read consults the filter (by default only reads of 32 keys or more)."""
    monkeypatch.setattr(manager_module, "_FILTER_MIN_KEYS", 1)


def _open(tmp: str, name: str = "op", local: str = "local", **kw) -> ManagedState:
    ms = ManagedState(f"{tmp}/ckpt", name, 0, local_dir=f"{tmp}/{local}", **kw)
    return ms


def test_rebuilt_after_restore_from_a_store_this_instance_never_wrote(always_filter) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one = _open(tmp)
        one.restore(-1)
        m = one.map("m", INT, INT_VALUE)
        m.put_many(list(range(0, 2000, 2)), list(range(1000)))
        one.checkpoint(0)
        assert m.get_many([0, 1, 2]) == [0, None, 1]
        one.close()
        # the same local store (caught up), then a fresh one (rebuilt from the files)
        for local in ("local", "other"):
            two = _open(tmp, local=local)
            two.restore(0)
            m2 = two.map("m", INT, INT_VALUE)
            keys = list(range(2000))
            assert m2.get_many(keys) == [k // 2 if k % 2 == 0 else None for k in keys]
            assert two.stats["filter_builds"] == 1
            assert two._keys.filter is not None
            two.close()


def test_rebuilt_when_a_live_instance_catches_up_with_another_workers_files(
    always_filter,
) -> None:
    """Worker A holds a built filter; worker B (another local store) goes on from A's state
    and checkpoints new keys; A, told to restore B's window, catches its store up from B's
    file: its filter must not answer from before."""
    with tempfile.TemporaryDirectory() as tmp:
        a = _open(tmp, local="a")
        a.restore(-1)
        ma = a.map("m", INT, INT_VALUE)
        ma.put_many(list(range(100)), list(range(100)))
        a.checkpoint(0)
        assert ma.get_many(list(range(100, 200))) == [None] * 100
        assert a._keys.filter is not None
        b = _open(tmp, local="b")
        b.restore(0)
        b.map("m", INT, INT_VALUE).put_many(list(range(100, 200)), [7] * 100)
        b.checkpoint(1)
        b.close()
        a.restore(1)
        assert a.stats["files_applied"] == 1, "caught up, not rebuilt"
        assert ma.get_many(list(range(95, 200))) == list(range(95, 100)) + [7] * 100
        a.close()


def test_kept_by_a_restore_that_applies_nothing(always_filter) -> None:
    """The engine may restore the window the manager is at before every task: no rescan."""
    with tempfile.TemporaryDirectory() as tmp:
        ms = _open(tmp)
        ms.restore(-1)
        m = ms.map("m", INT, INT_VALUE)
        m.put_many(list(range(100)), list(range(100)))
        ms.checkpoint(0)
        m.put_many(list(range(100, 200)), [1] * 100)  # dropped by the restore below
        assert m.get_many([0, 1000]) == [0, None]
        ms.restore(0)
        ms.restore(0)
        assert m.get_many(list(range(98, 102))) == [98, 99, None, None]
        assert ms.stats["filter_builds"] == 1
        ms.close()


def test_kept_up_to_date_by_spills_and_checkpoints(always_filter) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ms = _open(tmp)
        ms._py_budget = 16 << 10  # spills every ~50 writes
        ms.restore(-1)
        m = ms.map("m", INT, INT_VALUE)
        assert m.get_many([1, 2]) == [None, None]  # builds the (empty) filter
        builds = ms.stats["filter_builds"]
        model: dict[int, int] = {}
        rng = random.Random(3)
        for w in range(6):
            ks = [rng.randrange(5000) for _ in range(400)]
            m.put_many(ks, [w] * len(ks))
            model.update(dict.fromkeys(ks, w))
            gone = [rng.randrange(5000) for _ in range(50)]
            m.delete_many(gone)
            for k in gone:
                model.pop(k, None)
            probe = list(range(0, 5000, 7))
            assert m.get_many(probe) == [model.get(k) for k in probe]
            ms.checkpoint(w)
            assert m.get_many(probe) == [model.get(k) for k in probe]
        assert ms.stats["spills"] > 0
        assert ms.stats["filter_builds"] == builds, "spills and checkpoints add to it, no rescan"
        ms.close()


def test_over_its_budget_it_is_dropped_and_retried(always_filter) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ms = _open(tmp)
        ms.restore(-1)
        ms._keys.budget = 2048  # ~580 keys at most
        m = ms.map("m", INT, INT_VALUE)
        m.put_many(list(range(3000)), list(range(3000)))
        ms.checkpoint(0)
        ms.restore(0)
        probe = list(range(0, 6000, 3))
        assert m.get_many(probe) == [k if k < 3000 else None for k in probe]
        assert ms._keys.filter is None and ms._keys.due > 0, "too many keys: no filter for now"
        builds = ms.stats["filter_builds"]
        assert m.get_many(probe[:5]) == probe[:5]
        assert ms.stats["filter_builds"] == builds, "not rescanned before enough writes"
        ms.close()


def test_disabled(always_filter) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ms = _open(tmp, key_filter=False)
        ms.restore(-1)
        m = ms.map("m", INT, INT_VALUE)
        m.put_many([1, 2], [1, 2])
        ms.checkpoint(0)
        assert m.get_many([1, 2, 3]) == [1, 2, None]
        assert ms.stats["filter_builds"] == 0 and ms._py_budget == ms.budget_bytes * 3 // 4
        ms.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "delete", "checkpoint", "restore", "crash", "lose_disk"]),
            st.lists(st.integers(0, 300), max_size=40),
        ),
        max_size=25,
    ),
    budget=st.sampled_from([None, 1024]),
)
def test_many_key_reads_equal_a_dict_model_through_restores(always_filter, ops, budget) -> None:
    """Random writes, spills, checkpoints, restores, crashes (a new instance on the same local
    store) and lost disks (a new local store): every many-key read equals the model."""
    with tempfile.TemporaryDirectory() as tmp:
        disk = 0

        def fresh() -> ManagedState:
            ms = _open(tmp, local=f"local{disk}")
            ms._py_budget = 4 << 10
            if budget is not None:
                ms._keys.budget = budget
            return ms

        ms = fresh()
        ms.restore(-1)
        model: dict[int, int] = {}
        saved: dict[int, dict[int, int]] = {-1: {}}
        w = -1
        try:
            for i, (op, ks) in enumerate(ops):
                m = ms.map("m", INT, INT_VALUE)
                if op == "put":
                    m.put_many(ks, [i] * len(ks))
                    model.update(dict.fromkeys(ks, i))
                elif op == "delete":
                    m.delete_many(ks)
                    for k in ks:
                        model.pop(k, None)
                elif op == "checkpoint":
                    w += 1
                    ms.checkpoint(w)
                    saved[w] = dict(model)
                elif op == "restore":
                    ms.restore(w)
                    model = dict(saved[w])
                else:
                    ms.close()
                    if op == "lose_disk":
                        disk += 1
                    ms = fresh()
                    ms.restore(w)
                    model = dict(saved[w])
                m = ms.map("m", INT, INT_VALUE)
                probe = list(range(0, 301, 3)) + ks
                assert m.get_many(probe) == [model.get(k) for k in probe]
        finally:
            ms.close()
