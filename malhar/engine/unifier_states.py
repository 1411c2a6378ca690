"""The state of unifiers across a repartitioning or a change of partition counts.

A unifier runs in the group of the operator downstream of its route, one copy per
downstream partition, and is checkpointed there by route id. A new plan may number its
routes otherwise, so the state is carried by the route's ends (source port, sink port)
and the downstream partition:

- the downstream keeps its partition count: each copy keeps its state (whatever the
  upstream's count: a windowed unifier merges the partials of any number of partitions);
- another downstream count: copies holding the same state (or none) are copied; copies
  that differ cannot be divided, and the change is refused (:class:`StateError`);
- the route loses its unifier (its upstream goes to one partition) while a copy holds
  state: refused, the state would be lost.

Every refusal comes before the new generation is committed: the old one stays in force.
"""

from __future__ import annotations

import pickle
from typing import Any

from malhar.engine.plan import Group, Plan, Route
from malhar.errors import StateError
from malhar.state import state_fields

Ends = tuple[str, str]


def _ends(route: Route) -> Ends:
    return str(route.source), str(route.sink)


def holds_state(template: Any, snapshot: dict[str, Any]) -> bool:
    """Whether a snapshot holds anything but its fields' initial values."""
    if snapshot.get("custom") is not None:
        return True
    fields = state_fields(type(template))
    for fname, value in snapshot.get("fields", {}).items():
        spec = fields.get(fname)
        initial = spec.initial() if spec is not None else None
        try:
            if value != initial:
                return True
        except Exception:  # a value that cannot be compared: move it to be safe
            return True
    return False


class UnifierStates:
    """The unifier snapshots of an old plan's window, by route ends and partition."""

    def __init__(self) -> None:
        self._copies: dict[Ends, dict[int, dict[str, Any]]] = {}
        self._count: dict[Ends, int] = {}
        self._template: dict[Ends, Any] = {}

    def add(self, plan: Plan, group: Group, partition: int, saved: dict[Any, Any]) -> None:
        """The unifier snapshots ``saved`` (by route id) of ``group``'s ``partition``."""
        for rid, snapshot in saved.items():
            route = plan.routes[int(rid)]
            ends = _ends(route)
            self._copies.setdefault(ends, {})[partition] = snapshot
            self._count[ends] = group.partitions
            self._template[ends] = route.unifier

    def for_partition(self, plan: Plan, group: Group, partition: int) -> dict[int, Any]:
        """The unifier snapshots of ``group``'s ``partition`` in the new ``plan``."""
        out: dict[int, Any] = {}
        for rid in group.routes_in:
            route = plan.routes[rid]
            ends = _ends(route)
            copies = self._copies.get(ends)
            if route.unifier is None or not copies:
                continue
            if self._count[ends] == group.partitions:
                if partition in copies:
                    out[rid] = copies[partition]
                continue
            kept = self._one_state(ends, group.partitions)
            if kept is not None:
                out[rid] = kept
        return out

    def _one_state(self, ends: Ends, partitions: int) -> dict[str, Any] | None:
        copies = self._copies[ends]
        template = self._template[ends]
        held = [c for c in copies.values() if holds_state(template, c)]
        if not held:
            return None
        distinct = {pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL) for c in copies.values()}
        if len(distinct) == 1 and len(copies) == self._count[ends]:
            return held[0]
        raise StateError(
            f"the unifier of {ends[0]} -> {ends[1]} holds state in its copies (one per "
            f"partition of {ends[1].split('.')[0]!r}: {self._count[ends]}, now "
            f"{partitions}) that differs between them and cannot be divided: keep that "
            "operator's partition count while the upstream's windows are open"
        )

    def check_kept(self, plan: Plan) -> None:
        """Refuse a new ``plan`` without a unifier where one holds state."""
        unified = {_ends(r) for r in plan.routes if r.unifier is not None}
        for ends, copies in self._copies.items():
            if ends in unified:
                continue
            template = self._template[ends]
            if any(holds_state(template, c) for c in copies.values()):
                raise StateError(
                    f"the unifier of {ends[0]} -> {ends[1]} holds state that the new "
                    f"partitioning has no unifier for ({ends[0].split('.')[0]!r} would run one "
                    "partition, or the stream is gone): it would be lost. Keep "
                    f"{ends[0].split('.')[0]!r} on two partitions or more"
                )
