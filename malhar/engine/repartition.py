"""Repartitioning an application between two windows, exactly once (driver side).

Called while the application's query is stopped after window ``W`` (an orderly
stop: every partition ended ``W`` and was torn down, and ``W`` is recorded in the
window log). For each operator to repartition, its partitioner is asked for the new
partitions (``define_partitions``) with the existing ones rebuilt from their
snapshots of ``W``; then:

1. keyed state moves with its keys: every ``State(keyed=True)`` mapping of the old
   partitions is pooled and each entry goes to the new partition that receives its
   key (the stream codec's ``hash_keys`` and the new partition keys); a state field
   that is not keyed must be equal in every old partition (it is copied), else the
   repartitioning is refused with the field's name. An input operator's own
   partitioner places its read positions (e.g. Kafka partitions and their offsets);
2. the snapshots of every group partition of the new plan are written for window
   ``W`` under the next generation's root; the managed state of the repartitioned
   operators is rewritten there too, by key;
3. the generation manifest is replaced (the commit point, see
   ``malhar.engine.generations``), the partitioners hear ``partitioned``, and files
   no generation needs any more are removed.

The query then starts again from the window log: window ``W + 1`` runs on the new
partitions. A crash before step 3 leaves the old generation in force (the new one's
files are garbage); after it, the new one. How state moves is in
``malhar.engine.state_moves``; a launch whose partition counts changed moves it too
(``malhar.engine.reconcile``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from malhar import attributes as A
from malhar.dag import DAG
from malhar.engine import generations
from malhar.engine.plan import Plan, build_plan
from malhar.engine.state_moves import (
    _codec_of,
    _redistribute,
    _refuse_custom_state,
    _repartition_managed,
    _restored,
    _Snapshots,
    _write_snapshots,
)
from malhar.errors import ConfigError
from malhar.operator import InputOperator
from malhar.partitioning import (
    Partition,
    Partitioner,
    PartitioningContext,
    StatelessPartitioner,
    routing_table,
    spread,
)
from malhar.stats import OperatorStats

log = logging.getLogger("malhar")

#: called with the name of each step as it is reached (crash tests pause here)
STEP_HOOK: Callable[[str], None] = lambda step: None  # noqa: E731

Request = int | Partitioner


def planned(dag: DAG, checkpoint: str, generation: generations.Generation) -> Plan:
    """The plan of ``dag`` at ``generation`` (partition counts, routing, state roots)."""
    shaped = generations.partitioned_dag(dag, generation)
    shaped.set_attribute(A.CHECKPOINT, checkpoint)
    plan = build_plan(shaped, own_routing=generation.operators)
    generations.apply(plan, generation)
    return plan


def partitioner_of(dag: DAG, name: str, request: Request | None) -> Partitioner:
    """What defines ``name``'s partitions: the request, its PARTITIONER attribute, or the
    operator itself when it implements the protocol. A count asks for a
    :class:`StatelessPartitioner`, except for an input: its own partitioner gets the
    count (``PartitioningContext.requested``) and moves its read positions."""
    meta = dag.operators[name]
    if isinstance(meta.operator, InputOperator):
        # only the input knows its read positions: a fresh copy would read again or skip
        if not isinstance(meta.operator, Partitioner) or not isinstance(request, int | None):
            raise ConfigError(
                f"operator {name!r} is an input that cannot move its read positions to new "
                "partitions, so it keeps its partition count (an input is repartitioned by "
                "its own define_partitions, as the Kafka and file inputs are, given a count or None)"
            )
        return meta.operator
    if isinstance(request, int):
        return StatelessPartitioner(request)
    if request is not None:
        return request
    found = meta.attr(A.PARTITIONER)
    if found is None and isinstance(meta.operator, Partitioner):
        found = meta.operator
    if found is None:
        raise ConfigError(
            f"operator {name!r} has no partitioner: set its PARTITIONER attribute, implement "
            "define_partitions on it, or ask for a partition count"
        )
    return found


def _followers(dag: DAG, chain: list[str], name: str) -> list[str]:
    """``name`` and the operators of its fused chain that take its partition count
    through ``PARALLEL_PARTITION`` (a ``PARTITIONS`` of their own must agree with it,
    ``DAG.validate``): they move with it. The others were fused only because their counts
    happened to be equal."""
    moving = [name]
    for member in chain[chain.index(name) + 1 :]:
        if any(up in moving for _, up in dag.parallel_upstreams(member)):
            moving.append(member)
    return moving


def check_requests(
    dag: DAG, requests: Mapping[str, Request | None], plan: Plan | None = None
) -> None:
    """Refuse, before anything is stopped, requests naming no operator of ``dag``, an
    operator fused behind another (``plan``: the running plan), an operator that says
    it cannot be repartitioned (``Operator.cannot_repartition``), itself or one fused
    behind it (they follow its count), or one without a partitioner for the request (an
    input that cannot move its read positions)."""
    unknown = sorted(set(requests) - set(dag.operators))
    if unknown:
        from malhar.suggest import did_you_mean

        raise ConfigError(
            f"no operator {', '.join(map(repr, unknown))} to repartition"
            f"{did_you_mean(unknown[0], dag.operators)} (operators: {sorted(dag.operators)}); "
            "the application goes on unchanged"
        )
    for name, request in requests.items():
        members = [name]
        if plan is not None:
            members = list(plan.groups[plan.group_of[name]].operators)
            if members[0] != name:
                raise ConfigError(
                    f"operator {name!r} runs fused with {members[0]!r} (PARALLEL_PARTITION): "
                    "repartition the first operator of the chain; the application goes on "
                    "unchanged"
                )
        for member in members:
            operator = dag.operators[member].operator
            why = operator.cannot_repartition()
            if why:
                fused = "" if member == name else f" (fused behind {name!r})"
                raise ConfigError(
                    f"operator {member!r} ({type(operator).__name__}){fused} cannot be "
                    f"repartitioned while the application runs: {why}; the application goes "
                    "on unchanged"
                )
        partitioner_of(dag, name, request)  # an input that cannot move its positions ...


def repartition(
    dag: DAG,
    checkpoint: str,
    window: int,
    requests: Mapping[str, Request | None],
    stats: Mapping[str, OperatorStats] | None = None,
) -> generations.Generation:
    """Repartition ``requests``' operators after ``window`` (see the module docstring).

    ``requests``: operator -> a partition count, a partitioner, or None (its own).
    Returns the generation now in force.
    """
    old_gen = generations.load(checkpoint)
    old_plan = planned(dag, checkpoint, old_gen)
    snapshots = _Snapshots(old_plan, window)
    STEP_HOOK("loaded")
    new_gen = generations.Generation(
        generation=old_gen.generation + 1,
        window=window,
        operators=dict(old_gen.operators),
        managed_roots=dict(old_gen.managed_roots),
        counts=dict(old_gen.counts),
        declared=dict(old_gen.declared),
    )
    changed: dict[str, list[Partition]] = {}
    partitioners: dict[str, Partitioner] = {}
    for name, request in requests.items():
        partitioners[name] = _repartition_one(
            dag, name, request, old_plan, old_gen, new_gen, snapshots, stats or {}, changed
        )
    STEP_HOOK("partitioned")
    new_gen.counts.update((name, len(parts)) for name, parts in changed.items())

    new_plan = planned(dag, checkpoint, new_gen)
    root = generations.state_root(checkpoint, new_gen.generation)
    _write_snapshots(new_plan, root, window, changed, snapshots)
    STEP_HOOK("snapshots")

    _repartition_managed(old_plan, new_gen, changed, window, root)
    STEP_HOOK("managed")
    generations.commit(checkpoint, new_gen)
    STEP_HOOK("committed")
    for name, partitioner in partitioners.items():
        partitioner.partitioned(dict(enumerate(changed[name])))
    generations.remove_other_generations(checkpoint, new_gen)
    log.info(
        "malhar: repartitioned %s after window %d (generation %d)",
        ", ".join(f"{n}: {len(changed[n])}" for n in requests),
        window,
        new_gen.generation,
    )
    return new_gen


def _repartition_one(
    dag: DAG,
    name: str,
    request: Request | None,
    old_plan: Plan,
    old_gen: generations.Generation,
    new_gen: generations.Generation,
    snapshots: _Snapshots,
    stats: Mapping[str, OperatorStats],
    changed: dict[str, list[Partition]],
) -> Partitioner:
    """The new partitions of ``name`` and of the operators fused behind it that follow its
    count, into ``changed`` and ``new_gen``; returns the partitioner that defined them."""
    if name not in dag.operators:
        raise ConfigError(
            f"no operator {name!r} to repartition (operators: {sorted(dag.operators)})"
        )
    meta = dag.operators[name]
    group = old_plan.groups[old_plan.group_of[name]]
    is_input = isinstance(meta.operator, InputOperator)
    if group.operators[0] != name:
        raise ConfigError(
            f"operator {name!r} runs fused with {group.operators[0]!r} (PARALLEL_PARTITION, "
            "or the same partition count): repartition the first operator of the chain, or "
            f"give {name!r} a PARTITIONS of its own at a launch after a clean stop (without "
            "PARALLEL_PARTITION it then runs in a stage of its own)"
        )
    old_keys = (
        old_gen.operators[name].partition_keys() if name in old_gen.operators else None
    ) or spread(group.partitions)
    windows = stats.get(name, OperatorStats(name, 0, [])).windows
    existing = [
        Partition(
            _restored(meta.operator, snapshots.get(name, p)),
            old_keys[p],
            [w for w in windows if w.partition == p],
        )
        for p in range(group.partitions)
    ]
    partitioner = partitioner_of(dag, name, request)
    context = PartitioningContext(
        name,
        stats.get(name),
        requested=request if isinstance(request, int) and is_input else None,
    )
    new = partitioner.define_partitions(list(existing), context)
    if not new:
        raise ConfigError(f"the partitioner of {name!r} returned no partitions")
    if any(p.keys is None for p in new):
        for p, keys in zip(new, spread(len(new)), strict=True):
            p.keys = keys
    table = routing_table([p.keys for p in new])  # type: ignore[misc]
    codec, typed = _codec_of(old_plan, name)
    unchanged = len(new) == len(existing) and all(
        n.operator is e.operator and n.keys == e.keys for n, e in zip(new, existing, strict=True)
    )
    for member in _followers(dag, group.operators, name):  # it and what follows it
        if not unchanged and not (is_input and member == name):
            _refuse_custom_state(member, name, group.partitions, snapshots)
        if member == name:
            olds, news = [p.operator for p in existing], new
        else:
            template = dag.operators[member].operator
            olds = [_restored(template, snapshots.get(member, p)) for p in range(group.partitions)]
            news = (
                [Partition(o, p.keys) for o, p in zip(olds, new, strict=True)]
                if unchanged  # its partitions stay as they were, custom snapshot() included
                else [Partition(template.clone(), p.keys) for p in new]
            )
        if not (is_input and member == name):  # an input's partitioner placed its positions
            _redistribute(member, olds, news, codec, typed, table)
        changed[member] = news
        new_gen.operators[member] = generations.OperatorPartitioning.of([p.keys for p in new])
    return partitioner
