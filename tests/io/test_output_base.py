"""The transactional output contract (``malhar.io.base.output``) on a small store of its own:
the committer's protocol (skip, fencing, retries, regression, rejected rows kept with their
window, re-run fingerprints) and the operator base (buffering, error port, replays,
application windows spanning streaming windows, application names).

The store here is a real implementation of the protocol over an in-process "system" (a
dict guarded by one lock per partition), the way a connector author would write one; the
JDBC store runs the same tests against PostgreSQL in ``test_jdbc_*.py``.
"""

from __future__ import annotations

import pickle
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.errors import ConfigError, MalharError
from malhar.io.base.committer import WindowCommitter
from malhar.io.base.output import (
    CommitMark,
    OutputError,
    OutputUnavailableError,
    RetryPolicy,
    TransactionalStore,
    WindowContentMismatchError,
    WindowKey,
    WindowRegressionError,
    batch_digest,
    rejected_row,
)
from malhar.io.base.output_operator import TransactionalOutputOperator
from malhar.io.base.spark_sink import TransactionalSinkSettings
from malhar.properties import Property
from malhar.testing.harness import OperatorHarness


# -- a store over an in-process system -----------------------------------------------------------
@dataclass
class System:
    """What the "external system" holds: committed rows and marks, rejected rows per window."""

    rows: list[tuple[WindowKey, int, dict]] = field(default_factory=list)
    marks: dict[WindowKey, CommitMark] = field(default_factory=dict)
    rejects: dict[tuple[WindowKey, int], list[dict]] = field(default_factory=dict)
    locks: dict[WindowKey, threading.Lock] = field(default_factory=dict)
    #: step name -> errors to raise at the next calls of that step
    fail: dict[str, list[BaseException]] = field(default_factory=dict)
    #: step name -> errors to raise *after* the step took effect (a lost reply)
    fail_after: dict[str, list[BaseException]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def step(self, name: str) -> None:
        self.calls.append(name)
        if self.fail.get(name):
            raise self.fail[name].pop(0)

    def after(self, name: str) -> None:
        if self.fail_after.get(name):
            raise self.fail_after[name].pop(0)

    def written(self) -> list[tuple[int, Any]]:
        return sorted((w, r["v"]) for _, w, r in self.rows)


@dataclass
class Txn:
    window: int
    rows: list[dict] = field(default_factory=list)
    rejects: list[dict] = field(default_factory=list)
    mark: CommitMark | None = None
    done: bool = False


class MemoryStore(TransactionalStore[Txn]):
    """Rows with a negative ``v`` are rejected by the "system"."""

    records_rejected = True

    def __init__(self, system: System, key: WindowKey) -> None:
        super().__init__(key)
        self.system = system

    def open(self) -> None:
        self.system.step("open")
        self.system.locks.setdefault(self.key, threading.Lock())

    def read_committed(self) -> CommitMark:
        self.system.step("read")
        return self.system.marks.get(self.key, CommitMark())

    def begin(self, window: int) -> Txn:
        self.system.step("begin")
        if not self.system.locks[self.key].acquire(timeout=10):
            raise TimeoutError("lock wait timed out")
        return Txn(window)

    def read_committed_locked(self, txn: Txn) -> CommitMark:
        self.system.step("read_locked")
        return self.system.marks.get(self.key, CommitMark())

    def write(self, txn: Txn, rows: pa.Table) -> list[dict[str, Any]]:
        self.system.step("write")
        bad = []
        for row in rows.to_pylist():
            if row["v"] is not None and row["v"] < 0:
                bad.append(rejected_row(row, "negative"))
            else:
                txn.rows.append(row)
        return bad

    def store_rejected(self, txn: Txn, window: int, rows: list[dict[str, Any]]) -> None:
        txn.rejects = list(rows)

    def read_rejected(self, window: int) -> list[dict[str, Any]]:
        return list(self.system.rejects.get((self.key, window), []))

    def store_committed(self, txn: Txn, mark: CommitMark) -> None:
        txn.mark = mark

    def commit(self, txn: Txn) -> None:
        self.system.step("commit")
        assert txn.mark is not None
        self.system.rows += [(self.key, txn.window, r) for r in txn.rows]
        self.system.marks[self.key] = txn.mark
        if txn.rejects:
            self.system.rejects[(self.key, txn.window)] = txn.rejects
        txn.done = True
        self.system.locks[self.key].release()
        self.system.after("commit")

    def abort(self, txn: Txn, error: BaseException | None) -> None:
        self.system.calls.append("abort")
        if not txn.done:
            txn.done = True
            self.system.locks[self.key].release()


KEY = WindowKey("app-test", "out", 0)


def rows(*values: int) -> pa.Table:
    return pa.table({"v": pa.array(values, pa.int64())})


def committer(system: System, **kw: Any) -> WindowCommitter[Txn]:
    c = WindowCommitter(MemoryStore(system, KEY), sleep=lambda s: None, **kw)
    c.open()
    return c


# -- the committer ---------------------------------------------------------------------------------
def test_a_window_is_written_once_and_its_replay_skipped() -> None:
    system = System()
    c = committer(system)
    first = c.commit_window(0, rows(1, 2, -3))
    assert (first.written, first.skipped, first.attempts) == (2, False, 1)
    assert [r["error"] for r in first.rejected] == ["negative"]
    assert system.written() == [(0, 1), (0, 2)]
    assert system.marks[KEY].window == 0

    again = c.commit_window(0, rows(1, 2, -3))  # the engine replays window 0
    assert again.skipped and again.replayed
    assert again.rejected == first.rejected  # recorded with the window, re-emitted
    assert system.written() == [(0, 1), (0, 2)]


def test_a_zombie_writer_is_fenced_by_the_locked_read() -> None:
    system = System()
    stale = committer(system)  # opened when nothing was committed
    fresh = committer(system)
    fresh.commit_window(0, rows(1))
    assert stale.committed == -1  # its cached mark says "not yet" ...
    result = stale.commit_window(0, rows(1))  # ... the read under the lock says committed
    assert result.skipped and system.written() == [(0, 1)]
    assert stale.committed == 0
    assert system.calls[-2:] == ["read_locked", "abort"]


def test_a_lost_commit_reply_is_retried_and_found_committed() -> None:
    system = System(fail_after={"commit": [ConnectionError("server closed the connection")]})
    retries: list[tuple[int, float]] = []
    c = committer(system, on_retry=lambda a, d, e: retries.append((a, d)))
    result = c.commit_window(0, rows(5, -1))
    # the COMMIT went through, its reply was lost: the retry finds the window committed,
    # writes nothing again, and returns the rows the first attempt rejected
    assert result.skipped and result.attempts == 2 and retries == [(1, 0.5)]
    assert system.written() == [(0, 5)]
    assert [r["v"] for r in result.rejected] == [-1]


def test_transient_failures_back_off_then_fail_clearly() -> None:
    system = System(fail={"write": [ConnectionError("refused")] * 10})
    waits: list[float] = []
    store = MemoryStore(system, KEY)
    c = WindowCommitter(
        store, retry=RetryPolicy(attempts=5, backoff=0.5, max_backoff=2.0), sleep=waits.append
    )
    c.open()
    with pytest.raises(OutputUnavailableError, match="still unavailable after 5 attempts"):
        c.commit_window(0, rows(1))
    assert waits == [0.5, 1.0, 2.0, 2.0]
    assert system.written() == [] and KEY not in system.marks
    assert system.calls.count("abort") == 5  # every failed attempt rolled back

    # anything that is not transient fails at once, wrapped, with the cause kept
    system.fail["write"] = [KeyError("schema changed")]
    with pytest.raises(OutputError, match=r"writing window 0 .* failed: KeyError") as err:
        c.commit_window(0, rows(1))
    assert isinstance(err.value, MalharError) and isinstance(err.value.__cause__, KeyError)


def test_windows_going_backwards_fail_unless_skipped() -> None:
    system = System()
    c = committer(system)
    c.commit_window(5, rows(1))
    with pytest.raises(WindowRegressionError, match="window 3 is older than window 5"):
        committer(system).commit_window(3, rows(2))
    lenient = committer(system, skip_older_windows=True)
    assert lenient.commit_window(3, rows(2)).skipped
    assert system.written() == [(5, 1)]


def test_a_rerun_with_other_rows_is_refused() -> None:
    system = System()
    c = committer(system)
    c.commit_window(0, rows(1, 2), digest=batch_digest(rows(1, 2)))
    assert system.marks[KEY].digest == batch_digest(rows(2, 1))  # order does not matter
    same = c.commit_window(0, rows(2, 1), digest=batch_digest(rows(2, 1)))
    assert same.skipped
    with pytest.raises(WindowContentMismatchError, match="window 0 re-ran with other input"):
        c.commit_window(0, rows(1, 3), digest=batch_digest(rows(1, 3)))


def test_batch_digest_is_order_and_chunk_independent() -> None:
    a = pa.table({"k": ["x", "y", None], "n": [1, 2, 3]})
    b = pa.concat_tables([a.slice(2), a.slice(0, 2)])
    assert batch_digest(a) == batch_digest(b)
    assert batch_digest(a) != batch_digest(a.slice(0, 2))
    assert batch_digest(a).startswith("3:")
    assert batch_digest(pa.table({"k": ["x"], "n": [2]})) != batch_digest(
        pa.table({"k": ["x"], "n": [1]})
    )


# -- the operator base -------------------------------------------------------------------------------
SYSTEMS: dict[str, System] = {}


class MemoryOutput(TransactionalOutputOperator):
    """An output operator on MemoryStore, the way a connector author writes one."""

    system = Property(str, default="default")

    def create_store(self, context: OperatorContext) -> MemoryStore:
        key = WindowKey(context.application, context.name, context.partition)
        return MemoryStore(SYSTEMS.setdefault(self.system, System()), key)


def harness(op: TransactionalOutputOperator, app: str = "app-test") -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="out", application=app))


