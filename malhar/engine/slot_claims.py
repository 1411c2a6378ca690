"""Level-0 slots claimed by tasks: each worker keeps its operators, no core waits.

Level 0 (the input operators and what is fused to them) is free to choose which task runs
which slot: its tasks read no shuffled input, and what they emit is routed by destination,
not by the emitting task. malhar uses that freedom twice.

* **Sticky slots.** Spark gives tasks no affinity to Python workers: with 4 input
  partitions on 2 cores the task of partition ``s`` lands on either worker, so a worker
  found its cached runtime of ``s`` a window or more behind about half the time and rebuilt
  it from the state store (``setup`` again: a new Kafka consumer, a cold first fetch). A
  task therefore first claims the slots whose runtime its worker holds at the previous
  window.
* **Fewer tasks than slots.** Level 0 has one Spark task per core (at most one per slot),
  and a task runs its share of the slots: no task launch per slot (about 60-70 ms each on
  2 cores), and all its slots begin before the first one reads, so their connectors fetch
  at the same time (``task.run_inputs``).

Measured on the flagship (4 readers x 50k lines, 2 cores): rebuilt readers spent 55-65 ms in
``setup`` and 120-240 ms reading their window, warm ones 0 and 50-65 ms; windows took
600-800 ms before, 390-450 ms with both (docs/performance-wordcount.md §5.5).

A claim is a file ``<checkpoint>/malhar/claims/<launch>/<window>/<slot>`` written atomically
without overwrite (the file system's compare-and-swap), holding the Spark partition that
claimed it: every slot is claimed once per window, and a retried attempt of a partition
runs the slots its failed attempt claimed before it claims more. So does a partition
Spark runs again in a resubmitted stage (an executor lost with its shuffle output), though
Spark numbers its attempts from 0 again: it meets its own claim. With speculative
execution two attempts of one partition may run at once, each claiming on its own, and
Spark keeps either one's output: there level 0 claims nothing and task ``s`` runs slot
``s``, as Spark placed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache

from malhar.util.fs import FileSystem, StorageExistsError, StorageNotFoundError, filesystem_for


@lru_cache(maxsize=8)
def claims_root(checkpoint: str) -> tuple[FileSystem, str]:
    """The folder of every launch's claims (the launcher clears it before a launch); one
    file system client per checkpoint and process (HDFS keeps its connections)."""
    fs, base = filesystem_for(checkpoint)
    return fs, fs.join(base, "malhar", "claims")


def level0_tasks(slots: int, parallelism: int, claim: bool) -> int:
    """How many Spark tasks run level 0: one per core, at most one per slot, when they
    ``claim``; else 0, which means one task per slot running its own slot, unclaimed (under
    speculative execution, see the module's docstring, or the ``SLOT_CLAIMS`` attribute
    set to False)."""
    return max(1, min(slots, parallelism)) if claim else 0


def claim_slots(
    checkpoint: str,
    launch: str,
    window: int,
    slots: int,
    task: int,
    tasks: int,
    *,
    attempt: int = 0,
    warm: Iterable[int] = (),
) -> list[int]:
    """The slots Spark partition ``task`` (of ``tasks``) runs in ``window``.

    Each task claims its share, ``ceil(slots / tasks)`` slots: first the ones whose runtime
    its worker holds, then its own index and the following free ones. Every slot is
    claimed once every task ran, and a worker keeps its slots from one window to the next
    even when a window is so short that one task could run them all before the other one
    starts. Fewer when the others took the rest.

    Args:
        checkpoint: the application's checkpoint root.
        launch: the launch's id (claims of another launch do not count).
        window: the window the task belongs to.
        slots: how many slots level 0 has.
        task: the task's Spark partition index.
        tasks: how many tasks level 0 has (at most ``slots``).
        attempt: the task's attempt number; after the first, the slots an earlier attempt
            claimed are its own again.
        warm: the slots whose runtime this worker holds at ``window - 1``, best first.
    """
    if slots <= 1:
        return [task] if task < slots else []
    fs, root = claims_root(checkpoint)
    folder = fs.join(root, launch, str(window))
    mine = str(task).encode()
    share = -(-slots // max(1, min(tasks, slots)))
    held = _claimed_by(fs, folder, mine) if attempt > 0 else []
    rerun = attempt > 0
    for slot in dict.fromkeys([*warm, *_after(task, slots)]):
        if len(held) >= share:
            break
        if not 0 <= slot < slots or slot in held:
            continue
        path = fs.join(folder, str(slot))
        try:
            fs.write_atomic(path, mine, overwrite=False)
        except StorageExistsError:
            # Spark numbers the attempts of a resubmitted stage (a lost executor's shuffle
            # output) from 0 again: a first attempt that meets its own claim is a re-run
            # and runs every slot its partition claimed, as a retry does.
            if not rerun and fs.read_all(path) == mine:
                rerun = True
                held = _claimed_by(fs, folder, mine)  # with the ones claimed above
            continue
        held.append(slot)
        if slot == 0:
            _purge(fs, fs.join(root, launch), window)
    return sorted(held)


def _claimed_by(fs: FileSystem, folder: str, mine: bytes) -> list[int]:
    """The slots of ``folder`` (one window's claims) that partition ``mine`` claimed."""
    if not fs.exists(folder):
        return []
    return [
        int(entry.name)
        for entry in fs.list(folder)
        if entry.name.isdigit() and fs.read_all(fs.join(folder, entry.name)) == mine
    ]


def _after(task: int, slots: int) -> Iterator[int]:
    """The task's own index first, then the following slots, wrapping around."""
    return ((task + i) % slots for i in range(slots))


def _purge(fs: FileSystem, launch_folder: str, window: int) -> None:
    """Drop the claims of earlier windows: their batches are in Spark's commit log (a
    window's tasks run only once the previous batch committed), so no attempt is left."""
    for entry in fs.list(launch_folder):
        if entry.name.isdigit() and int(entry.name) < window:
            try:
                fs.delete(fs.join(launch_folder, entry.name), recursive=True)
            except StorageNotFoundError:
                pass
