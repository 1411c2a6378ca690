"""Incremental checkpoints: restore semantics, crashes, compaction, spills, corrupt files."""

from __future__ import annotations

import os
import shutil
import tempfile
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malhar.util import filesystem_for
from malhar.util.state import (
    INT,
    INT_VALUE,
    STR,
    CorruptCheckpointError,
    ManagedState,
    StateError,
)
from malhar.util.state.fileformat import ROOT, FileReader, FileWriter, parse_name


def _fill(ms: ManagedState, keys: range, value: int) -> None:
    m = ms.map("m", INT, INT_VALUE)
    for k in keys:
        m[k] = value


def _state(ms: ManagedState) -> dict[int, int]:
    return dict(ms.map("m", INT, INT_VALUE).items())


def test_restore_replay_and_fresh_worker(any_root) -> None:
    """Windows 0..3; replay of 3 after restore(2) gives the same state; a fresh worker too."""
    ms = any_root.new()
    ms.restore(-1)
    _fill(ms, range(100), 0)
    ms.checkpoint(0)
    _fill(ms, range(10), 1)
    ms.checkpoint(1)
    ms.checkpoint(2)  # nothing changed: no file
    _fill(ms, range(5, 15), 3)
    ms.checkpoint(3)
    after3 = _state(ms)
    assert len(any_root.files()) == 3
    ms.restore(2)
    assert _state(ms) == {**{k: 0 for k in range(100)}, **{k: 1 for k in range(10)}}
    _fill(ms, range(5, 15), 3)  # the replay of window 3
    ms.checkpoint(3)
    assert _state(ms) == after3
    ms.close()
    shutil.rmtree(ms.local_dir)  # the worker's disk is gone
    fresh = any_root.new()
    fresh.restore(3)
    assert _state(fresh) == after3 and len(fresh.map("m", INT, INT_VALUE)) == 100
    fresh.restore(1)
    assert _state(fresh) == {**{k: 0 for k in range(100)}, **{k: 1 for k in range(10)}}
    assert len(any_root.files()) == 2, "restore(1) drops the files of the abandoned windows"


def test_uncheckpointed_changes_are_dropped_by_restore(root) -> None:
    ms = root.new()
    ms.restore(-1)
    _fill(ms, range(10), 1)
    ms.checkpoint(0)
    _fill(ms, range(5, 20), 2)  # a window that fails
    ms.map("m", INT, INT_VALUE).clear()
    ms.restore(0)
    assert _state(ms) == {k: 1 for k in range(10)}


def test_catch_up_applies_only_the_missing_files(root) -> None:
    """A worker whose local store is at window 1 catches up with the files of 2..4 only."""
    a = root.new()
    a.restore(-1)
    _fill(a, range(50), 0)
    a.checkpoint(1)
    a.close()
    b = root.new()
    b.restore(1)
    for w in (2, 3, 4):
        _fill(b, range(w), w)
        b.checkpoint(w)
    b.close()
    a2 = ManagedState(a.root, "op", 0, local_dir=a.local_dir)
    a2.restore(4)
    assert a2.stats["files_applied"] == 3
    assert _state(a2) == {**{k: 0 for k in range(50)}, 0: 4, 1: 4, 2: 4, 3: 4}
    a2.close()


def test_crash_mid_checkpoint_leaves_previous_window(root) -> None:
    """A checkpoint that died before its rename: a temporary file, window 0 restorable."""
    ms = root.new()
    ms.restore(-1)
    _fill(ms, range(10), 1)
    ms.checkpoint(0)
    _fill(ms, range(10), 2)
    fs, _ = root.fs()
    real_rename = fs.rename

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed")

    fs.rename = crash  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            ms.checkpoint(1)
    finally:
        fs.rename = real_rename  # type: ignore[method-assign]
    other = root.new()
    other.restore(1)
    assert _state(other) == {k: 1 for k in range(10)}
    assert not [n for n in os.listdir(root.pdir()) if n.endswith(".tmp")]


def test_crash_between_file_and_local_apply(root) -> None:
    """The file of window 1 is durable but the local store is still at 0: caught up."""
    ms = root.new()
    ms.restore(-1)
    _fill(ms, range(10), 1)
    ms.checkpoint(0)
    _fill(ms, range(3), 2)
    store = ms._local().store
    real = store.batch

    def die():
        raise KeyboardInterrupt("killed")

    store.batch = die  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        ms.checkpoint(1)
    store.batch = real  # type: ignore[method-assign]
    ms.close()
    again = ManagedState(ms.root, "op", 0, local_dir=ms.local_dir)
    again.restore(1)
    assert again.stats["files_applied"] == 1
    assert _state(again) == {**{k: 1 for k in range(10)}, 0: 2, 1: 2, 2: 2}
    again.close()


