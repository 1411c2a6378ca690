"""Turn a validated DAG into Spark stages ("levels") of fused operator groups.

- A *group* is a chain of operators that run in one Python pass in one Spark
  task (Apex THREAD_LOCAL / CONTAINER_LOCAL): partition ``p`` of every member
  runs in the same task.
- A *level* is one Spark stage. Level 0 runs inside the streaming source's
  ``read()``: input operators and what is fused to them. Each later level is
  ``repartition(S, pkey).mapInArrow(...)`` over the envelope rows, where the
  level's ``S`` *slots* are its groups' partitions laid end to end.
- A *route* is a stream edge that crosses tasks; its rows carry the
  destination slot, and the emitting task writes the one ``pkey`` that Spark's
  hash partitioner sends to that slot (see :mod:`malhar.engine.murmur3`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from malhar import attributes as A
from malhar.codec import StreamCodec
from malhar.dag import DAG, PortRef, declared_codecs
from malhar.engine.murmur3 import partition_keys
from malhar.operator import Operator, PassThroughUnifier, Unifier
from malhar.schema import arrow_schema

log = logging.getLogger("malhar")


@dataclass
class Route:
    id: int
    stream: str
    source: PortRef
    sink: PortRef
    dest_group: int
    codec: StreamCodec | None
    #: the configured unifier (a template cloned per instance); None: pass-through
    unifier: Unifier | None
    upstream_partitions: int
    arrow_schema: Any  # pyarrow.Schema, or None for untyped ports
    limit: int = 0  # UNIFIER_LIMIT of the upstream operator
    cascade: list[int] = field(default_factory=list)  # ids of the cascade unifier groups


@dataclass
class Group:
    id: int
    key: str  # stable name of the group: its operators' names
    operators: list[str]
    partitions: int
    level: int
    slot_offset: int = 0
    routes_in: list[int] = field(default_factory=list)
    #: for a cascade level of unifiers: the route it unifies and its fan-in groups per
    #: downstream partition (partition q unifies group q % fan for downstream q // fan)
    cascade_route: int | None = None
    fan: int = 0
    #: ``(mask, table)`` when the group's partitions have partition keys (dynamic
    #: partitioning): a keyed tuple goes to ``table[hash & mask]``; else ``hash % partitions``
    routing: tuple[int, list[int]] | None = None


@dataclass
class Plan:
    app: str
    dag: DAG
    groups: list[Group]
    routes: list[Route]
    levels: list[int]  # slots per level
    pkeys: list[list[int]]  # level -> slot -> pkey
    local_edges: dict[str, list[PortRef]]  # "op.port" -> fused sinks
    error_ports: list[str]  # "op.port", index = metric id
    checkpoint: str | None
    window_ms: int
    group_of: dict[str, int]
    id: str = ""  # set per launch; a worker's cached runtime belongs to one launch
    #: a worker tears down a runtime idle for this long (IDLE_RUNTIME_TIMEOUT_MS)
    idle_timeout_ms: int = 60_000
    #: CHECKPOINT_INTEGRITY_KEY: HMAC key (bytes or a secret reference) of checkpoint files
    integrity_key: str | bytes | None = None
    #: the checkpoint's identity (``malhar.engine.checkpoint_identity``), set per launch
    checkpoint_id: str | None = None
    #: the partitioning generation (``malhar.engine.generations``) and where its snapshots
    #: live; operators whose managed state lives elsewhere than the checkpoint root
    generation: int = 0
    state_root: str | None = None
    managed_roots: dict[str, str] = field(default_factory=dict)

    def group_at(self, level: int, slot: int) -> tuple[Group, int]:
        for g in self.groups:
            if g.level == level and g.slot_offset <= slot < g.slot_offset + g.partitions:
                return g, slot - g.slot_offset
        raise LookupError(f"no group at level {level} slot {slot}")

    def operator(self, name: str) -> Operator:
        return self.dag.operators[name].operator

    def routes_from(self, ref: str) -> list[Route]:
        return [r for r in self.routes if str(r.source) == ref]


def unifiers_of(dag: DAG) -> dict[str, Unifier]:
    """``"op.port"`` -> the configured unifier of every output port that has one
    (``Operator.get_unifier``; the pass-through default is left out)."""
    out: dict[str, Unifier] = {}
    for name, meta in dag.operators.items():
        for port in meta.outputs:
            unifier = meta.operator.get_unifier(port)
            if unifier is not None and type(unifier) is not PassThroughUnifier:
                out[f"{name}.{port}"] = unifier
    return out


def _needs_shuffle(
    dag: DAG, up: str, sink: PortRef, up_parts: int, down_parts: int, unifiers: dict[str, Unifier]
) -> bool:
    meta = dag.operators[sink.operator]
    if meta.port_attr(sink.port, A.PARALLEL_PARTITION):
        return False
    # an explicit codec only: fusing by equal counts stays as it was (a keyed operator's
    # declared codecs route it where a route exists anyway, see ``input_codec``), so a
    # checkpoint's groups and the snapshots under them keep their shape
    if meta.port_attr(sink.port, A.STREAM_CODEC) is not None:
        return True
    if up_parts != down_parts:
        return True
    return up_parts > 1 and any(ref.startswith(f"{up}.") for ref in unifiers)


def _fused_keyed_ports(
    dag: DAG,
    local_edges: Mapping[str, list[PortRef]],
    partitions: Mapping[str, int],
    routes: list[Route],
) -> list[str]:
    """Why each fused edge into a port that needs each key on one partition (a keyed
    operator's declared codec) cannot run that way: on several partitions, each would see
    only what its upstream partition sends, and a key that two upstream partitions send
    would be counted (deduplicated, joined) in two places. Not when the upstream's own
    input is routed by an equal codec (a dedup by ``id`` before a count by ``id``): its
    partitions hold each key once already."""
    keyed_by: dict[str, set[str]] = {}
    for r in routes:
        if r.codec is not None:
            keyed_by.setdefault(r.sink.operator, set()).add(repr(r.codec))
    out = []
    for source, sinks in local_edges.items():
        up = source.rsplit(".", 1)[0]
        for sink in sinks:
            meta = dag.operators[sink.operator]
            codec = declared_codecs(meta.operator).get(sink.port)
            if (
                partitions[sink.operator] > 1
                and codec is not None
                and repr(codec) not in keyed_by.get(up, ())
                and not meta.port_attr(sink.port, A.PARALLEL_PARTITION)
                and meta.port_attr(sink.port, A.STREAM_CODEC) is None
            ):
                out.append(
                    f"operator {sink.operator!r} ({type(meta.operator).__name__}) needs each "
                    f"key on one partition, but runs fused behind {up!r} "
                    f"({partitions[up]} partitions each): each of its partitions sees only "
                    f"the keys one partition of {up!r} sends, so a key two of them send is "
                    "counted, deduplicated or joined twice. Route by key: "
                    f"malhar.algo.partition_by_key(<the {sink.operator!r} operator>) or a "
                    f"STREAM_CODEC on {sink}; or, if each key comes from one partition of "
                    f"{up!r} (a topic keyed alike), say so with PARALLEL_PARTITION=True on "
                    f"{sink} (what a checkpoint that ran this way needs to keep its state)"
                )
    return out


def cascade_fans(upstream: int, limit: int) -> list[int]:
    """Unifier counts per cascade level so that no unifier has more than ``limit`` inputs.

    ``cascade_fans(8, 2) == [4, 2]``: 8 partitions -> 4 unifiers -> 2 unifiers -> the
    final unifier in front of each downstream partition.
    """
    fans: list[int] = []
    if limit < 2:
        return fans
    n = upstream
    while n > limit:
        n = -(-n // limit)
        fans.append(n)
    return fans


def _cascade_depth(dag: DAG, up: str, up_parts: int, unifiers: dict[str, Unifier]) -> int:
    if not any(ref.startswith(f"{up}.") for ref in unifiers):
        return 0
    return len(cascade_fans(up_parts, int(dag.operators[up].attr(A.UNIFIER_LIMIT))))


def build_plan(dag: DAG, own_routing: Collection[str] = (), *, strict: bool = False) -> Plan:
    """Fuse, level and route a validated DAG.

    ``strict``: refuse (:class:`~malhar.validation.ValidationError`) a keyed operator fused
    behind an upstream of as many partitions that is not keyed alike (``malhar validate``
    and a launch); otherwise warn (the plan a checkpoint ran with, a running
    repartitioning: refusing there would stop a running application or its restart).

    ``own_routing``: operators whose partitions have partition keys of their own (a
    repartitioning generation, ``malhar.engine.generations``). Such an operator is fused
    behind its upstream only through ``PARALLEL_PARTITION`` (it then follows that
    partitioning): fused because counts happen to be equal, its routing table would
    become the upstream group's and move the upstream's keyed state, and it could not
    be repartitioned again.
    """
    dag.validate()
    order = dag.topological_order()
    unifiers = unifiers_of(dag)
    partitions = dag.partition_counts()
    groups, group_of = _groups(dag, order, partitions, unifiers, own_routing)
    routes, local_edges = _routes(dag, groups, group_of, partitions, unifiers)
    fused = _fused_keyed_ports(dag, local_edges, partitions, routes)
    if fused and strict:
        from malhar.validation import ValidationError

        raise ValidationError(fused)
    for problem in fused:
        log.warning("malhar: %s", problem)
    n_levels = 1 + max(g.level for g in groups)
    levels = [0] * n_levels
    for g in groups:
        g.slot_offset = levels[g.level]
        levels[g.level] += g.partitions

    error_ports = [
        f"{name}.{pname}"
        for name in order
        for pname, port in dag.operators[name].outputs.items()
        if port.error
    ]
    return Plan(
        app=dag.attr(A.APPLICATION_NAME),
        dag=dag,
        groups=groups,
        routes=routes,
        levels=levels,
        pkeys=[partition_keys(n) for n in levels],
        local_edges=local_edges,
        error_ports=error_ports,
        checkpoint=dag.attr(A.CHECKPOINT),
        window_ms=dag.attr(A.STREAMING_WINDOW_MS),
        group_of=group_of,
        idle_timeout_ms=int(dag.attr(A.IDLE_RUNTIME_TIMEOUT_MS)),
        integrity_key=dag.attr(A.CHECKPOINT_INTEGRITY_KEY),
    )


def _groups(
    dag: DAG,
    order: list[str],
    partitions: Mapping[str, int],
    unifiers: Mapping[str, Unifier],
    own_routing: Collection[str],
) -> tuple[list[Group], dict[str, int]]:
    """The fused groups in topological order (an operator joins its only upstream group
    when none of its inputs needs a shuffle), with their levels; operator -> group id."""
    groups: list[Group] = []
    group_of: dict[str, int] = {}
    for name in order:
        meta = dag.operators[name]
        in_streams = [
            (s, sink)
            for s in dag.streams.values()
            for sink in s.sinks
            if sink.operator == name and s.source is not None
        ]
        parts = partitions[name]
        parallel = dag.parallel_upstreams(name)
        ups = {s.source.operator for s, _ in in_streams}
        fuse_into = None
        if in_streams and not meta.is_input:
            up_groups = {group_of[u] for u in ups}
            if len(up_groups) == 1:
                g = groups[next(iter(up_groups))]
                if all(
                    not _needs_shuffle(
                        dag, s.source.operator, sink, partitions[s.source.operator], parts, unifiers
                    )
                    for s, sink in in_streams
                ) and (name not in own_routing or len(parallel) == len(in_streams)):
                    fuse_into = g
        if fuse_into is not None:
            fuse_into.operators.append(name)
            group_of[name] = fuse_into.id
            continue
        level = (
            0
            if not in_streams
            else 1
            + max(
                groups[group_of[u]].level + _cascade_depth(dag, u, partitions[u], unifiers)
                for u in ups
            )
        )
        group = Group(len(groups), name, [name], parts, level)
        groups.append(group)
        group_of[name] = group.id
    for g in groups:
        g.key = "+".join(g.operators)

    return groups, group_of


def _routes(
    dag: DAG,
    groups: list[Group],
    group_of: Mapping[str, int],
    partitions: Mapping[str, int],
    unifiers: Mapping[str, Unifier],
) -> tuple[list[Route], dict[str, list[PortRef]]]:
    """The routes between groups (with their unifier cascades, appended to ``groups``) and
    the fused edges inside them ("op.port" -> sinks)."""
    routes: list[Route] = []
    local_edges: dict[str, list[PortRef]] = {}
    for s in dag.streams.values():
        if s.source is None:
            continue
        up = s.source.operator
        src_port = dag.operators[up].outputs[s.source.port]
        for sink in s.sinks:
            if group_of[sink.operator] == group_of[up]:
                local_edges.setdefault(str(s.source), []).append(sink)
                continue
            dest = groups[group_of[sink.operator]]
            unifier = unifiers.get(str(s.source))
            route = Route(
                id=len(routes),
                stream=s.name,
                source=s.source,
                sink=sink,
                dest_group=dest.id,
                codec=dag.operators[sink.operator].input_codec(sink.port, dest.partitions),
                unifier=unifier if partitions[up] > 1 else None,
                upstream_partitions=partitions[up],
                arrow_schema=None if src_port.schema is None else arrow_schema(src_port.schema),
                limit=int(dag.operators[up].attr(A.UNIFIER_LIMIT)),
            )
            routes.append(route)
            dest.routes_in.append(route.id)
            if route.unifier is not None:
                base = groups[group_of[up]].level
                for i, fan in enumerate(cascade_fans(route.upstream_partitions, route.limit)):
                    level_group = Group(
                        id=len(groups),
                        key=f"{route.source}#cascade{i}->{sink}",
                        operators=[],
                        partitions=dest.partitions * fan,
                        level=base + 1 + i,
                        routes_in=[route.id],
                        cascade_route=route.id,
                        fan=fan,
                    )
                    groups.append(level_group)
                    route.cascade.append(level_group.id)

    return routes, local_edges


def describe(plan: Plan) -> str:
    """A human-readable summary of the physical plan (``malhar validate`` prints it)."""
    lines = []
    for level, slots in enumerate(plan.levels):
        lines.append(f"level {level}: {slots} task(s)")
        for g in plan.groups:
            if g.level == level and g.cascade_route is not None:
                lines.append(
                    f"  [unifier cascade of {plan.routes[g.cascade_route].source}] x{g.partitions}"
                )
            elif g.level == level:
                lines.append(f"  [{' -> '.join(g.operators)}] x{g.partitions}")
    for r in plan.routes:
        how = f"codec {r.codec!r}" if r.codec else "round robin"
        uni = f", unifier {type(r.unifier).__name__}" if r.unifier else ""
        if r.cascade:
            uni += f" (cascade of {len(r.cascade)} level(s), limit {r.limit})"
        lines.append(f"  route {r.source} -> {r.sink}: {how}{uni}")
    return "\n".join(lines)
