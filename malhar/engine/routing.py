"""Where emitted tuples go: fused edges (direct calls) and routes (envelope chunks).

An operator's bound output port holds one :class:`~malhar.ports.Emitter`:

- :class:`LocalSink`: a fused edge (Apex THREAD_LOCAL); ``emit`` is a call of the
  downstream handler through the partition's dispatcher;
- :class:`RouteBuffer`: an edge to another task; tuples are partitioned (stream codec,
  round robin), buffered per destination partition and cut into envelope chunks;
- :class:`FanOut`: several of those.

A route encodes a typed port's tuples and batches to the port's Arrow schema; what does
not convert fails as an :class:`~malhar.errors.OperatorError` naming the emitting
operator, its output port and the schema (:mod:`malhar.engine.typed_rows`; ``malhar.testing.OperatorHarness`` checks every
emitted tuple the same way).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from malhar.control import ControlSender, ControlTuple
from malhar.engine import envelope as E
from malhar.engine.plan import Group, Route
from malhar.engine.typed_rows import (
    arrow_text,
    cast_batch,
    rows_to_batch,
    schema_text,
    unfit_error,
)
from malhar.errors import OperatorError
from malhar.ports import Emitter

if TYPE_CHECKING:
    from malhar.engine.runtime import PartitionRuntime

#: rows per destination partition buffered before a chunk is cut mid-window
CHUNK_ROWS = 65_536


class FanOut(Emitter):
    def __init__(self, targets: list[Emitter]) -> None:
        self.targets = targets

    def tuple(self, value: Any) -> None:
        for t in self.targets:
            t.tuple(value)

    def batch(self, batch: pa.RecordBatch) -> None:
        for t in self.targets:
            t.batch(batch)

    def control(self, ctl: ControlTuple, sender: ControlSender | None = None) -> None:
        for t in self.targets:
            t.control(ctl, sender)


class LocalSink(Emitter):
    """A fused stream edge (or a unifier's output): delivery is a direct call.

    Args:
        stream, upstream: the stream and the operator writing it (control senders).
        senders: upstream partitions feeding the receiving partition: 1 on a fused
            edge, all of them behind a unifier.
    """

    def __init__(
        self, rt: PartitionRuntime, op: str, port: str, stream: str, upstream: str, senders: int
    ) -> None:
        self.dispatcher = rt.dispatcher
        self.op, self.port = op, port
        self.own_sender = ControlSender(stream, upstream, rt.partition, senders)

    def tuple(self, value: Any) -> None:
        self.dispatcher.deliver_tuple(self.op, self.port, value)

    def batch(self, batch: pa.RecordBatch) -> None:
        self.dispatcher.deliver_batch(self.op, self.port, batch)

    def control(self, ctl: ControlTuple, sender: ControlSender | None = None) -> None:
        self.dispatcher.deliver_control(self.op, self.port, ctl, sender or self.own_sender)


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
        final = plan.groups[route.dest_group]
        self.n = final.partitions  # tuples choose among these
        #: partition keys of the destination (dynamic partitioning): hash & mask -> partition
        self.table = None if final.routing is None else np.asarray(final.routing[1], np.int64)
        self.mask = 0 if final.routing is None else final.routing[0]
        self.first_cascade = (
            plan.groups[route.cascade[0]] if route.cascade and dest is None else None
        )
        self.dest = dest or self.first_cascade or plan.groups[route.dest_group]
        self.tuples: dict[int, list[Any]] = defaultdict(list)
        self.batches: dict[int, list[pa.RecordBatch]] = defaultdict(list)
        self.rows: dict[int, int] = defaultdict(int)
        self.rr = rt.partition  # round robin starts at our own index: spreads partitions
        self.pending: list[Any] = []

    def _unfit(self, what: str, reason: str) -> OperatorError:
        """The error for emitted ``what`` that does not convert to the stream's schema."""
        route, rt = self.route, self.rt
        # a cascade unifier's buffer (``fixed``) carries what that unifier emitted
        operator = route.source.operator if self.fixed is None else rt.unifier_name(route.id)
        port = route.source.port if self.fixed is None else "output"
        try:
            ddl = schema_text(
                rt.plan.dag.operators[route.source.operator].outputs[route.source.port]
            )
        except (KeyError, AttributeError):
            ddl = arrow_text(route.arrow_schema)
        return unfit_error(operator, rt.partition, rt.dispatcher.window, port, ddl, what, reason)

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
            h = self.route.codec.partition(value)
            d = h % self.n if self.table is None else int(self.table[h & self.mask])
        else:
            d = self.rr % self.n
            self.rr += 1
        self.tuples[d].append(value)
        self._count(d, 1)

    def _drain_pending(self) -> None:
        if self.pending:
            rows, self.pending = self.pending, []
            self.batch(rows_to_batch(rows, self.route.arrow_schema, self._unfit))

    def batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.n == 1 or self.fixed is not None:
            self.batches[0].append(batch)
            self._count(0, batch.num_rows)
            return
        if self.route.codec is not None:
            schema = self.route.arrow_schema
            codec = self.route.codec
            # keys hash as the stream's types, as repartitioning hashes state keys; an
            # untyped stream's rows as its Python tuples would (it may carry both)
            if schema is None:
                hashes = np.asarray(codec.partition_rows(batch))
            else:
                typed = batch if batch.schema == schema else _typed(batch, schema)
                hashes = np.asarray(codec.partition_batch(typed))
            keys = hashes % self.n if self.table is None else self.table[hashes & self.mask]
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

    def control(self, ctl: ControlTuple, sender: ControlSender | None = None) -> None:
        self._drain_pending()
        route = self.route
        if sender is None:
            payload = E.encode_control(ctl, self.rt.partition)
        elif sender.stream == route.stream and sender.operator == route.source.operator:
            # a unifier of a cascade passes on the upstream partition it heard from
            payload = E.encode_control(ctl, sender.partition)
        else:
            # a copy passed on by an operator that is not control aware: its first sender
            # travels whole. Past this route every partition of that sender's operator can
            # reach the receiver (a fused edge had said 1 of 1): it counts them all.
            total = self.rt.plan.groups[self.rt.plan.group_of[sender.operator]].partitions
            payload = E.encode_control(ctl, sender.partition, replace(sender, partitions=total))
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
            # a batch on an untyped port crosses as its rows (dicts of every column), as
            # a fused operator without process_batch receives it
            values = tuples + [row for b in batches for row in b.to_pylist()]
            payload = E.encode_objects(values)
        else:
            if tuples:
                batches.append(rows_to_batch(tuples, schema, self._unfit))
            if len(batches) == 1:
                merged = batches[0]
            else:
                casts = [cast_batch(b, schema, self._unfit) for b in batches]
                table = pa.Table.from_batches(casts, schema=schema)
                merged = table.combine_chunks().to_batches()[0]
            payload = E.encode_batch(merged)
        self.rt.emit_row(
            self.dest, self._index(d), E.DATA, self.route.id, count=rows, payload=payload
        )

    def flush(self) -> None:
        self._drain_pending()
        for d in sorted(set(self.tuples) | set(self.batches)):
            self.flush_one(d)


def _typed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with each column the stream's schema types otherwise cast to that type (for
    hashing only: the batch itself travels as it is); a column that does not cast, or that
    the schema lacks, stays as it is."""
    columns = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        index = schema.get_field_index(field.name)
        if index >= 0 and schema.field(index).type != field.type:
            try:
                column = column.cast(schema.field(index).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