@pytest.mark.parametrize("where", ["file", "ingest"])
def test_crash_in_the_checkpoint_of_a_window_that_spilled(root, where, monkeypatch) -> None:
    """A window that spilled is applied to the local store by ingesting one table file, and
    only once its checkpoint file is durable: a crash while writing that file leaves the
    store at the previous window (restored without a rebuild); a crash at the ingestion,
    after the file, leaves it to be caught up from the file."""
    ms = root.new()
    ms.restore(-1)
    _fill(ms, range(10), 1)
    ms.map("t", STR, INT_VALUE)["gone"] = 1
    ms.checkpoint(0)
    ms._py_budget = 4 << 10
    _fill(ms, range(5, 300), 2)  # spills
    del ms.map("m", INT, INT_VALUE)[0]
    ms.map("t", STR, INT_VALUE).clear()  # a range delete: applied before the entries
    assert ms._pending
    store = ms._local().store
    files = list(root.files())

    def die(*args, **kwargs):
        raise KeyboardInterrupt("killed")

    if where == "file":
        monkeypatch.setattr(ms._dirfs()[0], "rename", die)  # a shared filesystem object
    else:
        real = store.ingest_batch

        def dying(name):
            batch = real(name)
            batch.ingest = die
            return batch

        monkeypatch.setattr(store, "ingest_batch", dying)
    with pytest.raises(KeyboardInterrupt):
        ms.checkpoint(1)
    monkeypatch.undo()
    ms.close()
    again = ManagedState(ms.root, "op", 0, local_dir=ms.local_dir)
    again.restore(1)
    assert not os.path.exists(store.path + ".ingest"), "a crash's table file is removed"
    expect = {k: 1 for k in range(1, 5)} | {k: 2 for k in range(5, 300)}
    if where == "file":
        assert list(root.files()) == files
        assert again.stats["files_applied"] == 0, "the store is still at window 0"
        expect = {k: 1 for k in range(10)}
        assert len(again.map("t", STR, INT_VALUE)) == 1
    else:
        assert again.stats["files_applied"] == 2, "rebuilt from the files"
        assert len(again.map("t", STR, INT_VALUE)) == 0
    assert _state(again) == expect
    again.close()


def test_committed_merges_runs_and_keeps_every_restorable_window(any_root) -> None:
    ms = any_root.new()
    ms.restore(-1)
    history = {}
    windows = 12 if any_root.backend == "local" else 6
    for w in range(windows):
        m = ms.map("m", INT, INT_VALUE)
        for k in range(w * 3, w * 3 + 5):  # overlapping updates
            m[k] = w
        if w % 4 == 3:
            del m[w]
        ms.checkpoint(w)
        history[w] = _state(ms)
        ms.committed(w - 2)
        assert len(any_root.files()) <= 5, any_root.files()
    files = [parse_name(n) for n in any_root.files()]
    assert any(n.lo == -1 and n.hi > 0 for n in files), "the oldest deltas were merged"
    # newest first: restoring an earlier window drops the files of the later ones
    for w in range(windows - 1, windows - 4, -1):
        fresh = any_root.new()
        fresh.restore(w)
        assert _state(fresh) == history[w]
        fresh.close()


def test_crash_mid_merge_keeps_both_paths_valid(root) -> None:
    ms = root.new()
    ms.restore(-1)
    for w in range(4):
        _fill(ms, range(w, w + 3), w)
        ms.checkpoint(w)
    expected = _state(ms)
    fs, _ = root.fs()
    real_delete = fs.delete
    calls = []

    def delete_once(path, **kw):  # the first input is deleted, then the process dies
        calls.append(path)
        if len(calls) > 1:
            raise KeyboardInterrupt("killed")
        return real_delete(path, **kw)

    fs.delete = delete_once  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            ms.committed(3)
    finally:
        fs.delete = real_delete  # type: ignore[method-assign]
    fresh = root.new()
    fresh.restore(3)
    assert _state(fresh) == expected
    fresh.committed(3)
    assert len(root.files()) == 1
    assert _state(fresh) == expected


