"""The Kafka output operator (Malhar's ``KafkaSinglePortExactlyOnceOutputOperator``), on
:class:`~malhar.io.base.output_operator.TransactionalOutputOperator`.

Each partition writes a window's records in one Kafka transaction together with the
window's id (the committed offset of the partition's commit group), so that readers with
``isolation.level=read_committed`` see every window exactly once, whatever crashes
happen; see :mod:`malhar.io.kafka.producer` for the protocol and the other delivery
modes, and ``docs/connectors/kafka.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from malhar.io.base.output import WindowKey, checkpoint_run, rejected_row
from malhar.io.base.output_operator import TransactionalOutputOperator, WindowBuffer
from malhar.io.base.rejected_log import RejectedLog
from malhar.io.kafka.encoding import Window, WindowPieces, pack_rows
from malhar.io.kafka.output_settings import KafkaOutputSettings
from malhar.io.kafka.producer import KafkaOutputStore
from malhar.io.kafka.serializers import ARROW_ERRORS, faithful_table
from malhar.operator import OperatorContext
from malhar.state import State

__all__ = ["KafkaOutputOperator"]


class KafkaOutputOperator(TransactionalOutputOperator, KafkaOutputSettings):
    """Writes tuples to a Kafka topic, one transaction per window and partition.

    Input ``input``: dicts (one field per column), records (dataclasses, named tuples,
    Spark ``Row``\\ s), ``str`` / ``bytes`` (the field ``value``), or Arrow record batches
    from a typed stream (encoded a column at a time). Output ``error`` (error port): each
    tuple that cannot be a record, as ``{**row, "error": reason}`` (a value the serializer
    cannot encode, a record over the size limit, a partition that the topic does not have,
    a missing key / value / partition column); the window's other records are written.

    The properties are those of :class:`~malhar.io.kafka.output_settings.KafkaOutputSettings`
    (and the retry properties of the output base).

    Example:
        >>> from malhar.io.kafka import KafkaOutputOperator
        >>> out = KafkaOutputOperator(
        ...     bootstrap_servers="localhost:9092", topic="word-counts",
        ...     key_column="word",                       # the record key
        ...     producer_config={"compression.type": "lz4", "linger.ms": 20})
        >>> (out.delivery, out.value_serializer)   # every row as JSON, exactly once
        ('exactly_once', 'json')
    """

    #: scan mode: partition -> offset after this partition's records of the last completed
    #: window (where the restart scan starts)
    _positions = State(dict)
    #: the store opened once (the cluster was reached): a later open (a partition rebuilt
    #: from the checkpoint) rides out an outage with window retries instead of failing
    #: after one first contact
    _reached = State(default=False)

    def __init__(
        self, bootstrap_servers: str | None = None, topic: str | None = None, **properties: Any
    ) -> None:
        if bootstrap_servers is not None:
            self.bootstrap_servers = bootstrap_servers
        if topic is not None:
            self.topic = topic
        self.configure(**properties)

    def settings(self) -> KafkaOutputSettings:
        """This operator's configuration as the plain settings its store takes."""
        return self.settings_of(KafkaOutputSettings)

    # -- TransactionalOutputOperator --------------------------------------------------------
    def preflight(self, label: str, timeout: float) -> str:
        """The topic and its partition count (see :mod:`malhar.io.kafka.preflight`)."""
        from malhar.io.kafka.preflight import check_output

        self.check_settings()
        return check_output(self, label, timeout)

    def fields_read(self, port: str) -> list[str]:
        """The key, value and partition columns: a typed stream must have them."""
        if port != "input":
            return []
        partition = self.partition_column if self.partitioner != "key" else None
        named = (self.key_column, self.value_source, partition)
        return list(dict.fromkeys(c for c in named if c))

    def create_store(self, context: OperatorContext) -> KafkaOutputStore:
        key = WindowKey(context.application, context.name, context.partition)
        rejected = (
            None
            if context.checkpoint is None
            else RejectedLog(
                context.checkpoint, context.name, context.partition, context.partitions
            )
        )
        return KafkaOutputStore(
            self.settings(),
            key,
            positions=self._positions,
            rejected=rejected,
            run=checkpoint_run(context.checkpoint_id),
            first_contact=not self._reached,
        )

    def setup(self, context: OperatorContext) -> None:
        super().setup(context)
        self._reached = True

    def end_window(self) -> None:
        super().end_window()
        store: KafkaOutputStore = self._store
        if store.delivery == "scan" and store.positions != self._positions:
            self._positions = dict(store.positions)

    def window_rows(self, buffer: WindowBuffer) -> tuple[Window, list[dict[str, Any]]]:
        """The window's rows: one Arrow table when its pieces share a schema (no per-row
        work for a typed stream), otherwise :class:`~malhar.io.kafka.encoding.WindowPieces`,
        each encoded as it is: an Arrow batch with its declared types, a run of tuples as
        one table when Arrow gives its rows back as they are, else each row as itself (a
        union of schemas would invent nulls; converting a batch to Python values would
        change how its values encode, e.g. a ``float32`` key as text)."""
        tables: list[pa.Table] = []
        bad: list[dict[str, Any]] = []
        for piece in buffer.pieces:
            if isinstance(piece, list):
                rows, refused = self._rows(piece)
                bad.extend(refused)
                if rows:
                    table = _fast_table(rows)
                    if table is None:
                        table, refused = _packed(rows)
                        bad.extend(refused)
                    tables.append(table)
            elif piece.num_rows:
                tables.append(
                    pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece
                )
        runs: list[list[pa.Table]] = []
        for table in tables:  # consecutive pieces of one schema are encoded together
            if runs and runs[-1][0].schema.equals(table.schema, check_metadata=True):
                runs[-1].append(table)
            else:
                runs.append([table])
        joined = [run[0] if len(run) == 1 else pa.concat_tables(run) for run in runs]
        if not joined:
            return pa.table({}), bad
        return (joined[0] if len(joined) == 1 else WindowPieces(joined)), bad

    def _rows(self, tuples: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        bad: list[dict[str, Any]] = []
        headers = self.headers_column
        for value in tuples:
            row = _as_row(value)
            if headers and row is not None and row.get(headers) is not None:
                row = {**row, headers: _header_list(row[headers])}
            if row is None:
                bad.append(
                    rejected_row(
                        value,
                        f"expected a dict, a record, str or bytes, got {type(value).__name__}",
                    )
                )
            else:
                rows.append(row)
        return rows, bad


def _fast_table(rows: list[dict[str, Any]]) -> pa.Table | None:
    """``rows`` as one Arrow table, when it gives each of them back as it is (None: not)."""
    try:
        table = pa.Table.from_pylist(rows)
    except ARROW_ERRORS:
        return None
    return table if faithful_table(rows, table) else None


def _packed(rows: list[dict[str, Any]]) -> tuple[pa.Table, list[dict[str, Any]]]:
    table, refused = pack_rows(rows)
    return table, [rejected_row(rows[i], why) for i, why in sorted(refused.items())]


def _as_row(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return value if isinstance(value, dict) else dict(value)
    if isinstance(value, str | bytes):
        return {"value": value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    for name in ("asDict", "_asdict"):
        fn = getattr(value, name, None)
        if callable(fn):
            return dict(fn())
    return None


def _header_list(value: Any) -> Any:
    """Per-row headers as ``[{"key", "value"}]`` (the Kafka input's ``headers`` shape), from a
    mapping or (key, value) pairs; text values as UTF-8. Anything else is left for the
    encoder to refuse."""
    try:
        pairs = value.items() if isinstance(value, Mapping) else value
        out = []
        for pair in pairs:
            if isinstance(pair, Mapping):
                pair = (pair.get("key"), pair.get("value"))
            k, v = pair
            out.append({"key": k, "value": v.encode() if isinstance(v, str) else v})
        return out
    except (TypeError, ValueError):
        return value
