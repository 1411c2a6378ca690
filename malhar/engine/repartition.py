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
files are garbage); after it, the new one.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import pickle
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import cloudpickle

from malhar import attributes as A
from malhar.dag import DAG, PortRef, declared_codecs
from malhar.engine import generations
from malhar.engine.plan import Plan, build_plan
from malhar.engine.state_store import StateStore, windows_in
from malhar.engine.unifier_states import UnifierStates, holds_state
from malhar.errors import ConfigError, StateError
from malhar.operator import InputOperator
from malhar.partitioning import (
    Partition,
    Partitioner,
    PartitioningContext,
    StatelessPartitioner,
    routing_table,
    spread,
)
from malhar.state import (
    DividedByKey,
    State,
    restore_window_snapshot,
    state_fields,
    window_snapshot,
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


class _Snapshots:
    """The state of window ``W`` of every group partition of the old plan, by operator."""

    def __init__(self, plan: Plan, window: int) -> None:
        self.ops: dict[tuple[str, int], dict[str, Any]] = {}
        self.unifiers = UnifierStates()
        for group in plan.groups:
            if group.cascade_route is not None:
                continue
            for p in range(group.partitions):
                store = StateStore(
                    plan.state_root or plan.checkpoint or "", group.key, p, plan.integrity_key
                )
                found = store.load(window)
                if found is None:
                    continue
                saved = pickle.loads(found[1])
                for name, snap in saved["ops"].items():
                    self.ops[(name, p)] = snap
                self.unifiers.add(plan, group, p, saved.get("unifiers", {}))

    def get(self, name: str, partition: int) -> dict[str, Any]:
        return self.ops.get((name, partition), {"fields": {}})


def _codec_of(plan: Plan, name: str) -> tuple[Any, pa.Schema | None]:
    """The stream codec that routes ``name``'s keyed input, and the stream's Arrow schema
    (None: it carries Python objects), which is what ``hash_keys`` takes as ``typed``."""
    for route in plan.routes:
        if route.sink.operator == name and route.codec is not None:
            return route.codec, route.arrow_schema
    # one partition routes nothing by key; on more, a keyed operator's inputs go by the
    # codecs it declares (``OperatorMeta.input_codec``): its state is placed by them too
    for port, codec in declared_codecs(plan.dag.operators[name].operator).items():
        schemas = [r.arrow_schema for r in plan.routes if r.sink == PortRef(name, port)]
        return codec, schemas[0] if schemas else None
    return None, None


def _redistribute(
    name: str,
    old: list[Any],
    new: list[Partition],
    codec: Any,
    typed: pa.Schema | None,
    table: tuple[int, list[int]] | None,
) -> None:
    """Move keyed state fields to the partitions that own their keys; copy the others.

    ``table``: the new partitions' routing table (partition keys), or None for the
    routing of a static partition count (the key's hash modulo the count)."""
    fields = state_fields(type(new[0].operator))
    kept = {id(p.operator) for p in new} & {id(o) for o in old}
    for fname, spec in fields.items():
        values = [o.__dict__.get(fname, spec.initial()) for o in old]
        if spec.keyed and all(v is None for v in values):
            for p in new:  # never set (no partition ran): the new ones start from scratch
                p.operator.__dict__[fname] = spec.initial()
            continue
        divisible = next((v for v in values if isinstance(v, DividedByKey)), None)
        if spec.keyed and divisible is not None:
            owner_of = _key_owners(name, fname, codec, typed, table, len(new))
            pool = type(divisible).pooled(values, new[0].operator)
            parts = pool.divided(owner_of, len(new))
            for p, part in zip(new, parts, strict=True):
                p.operator.__dict__[fname] = part
            continue
        if spec.keyed:
            pool: dict[Any, Any] = {}
            for p, v in enumerate(values):
                both = pool.keys() & v.keys()
                if both:  # one value would silently replace the other (managed state refuses too)
                    raise StateError(
                        f"operator {name!r}: keyed state field {fname!r} holds key "
                        f"{next(iter(both))!r} in two partitions (of {len(both)} such keys, "
                        f"partition {p} among them): the state was not partitioned by key "
                        "(give the input a STREAM_CODEC that routes by the same key)"
                    )
                pool.update(v)
            # the field's own initial value (a defaultdict keeps its default factory)
            targets = [_empty_like(spec, values) for _ in new]
            if pool:
                keys = list(pool)
                owners = _key_owners(name, fname, codec, typed, table, len(new))(keys)
                moved: list[dict[Any, Any]] = [{} for _ in new]
                for key, owner in zip(keys, owners, strict=True):
                    moved[owner][key] = pool[key]
                for target, entries in zip(targets, moved, strict=True):
                    target.update(entries)
            for p, target in zip(new, targets, strict=True):
                p.operator.__dict__[fname] = target
            continue
        distinct = {pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) for v in values}
        for p in new:
            if id(p.operator) in kept:
                continue  # an existing partition kept as it is
            if len(distinct) > 1:
                raise StateError(
                    f"operator {name!r}: state field {fname!r} differs between its partitions "
                    "and is not keyed, so a repartitioning would lose part of it: declare it "
                    "State(..., keyed=True) if it maps stream keys, or give the operator a "
                    "partitioner that moves it"
                )
            if values:
                p.operator.__dict__[fname] = pickle.loads(next(iter(distinct)))