def test_checkpoint_cost_follows_the_change_not_the_size(root) -> None:
    small, big = root.new(operator="small"), root.new(operator="big")
    for ms, n in ((small, 1_000), (big, 50_000)):
        ms.restore(-1)
        _fill(ms, range(n), 0)
        ms.checkpoint(0)
        before = ms.stats["bytes_written"]
        _fill(ms, range(100), 1)
        ms.checkpoint(1)
        ms.delta = ms.stats["bytes_written"] - before  # type: ignore[attr-defined]
    assert small.delta == big.delta  # type: ignore[attr-defined]


def test_window_bigger_than_memory_spills_and_restores(root) -> None:
    ms = root.new(budget_bytes=8 << 20)
    ms._py_budget = 64 << 10  # a tiny overlay: this window spills many times
    ms.restore(-1)
    m = ms.map("m", INT, INT_VALUE)
    for k in range(20_000):
        m[k] = k
    for k in range(0, 20_000, 2):
        del m[k]
    assert ms.stats["spills"] > 5
    assert len(m) == 10_000 and m[3] == 3 and 4 not in m
    assert sum(1 for _ in m) == 10_000
    ms.checkpoint(0)
    for k in range(1, 1000, 2):
        m[k] = -k
    ms.map("m", INT, INT_VALUE).range(0, 10)
    ms.checkpoint(1)
    fresh = root.new()
    fresh.restore(1)
    got = _state(fresh)
    assert len(got) == 10_000 and got[1] == -1 and got[1001] == 1001


def _corrupt_one(root, mutate) -> str:
    ms = root.new()
    ms.restore(-1)
    _fill(ms, range(1000), 7)
    ms.checkpoint(0)
    _fill(ms, range(10), 8)
    ms.checkpoint(1)
    ms.close()
    name = sorted(root.files())[0]
    path = os.path.join(root.pdir(), name)
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.truncate()
        f.write(mutate(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "detail"),
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: d[:-3], "truncated"),
        (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "checksum mismatch"),
        (lambda d: d[:10] + bytes([d[10] ^ 4]) + d[11:], "header checksum mismatch"),
        (lambda d: d + b"x", "bytes after the end block"),
        (lambda d: b"", "truncated"),
    ],
    ids=["half", "tail", "bitflip", "header", "trailing", "empty"],
)
def test_corrupt_or_truncated_file_is_named(root, mutate, detail) -> None:
    path = _corrupt_one(root, mutate)
    fresh = root.new()
    with pytest.raises(CorruptCheckpointError, match=detail) as err:
        fresh.restore(1)
    assert err.value.path == f"file://{path}"
    assert path in str(err.value)


def test_missing_file_of_the_chain_is_an_error(root) -> None:
    ms = root.new()
    ms.restore(-1)
    for w in range(3):
        _fill(ms, range(w + 1), w)
        ms.checkpoint(w)
    ms.close()
    os.remove(os.path.join(root.pdir(), sorted(root.files())[1]))
    with pytest.raises(StateError, match="chain is broken"):
        root.new().restore(2)


def test_renamed_file_does_not_match_its_header(root) -> None:
    ms = root.new()
    ms.restore(-1)
    _fill(ms, range(3), 1)
    ms.checkpoint(0)
    ms.close()
    (name,) = root.files()
    node = parse_name(name)
    forged = name.replace(node.uid, "f" * 16)
    os.rename(os.path.join(root.pdir(), name), os.path.join(root.pdir(), forged))
    with pytest.raises(CorruptCheckpointError, match="does not match the file name"):
        root.new().restore(0)


def test_signed_checkpoints(root) -> None:
    ms = root.new(signer=b"k1")
    ms.restore(-1)
    _fill(ms, range(3), 1)
    ms.checkpoint(0)
    ms.close()
    ok = root.new(signer=b"k1")
    ok.restore(0)
    assert _state(ok) == {0: 1, 1: 1, 2: 1}
    with pytest.raises(CorruptCheckpointError, match="signature mismatch"):
        root.new(signer=b"other").restore(0)
    with pytest.raises(CorruptCheckpointError, match="signed but no signer"):
        root.new().restore(0)


