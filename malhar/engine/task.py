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
from collections.abc import Iterable, Iterator

import pyarrow as pa

from malhar.engine import envelope as E
from malhar.engine.plan import Group, Plan
from malhar.engine.runtime import PartitionRuntime

# -- cache of live runtimes in this Python worker ------------------------------------------------
_LIVE: dict[tuple[str, str, int], PartitionRuntime] = {}


def acquire(plan: Plan, group: Group, partition: int, window: int) -> PartitionRuntime:
    key = (plan.app, group.key, partition)
    for other, stale in list(_LIVE.items()):
        if (
            other != key
            and other[0] == plan.app
            and stale.plan.id != plan.id
            and stale.plan.checkpoint == plan.checkpoint
        ):
            del _LIVE[other]  # an earlier launch of this application: release its resources
            stale.teardown()
    rt = _LIVE.pop(key, None)
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
        for rt in _LIVE.values()
        if rt.plan.id == plan.id and rt.group.level == level and rt.window == window - 1
    )


def release(rt: PartitionRuntime, *, keep: bool, failed: bool = False) -> None:
    if keep:
        _LIVE[(rt.plan.app, rt.group.key, rt.partition)] = rt
    elif failed:
        rt.teardown()  # release connections now; the replay restores from the store


@atexit.register
def _teardown_all() -> None:  # pragma: no cover - process exit
    for rt in list(_LIVE.values()):
        rt.teardown()
    _LIVE.clear()


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
