"""A launch whose DAG changed a partition count: the manifest reconciled with the DAG.

Before a launch's first query, operators whose ``PARTITIONS`` (or the count they
follow) differs from the count they last ran with from the checkpoint have their state
moved as a repartitioning after the last completed window would
(``malhar.engine.state_moves``), and the generation manifest
(``malhar.engine.generations``) records the counts of the launch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from malhar import attributes as A
from malhar.dag import DAG
from malhar.engine import generations
from malhar.engine.plan import Plan
from malhar.engine.repartition import _repartition_one, planned
from malhar.engine.state_moves import (
    _codec_of,
    _has_managed,
    _move_managed,
    _redistribute,
    _refuse_custom_state,
    _restored,
    _Snapshots,
    _write_snapshots,
)
from malhar.engine.state_store import windows_in
from malhar.engine.unifier_states import holds_state
from malhar.errors import ConfigError, StateError
from malhar.operator import InputOperator
from malhar.partitioning import Partition, Partitioner

log = logging.getLogger("malhar")


def reconcile(
    dag: DAG, checkpoint: str, window: int, *, stopped: bool = True
) -> generations.Generation | None:
    """Before a launch's first query: move the state of operators whose ``PARTITIONS`` (or
    the count they follow) differs from the count they last ran with from ``checkpoint``.

    ``window``: the last completed window (-1: none, nothing to move). Operators of the
    generation manifest (dynamically repartitioned) keep the partitioning recorded there,
    as before. For the others the manifest records the counts of every launch
    (``Generation.counts``; a checkpoint written before that record is read from its
    snapshot folders). A changed count is applied as a repartitioning after ``window``:
    keyed ``State`` fields and managed state move by key to the partitions that now
    receive the key (the static routing: the stream codec's hash modulo the count), a
    new generation holds the snapshots of the new plan, the manifest commits it. State
    the engine cannot move (an operator that says ``cannot_repartition()``, a custom
    ``snapshot()``, a differing field that is not keyed, a key held by two partitions)
    refuses the launch before anything is written. An input's read positions are dealt
    to its new count by its own partitioner, as a running repartitioning does (an input
    that cannot deal them refuses the launch). ``stopped``: the last run
    stopped cleanly after ``window``; otherwise window ``window + 1`` may be partly
    committed by outputs, and a count change is refused (its replay would route rows to
    other output partitions than the ones that committed them). Returns the generation
    written, or None when no state moved.
    """
    c = _Changes.of(dag, checkpoint)
    gen, kept, configured = c.gen, c.kept, c.configured
    counts, old_counts, moved = c.counts, c.old_counts, c.moved
    declared, released = c.declared, c.released
    _say_where_the_manifest_wins(dag, kept, gen.declared)
    if window < 0 or not moved:
        if gen.counts != counts or gen.declared != declared or released:
            generations.commit(
                checkpoint, dataclasses.replace(kept, counts=counts, declared=declared)
            )
        return None
    changes = c.changes
    if not stopped:
        raise StateError(_unclean(changes, checkpoint, window))

    old_plan = _plan_as_it_ran(dag, checkpoint, gen, moved, old_counts)
    snapshots = _Snapshots(old_plan, window)
    changed: dict[str, list[Partition]] = {}
    new_gen = generations.Generation(
        generation=gen.generation + 1,
        window=window,
        operators=dict(kept.operators),
        managed_roots=dict(gen.managed_roots),
        counts=counts,
        declared=declared,
    )
    for name in moved:
        if name in changed:  # fused behind an input, moved with it
            continue
        try:
            if _leads_as_input(dag, old_plan, name):
                # only the input knows its read positions: dealt by its own partitioner,
                # as a running repartitioning does (with what is fused behind it)
                _repartition_one(
                    dag, name, counts[name], old_plan, kept, new_gen, snapshots, {}, changed
                )
                continue
            news = _moved_by_count(dag, name, old_plan, configured, snapshots, window)
        except (StateError, ConfigError) as exc:
            raise type(exc)(
                f"operator {name!r}: PARTITIONS is now {counts[name]}, but the checkpoint "
                f"{checkpoint} ran it with {old_counts[name]} partitions, and its state cannot "
                f"move to the new count: {exc}. To go on, launch with the count it ran with "
                f"({old_counts[name]}), or start from a new checkpoint"
            ) from exc
        if news is not None:
            changed[name] = news
    if not changed and not _regrouped(dag, old_plan, configured, snapshots):
        # nothing held state: the new count starts empty
        generations.commit(checkpoint, dataclasses.replace(kept, counts=counts, declared=declared))
        return None
    _refuse_inside_application_windows(dag, checkpoint, window)

    new_plan = planned(dag, checkpoint, new_gen)
    root = generations.state_root(checkpoint, new_gen.generation)
    try:
        _write_snapshots(new_plan, root, window, changed, snapshots)
    except StateError as exc:  # a unifier's state (malhar.engine.unifier_states)
        raise StateError(
            f"{changes}: the partition counts changed since the last run on {checkpoint}, "
            f"but {exc}. To go on, launch with the counts it ran with, or start from a new "
            "checkpoint"
        ) from exc
    _move_managed(old_plan, configured, new_gen, changed, window, root)
    generations.commit(checkpoint, new_gen)
    generations.remove_other_generations(checkpoint, new_gen)
    log.warning(
        "malhar: %s: partition counts changed since the checkpoint's last run; their "
        "state moved by key after window %d (generation %d)",
        changes,
        window,
        new_gen.generation,
    )
    return new_gen


@dataclasses.dataclass(frozen=True)
class _Changes:
    """What a launch of ``dag`` changes in the partitioning ``checkpoint`` records."""

    gen: generations.Generation  #: the manifest as the last run left it
    declared: dict[str, int]  #: the DAG's own counts
    released: list[str]  #: manifest operators whose declared count changed
    kept: generations.Generation  #: the manifest without them
    configured: Plan  #: the plan of this launch
    counts: dict[str, int]  #: every operator's count in it
    old_counts: dict[str, int]  #: the counts of the last run
    moved: list[str]  #: operators whose state goes to another partitioning

    @classmethod
    def of(cls, dag: DAG, checkpoint: str) -> _Changes:
        gen = generations.load(checkpoint)
        declared = dag.partition_counts()
        released = _released(gen, declared)
        kept = dataclasses.replace(
            gen, operators={n: p for n, p in gen.operators.items() if n not in released}
        )
        configured = planned(dag, checkpoint, kept)
        groups, group_of = configured.groups, configured.group_of
        counts = {n: groups[group_of[n]].partitions for n in dag.operators}
        old_counts = dict(gen.counts) or _counts_in_folders(checkpoint, gen, set(dag.operators))
        moved = _moved(dag, kept, counts, old_counts, released)
        return cls(gen, declared, released, kept, configured, counts, old_counts, moved)

    @property
    def changes(self) -> str:
        """``a: 2 -> 3, b: 1 -> 2``."""
        return ", ".join(f"{n}: {self.old_counts[n]} -> {self.counts[n]}" for n in self.moved)


def _unclean(changes: str, checkpoint: str, window: int) -> str:
    return (
        f"{changes}: the partition counts changed since the last run on {checkpoint}, "
        f"which did not stop cleanly after window {window} (it crashed or was killed). "
        f"Window {window + 1} may be partly committed by its outputs, and replaying it "
        "with other counts would send its rows to other output partitions (rows written "
        "twice). Restart with the counts it ran with, stop it (Ctrl-C, "
        "RunningApplication.stop()), then change PARTITIONS"
    )


def refusal_before_launch(dag: DAG, checkpoint: str) -> str | None:
    """The refusal :func:`reconcile` gives a launch that changes partition counts after a
    run that did not stop cleanly, found by reading ``checkpoint`` only, so that
    ``malhar run`` says it before starting Spark; None: not refused here (the launch
    itself checks everything, this too)."""
    from malhar.engine.spark_io import stopped_after
    from malhar.engine.window_log import WindowLog

    try:
        window = WindowLog(checkpoint, dag.attr(A.CHECKPOINT_INTEGRITY_KEY)).largest_completed()
        if window < 0 or stopped_after(checkpoint, window):
            return None
        changes = _Changes.of(dag, checkpoint)
    except Exception:  # a checkpoint this cannot read: the launch says what is wrong
        return None
    return _unclean(changes.changes, checkpoint, window) if changes.moved else None


def _released(gen: generations.Generation, declared: Mapping[str, int]) -> list[str]:
    """Operators of the manifest whose DAG now declares another count than at the last
    launch: an operator repartitioned while running keeps that count, unless the user
    changed its PARTITIONS to change it."""
    return sorted(
        n
        for n in gen.operators
        if n in gen.declared and n in declared and declared[n] != gen.declared[n]
    )


def _moved(
    dag: DAG,
    kept: generations.Generation,
    counts: Mapping[str, int],
    old_counts: Mapping[str, int],
    released: list[str],
) -> list[str]:
    """Operators outside the manifest (``kept``) whose state goes to another partitioning."""
    return sorted(
        n
        for n in dag.operators
        if n not in kept.operators
        and n in old_counts
        and (old_counts[n] != counts[n] or n in released)  # released: routed by table before
    )


def _say_where_the_manifest_wins(
    dag: DAG, gen: generations.Generation, declared: Mapping[str, int]
) -> None:
    """Say which operators keep the count a repartitioning while running gave them over
    their static PARTITIONS: at INFO when that PARTITIONS is the one of the last launch
    (unchanged: the running count stands), as a WARNING when the checkpoint does not say
    (written before launches recorded it: a change made now is not seen as one)."""
    static = dag.partition_counts()
    for name, kept in sorted(gen.operators.items()):
        if name in static and static[name] != kept.partitions:
            known = name in declared
            log.log(
                logging.INFO if known else logging.WARNING,
                "malhar: operator %r runs %d partitions, as its last repartitioning while "
                "running left it (the checkpoint's partitioning.json); its PARTITIONS=%d is "
                "not applied%s",
                name,
                kept.partitions,
                static[name],
                " (unchanged since the last launch: change it to change the count)"
                if known
                else ": this checkpoint does not record the PARTITIONS it was last launched "
                "with, so a change cannot be told; repartition it while it runs (malhar "
                "repartition, RunningApplication.repartition)",
            )


def _plan_as_it_ran(
    dag: DAG,
    checkpoint: str,
    gen: generations.Generation,
    moved: list[str],
    old_counts: Mapping[str, int],
) -> Plan:
    """The plan the checkpoint last ran: ``moved`` at their old counts."""
    shape = generations.Generation(
        operators={n: generations.OperatorPartitioning(old_counts[n]) for n in moved}
    )
    old_plan = planned(generations.partitioned_dag(dag, shape), checkpoint, gen)
    for name in moved:
        ran = old_plan.groups[old_plan.group_of[name]].partitions
        if ran != old_counts[name]:
            raise StateError(
                f"operator {name!r}: the checkpoint {checkpoint} ran it with "
                f"{old_counts[name]} partitions, but the DAG cannot be planned with that count "
                f"({ran}); restart with the partition counts it last ran with"
            )
    return old_plan


def _regrouped(dag: DAG, old_plan: Plan, new_plan: Plan, snapshots: _Snapshots) -> list[str]:
    """Operators fused differently now that hold state: their snapshots go to their new
    groups."""
    out = []
    for name in dag.operators:
        old_group = old_plan.groups[old_plan.group_of[name]]
        if old_group.key == new_plan.groups[new_plan.group_of[name]].key:
            continue
        template = dag.operators[name].operator
        if any(holds_state(template, snapshots.get(name, p)) for p in range(old_group.partitions)):
            out.append(name)
    return out


def _refuse_inside_application_windows(dag: DAG, checkpoint: str, window: int) -> None:
    """Refuse a move after ``window`` when it ends inside an operator's application window:
    the rewritten snapshots would close it (its buffered windows lost); a running
    repartition waits for the boundary instead."""
    for name, meta in dag.operators.items():
        every = int(meta.attr(A.APPLICATION_WINDOW_COUNT))
        if every > 1 and (window + 1) % every and not meta.is_input:
            raise StateError(
                f"operator {name!r}: the checkpoint {checkpoint}'s last completed window "
                f"{window} ends inside its application window of {every} streaming windows, "
                "and the partition counts changed since its last run: launch with the "
                "counts it last ran with until the application window ends, then change them"
            )


def _leads_as_input(dag: DAG, plan: Plan, name: str) -> bool:
    """``name`` is an input operator, first of its fused group, that deals its read
    positions itself (a ``Partitioner``); one that cannot and says why (its
    ``cannot_repartition``) is refused here, before the launch writes anything."""
    operator = dag.operators[name].operator
    group = plan.groups[plan.group_of[name]]
    if not isinstance(operator, InputOperator) or group.operators[0] != name:
        return False
    why = operator.cannot_repartition()  # asked of a Partitioner too: it may say no
    if why:
        raise ConfigError(f"{type(operator).__name__} cannot be repartitioned: {why}")
    # an input without positions keeps its snapshots by partition number
    return isinstance(operator, Partitioner)


def _moved_by_count(
    dag: DAG, name: str, old_plan: Plan, new_plan: Plan, snapshots: _Snapshots, window: int
) -> list[Partition] | None:
    """The new partitions of ``name`` at its configured static count with its state moved
    by key, or None when it holds no state to move (or is an input)."""
    meta = dag.operators[name]
    if isinstance(meta.operator, InputOperator):
        return None  # snapshots stay by partition number, as before; the input checks
    old_n = old_plan.groups[old_plan.group_of[name]].partitions
    new_n = new_plan.groups[new_plan.group_of[name]].partitions
    snaps = [snapshots.get(name, p) for p in range(old_n)]
    if not (_has_managed(old_plan, name) or any(holds_state(meta.operator, s) for s in snaps)):
        return None
    why = meta.operator.cannot_repartition()
    if why:
        raise ConfigError(f"{type(meta.operator).__name__} cannot be repartitioned: {why}")
    _refuse_custom_state(name, name, old_n, snapshots)
    every = int(meta.attr(A.APPLICATION_WINDOW_COUNT))
    if every > 1 and (window + 1) % every:
        raise StateError(
            f"its last completed window {window} ends inside an application window of "
            f"{every} streaming windows, whose state would move mid-way (RunningApplication."
            "repartition waits for the end of the application window)"
        )
    olds = [_restored(meta.operator, s) for s in snaps]
    news = [Partition(meta.operator.clone(), None) for _ in range(new_n)]
    # the stream codec of its group's first operator routes its tuples (PARALLEL_PARTITION)
    codec, typed = _codec_of(new_plan, new_plan.groups[new_plan.group_of[name]].operators[0])
    _redistribute(name, olds, news, codec, typed, None)
    return news


def _counts_in_folders(
    checkpoint: str, gen: generations.Generation, names: set[str]
) -> dict[str, int]:
    """The partition counts a checkpoint written before ``Generation.counts`` ran its
    operators with: the partition folders of the groups' snapshots."""
    from malhar.util.fs import filesystem_for
    from malhar.util.fs.names import decode_segment

    fs, base = filesystem_for(generations.state_root(checkpoint, gen.generation))
    parent = fs.join(base, "malhar", "state")
    if not fs.exists(parent):
        return {}
    out: dict[str, int] = {}
    for entry in fs.list(parent):
        try:
            key = decode_segment(entry.name)
        except Exception:
            continue
        newest = {
            int(e.name): max(found)
            for e in fs.list(entry.path)
            if e.name.isdigit() and (found := windows_in(fs, e.path))
        }
        if not newest:
            continue
        latest = max(newest.values())
        # folders of an earlier, larger count stay behind with older snapshots: only the
        # partitions that wrote the group's latest window count
        current = [p for p, w in newest.items() if w == latest]
        for member in key.split("+"):
            if member in names:
                out[member] = max(current) + 1
    return out
