"""One fused-group partition running one window inside a Spark task.

A :class:`PartitionRuntime` holds the live operator instances of one group
partition. It stays cached in the Python worker between windows; it is
rebuilt from the state store whenever the cached copy is not exactly the
state after the previous window (another worker ran it, or a failure).
"""

from __future__ import annotations

import atexit
import logging
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import cloudpickle

from malhar import attributes as A
from malhar.control import ControlTuple, DeliveryType
from malhar.engine import envelope as E
from malhar.engine.plan import Group, Plan, Route
from malhar.engine.state_store import StateStore
from malhar.operator import (
    ActivationListener,
    CheckpointListener,
    InputOperator,
    Operator,
    OperatorContext,
)
from malhar.ports import Emitter, InputPort, handler, ports_of
from malhar.schema import arrow_schema

log = logging.getLogger("malhar.engine")

#: rows per destination partition buffered before a chunk is cut mid-window
CHUNK_ROWS = 65_536


class OperatorError(RuntimeError):
    """User operator code failed; the message names operator, partition and window."""


# -- emitters -------------------------------------------------------------------------------
class FanOut(Emitter):
    def __init__(self, targets: list[Emitter]) -> None:
        self.targets = targets

    def tuple(self, value: Any) -> None:
        for t in self.targets:
            t.tuple(value)

    def batch(self, batch: pa.RecordBatch) -> None:
        for t in self.targets:
            t.batch(batch)

    def control(self, ctl: ControlTuple) -> None:
        for t in self.targets:
            t.control(ctl)


class LocalSink(Emitter):
    """A fused stream edge: delivery is a direct call (Apex THREAD_LOCAL)."""

    def __init__(self, rt: PartitionRuntime, op: str, port: str) -> None:
        self.rt, self.op, self.port = rt, op, port

    def tuple(self, value: Any) -> None:
        self.rt.deliver_tuple(self.op, self.port, value)

    def batch(self, batch: pa.RecordBatch) -> None:
        self.rt.deliver_batch(self.op, self.port, batch)

    def control(self, ctl: ControlTuple) -> None:
        self.rt.deliver_control(self.op, self.port, ctl)


