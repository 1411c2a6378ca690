"""Dedup on managed state: expiry by event time, bounded memory of keys, spilling, replay."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.algo import BoundedDedup, TimeBasedDedup
from malhar.testing.harness import OperatorHarness


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
