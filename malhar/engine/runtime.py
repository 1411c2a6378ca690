"""One fused-group partition: its live operator instances and their windows.

A :class:`PartitionRuntime` wires the instances (:mod:`malhar.engine.routing`),
hands what arrives to them through its :class:`~malhar.engine.dispatch.Dispatcher`,
drives the window lifecycle, and checkpoints their state with every window
(:mod:`malhar.engine.snapshots`). It stays cached in the Python worker between
windows (:mod:`malhar.engine.task`); it is rebuilt from the state store whenever
the cached copy is not exactly the state after the previous window.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from malhar import attributes as A
from malhar.control import ControlSender, ControlTuple
from malhar.engine import envelope as E
from malhar.engine.dispatch import Dispatcher
from malhar.engine.managed import ManagedStates
from malhar.engine.plan import Group, Plan
from malhar.engine.routing import FanOut, LocalSink, RouteBuffer
from malhar.engine.snapshots import PartitionSnapshots, restore_into
from malhar.engine.state_store import StateStore
from malhar.engine.unifier_states import by_route, restore_unifiers
from malhar.engine.unread_errors import FirstErrorLogged
from malhar.operator import (
    ActivationListener,
    CheckpointListener,
    InputOperator,
    Operator,
    OperatorContext,
)
from malhar.ports import BoundOutput, Emitter, ports_of
from malhar.stats import WindowStats

log = logging.getLogger("malhar.engine")


class PartitionRuntime:
    def __init__(self, plan: Plan, group: Group, partition: int) -> None:
        self.plan = plan
        self.group = group
        self.partition = partition
        self.window = -1  # last window completed by this instance
        self.committed = -1  # last committed window delivered
        self.ops: dict[str, Operator] = {}
        self.unifiers: dict[int, Operator] = {}  # route id -> unifier instance
        self._unifiers_by_route: dict[str, Operator] = {}  # the same, by route ends
        self.open: dict[str, bool] = {}  # application window open per operator
        self.snapshots = PartitionSnapshots(
            StateStore(plan.state_root or plan.checkpoint, group.key, partition, plan.integrity_key)
            if plan.checkpoint
            else None
        )
        self.dispatcher = Dispatcher(partition, self._forward_control)
        self.managed = ManagedStates(
            plan.checkpoint, partition, plan.integrity_key, roots=plan.managed_roots
        )
        self.out = E.EnvelopeBuffer()
        self.buffers: list[RouteBuffer] = []
        self._purge_pending = True  # snapshots or markers may exist that a purge can drop
        self._outputs: list[BoundOutput] = []
        self._started = 0.0  # wall time the current window began (statistics)
        self._bytes_in = 0  # payload bytes received in the current window
        self._app_windows = {
            name: int(self.plan.dag.operators[name].attr(A.APPLICATION_WINDOW_COUNT))
            for name in group.operators
        }
        self._at_most_once = [
            n
            for n in group.operators
            if plan.dag.operators[n].attr(A.PROCESSING_MODE) is A.ProcessingMode.AT_MOST_ONCE
        ]

    # -- construction ------------------------------------------------------------------------
    def context(self, name: str) -> OperatorContext:
        meta = self.plan.dag.operators.get(name)
        return OperatorContext(
            name=name,
            partition=self.partition,
            partitions=self.group.partitions,
            application=self.plan.app,
            attributes={
                # the streaming window period: operators derive processing time from it
                A.STREAMING_WINDOW_MS.name: self.plan.window_ms,
                **(
                    {**{n: a.default for n, a in A.OPERATOR.items()}, **meta.attributes}
                    if meta
                    else {}
                ),
            },
            checkpoint=self.plan.checkpoint,
            integrity_key=self.plan.integrity_key,
            checkpoint_id=self.plan.checkpoint_id,
            managed=self._managed_state,
        )

    def _managed_state(self, operator: str, **options: Any) -> Any:
        # created while the operator sets up for window ``self.window + 1``
        return self.managed.get(operator, self.window, **options)

    def unifier_name(self, rid: int) -> str:
        route = self.plan.routes[rid]
        return f"{route.source}->{route.sink}#unifier"

    def restore(self, window: int) -> None:
        """Bring up the state after ``window - 1``: clones of the configured operators,
        with the state of the newest snapshot put back, or fresh."""
        self.ops = {n: self.plan.operator(n).clone() for n in self.group.operators}
        self.unifiers = {
            rid: unifier.clone()
            for rid in self.group.routes_in
            if (unifier := self.plan.routes[rid].unifier) is not None
        }
        # what their snapshots are saved under, every window (route ids change with plans)
        self._unifiers_by_route = by_route(self.plan, self.unifiers)
        self.open = dict.fromkeys(self.group.operators, False)
        self.window = window - 1
        saved = self.snapshots.load(window - 1)
        if saved is not None:
            restore_into(self.ops, saved["ops"])
            restore_unifiers(self.plan, self.unifiers, saved["unifiers"])
            self.open.update(saved["open"])
            # The lost instance had delivered committed(W - 2) when it began W - 1.
            self.committed = window - 2
        self.dispatcher.set_operators(
            dict(self._all_ops()), transparent=[self.unifier_name(r) for r in self.unifiers]
        )
        self._wire()
        self._outputs = [b for _, op in self._all_ops() for b in _bound_outputs(op)]
        self.dispatcher.window = window
        call = self.dispatcher.call
        for name, op in self._all_ops():
            call(name, op.setup, self.context(name))
            if isinstance(op, ActivationListener):
                call(name, op.activate, self.context(name))

    def _all_ops(self) -> Iterator[tuple[str, Operator]]:
        for rid, u in self.unifiers.items():
            yield self.unifier_name(rid), u
        yield from self.ops.items()

    def _wire(self) -> None:
        self.buffers = []
        stream_of = {str(s.source): s.name for s in self.plan.dag.streams.values()}
        for name, op in self.ops.items():
            _, outputs = ports_of(type(op))
            for pname in outputs:
                ref = f"{name}.{pname}"
                stream = stream_of.get(ref, ref)
                targets: list[Emitter] = [
                    LocalSink(self, s.operator, s.port, stream, name, 1)
                    for s in self.plan.local_edges.get(ref, [])
                ]
                for route in self.plan.routes_from(ref):
                    buf = RouteBuffer(self, route)
                    self.buffers.append(buf)
                    targets.append(buf)
                bound = getattr(op, pname)
                if targets:
                    bound.emitter = targets[0] if len(targets) == 1 else FanOut(targets)
                elif bound.port.warn_unread:
                    run = f"{self.plan.dag.name}@{self.plan.checkpoint}"
                    bound.emitter = FirstErrorLogged(
                        name, pname, self.partition, run, error=bound.port.error
                    )
        for rid, u in self.unifiers.items():
            route = self.plan.routes[rid]
            output = _bound_outputs(u)[0]
            if self.group.cascade_route is None:
                output.emitter = LocalSink(
                    self,
                    route.sink.operator,
                    route.sink.port,
                    route.stream,
                    route.source.operator,
                    route.upstream_partitions,
                )
                continue
            # A cascade unifier: partition q serves downstream partition q // fan.
            fan = self.group.fan
            d, g = divmod(self.partition, fan)
            i = route.cascade.index(self.group.id)
            if i + 1 < len(route.cascade):
                nxt = self.plan.groups[route.cascade[i + 1]]
                index = d * nxt.fan + (g * nxt.fan) // fan
            else:
                nxt, index = self.plan.groups[route.dest_group], d
            buf = RouteBuffer(self, route, dest=nxt, fixed=index)
            self.buffers.append(buf)
            output.emitter = buf

    def teardown(self) -> None:
        for name, op in self._all_ops():
            try:
                if isinstance(op, ActivationListener):
                    op.deactivate()
                op.teardown()
            except Exception:
                log.exception("malhar: teardown of %s partition %d failed", name, self.partition)
        try:
            self.managed.close()
        except Exception:
            log.exception("malhar: closing managed state of partition %d failed", self.partition)

    def _forward_control(self, op: str, ctl: ControlTuple, sender: ControlSender | None) -> None:
        instance = self.dispatcher.ops[op]
        for pname, port in ports_of(type(instance))[1].items():
            if not port.error:
                getattr(instance, pname).emitter.control(ctl, sender)

    # -- envelope output ------------------------------------------------------------------
    def emit_row(
        self, dest: Group, d: int, kind: int, route: int, *, count: int = 0, payload: bytes = b""
    ) -> None:
        nxt = self.group.level + 1
        slot = dest.slot_offset + d
        pkey = self.plan.pkeys[nxt][slot % self.plan.levels[nxt]]
        self.out.add(
            pkey=pkey,
            level=dest.level,
            slot=slot,
            kind=kind,
            route=route,
            src=self.partition,
            window=self.window + 1,
            count=count,
            payload=payload,
        )

    def forward(self, row: E.Envelope) -> None:
        """Pass on a row meant for a later level."""
        nxt = self.group.level + 1
        last = nxt >= len(self.plan.levels)
        key = 0 if last else self.plan.pkeys[nxt][row.slot % self.plan.levels[nxt]]
        self.out.add(**row._replace(pkey=key)._asdict())

    # -- one window ---------------------------------------------------------------------------
    def begin(self, window: int, committed: int, shutdown: bool = False) -> None:
        self._started = time.time()
        self._bytes_in = 0
        dispatcher = self.dispatcher
        dispatcher.begin_window(window)
        if committed > self.committed:
            for name, op in self._all_ops():
                if isinstance(op, CheckpointListener):
                    dispatcher.call(name, op.committed, committed)
            self.managed.committed(committed)
            store = self.snapshots.store
            if store and self._purge_pending:
                store.purge(committed)
                self._purge_pending = False
            self.committed = committed
        store = self.snapshots.store
        if self._at_most_once and store:
            self._purge_pending = True
            if store.mark_started(window):
                # a replay: at-most-once operators drop the in-flight window's tuples
                dispatcher.skip.update(self._at_most_once)
        self._markers(window, committed, shutdown)
        for bound in self._outputs:
            bound.count = 0
        for name, op in self._all_ops():
            # An application window ends at ids where (id + 1) % count == 0, so the
            # next one always begins on a boundary; the first ever begins at once.
            if not self.open.get(name, False):
                dispatcher.call(name, op.begin_window, window)
                self.open[name] = True

    def _markers(self, window: int, committed: int, shutdown: bool) -> None:
        # Sent first, to every task of the next level: each learns the window before any data.
        nxt = self.group.level + 1
        if nxt < len(self.plan.levels):
            for slot in range(self.plan.levels[nxt]):
                self.out.add(
                    pkey=self.plan.pkeys[nxt][slot],
                    level=nxt,
                    slot=slot,
                    kind=E.MARKER,
                    route=-1,
                    src=self.partition,
                    window=window,
                    committed=committed,
                    count=int(shutdown),
                )

    def run_input(self) -> None:
        """Level 0: let input operators emit up to their per-window limit."""
        call = self.dispatcher.call
        for name, op in self.ops.items():
            if not isinstance(op, InputOperator) or name in self.dispatcher.skip:
                continue
            limit = int(self.plan.dag.operators[name].attr(A.MAX_TUPLES_PER_WINDOW))
            outputs = _bound_outputs(op)
            while True:
                before = sum(b.count for b in outputs)
                call(name, op.emit_tuples)
                after = sum(b.count for b in outputs)
                if after == before or after >= limit:
                    break

    def receive(self, row: E.Envelope) -> None:
        if row.level != self.group.level or row.kind in (E.METRIC, E.STATS):
            self.forward(row)
            return
        if row.kind == E.MARKER:
            return
        route = self.plan.routes[row.route]
        dispatcher = self.dispatcher
        self._bytes_in += len(row.payload)
        unifier = self.unifiers.get(row.route)
        if unifier is not None:
            op, port = self.unifier_name(row.route), next(iter(ports_of(type(unifier))[0]))
        else:
            op, port = route.sink.operator, route.sink.port
        if row.kind == E.CONTROL:
            ctl, origin, first = E.decode_control(row.payload)
            sender = first or ControlSender(
                route.stream, route.source.operator, origin, route.upstream_partitions
            )
            dispatcher.deliver_control(op, port, ctl, sender)
        elif route.arrow_schema is None:
            dispatcher.deliver_objects(op, port, E.decode_objects(row.payload))
        else:
            dispatcher.deliver_batch(op, port, E.decode_batch(row.payload))

    def end(self, window: int, shutdown: bool = False) -> None:
        dispatcher = self.dispatcher
        for name, op in self._all_ops():
            dispatcher.end_window_controls(name)
            count = self._app_windows.get(name, 1)
            if self.open.get(name) and (count == 1 or (window + 1) % count == 0 or shutdown):
                dispatcher.call(name, op.end_window)
                self.open[name] = False
        for buf in self.buffers:
            buf.flush()
        self.managed.checkpoint(window)
        self.window = window
        self._metrics(window)
        self._stats(window)
        self._save(window)
        if shutdown:
            self.teardown()

    def _metrics(self, window: int) -> None:
        last = len(self.plan.levels)
        for mid, ref in enumerate(self.plan.error_ports):
            op_name, port = ref.rsplit(".", 1)
            if op_name in self.ops:
                n = getattr(self.ops[op_name], port).count
                nxt = self.group.level + 1
                key = self.plan.pkeys[nxt][0] if nxt < last else 0
                self.out.add(
                    pkey=key,
                    level=last,
                    slot=0,
                    kind=E.METRIC,
                    route=mid,
                    src=self.partition,
                    window=window,
                    count=n,
                )
        if self.group.level == last - 1:
            self.out.add(
                pkey=0,
                level=last,
                slot=0,
                kind=E.MARKER,
                route=-1,
                src=self.partition,
                window=window,
                committed=self.committed,
            )

    def _stats(self, window: int) -> None:
        """This window's statistics of every operator of the group (``malhar.stats``),
        sent to the last level, where ``observe`` hands them to the driver."""
        ended = time.time()
        received = self.dispatcher.received
        report = {}
        for name, op in self.ops.items():
            inputs, outputs = ports_of(type(op))
            backlog = op.backlog() if isinstance(op, InputOperator) else None
            stats = WindowStats(
                window=window,
                partition=self.partition,
                tuples_in={p: received.get((name, p), 0) for p in inputs},
                tuples_out={p: getattr(op, p).count for p in outputs},
                started=self._started,
                ended=ended,
                bytes_in=self._bytes_in,
                backlog=backlog,
                metrics=dict(self.dispatcher.call(name, op.metrics)),
            )
            report[name] = stats.to_json()
        if not report:
            return  # a cascade level of unifiers
        last = len(self.plan.levels)
        nxt = self.group.level + 1
        self.out.add(
            pkey=self.plan.pkeys[nxt][0] if nxt < last else 0,
            level=last,
            slot=0,
            kind=E.STATS,
            route=-1,
            src=self.partition,
            window=window,
            payload=json.dumps(report, separators=(",", ":")).encode(),
        )

    def _save(self, window: int) -> None:
        saved = self.snapshots.save(
            window, self.ops, self._unifiers_by_route, self.open, self._all_ops()
        )
        if saved:
            self._purge_pending = True
        call = self.dispatcher.call
        for name, op in self._all_ops():
            if isinstance(op, CheckpointListener):
                call(name, op.checkpointed, window)


def _bound_outputs(op: Operator) -> list[Any]:
    return [getattr(op, p) for p in ports_of(type(op))[1]]
