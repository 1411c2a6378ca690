"""Moving operator state from the partitions of one plan to those of another (driver side).

Used by a repartitioning while running (``malhar.engine.repartition``) and by a launch
whose partition counts changed (``malhar.engine.reconcile``). The state of window ``W``
of every old group partition is read from its snapshot; keyed ``State`` fields, values
that divide by key (``DividedByKey``) and managed state are pooled and each entry goes
to the new partition that receives its key (the stream codec's ``hash_keys`` and the
new routing table, or the key's hash modulo a static count); a state field that is not
keyed must be equal in every old partition (it is copied), else the move is refused
with the field's name, as is state the engine cannot see into (a custom ``snapshot()``).
The new snapshots are written for window ``W`` under the next generation's root.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import cloudpickle

from malhar.dag import PortRef, declared_codecs
from malhar.engine import generations
from malhar.engine.plan import Plan
from malhar.engine.state_store import StateStore
from malhar.engine.unifier_states import UnifierStates
from malhar.errors import StateError
from malhar.partitioning import Partition, routing_table
from malhar.state import (
    DividedByKey,
    State,
    restore_window_snapshot,
    state_fields,
    window_snapshot,
)


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