def test_second_process_on_the_same_local_dir_gets_a_private_store(root) -> None:
    a = root.new()
    a.restore(-1)
    _fill(a, range(5), 1)
    a.checkpoint(0)
    b = ManagedState(a.root, "op", 0, local_dir=a.local_dir)  # a stale copy elsewhere
    b.restore(0)
    assert b._store_private and _state(b) == {k: 1 for k in range(5)}
    private = b._replica.store.path
    b.close()
    assert not os.path.exists(private)


def test_merges_respect_range_deletes(root) -> None:
    """An older put under a newer range delete stays deleted through bottom and upper merges."""
    ms = root.new(compaction_ratio=4)
    ms.restore(-1)
    base = ms.map("m", INT, INT_VALUE)
    for k in range(1000, 6000):  # a big (incompressible) base that upper merges leave alone
        base[k] = k * 2654435761 % (1 << 61)
    ms.checkpoint(0)
    ms.committed(0)
    m = ms.map("m", INT, INT_VALUE)
    m[1] = 1
    ms.checkpoint(1)
    m.clear()  # one range delete over the map
    m[2] = 2
    ms.checkpoint(2)
    m[3] = 3
    ms.checkpoint(3)
    ms.committed(3)  # merges deltas 1..3 above the base (not bottom: the range is kept)
    names = [parse_name(n) for n in root.files()]
    assert sorted((n.lo, n.hi) for n in names) == [(-1, 0), (0, 3)], names
    fresh = root.new()
    fresh.restore(3)
    assert _state(fresh) == {2: 2, 3: 3}
    fresh.close()
    bottom = root.new(compaction_ratio=1e9)  # merge everything: the bottom run drops deletes
    bottom.restore(3)
    bottom.committed(3)
    assert [(n.lo, n.hi) for n in map(parse_name, root.files())] == [(-1, 3)]
    again = root.new()
    again.restore(3)
    assert _state(again) == {2: 2, 3: 3} and len(again.map("m", INT, INT_VALUE)) == 2


def test_spilled_writes_of_a_crashed_window_are_not_read_back(root) -> None:
    """A process dies with spilled (pending) writes in the local store; the next one on the
    same disk must not read them, even once it spills itself."""
    ms = root.new()
    ms._py_budget = 4096
    ms.restore(-1)
    _fill(ms, range(10), 1)
    ms.checkpoint(0)
    _fill(ms, range(100, 400), 9)  # spilled, never checkpointed
    assert ms.stats["spills"] > 0
    ms._replica.store.close()  # killed: no restore, no cleanup
    ms._replica = None
    again = ManagedState(ms.root, "op", 0, local_dir=ms.local_dir)
    again._py_budget = 4096
    again.restore(0)
    _fill(again, range(500, 800), 2)  # spills again
    assert again.stats["spills"] > 0
    m = again.map("m", INT, INT_VALUE)
    assert 150 not in m and m.get(150) is None
    assert sorted(m)[:11] == [*range(10), 500]
    again.close()


def test_committed_on_a_stale_instance_touches_nothing(root) -> None:
    """Worker A is left at window 1 while worker B runs 2 and 3; a committed(3) that reaches A
    must not delete B's files (A's chain does not know them)."""
    a = root.new()
    a.restore(-1)
    _fill(a, range(5), 1)
    a.checkpoint(1)
    b = root.new()
    b.restore(1)
    for w in (2, 3):
        _fill(b, range(w), w)
        b.checkpoint(w)
    expected = _state(b)
    before = sorted(root.files())
    a.committed(3)
    assert sorted(root.files()) == before
    b.committed(3)
    fresh = root.new()
    fresh.restore(3)
    assert _state(fresh) == expected


def test_spilled_keys_do_not_leave_stale_cache_entries(root) -> None:
    """Found by the property test: a key read (and cached as absent) then written and spilled
    in the same window must read its checkpointed value after the window."""
    ms = root.new()
    ms._py_budget = 2048  # the metadata written at the checkpoint spills the overlay
    ms.restore(-1)
    mm, lst = ms.set_multimap("mm", INT, INT), ms.list("l", INT_VALUE)
    m, tb = ms.map("m", INT, INT_VALUE), ms.time_buckets("tb", 10, STR, INT_VALUE)
    mm.add(0, 0)
    lst.append(0)
    m[0] = 0
    tb.put("0", 0, 0)
    lst.append(1)
    assert ms.stats["spills"] == 0
    ms.checkpoint(0)
    assert ms.stats["spills"] == 1
    ms.restore(0)
    assert (len(mm), list(lst), len(m)) == (1, [0, 1], 1)


