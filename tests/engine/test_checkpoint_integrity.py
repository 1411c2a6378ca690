"""Snapshots signed with CHECKPOINT_INTEGRITY_KEY; group directories named injectively."""

from __future__ import annotations

from pathlib import Path

import pytest

from malhar import DAG, ApplicationFailed, run
from malhar.engine.state_store import StateStore
from malhar.testing.operators import Collector, collected
from malhar.util.integrity import IntegrityError
from tests.engine.ops import Numbers, RunningTotal, window_items

KEY = b"k" * 32


def test_a_tampered_or_moved_snapshot_is_refused(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), "count", 0, KEY)
    store.save(3, b"state after 3")
    assert store.load(3) == (3, b"state after 3")
    snap = Path(store.describe(3))
    raw = bytearray(snap.read_bytes())
    raw[-1] ^= 1
    snap.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=str(snap)):
        store.load(3)
    store.save(3, b"state after 3")
    Path(store.describe(4)).write_bytes(snap.read_bytes())  # a valid snapshot, moved
    with pytest.raises(IntegrityError, match="tag mismatch"):
        store.load(4)
    other = StateStore(str(tmp_path), "other", 0, KEY)  # another group's directory
    Path(other.describe(3)).write_bytes(snap.read_bytes())
    with pytest.raises(IntegrityError):
        other.load(3)


def test_unsigned_snapshots_are_refused_once_a_key_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    StateStore(str(tmp_path), "g", 0).save(1, b"plain")
    monkeypatch.setenv("MALHAR_TEST_STATE_KEY", "k" * 32)  # the key as a reference
    with pytest.raises(IntegrityError):
        StateStore(str(tmp_path), "g", 0, "${env:MALHAR_TEST_STATE_KEY}").load(1)


def test_group_names_map_to_distinct_directories_and_old_ones_move_over(tmp_path: Path) -> None:
    stores = [StateStore(str(tmp_path), name, 0) for name in ("a b", "a/b", "a_b", "..")]
    for i, store in enumerate(stores):
        store.save(1, f"{i}".encode())
    assert [s.load(1) for s in stores] == [(1, f"{i}".encode()) for i in range(4)]
    assert len({Path(s.describe(1)).parent for s in stores}) == 4
    assert all(tmp_path in Path(s.describe(1)).parents for s in stores)
    legacy = tmp_path / "malhar" / "state" / "src+sum" / "0"  # before names were encoded
    legacy.mkdir(parents=True)
    (legacy / f"{7:020d}.state").write_bytes(b"old")
    assert StateStore(str(tmp_path), "src+sum", 0).load(7) == (7, b"old")


@pytest.mark.integration
def test_a_signed_application_runs_and_a_tampered_checkpoint_stops_it(
    spark, tmp_path: Path
) -> None:
    def build() -> DAG:
        dag = DAG("signed", CHECKPOINT_INTEGRITY_KEY=KEY)
        src = dag.add_operator("src", Numbers())
        tot = dag.add_operator("total", RunningTotal())
        out = dag.add_operator("out", Collector())
        dag.add_stream("a", src.output, tot.input)
        dag.add_stream("b", tot.output, out.input)
        return dag

    checkpoint = str(tmp_path / "ck")
    run(build(), windows=3, spark=spark, checkpoint=checkpoint, window_ms=50)
    totals = [v for _, vs in sorted(collected(checkpoint, "out").items()) for v in vs]
    expected = [sum(v for _, v in window_items(w)) for w in range(3)]
    assert totals == [sum(expected[: i + 1]) for i in range(3)]
    snapshots = sorted((Path(checkpoint) / "malhar" / "state").rglob("*.state"))
    assert snapshots
    for snap in snapshots:  # someone without the key rewrites the state
        raw = bytearray(snap.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        snap.write_bytes(bytes(raw))
    with pytest.raises(ApplicationFailed, match="IntegrityError"):
        run(build(), windows=1, spark=spark, checkpoint=checkpoint, window_ms=50)
