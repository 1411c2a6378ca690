"""The Spark task side of a window: which runtime runs it, and the entry points.

:func:`run_inputs` runs level 0 (inside the streaming source's ``read()``),
:func:`run_window` a later level (inside ``mapInArrow``). Runtimes
(:class:`~malhar.engine.runtime.PartitionRuntime`) stay cached in the Python
worker between windows (:func:`acquire` / :func:`release`); one is rebuilt from the
state store whenever the cached copy is not exactly the state after the previous
window (another worker ran it, or a failure).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from malhar.engine import envelope as E
from malhar.engine.plan import Group, Plan
from malhar.engine.runtime import PartitionRuntime


# -- cache of live runtimes in this Python worker ------------------------------------------------
class RuntimeCache:
    """The live runtimes of this Python worker, by (application, group, partition).

    A runtime is kept between windows so that the next window of its slot in this
    worker skips the restore. When its slot moves to another worker (Spark places
    later levels freely), the runtime here would hold its connections and buffers (a
    Kafka consumer prefetches up to 64 MB) until this worker met it again or exited:
    runtimes idle for longer than the plan's ``IDLE_RUNTIME_TIMEOUT_MS`` are torn
    down, by the next acquire in this worker or by a daemon thread that wakes while
    the worker sits idle.
    """

    def __init__(self) -> None:
        self.live: dict[tuple[str, str, int], tuple[PartitionRuntime, float]] = {}
        self.lock = threading.RLock()
        self._sweeper: threading.Thread | None = None

    def __contains__(self, key: tuple[str, str, int]) -> bool:
        return key in self.live

    def runtimes(self) -> list[PartitionRuntime]:
        with self.lock:
            return [rt for rt, _ in self.live.values()]

    def take(self, key: tuple[str, str, int]) -> PartitionRuntime | None:
        with self.lock:
            found = self.live.pop(key, None)
        return None if found is None else found[0]

    def put(self, rt: PartitionRuntime) -> None:
        with self.lock:
            self.live[(rt.plan.app, rt.group.key, rt.partition)] = (rt, time.monotonic())
            if self._sweeper is None:
                self._sweeper = threading.Thread(
                    target=self._sweep_forever, name="malhar-runtime-sweeper", daemon=True
                )
                self._sweeper.start()

    def evict(self, predicate: Callable[[tuple[str, str, int], PartitionRuntime], bool]) -> int:
        """Tear down (outside the lock) the runtimes ``predicate`` selects; how many."""
        with self.lock:
            gone = [(k, rt) for k, (rt, _) in self.live.items() if predicate(k, rt)]
            for key, _ in gone:
                del self.live[key]
        for _, rt in gone:
            rt.teardown()
        return len(gone)

    def evict_idle(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        with self.lock:
            idle = {
                key
                for key, (rt, since) in self.live.items()
                if now - since > rt.plan.idle_timeout_ms / 1000
            }
        return self.evict(lambda key, _: key in idle)

    def _sweep_forever(self) -> None:  # pragma: no cover - timing of a daemon thread
        while True:
            with self.lock:
                timeouts = [rt.plan.idle_timeout_ms / 1000 for rt, _ in self.live.values()]
            time.sleep(max(0.05, min(timeouts, default=60.0) / 4))
            self.evict_idle()

    def clear(self) -> None:
        self.evict(lambda *_: True)


_CACHE = RuntimeCache()


def acquire(plan: Plan, group: Group, partition: int, window: int) -> PartitionRuntime:
    key = (plan.app, group.key, partition)
    # an earlier launch of this application: release its resources
    _CACHE.evict(
        lambda other, stale: (
            other != key
            and other[0] == plan.app
            and stale.plan.id != plan.id
            and stale.plan.checkpoint == plan.checkpoint
        )
    )
    _CACHE.evict_idle()
    rt = _CACHE.take(key)
    if rt is not None and rt.window == window - 1 and rt.plan.id == plan.id:
        return rt
    if rt is not None:
        rt.teardown()
    rt = PartitionRuntime(plan, group, partition)
    rt.restore(window)
    return rt


def warm_slots(plan: Plan, level: int, window: int) -> list[int]:
    """The slots of ``level`` whose runtime this worker holds at ``window - 1``."""
    return sorted(
        rt.group.slot_offset + rt.partition
        for rt in _CACHE.runtimes()
        if rt.plan.id == plan.id and rt.group.level == level and rt.window == window - 1
    )


def release(rt: PartitionRuntime, *, keep: bool, failed: bool = False) -> None:
    if keep:
        _CACHE.put(rt)
    elif failed:
        rt.teardown()  # release connections now; the replay restores from the store


@atexit.register
def _teardown_all() -> None:  # pragma: no cover - process exit
    _CACHE.clear()


def run_window(
    plan: Plan, level: int, slot: int, rows: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Run one window of the group partition at (``level`` >= 1, ``slot``) over the rows
    shuffled to it; yield envelope batches. The window comes with the first marker."""
    group, partition = plan.group_at(level, slot)
    incoming = iter(rows)
    early: list[E.Envelope] = []
    window: int | None = None
    committed, shutdown = -1, False
    for batch in incoming:  # learn the window from the first marker of any upstream task
        rows_of_batch = list(E.iter_rows(batch))
        for i, row in enumerate(rows_of_batch):
            if row.kind == E.MARKER and row.level == level:
                window, committed, shutdown = row.window, row.committed, row.shutdown
                early.extend(rows_of_batch[i + 1 :])
                break
            early.append(row)
        if window is not None:
            break
    if window is None:
        return  # no upstream task ran: nothing to do
    rt = acquire(plan, group, partition, window)
    ok = False
    try:
        rt.begin(window, committed, shutdown)
        for row in early:
            rt.receive(row)
            if rt.out.full():
                yield rt.out.take()
        for batch in incoming:
            for row in E.iter_rows(batch):
                rt.receive(row)
            if rt.out.full():
                yield rt.out.take()
        rt.end(window, shutdown)
        if len(rt.out):
            yield rt.out.take()
        ok = True
    finally:
        release(rt, keep=ok and not shutdown, failed=not ok)


def run_inputs(
    plan: Plan,
    slots: Iterable[int],
    *,
    window: int,
    committed: int = -1,
    shutdown: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Run one window of level-0 ``slots`` in this task; yield envelope batches.

    Every slot's runtime begins before the first one reads, so connectors that fetch
    ahead (the Kafka input assigns its partitions in ``begin_window``) all fetch while
    the first slot runs; then each slot reads, ends, and its output is yielded.
    """
    runtimes: list[PartitionRuntime] = []
    ok = False
    try:
        for slot in slots:
            group, partition = plan.group_at(0, slot)
            rt = acquire(plan, group, partition, window)
            runtimes.append(rt)
            rt.begin(window, committed, shutdown)
        for rt in runtimes:
            rt.run_input()
            rt.end(window, shutdown)
            if len(rt.out):
                yield rt.out.take()
        ok = True
    finally:
        for rt in runtimes:
            release(rt, keep=ok and not shutdown, failed=not ok)
