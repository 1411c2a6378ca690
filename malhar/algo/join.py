"""Joins (Malhar's ``lib/join``) on managed state, partitioned by the join key.

- :class:`StreamJoin`: a time-bounded inner / left / right / outer join of two streams.
  Each tuple stays joinable for ``expiry_windows`` application windows (kept in managed
  state's time buckets, one bucket per window); with ``within`` and the time fields, a
  pair also needs event times at most ``within`` apart. An outer side's tuple that found
  no partner is emitted alone when it expires.
- :class:`LookupJoin`: a stream-table join: ``table`` tuples upsert rows by key, ``stream``
  tuples are joined with the row of their key as of the end of the previous window. Stream
  tuples without a row (misses) and table rows not stored (null keys) are counted in
  ``metrics()``; ``miss_policy="error"`` (Enricher's name) sends misses to ``error``.

Retention counted in windows is the same in every partition and on every replay, so the
result does not depend on the partitioning or on crashes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    FIELD_TYPES,
    STORABLE_KEYS,
    AlgoOperator,
    FieldCodec,
    Partitioning,
    SchemaProperty,
    TypedOutputs,
    emit_table,
    getter,
    missing,
)
from malhar.errors import ConfigError, MalharError
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.util.epoch_millis import event_millis
from malhar.util.null_keys import null_key

__all__ = ["LookupJoin", "StreamJoin"]

JOIN_TYPES = ("inner", "left", "right", "outer")
_POS, _KEY, _HIT = "__malhar_pos", "__malhar_key", "__malhar_hit"

#: LookupJoin's miss_policy values: Enricher's names (malhar.algo.enrich.MISS_POLICIES) that
#: an inner join can take ("null" and "pass" are what join_type="left" does)
LOOKUP_MISS_POLICIES = ("drop", "error")


def _ragged() -> Any:
    raise TypeError("the table rows have different fields")


def _storable(k: Any) -> bool:
    """A key managed state's ordered key codec takes (AUTO_KEY): by exact type, as the
    codec checks (a subclass, such as a NumPy scalar or an IntEnum, is refused)."""
    t = type(k)
    if t is tuple:
        return all(_storable(x) for x in k)
    if t is int:
        return -(2**63) <= k < 2**63  # the codec's integers are 64-bit
    return k is None or t is bool or t is float or t is str or t is bytes


def _unstorable(k: Any, verb: str) -> str:
    """The error-port reason for a key :func:`_storable` refuses."""
    reason = f"the key {k!r} cannot be {verb}: {STORABLE_KEYS}"
    if type(k) not in (tuple, int, float, str, bytes) and isinstance(
        k, tuple | int | float | str | bytes
    ):
        # a NumPy scalar, an IntEnum, a str subclass: managed state keys have exact types
        reason += f" (a {type(k).__name__} is not: convert it to the built-in type)"
    return reason


def typed_rows(rows: list[dict], schema: pa.Schema) -> pa.RecordBatch:
    """``rows`` as a batch of ``schema``'s columns, whatever fields each row has: a field
    a row lacks is null, one the schema does not declare is left out (as ``conform``
    leaves it out). Each column is built as Arrow infers it (``from_pylist`` did, from the
    first row's fields only) for ``emit_table`` to cast to the port's type, which raises a
    SchemaError naming the field when a value does not cast; values Arrow infers no one
    type of are converted to the port's type directly."""
    arrays = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            arrays.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, names=schema.names)


class FieldClash(MalharError, ValueError):
    """The joined row would have two fields of one name (see :func:`merge_rows`)."""


def merge_rows(left: dict | None, right: dict | None, left_key: str, right_key: str) -> dict:
    """The joined row: the left fields, then the right ones; a right field whose name the
    left row has is prefixed ``right_`` (the right key is dropped when both keys share
    a name). Raises :class:`FieldClash` when a right field's name (prefixed or not) is
    already in the row: a left field named ``right_x`` and a right field ``x`` both in
    the left row, say, as the batch join refuses them."""
    out = dict(left or {})
    for f, v in (right or {}).items():
        if f == right_key and right_key == left_key:
            if f not in out:
                out[f] = v
            continue
        name = f"right_{f}" if f in out else f
        if name in out:
            raise FieldClash(f"the joined field {name!r} clashes")
        out[name] = v
    return out


