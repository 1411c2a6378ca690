"""The rows that travel between stages: chunks of tuples, window markers, control, metrics.

Between two Spark stages malhar moves *chunks*, not tuples: one envelope row
holds an Arrow IPC stream of many tuples of one route for one downstream
partition (or a pickled list on untyped ports). Spark shuffles few large rows
and never looks inside them.
"""

from __future__ import annotations

import enum
import pickle
from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa

ENVELOPE_DDL = (
    "pkey int, level int, slot int, kind tinyint, route int, src int, "
    "window bigint, committed bigint, count bigint, payload binary"
)


class Kind(enum.IntEnum):
    """What an envelope row carries."""

    #: a chunk of tuples of one route for one destination partition
    DATA = 0
    #: sent first by every task to every slot of the next level: the window, its
    #: committed window and the shutdown flag (in ``count``)
    MARKER = 1
    #: a pickled ``(ControlTuple, origin partition)``, in stream order after earlier data
    CONTROL = 2
    #: an error port's count (``route`` = the error port's metric id)
    METRIC = 3
    #: one group partition's window statistics (JSON, see ``malhar.stats``)
    STATS = 4


DATA, MARKER, CONTROL, METRIC, STATS = Kind.DATA, Kind.MARKER, Kind.CONTROL, Kind.METRIC, Kind.STATS


class Envelope(NamedTuple):
    """One row between stages (column order of :data:`ENVELOPE_SCHEMA`)."""

    pkey: int  #: the int Spark's hash partitioner sends to ``slot`` of the next level
    level: int  #: the level the row is meant for (rows for later levels are forwarded)
    slot: int  #: the destination slot at ``level``
    kind: int  #: a :class:`Kind`
    route: int  #: the route id (DATA, CONTROL), the metric id (METRIC), -1 (MARKER)
    src: int  #: the sending partition
    window: int
    committed: int  #: MARKER: the committed window delivered with this window
    count: int  #: DATA: tuples; METRIC: the count; MARKER: 1 for the shutdown window
    payload: bytes

    @property
    def shutdown(self) -> bool:
        """A MARKER of the application's last (orderly stop) window."""
        return bool(self.count)


ENVELOPE_SCHEMA = pa.schema(
    [
        ("pkey", pa.int32()),
        ("level", pa.int32()),
        ("slot", pa.int32()),
        ("kind", pa.int8()),
        ("route", pa.int32()),
        ("src", pa.int32()),
        ("window", pa.int64()),
        ("committed", pa.int64()),
        ("count", pa.int64()),
        ("payload", pa.binary()),
    ]
)
_COLUMNS = ENVELOPE_SCHEMA.names


def encode_batch(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_batch(payload: bytes) -> pa.RecordBatch:
    reader = pa.ipc.open_stream(pa.py_buffer(payload))
    batches = list(reader)
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, schema=reader.schema).combine_chunks().to_batches()[0]


def encode_objects(values: list[Any]) -> bytes:
    return pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)


def decode_objects(payload: bytes) -> list[Any]:
    return pickle.loads(payload)


class EnvelopeBuffer:
    """Collects envelope rows and hands them out as Arrow batches."""

    def __init__(self, flush_rows: int = 256) -> None:
        self.flush_rows = flush_rows
        self.rows: dict[str, list[Any]] = {c: [] for c in _COLUMNS}

    def add(
        self,
        *,
        pkey: int,
        level: int,
        slot: int,
        kind: int,
        route: int,
        src: int,
        window: int,
        committed: int = -1,
        count: int = 0,
        payload: bytes = b"",
    ) -> None:
        r = self.rows
        r["pkey"].append(pkey)
        r["level"].append(level)
        r["slot"].append(slot)
        r["kind"].append(kind)
        r["route"].append(route)
        r["src"].append(src)
        r["window"].append(window)
        r["committed"].append(committed)
        r["count"].append(count)
        r["payload"].append(payload)

    def __len__(self) -> int:
        return len(self.rows["pkey"])

    def full(self) -> bool:
        return len(self) >= self.flush_rows

    def take(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self.rows, schema=ENVELOPE_SCHEMA)
        self.rows = {c: [] for c in _COLUMNS}
        return batch


def iter_rows(batch: pa.RecordBatch) -> Iterator[Envelope]:
    """The envelope rows of ``batch`` (cheap: few rows, big payloads)."""
    cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    return map(Envelope._make, zip(*cols, strict=True))


def encode_control(ctl: Any, origin: int, sender: Any = None) -> bytes:
    """A CONTROL payload: the control tuple and the upstream partition it comes from, or
    the whole ``ControlSender`` of a copy an operator passed on from further upstream."""
    found = (ctl, origin) if sender is None else (ctl, origin, sender)
    return pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)


def decode_control(payload: bytes) -> tuple[Any, int, Any]:
    """(control tuple, origin partition, the first sender or None)."""
    found = pickle.loads(payload)
    return found if len(found) == 3 else (*found, None)