class RouteBuffer(Emitter):
    """A stream edge to another task: tuples are partitioned, buffered and cut into chunks."""

    def __init__(
        self,
        rt: PartitionRuntime,
        route: Route,
        dest: Group | None = None,
        fixed: int | None = None,
    ) -> None:
        plan = rt.plan
        self.rt = rt
        self.route = route
        self.fixed = fixed  # all output to one partition of ``dest`` (cascade unifiers)
        self.n = plan.groups[route.dest_group].partitions  # tuples choose among these
        self.first_cascade = (
            plan.groups[route.cascade[0]] if route.cascade and dest is None else None
        )
        self.dest = dest or self.first_cascade or plan.groups[route.dest_group]
        self.tuples: dict[int, list[Any]] = defaultdict(list)
        self.batches: dict[int, list[pa.RecordBatch]] = defaultdict(list)
        self.rows: dict[int, int] = defaultdict(int)
        self.rr = rt.partition  # round robin starts at our own index: spreads partitions
        self.pending: list[Any] = []

    def tuple(self, value: Any) -> None:
        if self.route.arrow_schema is not None and self.n > 1 and self.fixed is None:
            # Typed tuples are partitioned later, a whole Arrow batch at a time.
            self.pending.append(value)
            if len(self.pending) >= CHUNK_ROWS:
                self._drain_pending()
            return
        if self.n == 1 or self.fixed is not None:
            d = 0
        elif self.route.codec is not None:
            d = self.route.codec.partition(value) % self.n
        else:
            d = self.rr % self.n
            self.rr += 1
        self.tuples[d].append(value)
        self._count(d, 1)

    def _drain_pending(self) -> None:
        if self.pending:
            rows, self.pending = self.pending, []
            self.batch(pa.RecordBatch.from_pylist(rows, schema=self.route.arrow_schema))

    def batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.n == 1 or self.fixed is not None:
            self.batches[0].append(batch)
            self._count(0, batch.num_rows)
            return
        if self.route.codec is not None:
            keys = np.asarray(self.route.codec.partition_batch(batch)) % self.n
            for d in np.unique(keys):
                part = batch.filter(pa.array(keys == d))
                self.batches[int(d)].append(part)
                self._count(int(d), part.num_rows)
            return
        step = -(-batch.num_rows // self.n)
        for i in range(self.n):
            part = batch.slice(i * step, step)
            if part.num_rows:
                d = (self.rr + i) % self.n
                self.batches[d].append(part)
                self._count(d, part.num_rows)
        self.rr += 1

    def control(self, ctl: ControlTuple) -> None:
        self._drain_pending()
        payload = pickle.dumps(ctl, protocol=pickle.HIGHEST_PROTOCOL)
        targets = [0] if self.fixed is not None else range(self.n)
        for d in targets:
            self.flush_one(d)  # keep control in stream order after earlier data
            self.rt.emit_row(self.dest, self._index(d), E.CONTROL, self.route.id, payload=payload)

    def _count(self, d: int, rows: int) -> None:
        self.rows[d] += rows
        if self.rows[d] >= CHUNK_ROWS:
            self.flush_one(d)

    def _index(self, d: int) -> int:
        """Partition of ``self.dest`` that receives tuples meant for downstream partition d."""
        if self.fixed is not None:
            return self.fixed
        if self.first_cascade is not None:
            fan = self.first_cascade.fan
            return d * fan + (self.rt.partition * fan) // self.route.upstream_partitions
        return d

    def flush_one(self, d: int) -> None:
        tuples, batches = self.tuples.pop(d, []), self.batches.pop(d, [])
        rows = self.rows.pop(d, 0)
        if not rows:
            return
        schema = self.route.arrow_schema
        if schema is None:
            values = tuples + [v for b in batches for v in b.column(0).to_pylist()]
            payload = E.encode_objects(values)
        else:
            if tuples:
                batches.append(pa.RecordBatch.from_pylist(tuples, schema=schema))
            if len(batches) == 1:
                merged = batches[0]
            else:
                table = pa.Table.from_batches([b.cast(schema) for b in batches], schema=schema)
                merged = table.combine_chunks().to_batches()[0]
            payload = E.encode_batch(merged)
        self.rt.emit_row(
            self.dest, self._index(d), E.DATA, self.route.id, count=rows, payload=payload
        )

    def flush(self) -> None:
        self._drain_pending()
        for d in sorted(set(self.tuples) | set(self.batches)):
            self.flush_one(d)


# -- the runtime of one group partition -----------------------------------------------------
class PartitionRuntime:
    def __init__(self, plan: Plan, group: Group, partition: int) -> None:
        self.plan = plan
        self.group = group
        self.partition = partition
        self.window = -1  # last window completed by this instance
        self.committed = -1  # last committed window delivered
        self.ops: dict[str, Operator] = {}
        self.unifiers: dict[int, Operator] = {}  # route id -> unifier instance
        self.open: dict[str, bool] = {}  # application window open per operator
        self.pending_end: dict[str, list[tuple[str, ControlTuple]]] = defaultdict(list)
        self.last_saved: bytes | None = None
        self.store = StateStore(plan.checkpoint, group.key, partition) if plan.checkpoint else None
        self.out = E.EnvelopeBuffer()
        self._handlers: dict[tuple[str, str, str], Callable | None] = {}
        self._seen_controls: dict[tuple[str, str], set[bytes]] = defaultdict(set)
        self._skip: set[str] = set()
        self.buffers: list[RouteBuffer] = []
        self._purge_pending = True  # snapshots or markers may exist that a purge can drop

    # -- construction ------------------------------------------------------------------------
    def context(self, name: str) -> OperatorContext:
        meta = self.plan.dag.operators.get(name)
        return OperatorContext(
            name=name,
            partition=self.partition,
            partitions=self.group.partitions,
            application=self.plan.app,
            attributes=(
                {**{n: a.default for n, a in A.OPERATOR.items()}, **meta.attributes} if meta else {}
            ),
            checkpoint=self.plan.checkpoint,
        )

    def restore(self, window: int) -> None:
        """Bring up the state after ``window - 1``: from the store, or fresh."""
        snapshot = self.store.load(window - 1) if self.store else None
        if snapshot is not None:
            saved_window, data = snapshot
            state = pickle.loads(data)
            self.ops = state["ops"]
            self.unifiers = state["unifiers"]
            self.open = state["open"]
            self.pending_end = defaultdict(list, state["pending_end"])
            # The lost instance had delivered committed(W - 2) when it began W - 1.
            self.committed = window - 2
            self.window = window - 1
            self.last_saved = data
        else:
            self.ops = {n: self.plan.operator(n).clone() for n in self.group.operators}
            self.unifiers = {
                rid: self.plan.routes[rid].unifier()
                for rid in self.group.routes_in
                if self.plan.routes[rid].unifier is not None
            }
            self.open = dict.fromkeys(self.group.operators, False)
            self.window = window - 1
        self._wire()
        for name, op in self._all_ops():
            self._call(name, op.setup, self.context(name))
            if isinstance(op, ActivationListener):
                self._call(name, op.activate, self.context(name))

    def _all_ops(self) -> Iterator[tuple[str, Operator]]:
        for rid, u in self.unifiers.items():
            yield f"{self.plan.routes[rid].source}#unifier", u
        yield from self.ops.items()

    def _wire(self) -> None:
        self.buffers = []
        for name, op in self.ops.items():
            _, outputs = ports_of(type(op))
            for pname in outputs:
                ref = f"{name}.{pname}"
                targets: list[Emitter] = [
                    LocalSink(self, s.operator, s.port) for s in self.plan.local_edges.get(ref, [])
                ]
                for route in self.plan.routes_from(ref):
                    buf = RouteBuffer(self, route)
                    self.buffers.append(buf)
                    targets.append(buf)
                bound = getattr(op, pname)
                if targets:
                    bound.emitter = targets[0] if len(targets) == 1 else FanOut(targets)
        for rid, u in self.unifiers.items():
            route = self.plan.routes[rid]
            if self.group.cascade_route is None:
                u.output.emitter = LocalSink(self, route.sink.operator, route.sink.port)
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
            u.output.emitter = buf

    def teardown(self) -> None:
        for name, op in self._all_ops():
            try:
                if isinstance(op, ActivationListener):
                    op.deactivate()
                op.teardown()
            except Exception:
                log.exception("malhar: teardown of %s partition %d failed", name, self.partition)

    # -- calling user code ------------------------------------------------------------------
    def _call(self, name: str, fn: Callable, *args: Any) -> Any:
        try:
            return fn(*args)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(
                f"operator {name!r} partition {self.partition} failed in {fn.__name__} "
                f"of window {self.window + 1}: {type(exc).__name__}: {exc}"
            ) from exc

    def _handler(self, op_name: str, port: str, kind: str) -> Callable | None:
        key = (op_name, port, kind)
        if key not in self._handlers:
            op = self.ops[op_name]
            inputs, _ = ports_of(type(op))
            self._handlers[key] = handler(op, inputs[port], kind)
        return self._handlers[key]

    # -- delivery -----------------------------------------------------------------------------
    def deliver_tuple(self, op: str, port: str, value: Any) -> None:
        if op in self._skip:
            return
        fn = self._handler(op, port, "process")
        if fn is not None:
            self._call(op, fn, value)
            return
        fn = self._handler(op, port, "process_batch")
        if fn is None:
            raise OperatorError(f"operator {op!r} has no process/process_batch for port {port!r}")
        schema = arrow_schema(ports_of(type(self.ops[op]))[0][port].schema)
        self._call(op, fn, pa.RecordBatch.from_pylist([value], schema=schema))

    def deliver_batch(self, op: str, port: str, batch: pa.RecordBatch) -> None:
        if op in self._skip:
            return
        fn = self._handler(op, port, "process_batch")
        if fn is not None:
            self._call(op, fn, batch)
            return
        fn = self._handler(op, port, "process")
        if fn is None:
            raise OperatorError(f"operator {op!r} has no process/process_batch for port {port!r}")
        for row in batch.to_pylist():
            self._call(op, fn, row)

    def deliver_objects(self, op: str, port: str, values: Iterable[Any]) -> None:
        for v in values:
            self.deliver_tuple(op, port, v)

    def deliver_control(self, op: str, port: str, ctl: ControlTuple) -> None:
        key = pickle.dumps(ctl.payload, protocol=pickle.HIGHEST_PROTOCOL)
        seen = self._seen_controls[(op, port)]
        if key in seen:
            return  # the same control tuple from another upstream partition
        seen.add(key)
        inputs, _ = ports_of(type(self.ops[op]))
        if inputs[port].control_aware:
            if ctl.delivery is DeliveryType.END_WINDOW:
                self.pending_end[op].append((port, ctl))
                return
            self._control_now(op, port, ctl)
        else:
            self._propagate(op, ctl)

    def _control_now(self, op: str, port: str, ctl: ControlTuple) -> None:
        fn = self._handler(op, port, "process_control")
        handled = self._call(op, fn, ctl.payload) if fn is not None else False
        if not handled:
            self._propagate(op, ctl)

    def _propagate(self, op: str, ctl: ControlTuple) -> None:
        instance = self.ops[op]
        for pname, port in ports_of(type(instance))[1].items():
            if not port.error:
                getattr(instance, pname).emitter.control(ctl)

    # -- envelope output ------------------------------------------------------------------
    def emit_row(
        self, dest: Group, d: int, kind: int, route: int, *, count: int = 0, payload: bytes = b""
    ) -> None:
        nxt = self.group.level + 1
        slot = dest.slot_offset + d
        n_next = self.plan.levels[nxt]
        pkey = self.plan.pkeys[nxt][slot % n_next]
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

    def forward(self, row: tuple) -> None:
        """Pass on a row meant for a later level."""
        pkey, level, slot, kind, route, src, window, committed, count, payload = row
        nxt = self.group.level + 1
        n_next = self.plan.levels[nxt] if nxt < len(self.plan.levels) else 1
        key = self.plan.pkeys[nxt][slot % n_next] if nxt < len(self.plan.levels) else 0
        self.out.add(
            pkey=key,
            level=level,
            slot=slot,
            kind=kind,
            route=route,
            src=src,
            window=window,
            committed=committed,
            count=count,
            payload=payload,
        )

    # -- one window ---------------------------------------------------------------------------
    def begin(self, window: int, committed: int, shutdown: bool = False) -> None:
        self._seen_controls.clear()
        self._skip.clear()
        if committed > self.committed:
            for name, op in self._all_ops():
                if isinstance(op, CheckpointListener):
                    self._call(name, op.committed, committed)
            if self.store and self._purge_pending:
                self.store.purge(committed)
                self._purge_pending = False
            self.committed = committed
        amo = [
            n
            for n in self.group.operators
            if self.plan.dag.operators[n].attr(A.PROCESSING_MODE) is A.ProcessingMode.AT_MOST_ONCE
        ]
        if amo and self.store:
            self._purge_pending = True
            if self.store.mark_started(window):
                self._skip.update(amo)  # a replay: at-most-once drops the in-flight window's tuples
        self._markers(window, committed, shutdown)
        for _, op in self._all_ops():
            for bound in _bound_outputs(op):
                bound.count = 0
        for name, op in self._all_ops():
            # An application window ends at ids where (id + 1) % count == 0, so the
            # next one always begins on a boundary; the first ever begins at once.
            if not self.open.get(name, False):
                self._call(name, op.begin_window, window)
                self.open[name] = True

    def _app_window_count(self, name: str) -> int:
        meta = self.plan.dag.operators.get(name)
        return int(meta.attr(A.APPLICATION_WINDOW_COUNT)) if meta else 1

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
        for name, op in self.ops.items():
            if not isinstance(op, InputOperator) or name in self._skip:
                continue
            limit = int(self.plan.dag.operators[name].attr(A.MAX_TUPLES_PER_WINDOW))
            outputs = _bound_outputs(op)
            while True:
                before = sum(b.count for b in outputs)
                self._call(name, op.emit_tuples)
                after = sum(b.count for b in outputs)
                if after == before or after >= limit:
                    break

    def receive(self, row: tuple) -> None:
        pkey, level, slot, kind, route_id, src, window, committed, count, payload = row
        if level != self.group.level:
            self.forward(row)
            return
        if kind == E.MARKER:
            return
        if kind == E.METRIC:
            self.forward(row)
            return
        route = self.plan.routes[route_id]
        sink_op, sink_port = route.sink.operator, route.sink.port
        if kind == E.CONTROL:
            ctl = pickle.loads(payload)
            if route_id in self.unifiers:
                self._unifier_control(route_id, ctl)
            else:
                self.deliver_control(sink_op, sink_port, ctl)
            return
        unifier = self.unifiers.get(route_id)
        if route.arrow_schema is None:
            values = E.decode_objects(payload)
            if unifier is not None:
                fn = handler(unifier, type(unifier).input, "process")
                for v in values:
                    self._call(f"{route.source}#unifier", fn, v)
            else:
                self.deliver_objects(sink_op, sink_port, values)
            return
        batch = E.decode_batch(payload)
        if unifier is not None:
            fn = handler(unifier, type(unifier).input, "process_batch")
            if fn is not None:
                self._call(f"{route.source}#unifier", fn, batch)
            else:
                fn = handler(unifier, type(unifier).input, "process")
                for v in batch.to_pylist():
                    self._call(f"{route.source}#unifier", fn, v)
        else:
            self.deliver_batch(sink_op, sink_port, batch)

    def _unifier_control(self, route_id: int, ctl: ControlTuple) -> None:
        u = self.unifiers[route_id]
        inp: InputPort = type(u).input
        if inp.control_aware:
            fn = handler(u, inp, "process_control")
            if fn is not None and fn(ctl.payload):
                return
        u.output.emitter.control(ctl)

    def end(self, window: int, shutdown: bool = False) -> None:
        for name, op in self._all_ops():
            count = self._app_window_count(name)
            for port, ctl in self.pending_end.pop(name, []):
                self._control_now(name, port, ctl)
            if self.open.get(name) and (count == 1 or (window + 1) % count == 0 or shutdown):
                self._call(name, op.end_window)
                self.open[name] = False
        for buf in self.buffers:
            buf.flush()
        self.window = window
        self._metrics(window)
        self._save(window)
        if shutdown:
            self.teardown()

    def _metrics(self, window: int) -> None:
        last = len(self.plan.levels)
        for mid, ref in enumerate(self.plan.error_ports):
            op_name, port = ref.split(".", 1)
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

    def _save(self, window: int) -> None:
        if self.store is None:
            return
        data = cloudpickle.dumps(
            {
                "ops": self.ops,
                "unifiers": self.unifiers,
                "open": self.open,
                "pending_end": dict(self.pending_end),
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        if data != self.last_saved:  # a stateless chain writes once
            self.store.save(window, data)
            self.last_saved = data
            self._purge_pending = True
        for name, op in self._all_ops():
            if isinstance(op, CheckpointListener):
                self._call(name, op.checkpointed, window)


def _bound_outputs(op: Operator) -> list[Any]:
    return [getattr(op, p) for p in ports_of(type(op))[1]]


# -- cache of live runtimes in this Python worker ------------------------------------------------
_LIVE: dict[tuple[str, str, int], PartitionRuntime] = {}


def acquire(plan: Plan, group: Group, partition: int, window: int) -> PartitionRuntime:
    key = (plan.app, group.key, partition)
    for other, stale in list(_LIVE.items()):
        if (
            other != key
            and other[0] == plan.app
            and stale.plan.id != plan.id
            and stale.plan.checkpoint == plan.checkpoint
        ):
            del _LIVE[other]  # an earlier launch of this application: release its resources
            stale.teardown()
    rt = _LIVE.pop(key, None)
    if rt is not None and rt.window == window - 1 and rt.plan.id == plan.id:
        return rt
    if rt is not None:
        rt.teardown()
    rt = PartitionRuntime(plan, group, partition)
    rt.restore(window)
    return rt


def warm_slots(plan: Plan, level: int, window: int) -> list[int]:
    """The slots of ``level`` whose runtime this worker holds at ``window - 1``."""
    return sorted(
        rt.group.slot_offset + rt.partition
        for rt in _LIVE.values()
        if rt.plan.id == plan.id and rt.group.level == level and rt.window == window - 1
    )


def release(rt: PartitionRuntime, *, keep: bool, failed: bool = False) -> None:
    if keep:
        _LIVE[(rt.plan.app, rt.group.key, rt.partition)] = rt
    elif failed:
        rt.teardown()  # release connections now; the replay restores from the store


@atexit.register
def _teardown_all() -> None:  # pragma: no cover - process exit
    for rt in list(_LIVE.values()):
        rt.teardown()
    _LIVE.clear()


def run_window(
    plan: Plan, level: int, slot: int, rows: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Run one window of the group partition at (``level`` >= 1, ``slot``) over the rows
    shuffled to it; yield envelope batches. The window comes with the first marker."""
    group, partition = plan.group_at(level, slot)
    incoming = iter(rows)
    early: list[tuple] = []
    window: int | None = None
    committed, shutdown = -1, False
    for batch in incoming:  # learn the window from the first marker of any upstream task
        rows_of_batch = list(E.iter_rows(batch))
        for i, row in enumerate(rows_of_batch):
            if row[3] == E.MARKER and row[1] == level:
                window, committed, shutdown = row[6], row[7], bool(row[8])
                early.extend(rows_of_batch[i + 1 :])
                break
            early.append(row)
        if window is not None:
            break
    if window is None:
        return  # no upstream task ran: nothing to do
    rt = acquire(plan, group, partition, window)
    ok = False
    try:
        rt.begin(window, committed, shutdown)
        for row in early:
            rt.receive(row)
            if rt.out.full():
                yield rt.out.take()
        for batch in incoming:
            for row in E.iter_rows(batch):
                rt.receive(row)
            if rt.out.full():
                yield rt.out.take()
        rt.end(window, shutdown)
        if len(rt.out):
            yield rt.out.take()
        ok = True
    finally:
        release(rt, keep=ok and not shutdown, failed=not ok)


def run_inputs(
    plan: Plan,
    slots: Iterable[int],
    *,
    window: int,
    committed: int = -1,
    shutdown: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Run one window of level-0 ``slots`` in this task; yield envelope batches.

    Every slot's runtime begins before the first one reads, so connectors that fetch
    ahead (the Kafka input assigns its partitions in ``begin_window``) all fetch while
    the first slot runs; then each slot reads, ends, and its output is yielded.
    """
    runtimes: list[PartitionRuntime] = []
    ok = False
    try:
        for slot in slots:
            group, partition = plan.group_at(0, slot)
            rt = acquire(plan, group, partition, window)
            runtimes.append(rt)
            rt.begin(window, committed, shutdown)
        for rt in runtimes:
            rt.run_input()
            rt.end(window, shutdown)
            if len(rt.out):
                yield rt.out.take()
        ok = True
    finally:
        for rt in runtimes:
            release(rt, keep=ok and not shutdown, failed=not ok)
