"""Partitioning generations: which partitioning an application's checkpoint is at.

An application starts at generation 0: partition counts from the DAG's attributes,
state under the checkpoint root. Every dynamic repartitioning writes the complete
state of the next generation (snapshots of every group partition; managed state of
the operators whose partitions changed) under ``<checkpoint>/malhar/gen/<g>`` and
then, as its single commit point, replaces ``<checkpoint>/malhar/partitioning.json``
atomically. A launch reads that file first: a crash during a repartitioning finds
either the old generation (the new one's files are garbage, removed by the next
repartitioning) or the new one, never a mix.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from malhar.errors import StateError
from malhar.partitioning import PartitionKeys, routing_table

if TYPE_CHECKING:
    from malhar.dag import DAG
    from malhar.engine.plan import Plan

MANIFEST = "partitioning.json"


@dataclass
class OperatorPartitioning:
    """An operator's partitions in a generation: how many, and their partition keys."""

    partitions: int
    mask: int | None = None
    keys: list[list[int]] | None = None  #: per partition, the masked hash values it owns

    def partition_keys(self) -> list[PartitionKeys] | None:
        if self.keys is None or self.mask is None:
            return None
        return [PartitionKeys(self.mask, frozenset(k)) for k in self.keys]

    def routing(self) -> tuple[int, list[int]] | None:
        keys = self.partition_keys()
        return None if keys is None else routing_table(keys)

    @classmethod
    def of(cls, keys: list[PartitionKeys | None]) -> OperatorPartitioning:
        if any(k is None for k in keys):
            return cls(len(keys))
        mask = max(k.mask for k in keys)  # type: ignore[union-attr]
        wide = [sorted(k.with_mask(mask).keys) for k in keys]  # type: ignore[union-attr]
        return cls(len(keys), mask, wide)


@dataclass
class Generation:
    """The content of ``partitioning.json``."""

    generation: int = 0
    #: the last window of the previous generation (-1 for generation 0)
    window: int = -1
    operators: dict[str, OperatorPartitioning] = field(default_factory=dict)
    #: operator -> the root its managed state lives under (when not the checkpoint's)
    managed_roots: dict[str, str] = field(default_factory=dict)
    #: operator -> the partition count it last ran with from this checkpoint (every
    #: operator; written at launch). A launch whose DAG gives an operator outside
    #: ``operators`` another count moves its state first (``malhar.engine.reconcile``)
    counts: dict[str, int] = field(default_factory=dict)
    #: operator -> the partition count its DAG declared at the last launch (its
    #: ``PARTITIONS``, or the count it follows): a launch that declares another one for an
    #: operator of ``operators`` takes it over from the repartitioning while running
    declared: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Generation:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            generation=int(raw["generation"]),
            window=int(raw["window"]),
            operators={k: OperatorPartitioning(**v) for k, v in raw["operators"].items()},
            managed_roots=dict(raw.get("managed_roots", {})),
            counts={k: int(v) for k, v in raw.get("counts", {}).items()},
            declared={k: int(v) for k, v in raw.get("declared", {}).items()},
        )


def state_root(checkpoint: str, generation: int) -> str:
    """Where a generation's snapshots live (generation 0: the checkpoint root itself)."""
    from malhar.util.fs.urls import child_url

    if generation == 0:
        return checkpoint.rstrip("/")
    return child_url(checkpoint, "malhar", "gen", str(generation))  # a URL's ?query stays last


def spark_checkpoint(checkpoint: str, generation: int) -> str:
    """Spark's own checkpoint of a generation (a repartitioned query has new stages)."""
    root = checkpoint.rstrip("/")
    return f"{root}/spark" if generation == 0 else f"{root}/spark-g{generation}"


def load(checkpoint: str) -> Generation:
    """The current generation of the checkpoint (generation 0 when never repartitioned)."""
    from malhar.util.fs import filesystem_for

    fs, base = filesystem_for(checkpoint)
    path = fs.join(base, "malhar", MANIFEST)
    if not fs.exists(path):
        return Generation()
    return Generation.from_json(fs.read_all(path))


def commit(checkpoint: str, generation: Generation) -> None:
    """Make ``generation`` the checkpoint's current one (atomic replace: the commit point)."""
    from malhar.util.fs import filesystem_for

    fs, base = filesystem_for(checkpoint)
    fs.mkdirs(fs.join(base, "malhar"))
    fs.write_atomic(fs.join(base, "malhar", MANIFEST), generation.to_json(), overwrite=True)


def remove_other_generations(checkpoint: str, keep: Generation) -> None:
    """Delete the files of generations other than ``keep`` and those its managed state
    still lives in (earlier ones, or a later one that never committed)."""
    from malhar.util.fs import filesystem_for

    fs, base = filesystem_for(checkpoint)
    gens = fs.join(base, "malhar", "gen")
    if not fs.exists(gens):
        return
    needed = {keep.generation} | {
        int(r.rstrip("/").rsplit("/", 1)[1]) for r in keep.managed_roots.values() if "/gen/" in r
    }
    for entry in fs.list(gens):
        if entry.name.isdigit() and int(entry.name) not in needed:
            fs.delete(entry.path, recursive=True)
    if keep.generation > 0:  # generation 0's snapshots live at the root
        fs.delete(fs.join(base, "malhar", "state"), recursive=True)
    for entry in fs.list(base):
        if entry.name.startswith("spark") and entry.path != fs.join(
            base, spark_checkpoint("", keep.generation).lstrip("/")
        ):
            fs.delete(entry.path, recursive=True)


def partitioned_dag(dag: DAG, generation: Generation) -> DAG:
    """A copy of ``dag`` with the partition counts of ``generation`` (the caller's DAG
    and its operators' attribute maps are left alone)."""
    from malhar import attributes as A

    out = copy.copy(dag)
    out.attributes = dict(dag.attributes)
    out.operators = {}
    for name, meta in dag.operators.items():
        attributes = dict(meta.attributes)
        if name in generation.operators:
            attributes[A.PARTITIONS.name] = generation.operators[name].partitions
        out.operators[name] = dataclasses.replace(meta, attributes=attributes)
    return out


def apply(plan: Plan, generation: Generation) -> None:
    """Give ``plan`` (built from :func:`partitioned_dag`) the generation's state roots and
    the routing tables of the operators with partition keys."""
    if plan.checkpoint is None:
        return
    plan.generation = generation.generation
    plan.state_root = state_root(plan.checkpoint, generation.generation)
    plan.managed_roots = dict(generation.managed_roots)
    for name, part in generation.operators.items():
        if name not in plan.group_of:
            continue
        group = plan.groups[plan.group_of[name]]
        routing = part.routing()
        lead = group.operators[0]
        if lead != name and (
            lead not in generation.operators or generation.operators[lead].routing() != routing
        ):
            # build_plan(own_routing=...) keeps such an operator out of the upstream group:
            # its table would route (and so misplace the state of) the group's first operator
            raise StateError(
                f"operator {name!r} has partition keys of its own but runs fused behind "
                f"{lead!r}: its routing table would move {lead!r}'s keyed state"
            )
        group.routing = routing