def _key_owners(
    name: str,
    fname: str,
    codec: Any,
    typed: pa.Schema | None,
    table: tuple[int, list[int]] | None,
    n: int,
) -> Callable[[list[Any]], list[int]]:
    """``keys -> their new partitions`` for keyed field ``fname`` of operator ``name``."""

    def owner_of(keys: list[Any]) -> list[int]:
        if not keys:
            return []
        if codec is None:
            raise StateError(
                f"operator {name!r}: keyed state field {fname!r} cannot be placed: its "
                "input has no STREAM_CODEC (KeyCodec) that says which partition owns a key"
            )
        return _owners(np.asarray(codec.hash_keys(keys, typed)), table, n).tolist()

    return owner_of


def _owners(hashes: np.ndarray, table: tuple[int, list[int]] | None, n: int) -> np.ndarray:
    """The partition of each hash: through a routing table (partition keys), or modulo
    ``n`` as a static partition count routes (``malhar.engine.routing``)."""
    hashes = hashes.astype(np.int64)
    if table is None:
        return hashes % n
    mask, lookup = table
    return np.asarray(lookup)[hashes & mask]


def _empty_like(spec: State, values: list[Any]) -> Any:
    """A new mapping for a keyed field of a new partition: its factory's value (a
    ``defaultdict`` keeps its default factory), else an emptied copy of an old value (a
    ``State(default=None, keyed=True)`` set to a mapping later), else a dict."""
    if spec.factory is not None:
        initial = spec.initial()
        if isinstance(initial, MutableMapping):
            return initial
    for value in values:
        if isinstance(value, MutableMapping):
            empty = copy.copy(value)
            empty.clear()
            return empty
    return {}


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


class _ManagedOwner:
    """The new partition of managed-state keys (as ``AUTO_KEY`` encodes them): the stream
    codec's hash of the key through the new routing table (None: a static count of ``n``
    partitions, hash modulo ``n``). ``many`` hashes a list at once (a ``KeyCodec`` on a
    typed stream builds a batch per call: one per key took ~250 µs)."""

    def __init__(
        self,
        name: str,
        codec: Any,
        typed: pa.Schema | None,
        table: tuple[int, list[int]] | None,
        n: int,
    ) -> None:
        self.name, self.codec, self.typed = name, codec, typed
        self.table, self.n = table, n

    def __call__(self, encoded: bytes) -> int:
        return self.many([encoded])[0]

    def many(self, encoded: list[bytes]) -> list[int]:
        if self.codec is None:
            raise StateError(
                f"operator {self.name!r}: its managed state cannot be placed: its input has "
                "no STREAM_CODEC (KeyCodec) that says which partition owns a key"
            )
        from malhar.util.state import AUTO_KEY  # here: the state package is heavy to import

        try:
            keys = [AUTO_KEY.decode(e) for e in encoded]
        except Exception as exc:
            raise StateError(
                f"operator {self.name!r}: a managed-state key is not encoded with the default "
                "key codec (AUTO_KEY), so the engine cannot tell its partition"
            ) from exc
        hashes = np.asarray(self.codec.hash_keys(keys, self.typed), dtype=np.int64)
        return _owners(hashes, self.table, self.n).tolist()


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


