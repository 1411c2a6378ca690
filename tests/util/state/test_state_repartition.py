"""Repartitioning a checkpoint N -> M by key: every key exactly once, sizes recounted."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from malhar.util.state import INT, INT_VALUE, STR, ManagedState, StateError
from malhar.util.state.codecs import AUTO_KEY
from malhar.util.state.codecs import STR as STR_CODEC
from malhar.util.state.repartition import finish_pending


def _route(n: int):
    """What the engine would pass: decode the key with the structure's codec, apply its stream
    codec (here a stable CRC of the string), modulo the partition count."""

    def key_partition(encoded: bytes) -> int:
        return zlib.crc32(STR_CODEC.decode(encoded).encode()) % n

    return key_partition


class _Batched:
    """A key_partition with ``many`` (as the engine's): counts the calls of each kind."""

    def __init__(self, one) -> None:
        self.one, self.calls, self.keys = one, {"one": 0, "many": 0}, 0

    def __call__(self, encoded: bytes) -> int:
        self.calls["one"] += 1
        return self.one(encoded)

    def many(self, encoded: list[bytes]) -> list[int]:
        self.calls["many"] += 1
        self.keys += len(encoded)
        return [self.one(e) for e in encoded]


def _populate(root, old: int, window: int) -> dict:
    """Keys routed by _route(old); a few windows each; returns the expected global state."""
    route = _route(old)
    parts = [root.new(partition=p) for p in range(old)]
    for ms in parts:
        ms.restore(-1)
    expected = {"m": {}, "mm": set(), "tb": {}}
    for w in range(window + 1):
        for i in range(300):
            k = f"k{(i * 7 + w) % 500}"
            ms = parts[route(STR_CODEC.encode(k))]
            ms.map("m", STR, INT_VALUE)[k] = w
            expected["m"][k] = w
            ms.set_multimap("mm", STR, INT).add(k, w % 3)
            expected["mm"].add((k, w % 3))
            if ms.time_buckets("tb", 100, STR, INT_VALUE).put(k, w * 40, i):
                expected["tb"][(w * 40 // 100 * 100, k)] = i
            else:
                assert w >= 2 and w * 40 < 100, "only puts below the horizon are refused"
        if w == 1:
            for ms in parts:
                ms.time_buckets("tb", 100, STR, INT_VALUE).expire_before(100)
            expected["tb"] = {bk: v for bk, v in expected["tb"].items() if bk[0] >= 100}
        for ms in parts:
            ms.checkpoint(w)
            ms.committed(w - 1)
    for ms in parts:
        ms.close()
    return expected


@pytest.mark.parametrize(
    ("old", "new", "batched"),
    [(3, 5, False), (4, 2, False), (2, 1, False), (1, 3, False), (3, 2, True)],
)
def test_repartition_keeps_every_key_exactly_once(root, old: int, new: int, batched: bool) -> None:
    expected = _populate(root, old, window=3)
    key_partition = _Batched(_route(new)) if batched else _route(new)
    ManagedState.repartition(root.url, "op", 3, old, new, key_partition)
    if batched:  # keys are routed many at a time (one call per key took ~250 µs with pandas)
        assert key_partition.calls["one"] == 0
        assert key_partition.keys > 20 * key_partition.calls["many"]
    seen_m: dict = {}
    seen_mm: set = set()
    seen_tb: dict = {}
    route = _route(new)
    for p in range(new):
        ms = root.new(partition=p)
        ms.restore(3)
        m = ms.map("m", STR, INT_VALUE)
        items = dict(m.items())
        assert len(m) == len(items), "map sizes are recounted per new partition"
        assert all(route(STR_CODEC.encode(k)) == p for k in items)
        assert not seen_m.keys() & items.keys(), "a key in two partitions"
        seen_m.update(items)
        mm = ms.set_multimap("mm", STR, INT)
        pairs = set(mm.items())
        assert len(mm) == len(pairs) and not seen_mm & pairs
        seen_mm |= pairs
        tb = ms.time_buckets("tb", 100, STR, INT_VALUE)
        assert tb.horizon == 100, "the expiry horizon is carried over"
        for t, k, v in tb.items():
            assert (t, k) not in seen_tb
            seen_tb[(t, k)] = v
        # the new partitions go on checkpointing from there
        m["new-key"] = p
        ms.checkpoint(4)
        ms.close()
    assert seen_m == expected["m"]
    assert seen_mm == expected["mm"]
    assert seen_tb == expected["tb"]
    assert sorted(int(x) for x in _partition_dirs(root)) == list(range(new))


def _partition_dirs(root) -> list[str]:
    fs, _ = root.fs()
    opdir = fs.dirname(root.pdir())
    return [s.name for s in fs.list(opdir) if not s.name.startswith(".")]


def test_crash_after_the_commit_point_is_completed_by_restore(root) -> None:
    expected = _populate(root, 2, window=1)
    fs, _ = root.fs()
    real_rename = fs.rename
    moved = []

    def die_after_first_move(src, dst, **kw):
        if "/.repartition/" in src and not src.endswith("COMMIT") and ".tmp" not in src:
            if moved:
                raise KeyboardInterrupt("killed")
            moved.append(src)
        return real_rename(src, dst, **kw)

    fs.rename = die_after_first_move  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            ManagedState.repartition(root.url, "op", 1, 2, 3, _route(3))
    finally:
        fs.rename = real_rename  # type: ignore[method-assign]
    got = {}
    for p in range(3):
        ms = root.new(partition=p)
        ms.restore(1)  # completes the repartitioning first
        got.update(ms.map("m", STR, INT_VALUE).items())
        ms.close()
    assert got == expected["m"]
    assert not fs.exists(fs.join(fs.dirname(root.pdir()), ".repartition"))


def test_crash_before_the_commit_point_leaves_the_old_checkpoint(root) -> None:
    expected = _populate(root, 2, window=1)

    def explode(encoded: bytes) -> int:
        raise RuntimeError("stream codec failed")

    with pytest.raises(RuntimeError, match="stream codec failed"):
        ManagedState.repartition(root.url, "op", 1, 2, 3, explode)
    fs, _ = root.fs()
    finish_pending(fs, fs.dirname(root.pdir()))  # nothing pending
    got = {}
    for p in range(2):
        ms = root.new(partition=p)
        ms.restore(1)
        got.update(ms.map("m", STR, INT_VALUE).items())
        ms.close()
    assert got == expected["m"]


def test_bad_partition_numbers_and_lists_are_refused(root) -> None:
    ms = root.new()
    ms.restore(-1)
    ms.map("m", INT, INT_VALUE)[1] = 1
    ms.checkpoint(0)
    with pytest.raises(StateError, match=r"returned 7 for key .* not a partition in \[0, 2\)"):
        ManagedState.repartition(root.url, "op", 0, 1, 2, lambda k: 7)
    ms.list("log").append("x")
    ms.checkpoint(1)
    ms.close()
    with pytest.raises(StateError, match="SpillableList 'log' is not empty"):
        ManagedState.repartition(root.url, "op", 1, 1, 2, lambda k: 0)


def test_keys_in_two_old_partitions_are_refused(root) -> None:
    for p in range(2):
        ms = root.new(partition=p)
        ms.restore(-1)
        ms.map("m", INT, INT_VALUE)[1] = p  # not partitioned by key
        ms.checkpoint(0)
        ms.close()
    with pytest.raises(StateError, match="in partitions 0 and 1"):
        ManagedState.repartition(root.url, "op", 0, 2, 1, lambda k: 0)


@pytest.mark.parametrize(
    ("old", "new", "kind", "batched"),
    [(2, 3, "int", False), (3, 1, "int", False), (2, 3, "str", False), (2, 3, "str", True)],
)
def test_key_sets_are_split_key_by_key(root, old: int, new: int, kind: str, batched: bool) -> None:
    """A run holds many keys: each goes to the partition that owns it (the engine routes the
    AUTO_KEY encoding of the key, as for any key), the buckets and horizon kept."""

    def user(i: int):
        return i if kind == "int" else f"k{i}" + "\x00" * (i % 2)  # some end in NUL

    def owner(key, n: int) -> int:
        return key % n if kind == "int" else zlib.crc32(key.encode()) % n

    def route(n: int):
        return lambda encoded: owner(AUTO_KEY.decode(encoded), n)

    def structure(ms):
        return ms.int_sets("ints", 100) if kind == "int" else ms.str_sets("strs", 100)

    def column(sets, ids):
        if kind == "int":
            return np.array(ids, np.int64)
        raws = [user(i).encode() for i in ids]
        offsets = np.cumsum([0] + [len(r) for r in raws]).astype(np.int32)
        return sets.keys_of(offsets, np.frombuffer(b"".join(raws), np.uint8))

    parts = [root.new(partition=p) for p in range(old)]
    expected: set = set()
    for w in range(3):
        for p, ms in enumerate(parts):
            if w == 0:
                ms.restore(-1)
            sets = structure(ms)
            ids = [i for i in range(w * 400, w * 400 + 400) if owner(user(i), old) == p]
            buckets = np.array(ids, np.int64) % 3  # three buckets, several runs each
            assert sets.add_many(column(sets, ids), buckets).all()
            extra = [i for i in range(10_000, 10_200) if owner(user(i), old) == p][w]
            assert sets.add(user(extra), 150)  # a tail: a run at the checkpoint
            expected.add((100, user(extra)))
            if w == 2:
                sets.expire_before(100)  # bucket 0 goes
            ms.checkpoint(w)
        expected |= {(i % 3 * 100, user(i)) for i in range(w * 400, w * 400 + 400)}
    expected = {(t, k) for t, k in expected if t >= 100}
    for ms in parts:
        ms.close()
    key_partition = _Batched(route(new)) if batched else route(new)
    ManagedState.repartition(root.url, "op", 2, old, new, key_partition)
    if batched:
        assert key_partition.calls["one"] == 0 and key_partition.calls["many"] > 0
    got: set = set()
    for p in range(new):
        ms = root.new(partition=p)
        ms.restore(2)
        sets = structure(ms)
        items = sets.items()
        assert sets.horizon == 100
        assert all(owner(k, new) == p for _, k in items)
        assert len(items) == len(set(items))
        got |= set(items)
        assert all(sets.contains(k, t) for t, k in items[:50])
        ms.close()
    assert got == expected


def test_a_dedup_state_with_time_buckets_and_key_sets_repartitions(root) -> None:
    """What TimeBasedDedup holds: ``seen`` (time buckets) and key sets of ints and strs, each
    with a horizon (their metadata sorts after their entries and before the next name's)."""
    owner = lambda key, n: zlib.crc32(AUTO_KEY.encode(key)) % n  # noqa: E731
    for p in range(2):
        ms = root.new(partition=p)
        ms.restore(-1)
        seen = ms.time_buckets("seen", 1_000, value_codec=INT_VALUE)
        ints, strs = ms.int_sets("seen-ints", 1_000), ms.str_sets("seen-str", 1_000)
        mine = [i for i in range(100) if owner(i, 2) == p]
        assert ints.add_many(np.array(mine, np.int64), np.full(len(mine), 3, np.int64)).all()
        for i in mine:
            assert strs.add(f"s{i}", 3_500) and seen.put((i, "t"), 3_500, 1)
        for s in (seen, ints, strs):
            s.expire_before(2_000)
        ms.checkpoint(0)
        ms.close()
    ManagedState.repartition(root.url, "op", 0, 2, 3, lambda k: zlib.crc32(k) % 3)
    got: dict[str, set] = {"seen": set(), "ints": set(), "strs": set()}
    for p in range(3):
        ms = root.new(partition=p)
        ms.restore(0)
        seen = ms.time_buckets("seen", 1_000, value_codec=INT_VALUE)
        ints, strs = ms.int_sets("seen-ints", 1_000), ms.str_sets("seen-str", 1_000)
        assert seen.horizon == ints.horizon == strs.horizon == 2_000
        got["seen"] |= {k for _, k, _ in seen.items()}
        got["ints"] |= {k for _, k in ints.items()}
        got["strs"] |= {k for _, k in strs.items()}
        assert all(owner(k, 3) == p for _, k in ints.items() + strs.items())
        ms.close()
    assert got == {
        "seen": {(i, "t") for i in range(100)},
        "ints": set(range(100)),
        "strs": {f"s{i}" for i in range(100)},
    }


def test_structures_route_by_a_part_of_their_keys_or_leave_entries_out(root) -> None:
    # a map keyed by (window, key) moves by key; a count per window is left out for its
    # owner to count again (the spillable window storage's cells and windows)
    from malhar.util.state import TupleCodec

    cells_codec = TupleCodec(INT, STR)
    parts = [root.new(partition=p) for p in range(2)]
    expected = {}
    for p, ms in enumerate(parts):
        ms.restore(-1)
        cells = ms.map("cells", key_codec=cells_codec, value_codec=INT_VALUE)
        windows = ms.map("windows", key_codec=INT, value_codec=INT_VALUE)
        for w in range(3):
            for i in range(10):
                key = f"p{p}-{i}"
                cells[w, key] = i
                expected[w, key] = i
            windows[w] = 10
        ms.checkpoint(0)
        ms.close()
    route = _route(3)
    ManagedState.repartition(
        root.url,
        "op",
        0,
        2,
        3,
        lambda encoded: route(encoded),
        structures={"cells": lambda encoded: encoded[8:], "windows": lambda encoded: None},
    )
    seen = {}
    for p in range(3):
        ms = root.new(partition=p)
        ms.restore(0)
        cells = dict(ms.map("cells", key_codec=cells_codec, value_codec=INT_VALUE).items())
        assert all(route(STR_CODEC.encode(key)) == p for _, key in cells)
        assert not seen.keys() & cells.keys()
        seen.update(cells)
        assert len(ms.map("windows", key_codec=INT, value_codec=INT_VALUE)) == 0
        ms.close()
    assert seen == expected
