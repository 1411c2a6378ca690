"""The bucket span of time-bucketed state is kept with its checkpoint: a restore with another
span raises instead of misreading every bucket number (review finding 7)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from malhar import OperatorContext
from malhar.algo import TimeBasedDedup
from malhar.testing.harness import OperatorHarness
from malhar.util.state import INT_VALUE, ManagedState
from malhar.util.state.errors import StateError
from malhar.util.state.structure import Structure
from malhar.util.state.time_buckets import Bucketed


@pytest.fixture
def new_state(tmp_path: Any) -> Iterator[Callable[[], ManagedState]]:
    opened: list[ManagedState] = []

    def new() -> ManagedState:
        ms = ManagedState(
            str(tmp_path / "ckpt"), "op", 0, local_dir=str(tmp_path / uuid.uuid4().hex[:8])
        )
        opened.append(ms)
        return ms

    yield new
    for ms in opened:
        ms.close()


def test_a_restore_with_another_span_raises(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    tb = ms.time_buckets("tb", bucket_span=10, value_codec=INT_VALUE)
    ints = ms.int_sets("ints", bucket_span=10)
    assert tb.put("a", 25, 1) and ints.add(7, 25)
    ms.checkpoint(0)  # nothing expired: the span is kept all the same

    same = new_state()
    same.restore(0)
    assert same.time_buckets("tb", 10, value_codec=INT_VALUE).get("a", 25) == 1
    assert same.int_sets("ints", 10).contains(7, 25)

    other = new_state()
    other.restore(0)
    with pytest.raises(StateError, match="'tb' was checkpointed with bucket_span 10, not 60"):
        other.time_buckets("tb", 60, value_codec=INT_VALUE)
    with pytest.raises(StateError, match="'ints' was checkpointed with bucket_span 10, not 60"):
        other.int_sets("ints", 60)


def test_the_span_travels_with_the_horizon(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    tb = ms.time_buckets("tb", bucket_span=10, value_codec=INT_VALUE)
    tb.put("a", 25, 1)
    assert tb.expire_before(20) == 2
    ms.checkpoint(0)
    again = new_state()
    again.restore(0)
    tb = again.time_buckets("tb", 10, value_codec=INT_VALUE)
    assert tb.horizon == 20 and tb.get("a", 25) == 1 and tb.is_expired(19)
    other = new_state()
    other.restore(0)
    with pytest.raises(StateError, match="Set the bucket span back to 10"):
        other.time_buckets("tb", 5, value_codec=INT_VALUE)


def test_a_checkpoint_without_the_span_still_restores(new_state, monkeypatch) -> None:
    # the metadata as it was written before the span was kept: kind | horizon
    monkeypatch.setattr(Bucketed, "_flush_meta", Structure._flush_meta)
    ms = new_state()
    ms.restore(-1)
    tb = ms.time_buckets("tb", bucket_span=10, value_codec=INT_VALUE)
    tb.put("a", 25, 1)
    tb.expire_before(20)
    ms.checkpoint(0)
    monkeypatch.undo()

    old = new_state()
    old.restore(0)
    tb = old.time_buckets("tb", 10, value_codec=INT_VALUE)
    assert tb.horizon == 20 and tb.get("a", 25) == 1
    # a checkpoint that writes nothing stays empty (no span record on its own)
    written = old.stats["files_written"]
    old.checkpoint(1)
    assert old.stats["files_written"] == written
    # the next one that writes takes the span along
    tb.put("b", 35, 2)
    old.checkpoint(2)
    newer = new_state()
    newer.restore(2)
    with pytest.raises(StateError, match="bucket_span 10, not 5"):
        newer.time_buckets("tb", 5, value_codec=INT_VALUE)


def test_a_dedup_restarted_with_another_bucket_span_refuses_to_start() -> None:
    ctx = OperatorContext(name="dedup", checkpoint=tempfile.mkdtemp())
    t0 = 1_700_000_000_000

    def dedup(span: int) -> TimeBasedDedup:
        return TimeBasedDedup(key="k", time="t", expire_after=3_600_000, bucket_span=span)

    h = OperatorHarness(dedup(1_000), ctx)
    h.run_window([("input", {"k": i, "t": t0}) for i in range(3)])
    h.run_window([("input", {"k": 9, "t": t0 + 4_000_000})])  # moves the horizon
    saved = h.checkpoint()
    h.teardown()
    again = OperatorHarness.restored(dedup(60_000), saved, ctx)
    # before the fix every new tuple went to expired, silently
    with pytest.raises(StateError, match="bucket_span 1000, not 60000"):
        again.run_window([("input", {"k": 100, "t": t0 + 4_000_001})])
    again.teardown()
    same = OperatorHarness.restored(dedup(1_000), saved, ctx)
    same.run_window([("input", {"k": 100, "t": t0 + 4_000_001})] * 2)
    assert len(same.sink("unique").tuples) == 1 and len(same.sink("duplicate").tuples) == 1
    assert same.sink("expired").tuples == []
    same.teardown()