def _refuse_custom_state(member: str, name: str, partitions: int, snapshots: _Snapshots) -> None:
    """A custom ``snapshot()``/``restore()`` pair holds state the engine cannot split or
    pool: refuse rather than drop it (new partitions are clones without it)."""
    held = [p for p in range(partitions) if snapshots.get(member, p).get("custom") is not None]
    if held:
        moving = "" if member == name else f" (it follows {name!r}'s partitions)"
        raise StateError(
            f"operator {member!r}{moving}: its snapshot() holds state (in {len(held)} of "
            f"its {partitions} partitions) that a repartitioning would lose: "
            "the engine moves only State fields. Move that state into State fields "
            "(State(..., keyed=True) for a mapping by stream key), or give the operator a "
            "partitioner that returns its existing partitions unchanged; the application "
            "goes on with the partitions it had"
        )


def _restored(template: Any, snapshot: dict[str, Any]) -> Any:
    """A copy of ``template`` with the state of ``snapshot``."""
    instance = template.clone()
    restore_window_snapshot(instance, snapshot)
    return instance


def _write_snapshots(
    new_plan: Plan,
    root: str,
    window: int,
    changed: Mapping[str, list[Partition]],
    snapshots: _Snapshots,
) -> None:
    """The snapshot of ``window`` of every group partition of the new plan under ``root``:
    the new partitions of the repartitioned operators, the old state of the others, and
    of the unifiers (``malhar.engine.unifier_states``)."""
    snapshots.unifiers.check_kept(new_plan)
    for group in new_plan.groups:
        if group.cascade_route is not None:
            continue
        for p in range(group.partitions):
            ops = {
                name: window_snapshot(changed[name][p].operator)
                if name in changed
                else snapshots.get(name, p)
                for name in group.operators
            }
            unifiers = snapshots.unifiers.for_partition(new_plan, group, p)  # by route ends
            state = {
                "ops": ops,
                "unifiers": unifiers,
                "open": dict.fromkeys(group.operators, False),
            }
            data = cloudpickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
            StateStore(root, group.key, p, new_plan.integrity_key).save(window, data)


def _repartition_managed(
    old_plan: Plan,
    new_gen: generations.Generation,
    changed: Mapping[str, list[Partition]],
    window: int,
    root: str,
) -> None:
    """Rewrite the managed state of repartitioned operators under the new root, by key,
    for their new partitions' routing table."""
    for name, partitions in changed.items():
        if _has_managed(old_plan, name):
            # the stream codec of its group's first operator routes its tuples (fused
            # behind it through PARALLEL_PARTITION, it has no route of its own)
            first = old_plan.groups[old_plan.group_of[name]].operators[0]
            codec, typed = _codec_of(old_plan, first)
            table = routing_table([p.keys for p in partitions])  # type: ignore[misc]
            owner = _ManagedOwner(name, codec, typed, table, len(partitions))
            _rewrite_managed(old_plan, new_gen, name, partitions, owner, window, root)


def _rewrite_managed(
    old_plan: Plan,
    new_gen: generations.Generation,
    name: str,
    partitions: list[Partition],
    owner: _ManagedOwner,
    window: int,
    root: str,
) -> None:
    """The managed state of ``name`` at ``window`` moved to ``partitions`` under ``root``
    by ``owner`` (the structures' stream keys where the operator says they are)."""
    from malhar import secrets
    from malhar.util.state import ManagedState

    ManagedState.repartition(
        old_plan.managed_roots.get(name, old_plan.checkpoint or ""),
        name,
        window,
        old_plan.groups[old_plan.group_of[name]].partitions,
        len(partitions),
        owner,
        signer=secrets.resolve(old_plan.integrity_key, "CHECKPOINT_INTEGRITY_KEY"),
        target_root=root,
        structures=partitions[0].operator.managed_state_keys(),
    )
    new_gen.managed_roots[name] = root