@settings(max_examples=30, deadline=None)
@given(
    entries=st.dictionaries(
        st.binary(min_size=1, max_size=40),
        st.one_of(st.none(), st.binary(max_size=60_000)),
        max_size=120,
    ),
    cuts=st.lists(st.integers(0, 120), max_size=4),
    signed=st.booleans(),
)
def test_add_many_writes_the_bytes_of_add_all(entries, cuts, signed) -> None:
    """``FileWriter.add_many`` (records built by Arrow) against ``add_all``, in chunks: the
    same file, byte for byte (blocks cut at the same records), read back the same."""
    items = sorted(entries.items())
    bounds = sorted({0, len(items), *(c for c in cuts if c <= len(items))})
    with tempfile.TemporaryDirectory() as tmp:
        fs, base = filesystem_for(tmp)
        key = b"k" if signed else None
        files = []
        for kind in ("all", "many"):
            d = fs.join(base, kind)
            fs.mkdirs(d)
            w = FileWriter(fs, d, -1, 0, "1" * 16, ROOT, signer=key)
            w.add_ranges([(b"a", b"b")])
            for lo, hi in pairwise(bounds):
                part = items[lo:hi]
                if kind == "all":
                    w.add_all(part)
                else:
                    w.add_many([k for k, _ in part], [v for _, v in part])
            node = w.finish()
            path = fs.join(d, node.name)
            files.append(fs.read(path, 0, 1 << 30))
            assert FileReader(fs, path, node, signer=key).read_all() == ([(b"a", b"b")], items)
        assert files[0] == files[1]
    if len(items) >= 2:
        w = FileWriter(fs, base, -1, 0, "1" * 16, ROOT)
        with pytest.raises(ValueError, match="out of order"):
            w.add_many([items[1][0], items[0][0]], [b"", b""])
        w.abort()


def test_spilled_puts_inside_a_range_delete_of_the_same_window(root) -> None:
    """clear() (a range delete) then new values for the same keys, spilled: the store
    applies the range delete before ingesting the window's entries, so they survive it."""
    ms = root.new()
    ms.restore(-1)
    m = ms.map("m", INT, INT_VALUE)
    m.put_many(list(range(500)), [1] * 500)
    ms.checkpoint(0)
    ms._py_budget = 4 << 10
    m.clear()
    m.put_many(list(range(0, 500, 2)), [2] * 250)  # spills
    assert ms._pending
    ms.checkpoint(1)
    ms._cache.clear()
    want = {k: 2 for k in range(0, 500, 2)}
    assert _state(ms) == want and m.get_many(list(range(6))) == [2, None, 2, None, 2, None]
    fresh = root.new()
    fresh.restore(1)
    assert _state(fresh) == want


_KILLED_AFTER_SPILLED_CHECKPOINT = """
import os, signal, sys
from malhar.util.state import INT, INT_VALUE, ManagedState

root, local, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
ms = ManagedState(root, "op", 0, budget_bytes=8 << 20, local_dir=local)
ms.restore(-1)
for w in range(windows):
    ms._py_budget = 256 << 10  # every window spills, several MiB through the memtable
    m = ms.map("m", INT, INT_VALUE)
    for k in range(w * 60_000, (w + 1) * 60_000):
        m[k] = w
    assert ms._pending, "the window spilled"
    ms.checkpoint(w)
os.kill(os.getpid(), signal.SIGKILL)  # no close: what RocksDB holds in memory is lost
"""


@pytest.mark.parametrize("windows", [1, 2, 3])
def test_sigkill_after_the_checkpoint_of_a_window_that_spilled(root, windows) -> None:
    """The local store runs without a WAL, but an ingested table file is durable at once: the
    process is killed after checkpoints of windows that spilled (their memtable never
    flushed), and the window before the last is replayed. The store must hold exactly that
    window's state: not the ingested changes of the replayed one under an older marker."""
    import subprocess
    import sys

    local = f"{root.local_base}/killed"
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_SPILLED_CHECKPOINT, root.url, local, str(windows)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    again = ManagedState(root.url, "op", 0, budget_bytes=8 << 20, local_dir=local)
    again.restore(windows - 2)  # the last window is replayed
    expect = {k: k // 60_000 for k in range((windows - 1) * 60_000)}
    assert _state(again) == expect
    again.close()
