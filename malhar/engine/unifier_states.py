"""The state of unifiers across a repartitioning or a change of partition counts.

A unifier runs in the group of the operator downstream of its route, one copy per
downstream partition, and is checkpointed there under its route's ends (source port,
sink port; by route id before: another plan may number its routes otherwise, and a
restart with another count of an operator elsewhere renumbered them). Across a
repartitioning the state is carried by route ends and downstream partition:

- the downstream keeps its partition count: each copy keeps its state (whatever the
  upstream's count: a windowed unifier merges the partials of any number of partitions);
- another downstream count: refused while a copy holds state (:class:`StateError`): one
  copy's state given to several would be fired by each, and it cannot be divided;
- the route loses its unifier (its upstream goes to one partition) while a copy holds
  state: refused, the state would be lost.

Every refusal comes before the new generation is committed: the old one stays in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from malhar.engine.plan import Group, Plan, Route
from malhar.errors import StateError
from malhar.state import restore_window_snapshot, state_fields


def route_key(route: Route) -> str:
    """What a unifier's snapshot is saved under: its route's ends, ``source->sink``
    (route ids are positions in a plan, and another plan numbers them otherwise)."""
    return f"{route.source}->{route.sink}"


def by_route(plan: Plan, unifiers: Mapping[int, Any]) -> dict[str, Any]:
    """``unifiers`` (by route id) by :func:`route_key`."""
    return {route_key(plan.routes[rid]): u for rid, u in unifiers.items()}


def restore_unifiers(plan: Plan, unifiers: Mapping[int, Any], saved: Mapping[Any, Any]) -> None:
    """Put saved unifier snapshots back into fresh clones: by route ends, or by route id
    in a checkpoint written before they were saved so."""
    ids = {route_key(plan.routes[rid]): rid for rid in unifiers}
    for key, snapshot in saved.items():
        rid = key if isinstance(key, int) else ids.get(key)
        if rid in unifiers:
            restore_window_snapshot(unifiers[rid], snapshot)


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


def _unifier_holds(template: Any, snapshot: dict[str, Any]) -> bool:
    """:func:`holds_state`, or what a unifier whose class says what it holds answers
    (``holds_state()``: the windowed unifier's cells; its watermark bookkeeping is
    rebuilt by a new copy from the next watermarks)."""
    own = getattr(type(template), "holds_state", None)
    if own is None or snapshot.get("custom") is not None:
        return holds_state(template, snapshot)
    instance = template.clone()
    restore_window_snapshot(instance, snapshot)
    return bool(own(instance))


class UnifierStates:
    """The unifier snapshots of an old plan's window, by route ends and partition."""

    def __init__(self) -> None:
        self._copies: dict[str, dict[int, dict[str, Any]]] = {}
        self._count: dict[str, int] = {}
        self._template: dict[str, Any] = {}

    def add(self, plan: Plan, group: Group, partition: int, saved: Mapping[Any, Any]) -> None:
        """The unifier snapshots ``saved`` of ``group``'s ``partition`` (by route ends, or
        by route id in an older checkpoint)."""
        routes = {route_key(plan.routes[rid]): plan.routes[rid] for rid in group.routes_in}
        for key, snapshot in saved.items():
            route = plan.routes[key] if isinstance(key, int) else routes.get(key)
            if route is None:
                continue
            ends = route_key(route)
            self._copies.setdefault(ends, {})[partition] = snapshot
            self._count[ends] = group.partitions
            self._template[ends] = route.unifier

    def for_partition(self, plan: Plan, group: Group, partition: int) -> dict[str, Any]:
        """The unifier snapshots of ``group``'s ``partition`` in the new ``plan``, by route
        ends. Another downstream count than the old one while a copy holds state is
        refused: a copy's state given to every new copy would fire its cells once per
        copy, and the engine cannot divide it."""
        out: dict[str, Any] = {}
        for rid in group.routes_in:
            route = plan.routes[rid]
            ends = route_key(route)
            copies = self._copies.get(ends)
            if route.unifier is None or not copies:
                continue
            if self._count[ends] == group.partitions:
                if partition in copies:
                    out[ends] = copies[partition]
                continue
            if any(_unifier_holds(self._template[ends], c) for c in copies.values()):
                raise StateError(
                    f"the unifier of {ends} holds state in its copies (one per partition of "
                    f"{route.sink.operator!r}: {self._count[ends]}, now {group.partitions}) "
                    "that cannot be divided among another number of copies: keep the "
                    f"partition count of {route.sink.operator!r} while the windows of "
                    f"{route.source.operator!r} are open"
                )
        return out

    def check_kept(self, plan: Plan) -> None:
        """Refuse a new ``plan`` without a unifier where one holds state."""
        unified = {route_key(r) for r in plan.routes if r.unifier is not None}
        for ends, copies in self._copies.items():
            if ends in unified:
                continue
            template = self._template[ends]
            source = ends.split("->")[0].rsplit(".", 1)[0]
            if any(_unifier_holds(template, c) for c in copies.values()):
                raise StateError(
                    f"the unifier of {ends} holds state that the new partitioning has no "
                    f"unifier for ({source!r} would run one partition, or the stream is "
                    f"gone): it would be lost. Keep {source!r} on two partitions or more "
                    "while its windows are open"
                )