# -- a launch whose DAG changed a partition count ---------------------------------------------
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
    gen = generations.load(checkpoint)
    declared = dag.partition_counts()
    # an operator repartitioned while running keeps that count, unless the DAG now declares
    # another count than at the last launch: the user changed PARTITIONS to change it
    released = sorted(
        n
        for n in gen.operators
        if n in gen.declared and n in declared and declared[n] != gen.declared[n]
    )
    kept = dataclasses.replace(
        gen, operators={n: p for n, p in gen.operators.items() if n not in released}
    )
    configured = planned(dag, checkpoint, kept)
    counts = {n: configured.groups[configured.group_of[n]].partitions for n in dag.operators}
    old_counts = dict(gen.counts) or _counts_in_folders(checkpoint, gen, set(dag.operators))
    _say_where_the_manifest_wins(dag, kept, gen.declared)
    moved = sorted(
        n
        for n in dag.operators
        if n not in kept.operators
        and n in old_counts
        and (old_counts[n] != counts[n] or n in released)  # released: routed by table before
    )
    if window < 0 or not moved:
        if gen.counts != counts or gen.declared != declared or released:
            generations.commit(
                checkpoint, dataclasses.replace(kept, counts=counts, declared=declared)
            )
        return None
    if not stopped:
        raise StateError(
            f"{', '.join(f'{n}: {old_counts[n]} -> {counts[n]}' for n in moved)}: the "
            f"partition counts changed since the last run on {checkpoint}, which did not "
            f"stop cleanly after window {window} (it crashed or was killed). Window "
            f"{window + 1} may be partly committed by its outputs, and replaying it with "
            "other counts would send its rows to other output partitions (rows written "
            "twice). Restart with the counts it ran with, stop it (Ctrl-C, "
            "RunningApplication.stop()), then change PARTITIONS"
        )

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
            f"{', '.join(f'{n}: {old_counts[n]} -> {counts[n]}' for n in moved)}: the partition "
            f"counts changed since the last run on {checkpoint}, but {exc}. To go on, launch "
            "with the counts it ran with, or start from a new checkpoint"
        ) from exc
    _move_managed(old_plan, configured, new_gen, changed, window, root)
    generations.commit(checkpoint, new_gen)
    generations.remove_other_generations(checkpoint, new_gen)
    log.warning(
        "malhar: %s: partition counts changed since the checkpoint's last run; their "
        "state moved by key after window %d (generation %d)",
        ", ".join(f"{n}: {old_counts[n]} -> {counts[n]}" for n in moved),
        window,
        new_gen.generation,
    )
    return new_gen


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
    if isinstance(operator, Partitioner):
        return True
    why = operator.cannot_repartition()
    if why:
        raise ConfigError(f"{type(operator).__name__} cannot be repartitioned: {why}")
    return False  # an input without positions: its snapshots stay by partition number


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


def _has_managed(plan: Plan, name: str) -> bool:
    from malhar.util.fs import filesystem_for
    from malhar.util.state.manager import operator_dir

    fs, base = filesystem_for(plan.managed_roots.get(name, plan.checkpoint or ""))
    return bool(fs.exists(operator_dir(fs, base, name)))


def _move_managed(
    old_plan: Plan,
    new_plan: Plan,
    new_gen: generations.Generation,
    changed: Mapping[str, list[Partition]],
    window: int,
    root: str,
) -> None:
    """Rewrite the managed state of ``changed`` under ``root`` by key, for the static
    routing of their new counts (hash modulo the count)."""
    for name, partitions in changed.items():
        if _has_managed(old_plan, name):
            first = new_plan.groups[new_plan.group_of[name]].operators[0]
            codec, typed = _codec_of(new_plan, first)
            owner = _ManagedOwner(name, codec, typed, None, len(partitions))
            _rewrite_managed(old_plan, new_gen, name, partitions, owner, window, root)


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
