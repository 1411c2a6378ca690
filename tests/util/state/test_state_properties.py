"""Property tests: random puts, deletes, expiries, windows, crashes and recoveries equal a dict model.

A crash drops everything that was not checkpointed: the manager object (its
overlay and cache) and, half of the time, the worker's local disk too; the
recovery restores the last checkpointed window or, as a replay would, an earlier
one not older than the committed window.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from malhar.util.state import INT, INT_VALUE, STR, ManagedState
from malhar.util.state import key_sets as key_sets_module
from malhar.util.state import manager as manager_module

keys = st.integers(min_value=0, max_value=12)
# str and bytes keys: empty, ending in NULs (NumPy's S values drop those), non-ASCII, and a
# str next to its own UTF-8 bytes (different keys)
TEXT_KEYS = st.one_of(
    st.sampled_from(["", "a", "a\x00", "a\x00\x00", "\u00e9", "ab", "x" * 64, "x" * 63 + "\x00"]),
    st.sampled_from([b"", b"a", b"a\x00", b"\x00", b"ab", b"\x00" * 64]),
)
values = st.integers(min_value=-5, max_value=5)
SPAN = 10


class StateModel(RuleBasedStateMachine):
    """Drives a map, a set-multimap, a list, time buckets and key sets (int, str/bytes) against
    plain Python models."""

    root_factory = None  # set by the test: () -> conftest Root
    tiny_memory = False
    counts: dict[str, int] = {}  # what the examples exercised, checked by the tests

    @initialize()
    def start(self) -> None:
        self.root = type(self).root_factory()
        self.snapshots: dict[int, tuple] = {-1: ({}, set(), [], {}, -(2**63), set(), set())}
        self.window = -1
        self.committed = -1
        self.ms = self._open()
        self.ms.restore(-1)
        self._load(-1)

    def _open(self) -> ManagedState:
        ms = self.root.new(local_dir=f"{self.root.local_base}/worker")
        if self.tiny_memory:
            ms.key_set_views  # noqa: B018  (takes its share of the budget first)
            ms._py_budget = 2048  # spill nearly every window
        return ms

    def _load(self, w: int) -> None:
        m, mm, lst, tb, horizon, ints, texts = self.snapshots[w]
        self.m, self.mm, self.lst, self.tb, self.horizon, self.ints, self.texts = (
            dict(m),
            set(mm),
            list(lst),
            dict(tb),
            horizon,
            set(ints),
            set(texts),
        )

    # -- the structures ---------------------------------------------------------------------
    @property
    def smap(self):
        return self.ms.map("m", INT, INT_VALUE)

    @property
    def smm(self):
        return self.ms.set_multimap("mm", INT, INT)

    @property
    def slist(self):
        return self.ms.list("l", INT_VALUE)

    @property
    def stb(self):
        return self.ms.time_buckets("tb", SPAN, STR, INT_VALUE)

    @property
    def sints(self):
        s = self.ms.int_sets("ints", SPAN)
        s.view_bytes = 24  # about one bucket's runs: buckets are dropped and read again
        return s

    def stexts(self, key):
        s = (
            self.ms.str_sets("strs", SPAN)
            if isinstance(key, str)
            else self.ms.bytes_sets("bs", SPAN)
        )
        s.view_bytes = 40
        return s

    @rule(k=keys, v=values)
    def put(self, k: int, v: int) -> None:
        self.smap[k] = v
        self.m[k] = v

    @rule(k=keys)
    def delete(self, k: int) -> None:
        if k in self.m:
            del self.smap[k]
            del self.m[k]
        else:
            with pytest.raises(KeyError):
                del self.smap[k]

    @rule(k=keys, v=values)
    def add(self, k: int, v: int) -> None:
        assert self.smm.add(k, v) == ((k, v) not in self.mm)
        self.mm.add((k, v))

    @rule(k=keys)
    def remove_all(self, k: int) -> None:
        gone = {(a, b) for a, b in self.mm if a == k}
        assert self.smm.remove_all(k) == len(gone)
        self.mm -= gone

    @rule(v=values)
    def append(self, v: int) -> None:
        self.slist.append(v)
        self.lst.append(v)

    @rule(k=keys, t=st.integers(min_value=0, max_value=100), v=values)
    def put_timed(self, k: int, t: int, v: int) -> None:
        bucket = t // SPAN
        ok = self.stb.put(str(k), t, v)
        assert ok == (bucket >= self.horizon)
        if ok:
            self.tb[(bucket, str(k))] = v

    # the many-key API (one pass per layer) against the same models
    @rule(pairs=st.lists(st.tuples(keys, values), max_size=6))
    def put_many(self, pairs: list[tuple[int, int]]) -> None:
        self.smap.put_many([k for k, _ in pairs], [v for _, v in pairs])
        self.m.update(pairs)

    @rule(ks=st.lists(keys, max_size=6))
    def delete_many(self, ks: list[int]) -> None:
        assert self.smap.delete_many(ks) == len(set(ks) & self.m.keys())
        for k in ks:
            self.m.pop(k, None)

    @rule(
        items=st.lists(st.tuples(keys, st.integers(min_value=0, max_value=100), values), max_size=6)
    )
    def put_many_timed(self, items: list[tuple[int, int, int]]) -> None:
        ok = self.stb.put_many(
            [str(k) for k, _, _ in items], [t for _, t, _ in items], [v for _, _, v in items]
        )
        assert ok == [t // SPAN >= self.horizon for _, t, _ in items]
        for k, t, v in items:
            if t // SPAN >= self.horizon:
                self.tb[(t // SPAN, str(k))] = v

    @rule(k=keys, t=st.integers(min_value=0, max_value=100))
    def add_int(self, k: int, t: int) -> None:
        bucket = t // SPAN
        new = bucket >= self.horizon and (bucket, k) not in self.ints
        assert self.sints.add(k, t) == new
        if new:
            self.ints.add((bucket, k))

    @rule(pairs=st.lists(st.tuples(st.integers(min_value=0, max_value=10), keys), max_size=10))
    def add_many_ints(self, pairs: list[tuple[int, int]]) -> None:
        got = self.sints.add_many(
            np.array([k for _, k in pairs], np.int64), np.array([b for b, _ in pairs], np.int64)
        )
        new = []
        for b, k in pairs:  # one at a time, in order: a repeated pair is new once at most
            new.append(b >= self.horizon and (b, k) not in self.ints)
            if new[-1]:
                self.ints.add((b, k))
        assert got.tolist() == new

    @rule(k=TEXT_KEYS, t=st.integers(min_value=0, max_value=100))
    def add_text(self, k, t: int) -> None:
        bucket = t // SPAN
        new = bucket >= self.horizon and (bucket, k) not in self.texts
        assert self.stexts(k).add(k, t) == new
        if new:
            self.texts.add((bucket, k))

    @rule(
        pairs=st.lists(st.tuples(st.integers(min_value=0, max_value=10), TEXT_KEYS), max_size=10),
        binary=st.booleans(),
    )
    def add_many_texts(self, pairs: list, binary: bool) -> None:
        # one Arrow-like column: all str, or all bytes
        pairs = [(b, k.encode() if binary and isinstance(k, str) else k) for b, k in pairs]
        pairs = [(b, k) for b, k in pairs if isinstance(k, bytes) == binary]
        raws = [k if binary else k.encode() for _, k in pairs]
        offsets = np.cumsum([0] + [len(r) for r in raws]).astype(np.int32)
        data = np.frombuffer(b"".join(raws), np.uint8)
        sets = self.stexts(b"" if binary else "")
        held = sets.keys_of(offsets, data)
        got = sets.add_many(held, np.array([b for b, _ in pairs], np.int64))
        new = []
        for b, k in pairs:
            new.append(b >= self.horizon and (b, k) not in self.texts)
            if new[-1]:
                self.texts.add((b, k))
        assert got.tolist() == new

    @rule(t=st.integers(min_value=0, max_value=100))
    def expire(self, t: int) -> None:
        self.stb.expire_before(t)
        self.sints.expire_before(t)
        self.stexts("").expire_before(t)
        self.stexts(b"").expire_before(t)
        self.horizon = max(self.horizon, t // SPAN)
        self.tb = {bk: v for bk, v in self.tb.items() if bk[0] >= self.horizon}
        self.ints = {bk for bk in self.ints if bk[0] >= self.horizon}
        self.texts = {bk for bk in self.texts if bk[0] >= self.horizon}

    @rule()
    def clear_map(self) -> None:
        self.smap.clear()
        self.m.clear()

    # -- windows, crashes, recoveries ---------------------------------------------------------
    @rule(skip=st.integers(min_value=1, max_value=3))
    def checkpoint(self, skip: int) -> None:
        self.window += skip
        before = self.ms.stats["files_written"]
        self.ms.checkpoint(self.window)
        self._count("files", self.ms.stats["files_written"] - before)
        self.snapshots[self.window] = (
            dict(self.m),
            set(self.mm),
            list(self.lst),
            dict(self.tb),
            self.horizon,
            set(self.ints),
            set(self.texts),
        )

    @precondition(lambda self: self.window > self.committed)
    @rule(data=st.data())
    def commit(self, data) -> None:
        done = [w for w in self.snapshots if self.committed < w <= self.window]
        c = data.draw(st.sampled_from(sorted(done)))
        before = self.ms.stats["files_written"]
        self.ms.committed(c)
        self.committed = c
        self._count("merges", self.ms.stats["files_written"] - before)

    @rule(data=st.data(), lose_disk=st.booleans())
    def crash_and_recover(self, data, lose_disk: bool) -> None:
        self.ms.close()  # the process is gone: overlay, cache, open handles
        if lose_disk:
            shutil.rmtree(f"{self.root.local_base}/worker", ignore_errors=True)
        targets = sorted(w for w in self.snapshots if w >= self.committed)
        target = data.draw(st.sampled_from(targets), label="restore to")
        self.ms = self._open()
        self.ms.restore(target)
        self._count("recoveries")
        self._count("rebuilds" if lose_disk else "catch_ups")
        self._recovered(target)

    @rule()
    def fail_window(self) -> None:
        """The window fails in the same process: back to the last checkpoint."""
        self.ms.restore(self.window)
        self._load(self.window)

    def _count(self, what: str, n: int = 1) -> None:
        type(self).counts[what] = type(self).counts.get(what, 0) + n

    def _recovered(self, target: int) -> None:
        self.snapshots = {w: s for w, s in self.snapshots.items() if w <= target}
        self.window = target
        self._load(target)

    @invariant()
    def equal_to_model(self) -> None:
        if not hasattr(self, "ms"):
            return
        assert dict(self.smap.items()) == self.m
        assert len(self.smap) == len(self.m)
        assert set(self.smm.items()) == self.mm and len(self.smm) == len(self.mm)
        assert list(self.slist) == self.lst and len(self.slist) == len(self.lst)
        got = {(b // SPAN, k): v for b, k, v in self.stb.items()}
        assert got == self.tb
        every = list(range(14))
        assert self.smap.get_many(every) == [self.m.get(k) for k in every]
        names, times = [str(k) for k in every] * 3, [5] * 14 + [45] * 14 + [95] * 14
        expect = [self.tb.get((t // SPAN, k)) for k, t in zip(names, times, strict=True)]
        assert self.stb.get_many(names, times) == expect
        assert {(t // SPAN, k) for t, k in self.sints.items()} == self.ints
        assert [self.sints.contains(k, t) for k in every for t in (5, 45, 95)] == [
            (t // SPAN, k) in self.ints for k in every for t in (5, 45, 95)
        ]
        got = {(t // SPAN, k) for kind in ("", b"") for t, k in self.stexts(kind).items()}
        assert got == self.texts
        probes = ["", "a", "a\x00", b"a", b"", "\u00e9"]
        assert [self.stexts(k).contains(k, t) for k in probes for t in (5, 45)] == [
            (t // SPAN, k) in self.texts for k in probes for t in (5, 45)
        ]

    def teardown(self) -> None:
        if hasattr(self, "ms"):
            self._count("spills", self.ms.stats["spills"])
            self._count("filter_builds", self.ms.stats["filter_builds"])
            self.ms.close()


def _run(root_factory, *, tiny: bool, examples: int, steps: int) -> dict[str, int]:
    class Machine(StateModel):
        counts: dict[str, int] = {}

    Machine.root_factory = staticmethod(root_factory)
    Machine.tiny_memory = tiny
    Machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    Machine.TestCase().runTest()
    return Machine.counts


def _fresh(root):
    """A new checkpoint root per hypothesis example (examples must not share files)."""

    def make():
        sub = uuid.uuid4().hex[:8]
        return type(root)(
            root.backend,
            f"{root.url}/{sub}",
            f"{root.local_base}/{sub}",
            dict(root.fs_options),
            root.opened,
        )

    return make


def _exercised(root, what: tuple[str, ...], *, rounds: int = 4, **run: Any) -> None:
    """Run random histories until each path in ``what`` was taken, for at most ``rounds``
    runs: a single run leaves the rarest one (a merge on ``committed``) out about once in
    eight, and a property that ran without it proved nothing about it."""
    counts: Counter = Counter()
    for _ in range(rounds):
        counts.update(_run(_fresh(root), **run))
        if all(counts[w] > 0 for w in what):
            return
    raise AssertionError(f"{rounds} runs never took {[w for w in what if not counts[w]]}: {counts}")


@pytest.fixture
def always_filter(monkeypatch):
    """Every many-key read consults the key filter (by default: reads of 32 keys or more);
    the int sets turn tails into runs and merge runs after a few keys, not thousands."""
    monkeypatch.setattr(manager_module, "_FILTER_MIN_KEYS", 1)
    monkeypatch.setattr(key_sets_module, "TAIL_KEYS", 3)
    monkeypatch.setattr(key_sets_module, "SMALL_BATCH", 2)
    monkeypatch.setattr(key_sets_module, "MAX_RUNS", 2)


def test_random_histories_equal_a_dict_model(root, always_filter) -> None:
    _exercised(
        root,
        ("files", "merges", "rebuilds", "catch_ups", "filter_builds"),
        tiny=False,
        examples=60,
        steps=60,
    )


def test_random_histories_with_spills_equal_a_dict_model(root, always_filter) -> None:
    _exercised(
        root,
        ("files", "spills", "rebuilds", "catch_ups", "filter_builds"),
        tiny=True,
        examples=25,
        steps=60,
    )


@pytest.mark.integration
def test_random_histories_on_hdfs(hdfs_root) -> None:
    _exercised(hdfs_root, ("files", "recoveries"), tiny=False, examples=10, steps=50)