def test_operator_buffers_writes_and_reemits_rejects_on_replay() -> None:
    SYSTEMS.pop("replay", None)
    h = harness(MemoryOutput(system="replay"))
    h.run_window([("input", pa.RecordBatch.from_pylist([{"v": 3}, {"v": 4}]))], window=0)
    window1 = [("input", {"v": 1}), ("input", "not a row"), ("input", {"v": -2})]
    h.run_window(window1, window=1)
    system = SYSTEMS["replay"]
    assert system.written() == [(0, 3), (0, 4), (1, 1)]
    errors = h.sink("error").per_window[1]
    assert errors == [
        {"value": "not a row", "error": "expected a mapping, got str"},
        {"v": -2, "error": "negative"},
    ]

    # a restarted partition replays window 1: its tuples are dropped, its errors re-emitted
    again = harness(MemoryOutput(system="replay"))
    again.run_window(window1, window=1)
    assert system.written() == [(0, 3), (0, 4), (1, 1)]
    assert again.sink("error").per_window[1] == errors
    assert again.operator._skip is False  # between windows


def test_an_application_window_survives_a_restore_mid_window() -> None:
    SYSTEMS.pop("appwin", None)
    h = harness(MemoryOutput(system="appwin")).setup()
    h.begin_window(10)  # an application window of two streaming windows: 10 and 11
    h.put("input", {"v": 1})
    saved = h.checkpoint()  # the engine's snapshot after streaming window 10
    restored = OperatorHarness.restored(
        MemoryOutput(system="appwin"), saved, OperatorContext(name="out", application="app-test")
    ).setup()
    restored.put("input", {"v": 2})  # streaming window 11, no begin_window
    restored.end_window()
    assert SYSTEMS["appwin"].written() == [(10, 1), (10, 2)]
    assert SYSTEMS["appwin"].marks[WindowKey("app-test", "out", 0)].window == 10