class _Join(TypedOutputs, AlgoOperator):
    PARTITIONING: ClassVar[str] = "keyed by the join keys (both inputs)"

    output = OutputPort()
    error = OutputPort(error=True)

    left_key = Property(str, default=None, not_null=True, doc="key field of the left tuples")
    right_key = Property(str, default=None, doc="key field of the right tuples (default: left_key)")
    budget_bytes = Property(int, default=64 << 20, min=8 << 20, doc="managed-state memory budget")
    schema = SchemaProperty("output", doc="Spark DDL of the joined rows (types output)")
    null_keys_match = Property(
        bool,
        default=False,
        doc="a None key matches a None key (Spark's eqNullSafe); default: it matches nothing",
    )

    @property
    def _rkey(self) -> str:
        return self.right_key or self.left_key

    def fields_read(self, port: str) -> list[str]:
        """The join key of ``port`` (``left``/``stream``: left_key, ``right``/``table``:
        right_key or left_key) and its event-time field (StreamJoin)."""
        left = port in ("left", "stream")
        key = self.left_key if left else self._rkey
        time = getattr(self, "left_time" if left else "right_time", None)
        return [f for f in (key, time) if isinstance(f, str)]

    def _get(self, t: Any, key: str) -> Any:
        if not isinstance(t, dict):
            raise TypeError(f"expected a dict tuple, got {type(t).__name__}")
        return t[key]

    def _emit_rows(self, rows: list[dict]) -> None:
        if rows and self.output.port.schema is not None:
            from malhar.schema import arrow_schema

            emit_table(self.output, typed_rows(rows, arrow_schema(self.output.port.schema)))
        else:
            for r in rows:
                self.output.emit(r)


class StreamJoin(_Join):
    """Joins the ``left`` and ``right`` streams on their keys within a time bound
    (Malhar's ``POJOInnerJoinOperator`` on managed state, with left/right/outer variants).

    Output ``output``: merged dict rows (left fields, then right ones; a clashing right
    field is renamed ``right_<name>``), emitted when the second tuple of a pair arrives.
    For ``left``/``right``/``outer`` joins, a tuple of an outer side that found no partner
    is emitted alone when it expires. A pair whose row would have one field twice (the
    left tuple has ``x`` and ``right_x``, the right one ``x``) is not joined: the second
    tuple goes to ``error`` with the field's name, and both count as matched.

    Null keys match nothing, as in SQL: a tuple whose key is None (or a tuple with a None
    in it) is never paired; an inner side's is dropped, an outer side's is emitted alone
    when it expires, as any unmatched tuple (as a SQL outer join keeps it, unmatched).
    The dropped ones are counted per window in ``metrics()["left_null_keys"]`` and
    ``metrics()["right_null_keys"]`` (by input port, one tuple at a time or in a batch).
    ``null_keys_match=True`` pairs None with None (Spark's ``eqNullSafe``).

    Keys match as managed state stores them: by value within one type, so ``1``, ``1.0``
    and ``True`` are three keys (a typed column holds one type; normalize untyped keys
    first when they mix). Keys are of Python's own types: a NumPy scalar, an IntEnum or
    another subclass sends its tuple to ``error``.

    Example:
        >>> import tempfile
        >>> from malhar import OperatorContext
        >>> from malhar.algo import StreamJoin
        >>> from malhar.testing.harness import OperatorHarness
        >>> ctx = OperatorContext(name="join", checkpoint=tempfile.mkdtemp())
        >>> h = OperatorHarness(
        ...     StreamJoin(left_key="order", right_key="id", join_type="left", expiry_windows=2), ctx
        ... )
        >>> h.run_window([("left", {"order": 1, "qty": 2}), ("left", {"order": 2, "qty": 1})])
        >>> h.run_window([("right", {"id": 1, "paid": True})])
        >>> h.run_window([])
        >>> h.sink("output").tuples
        [{'order': 1, 'qty': 2, 'id': 1, 'paid': True}, {'order': 2, 'qty': 1}]
        >>> h.teardown()
    """

    left = InputPort()
    right = InputPort()

    join_type = Property(str, default="inner", one_of=JOIN_TYPES, doc="inner, left, right or outer")
    expiry_windows = Property(int, default=1, min=1, doc="application windows a tuple is joinable")
    within = Property(int, default=None, min=0, doc="max distance of the event times (ms)")
    left_time = Property(FIELD_TYPES, default=None, doc="event-time field of left tuples")
    right_time = Property(FIELD_TYPES, default=None, doc="event-time field of right tuples")

    #: application windows begun so far (the time of the state's buckets)
    epoch = State(default=-1)

    def __init__(
        self, left_key: str | None = None, right_key: str | None = None, **props: Any
    ) -> None:
        self.configure(left_key=left_key, right_key=right_key, **props)

    def partitioning(self) -> Partitioning:
        return Partitioning(
            "keyed", {"left": FieldCodec(self.left_key), "right": FieldCodec(self._rkey)}
        )

    def setup(self, context: Any) -> None:
        if self.within is not None and (self.left_time is None or self.right_time is None):
            raise ConfigError(f"{context.name}: within needs left_time and right_time")
        state = context.managed_state(budget_bytes=self.budget_bytes)
        self._sides = (
            state.time_buckets("left", bucket_span=1),
            state.time_buckets("right", bucket_span=1),
        )
        self._times = (getter(self.left_time), getter(self.right_time))
        self._keys = (self.left_key, self._rkey)
        outer = {"inner": (), "left": (0,), "right": (1,), "outer": (0, 1)}[self.join_type]
        self._outer = outer
        self._out: list[dict] = []  # rows of the call in progress (emitted before it returns)
        self._null_keys = [0, 0]  # this window's dropped null-key tuples, per side (metrics)

    def begin_window(self, window_id: int) -> None:
        self.epoch += 1
        self._null_keys = [0, 0]

    def metrics(self) -> dict[str, float]:
        """This window's errors, and the tuples of an inner side dropped because their key
        is null (per input port)."""
        left, right = getattr(self, "_null_keys", (0, 0))
        return {
            **super().metrics(),
            "left_null_keys": float(left),
            "right_null_keys": float(right),
        }

    def _close(self, a: Any, b: Any, side: int) -> bool:
        if self.within is None:
            return True
        return abs(a - b) <= self.within

    def _add(self, t: Any, side: int) -> None:
        try:
            k = self._get(t, self._keys[side])
            ts = event_millis(self._times[side](t)) if self.within is not None else None
        except KeyError as exc:
            self._error(t, missing(exc.args[0]))
            return
        except (TypeError, IndexError) as exc:
            self._error(t, str(exc))
            return
        if not _storable(k):
            self._error(t, _unstorable(k, "stored"))
            return
        probe = self.null_keys_match or not null_key(k)
        if not probe and side not in self._outer:
            # matches nothing and is never emitted alone: not even stored, counted
            self._null_keys[side] += 1
            return
        other = self._sides[1 - side]
        matched = False
        # a null key (on an outer side) looks nothing up: stored unmatched below, it is
        # emitted alone when it expires
        first = max(0, self.epoch - self.expiry_windows + 1) if probe else self.epoch + 1
        for b in range(first, self.epoch + 1):
            entries = other.get(k, b)
            if not entries:
                continue
            changed = False
            for entry in entries:
                if not self._close(ts, entry[2], side):
                    continue
                matched = True
                pair = (t, entry[0]) if side == 0 else (entry[0], t)
                try:
                    self._out.append(merge_rows(pair[0], pair[1], self.left_key, self._rkey))
                except FieldClash as exc:
                    # the pair is joined to the error port (both count as matched)
                    self._clash(t, entry[0], side, exc)
                if not entry[1]:
                    entry[1], changed = True, True
            if changed:
                other.put(k, b, entries)
        mine = self._sides[side]
        entries = mine.get(k, self.epoch) or []
        entries.append([t, matched, ts])
        mine.put(k, self.epoch, entries)

    def _clash(self, t: Any, other: Any, side: int, exc: FieldClash) -> None:
        """The pair of ``t`` and ``other`` cannot be one row: ``t`` to the error port."""
        partner = ("right", "left")[side]
        self._error(t, f"{exc} with the {partner} tuple {other!r}: rename a field")

    def _flush(self) -> None:
        # emitted at once: nothing of an application window waits in runtime attributes,
        # which a partition restored between its streaming windows would not have
        if self._out:
            self._emit_rows(self._out)
            self._out = []

    def process_left(self, t: Any) -> None:
        self._add(t, 0)
        self._flush()

    def process_right(self, t: Any) -> None:
        self._add(t, 1)
        self._flush()

    def process_batch_left(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            self._add(row, 0)
        self._flush()

    def process_batch_right(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            self._add(row, 1)
        self._flush()

    def end_window(self) -> None:
        last = self.epoch - self.expiry_windows + 1  # this bucket leaves after this window
        if last >= 0:
            for side in self._outer:
                for _, _, entries in self._sides[side].items(last, last + 1):
                    for row, matched, _ in entries:
                        if not matched:
                            pair = (row, None) if side == 0 else (None, row)
                            self._out.append(
                                merge_rows(pair[0], pair[1], self.left_key, self._rkey)
                            )
            for s in self._sides:
                s.expire_before(last + 1)
        self._flush()


class LookupJoin(_Join):
    """Joins each ``stream`` tuple with the latest ``table`` row of its key (a stream-table
    join; the table lives in managed state and may be larger than memory).

    Table updates of an (application) window take effect at its end, so a stream tuple
    sees the table as of the previous window whatever the arrival order (deterministic on
    replay); within a window the last update of a key wins. ``join_type`` ``inner`` drops stream tuples
    without a row, ``left`` emits them alone. A stream tuple whose joined row would have
    one field twice (it has ``x`` and ``right_x``, the table row ``x``) goes to ``error``
    with the field's name, one tuple at a time or in a batch.

    **Misses**: a stream tuple that finds no row -- its key has none yet (a row sent in
    the same window is not in force before the window ends), or its key is null -- is
    counted in ``metrics()["misses"]`` (per window, whatever the join type); a table row
    not stored because its key is null (a record parsed with a schema but without the key
    field, say) in ``metrics()["table_null_keys"]``. ``miss_policy`` (``Enricher``'s
    names) says what an ``inner`` join does with a miss: ``None`` (the default) or
    ``"drop"`` drops it, counted only; ``"error"`` sends it to ``error`` with the reason
    ``no row for {'<left_key>': <key>}``, as ``Enricher`` does. ``left`` emits misses
    alone and takes no ``miss_policy`` (setup raises ConfigError).

    Null keys match nothing, as in SQL: a stream tuple whose key is None (or a tuple with a
    None in it) is treated as one without a row (``inner`` drops it, ``left`` emits it
    alone), and a table row with such a key is not stored. ``null_keys_match=True`` stores
    it and joins None with None (Spark's ``eqNullSafe``).

    Keys match as managed state stores them: by value within one type, so ``1``, ``1.0``
    and ``True`` are three keys, in one window's updates too (a typed column holds one
    type; normalize untyped keys first when they mix). Keys are of Python's own types: a
    NumPy scalar, an IntEnum or another subclass sends its tuple to ``error``.

    Example:
        >>> import tempfile
        >>> from malhar import OperatorContext
        >>> from malhar.algo import LookupJoin
        >>> from malhar.testing.harness import OperatorHarness
        >>> ctx = OperatorContext(name="lookup", checkpoint=tempfile.mkdtemp())
        >>> h = OperatorHarness(LookupJoin(left_key="sku", right_key="id", join_type="left"), ctx)
        >>> h.run_window([("table", {"id": "p1", "name": "tea"})])
        >>> h.run_window([("stream", {"sku": "p1", "n": 2}), ("stream", {"sku": "p9", "n": 1})])
        >>> h.sink("output").tuples
        [{'sku': 'p1', 'n': 2, 'id': 'p1', 'name': 'tea'}, {'sku': 'p9', 'n': 1}]
        >>> h.teardown()
    """

    stream = InputPort()
    table = InputPort()

    join_type = Property(str, default="inner", one_of=("inner", "left"), doc="inner or left")
    miss_policy = Property(
        str,
        default=None,
        one_of=LOOKUP_MISS_POLICIES,
        doc="an inner join's stream tuple without a table row: drop (None: the default) or "
        "error (to the error port, as Enricher's miss_policy)",
    )

    #: the state codec's bytes of a key -> (key, its table row received in the open
    #: application window), in force at its end: keys as the table tells them apart
    #: (1, 1.0 and True are three; a dict would make them one)
    updates = State(dict)

    def __init__(
        self, left_key: str | None = None, right_key: str | None = None, **props: Any
    ) -> None:
        self.configure(left_key=left_key, right_key=right_key, **props)

    def partitioning(self) -> Partitioning:
        return Partitioning(
            "keyed", {"stream": FieldCodec(self.left_key), "table": FieldCodec(self._rkey)}
        )

    def setup(self, context: Any) -> None:
        if self.miss_policy is not None and self.join_type != "inner":
            raise ConfigError(
                f"{context.name}: miss_policy={self.miss_policy!r} is for join_type='inner'; "
                f"join_type={self.join_type!r} emits a stream tuple without a row alone"
            )
        state = context.managed_state(budget_bytes=self.budget_bytes)
        self._table = state.map("table")
        self.begin_window(-1)

    def begin_window(self, window_id: int) -> None:
        # this window's counts (metrics)
        self._misses = 0
        self._table_null_keys = 0

    def metrics(self) -> dict[str, float]:
        """This window's errors, stream tuples without a table row, and table rows not
        stored because their key is null."""
        return {
            **super().metrics(),
            "misses": float(getattr(self, "_misses", 0)),
            "table_null_keys": float(getattr(self, "_table_null_keys", 0)),
        }

    def _miss(self, t: Any, k: Any) -> None:
        """``t`` (key ``k``) found no table row: counted; to ``error`` with
        ``miss_policy="error"``."""
        self._misses += 1
        if self.miss_policy == "error":
            reason = f"no row for {{{self.left_key!r}: {k!r}}}"
            if null_key(k) and not self.null_keys_match:
                reason += " (a null key matches nothing; null_keys_match=True matches None)"
            self._error(t, reason)

    def process_table(self, t: Any) -> None:
        try:
            k = self._get(t, self._rkey)
            if not _storable(k):
                raise TypeError(_unstorable(k, "stored"))
            if not self.null_keys_match and null_key(k):
                self._table_null_keys += 1
                return  # a row no stream tuple can match: kept nowhere
            self.updates[self._table.key_codec.encode(k)] = (k, t)
        except KeyError as exc:
            self._error(t, missing(exc.args[0]))
        except TypeError as exc:
            self._error(t, str(exc))

    def process_stream(self, t: Any) -> None:
        try:
            k = self._get(t, self.left_key)
        except KeyError as exc:
            self._error(t, missing(exc.args[0]))
            return
        except TypeError as exc:
            self._error(t, str(exc))
            return
        if not _storable(k):
            self._error(t, _unstorable(k, "looked up"))
            return
        row = self._joined(t, k)
        if row is not None:
            self._emit_rows([row])

    def _joined(self, t: Any, k: Any) -> dict | None:
        """The row of ``t`` and its key's table row (None: none, or it went to the error
        port)."""
        row = self._table.get(k) if self.null_keys_match or not null_key(k) else None
        if row is not None:
            try:
                return merge_rows(t, row, self.left_key, self._rkey)
            except FieldClash as exc:
                self._error(t, f"{exc} with the table row {row!r}: rename a field")
                return None
        self._miss(t, k)
        if self.join_type == "left":
            return merge_rows(t, None, self.left_key, self._rkey)
        return None

    def process_batch_stream(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.output.port.schema is not None and self.left_key in batch.schema.names:
            try:
                joined, hit = self._join_batch(batch)
            except (pa.ArrowException, TypeError, ValueError):
                joined = None  # keys or rows Arrow cannot join: row by row below
            if joined is not None:
                self._batch_misses(batch, hit)
                emit_table(self.output, joined)
                return
        out = []
        for t in batch.to_pylist():
            try:
                k = self._get(t, self.left_key)
            except (KeyError, TypeError):
                self.process_stream(t)  # to the error port with the reason
                continue
            if not _storable(k):
                self.process_stream(t)
                continue
            row = self._joined(t, k)
            if row is not None:
                out.append(row)
        self._emit_rows(out)

    def _batch_misses(self, batch: pa.RecordBatch, hit: np.ndarray) -> None:
        """The rows of ``batch`` that found no table row (``hit`` False): counted, and to
        the error port with ``miss_policy="error"``, as :meth:`_joined` does them."""
        missed = np.flatnonzero(~hit)
        if not len(missed):
            return
        if self.miss_policy != "error":
            self._misses += len(missed)
            return
        for t in batch.take(pa.array(missed)).to_pylist():
            self._miss(t, t[self.left_key])

    def _join_batch(self, batch: pa.RecordBatch) -> tuple[pa.Table, np.ndarray]:
        """``batch`` joined with the table rows of its distinct keys (one state read per
        key, an Arrow hash join, arrival order kept): the rows :meth:`process_stream` gives,
        as columns, and which rows found a table row. Raises TypeError where the rows do not
        fit one Arrow table."""
        col = batch.column(self.left_key)
        # Arrow's join pairs no nulls: a null key finds no row (as _joined says), unless
        # null keys match and the table has a row for None (then row by row)
        if col.null_count and self.null_keys_match and self._table.get(None) is not None:
            raise TypeError("a table row has the key None")
        found = []
        for k in pc.unique(col).drop_null().to_pylist():
            if not _storable(k):
                raise TypeError(f"the key {k!r} cannot be looked up")
            row = self._table.get(k)
            if row is not None:
                found.append((k, row))
        left = pa.Table.from_batches([batch])
        left = left.append_column(_POS, pa.array(range(batch.num_rows), pa.int64()))
        if not found:
            none = np.zeros(batch.num_rows, bool)
            if self.join_type == "inner":
                return left.slice(0, 0).drop_columns([_POS]), none
            return left.drop_columns([_POS]), none
        fields = list(found[0][1])
        names = list(batch.schema.names)
        columns: dict[str, list] = {_KEY: [k for k, _ in found]}
        for f in fields:
            if f == self._rkey and self._rkey == self.left_key:
                continue  # the left row has the key
            name = f"right_{f}" if f in names else f
            if name in names or name in columns:
                raise TypeError(f"the joined field {name!r} clashes")
            names.append(name)
            columns[name] = [r[f] if list(r) == fields else _ragged() for _, r in found]
        columns[_HIT] = [True] * len(found)
        right = pa.table(
            {
                n: pa.array(v, type=col.type) if n == _KEY else pa.array(v)
                for n, v in columns.items()
            }
        )
        how = "inner" if self.join_type == "inner" else "left outer"
        joined = left.join(
            right, keys=self.left_key, right_keys=_KEY, join_type=how, use_threads=False
        ).sort_by(_POS)
        hit = np.zeros(batch.num_rows, bool)
        hits = joined.filter(pc.is_valid(joined.column(_HIT))).column(_POS)
        hit[hits.to_numpy()] = True
        joined = joined.drop_columns([c for c in (_POS, _KEY, _HIT) if c in joined.column_names])
        return joined.select([n for n in names if n in joined.column_names]), hit

    def process_batch_table(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            self.process_table(row)

    def end_window(self) -> None:
        for k, row in self.updates.items():
            if type(row) is tuple:  # (key, row); a checkpoint from before: key -> row
                k, row = row
            if self.null_keys_match or not null_key(k):  # (a checkpoint from before)
                self._table[k] = row
        self.updates = {}