def test_the_default_application_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="no name of its own") as err:
        harness(MemoryOutput(system="noname"), app="app").setup()
    assert isinstance(err.value, OutputError)


def test_sink_settings_from_spark_options() -> None:
    class Settings(TransactionalSinkSettings):
        topic = Property(str)

    s = Settings().from_options(
        {"NAME": "q", "topic": "t", "retry_attempts": "3", "checkpointLocation": "/ck"}
    )
    assert (s.name, s.topic, s.retry_policy().attempts, s.operator) == ("q", "t", 3, "sink")
    with pytest.raises(
        ConfigError, match=r"no option 'retry_atempts'; did you mean 'retry_attempts'"
    ):
        Settings().from_options({"name": "q", "retry_atempts": "3"})


def test_a_snapshot_from_before_the_split_of_the_output_module_restores() -> None:
    """Checkpoints written before the operator base moved to ``output_operator`` pickled its
    ``WindowBuffer`` under ``malhar.io.base.output``: they restore, and the old imports of the
    moved names give the same objects."""
    import malhar.io.base.output as old_home
    from malhar.io.base import output_operator

    cls = output_operator.WindowBuffer
    buffer = cls()
    buffer.begin(7, False)
    buffer.add({"v": 1})
    cls.__module__ = "malhar.io.base.output"  # as the class was named then
    try:
        old = pickle.dumps(buffer)
    finally:
        cls.__module__ = "malhar.io.base.output_operator"
    assert b"output_operator" not in old
    back = pickle.loads(old)
    assert type(back) is cls and (back.window, back.pieces) == (7, [[{"v": 1}]])
    assert old_home.TransactionalOutputOperator is output_operator.TransactionalOutputOperator
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        old_home.Nothing  # noqa: B018
