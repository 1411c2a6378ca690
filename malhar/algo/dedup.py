"""Deduplication (Malhar's ``lib/dedup``) on managed state: exactly once across crashes,
larger than memory (the state spills past ``budget_bytes`` and is checkpointed
incrementally with every window, see ``docs/state.md``).

- :class:`TimeBasedDedup`: a key is remembered in the time bucket of its event time until
  the bucket expires (``expire_after`` behind the largest event time seen); tuples older
  than that go to ``expired``.
- :class:`BoundedDedup`: remembers the last ``max_keys`` distinct keys (per partition).

Both need a checkpoint location (a running application, or an ``OperatorHarness`` whose
context names a ``checkpoint`` folder) and are partitioned by key.

Null keys (``null_keys``): by default (``"match"``) a None key is one key like any other,
as in Spark's ``dropDuplicates``: the second tuple without a key is a duplicate.
``"error"`` sends a tuple whose key is null to ``error``; ``"unique"`` passes it as unique
and remembers nothing.

Batches: an Arrow batch whose key column is integers, strings or binaries (no nulls) is
decided at once, with the same decisions and final state as its rows one at a time. Other
key columns go one key at a time. With ``null_keys`` ``"error"`` or ``"unique"`` the null
rows of a batch are set apart (vectorized) and the others decided as such a batch.

- TimeBasedDedup keeps int, str and bytes keys in sorted runs per time bucket
  (``malhar.util.state.key_sets``): a batch is decided and stored in numpy, without Python
  work per key. Other keys (floats, tuples, None, str/bytes over 64 bytes) stay one
  managed-state entry each, decided one at a time.
- BoundedDedup encodes the keys for the whole column (``arrow_keys.encode_keys``) and
  makes a few many-key state calls (``get_many``/``put_many``/...) instead of ~6 per key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    FIELD_TYPES,
    STORABLE_KEYS,
    AlgoOperator,
    FieldCodec,
    FieldSpec,
    Partitioning,
    SchemaProperty,
    TypedOutputs,
    batch_rows,
    column,
    emit_table,
    getter,
    unreadable,
)
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.util.epoch_millis import epoch_millis, event_millis
from malhar.util.null_keys import null_key
from malhar.util.state import INT, INT_VALUE
from malhar.util.state.arrow_keys import encode_keys
from malhar.util.state.key_set_kinds import I64_MAX, MAX_KEY_BYTES
from malhar.util.state.key_sets import TimeBucketedKeySets

__all__ = ["BoundedDedup", "TimeBasedDedup"]

#: TimeBasedDedup.keys_in_seen_to before the operator has looked at its restored state
_UNDECIDED = "undecided"

#: the label of a row whose key the state codec refuses (to the error port)
_REFUSED = 3
#: the label of a row whose key is null with null_keys="error" (to the error port)
_NULL = 4

#: what ``null_keys`` may be (see :class:`_Dedup`)
NULL_KEYS = ("match", "error", "unique")


class _Dedup(TypedOutputs, AlgoOperator):
    PARTITIONING: ClassVar[str] = "keyed by `key`"

    input = InputPort()
    unique = OutputPort()
    duplicate = OutputPort()
    error = OutputPort(error=True)

    FIELDS_READ = {"input": ("key",)}

    key = Property(
        FIELD_TYPES, default=None, doc="the field that identifies a tuple; None: the tuple"
    )
    budget_bytes = Property(int, default=64 << 20, min=8 << 20, doc="managed-state memory budget")
    schema = SchemaProperty("unique", "duplicate", doc="Spark DDL of the stream")
    null_keys = Property(
        str,
        default="match",
        one_of=NULL_KEYS,
        doc="a null key (None, or a tuple key with a None): match (one key, as Spark's "
        "dropDuplicates), error (to the error port) or unique (never remembered)",
    )

    def partitioning(self) -> Partitioning:
        return Partitioning("keyed", {"input": FieldCodec(self.key)})

    #: 0 unique, 1 duplicate (2 expired): the subclass's decision for a key
    _classify: Callable[..., int]

    def _label(self, k: Any, *args: Any) -> int:
        """:meth:`_classify` of the key, or :data:`_REFUSED` when the state codec refuses
        it (the tuple goes to the error port: :meth:`_refuse`)."""
        try:
            return self._classify(k, *args)
        except Exception as exc:  # a key the state codec cannot encode (a dict, a Decimal)
            if type(exc).__name__ != "StateCodecError":
                raise
            return _REFUSED

    def _refuse(self, t: Any, k: Any) -> None:
        self._error(t, f"the key {k!r} cannot be stored: {STORABLE_KEYS}")

    def _null(self, k: Any) -> bool:
        """Whether ``k`` is a null key that ``null_keys`` sets apart (not ``"match"``)."""
        return self._apart and null_key(k)

    def _refuse_null(self, t: Any, k: Any) -> None:
        field = "the key" if self.key is None else f"the key field {self.key!r}"
        what = "is null" if k is None else f"has a null part: {k!r}"
        self._error(t, f"{field} {what} (null_keys='error')")

    def _null_rows(self, keys: pa.Array) -> np.ndarray | None:
        """The mask of a batch's rows whose key ``null_keys`` sets apart (None: no such row)."""
        if self.null_keys == "match" or not keys.null_count:
            return None
        return keys.is_null().to_numpy(zero_copy_only=False)

    def _refuse_rows(self, batch: pa.RecordBatch, keys: pa.Array, labels: np.ndarray) -> None:
        """The rows labelled :data:`_REFUSED` or :data:`_NULL` to the error port, as
        :meth:`process` sends them: one bad key costs its row, not the batch."""
        labels = np.asarray(labels)
        for i in np.flatnonzero(labels >= _REFUSED).tolist():
            row = batch.slice(i, 1).to_pylist()[0]
            if labels[i] == _NULL:
                self._refuse_null(row, keys[i].as_py())
            else:
                self._refuse(row, keys[i].as_py())

    def _labels(
        self,
        keys: pa.Array,
        decide: Callable[[pa.Array, np.ndarray | None], np.ndarray],
        apart: Callable[[np.ndarray], np.ndarray],
    ) -> np.ndarray:
        """The labels of a batch's rows: ``decide(keys, rows)`` those of the rows (None: all)
        whose key is not set apart as null, ``apart(rows)`` those of the others."""
        nulls = self._null_rows(keys)
        if nulls is None:
            return np.asarray(decide(keys, None), np.int8)
        labels = np.empty(len(keys), np.int8)
        rest = np.flatnonzero(~nulls)
        if len(rest):
            labels[rest] = decide(keys.take(pa.array(rest)), rest)
        gone = np.flatnonzero(nulls)
        labels[gone] = apart(gone)
        return labels

    def _emit_split(
        self, batch: pa.RecordBatch, labels: list[int] | np.ndarray, ports: list[Any]
    ) -> None:
        arr = pa.array(labels, pa.int8())
        for i, port in enumerate(ports):
            part = batch.filter(pc.equal(arr, i))
            if part.num_rows:
                emit_table(port, part)


class TimeBasedDedup(_Dedup):
    """Drops repeated tuples by key within an event-time horizon (Malhar's
    ``TimeBasedDedupOperator``).

    A tuple's ``time`` (epoch ms, or a datetime) picks its time bucket (``bucket_span``
    ms); a tuple whose key is already in that bucket is a duplicate. Buckets expire once
    they end ``expire_after`` ms before the largest event time seen at the end of the
    previous window; a tuple older than that goes to ``expired``. So a duplicate is
    recognized when it carries its original's event time (the same event delivered
    twice), or any time in the same bucket.

    Keys are compared by value within one type: ``1``, ``1.0`` and ``True`` are three keys
    (as in a typed column, which holds one type). A key managed state cannot store (a
    Decimal, a date, an integer past 64 bits) sends its tuple to ``error``, in a batch
    too (the rest of the batch is decided); so does a time that is no epoch-ms int
    (a uint64 past ``2**63 - 1``).

    **Null keys** (``null_keys``, default ``"match"``): a None key is a key like any other,
    as in Spark's ``dropDuplicates`` (which keeps one row of the null key): the first tuple
    without a key is unique, every later one in its bucket a ``duplicate``; two different
    records that lack their id (a JSON record without ``order_id`` parsed with a schema,
    say) collapse into one. ``null_keys="error"`` sends a tuple whose key is null to
    ``error`` (the reason names the key field; counted as errors); ``"unique"`` passes each
    as unique and remembers none (SQL's view: a null equals nothing), though one behind the
    horizon still goes to ``expired``. A key of several fields (a tuple key) is null when
    any part is None, as the joins' null keys are (``malhar.util.null_keys``); with
    ``"match"`` each part is a value, as in ``dropDuplicates(["a", "b"])``.

    ``bucket_span`` is kept with the checkpoint: restarting with another span raises
    StateError (the stored buckets are counted in the old one); change it with a new
    checkpoint location.

    Int, str and bytes keys (str and bytes of up to 64 bytes) are kept as sorted runs per
    bucket (``docs/state.md`` §4a): an Arrow batch of them is decided and stored in NumPy.
    Other keys (floats, tuples, None, longer str and bytes) are one managed-state entry
    each, decided one at a time.

    Example:
        >>> import tempfile
        >>> from malhar import OperatorContext
        >>> from malhar.algo import TimeBasedDedup
        >>> from malhar.testing.harness import OperatorHarness
        >>> ctx = OperatorContext(name="dedup", checkpoint=tempfile.mkdtemp())
        >>> h = OperatorHarness(TimeBasedDedup(key="id", time="t", expire_after=60_000), ctx)
        >>> h.run_window([("input", {"id": 1, "t": 100_000}), ("input", {"id": 1, "t": 100_000})])
        >>> h.run_window([("input", {"id": 2, "t": 20_000})])  # behind the horizon
        >>> len(h.sink("unique").tuples), len(h.sink("duplicate").tuples), h.sink("expired").tuples
        (1, 1, [{'id': 2, 't': 20000}])
        >>> h.teardown()
    """

    expired = OutputPort(warn_unread=True)  # older than the horizon: not silently gone

    FIELDS_READ = {"input": ("key", "time")}

    time = Property(FIELD_TYPES, default=None, not_null=True, doc="the event-time field")
    expire_after = Property(int, default=3_600_000, min=1, doc="ms a key is remembered")
    bucket_span = Property(int, default=60_000, min=1, doc="ms per time bucket")
    schema = SchemaProperty("unique", "duplicate", "expired", doc="Spark DDL of the stream")

    #: the largest event time seen, at the end of the last window
    max_time = State(default=None)
    #: the newest event time of the open application window (max_time at its end)
    window_max = State(default=None)
    #: the last time bucket whose int, str or bytes keys may be in ``seen`` rather than in the
    #: key sets (a checkpoint from before the key sets kept them there); None: no such
    #: bucket (any more); "undecided": set from the newest event time restored when the
    #: operator starts
    keys_in_seen_to = State(default=_UNDECIDED)

    def __init__(self, key: FieldSpec = None, time: FieldSpec = None, **props: Any) -> None:
        self.configure(key=key, time=time, **props)

    def cannot_repartition(self) -> str | None:
        return (
            "each partition expires keys by the newest event time it has seen, which "
            "differs between partitions and cannot be split by key; set PARTITIONS before "
            "the first launch"
        )

    def setup(self, context: Any) -> None:
        self._apart = self.null_keys != "match"  # read per tuple: not through the Property
        state = context.managed_state(budget_bytes=self.budget_bytes)
        self._seen = state.time_buckets("seen", bucket_span=self.bucket_span, value_codec=INT_VALUE)
        self._ints = state.int_sets("seen-ints", bucket_span=self.bucket_span)
        self._strs = state.str_sets("seen-str", bucket_span=self.bucket_span)
        self._bytes = state.bytes_sets("seen-bytes", bucket_span=self.bucket_span)
        self._sets_of = {int: self._ints, str: self._strs, bytes: self._bytes}
        self._key, self._time = getter(self.key), getter(self.time)
        self.begin_window(-1)

    def begin_window(self, window_id: int) -> None:
        # the horizon of the open application window (also after a restore inside it)
        self._horizon = None if self.max_time is None else self.max_time - self.expire_after
        if self.keys_in_seen_to == _UNDECIDED:
            # a checkpoint taken inside an application window has keys up to window_max
            newest = [t for t in (self.max_time, self.window_max) if t is not None]
            self.keys_in_seen_to = max(newest) // self.bucket_span if newest else None

    def _expired(self, ts: int) -> bool:
        return (self._horizon is not None and ts < self._horizon) or self._ints.is_expired(ts)

    def _classify(self, k: Any, ts: int) -> int:
        """0 unique, 1 duplicate, 2 expired."""
        if self._expired(ts):
            return 2
        sets = self._sets_of.get(type(k))
        if sets is not None and (held := sets.key(k)) is not None:
            legacy = self.keys_in_seen_to
            if (
                legacy is not None
                and ts // self.bucket_span <= legacy
                and self._seen.contains(k, ts)
            ):
                return 1
            return 0 if sets.add_held(held, ts) else 1
        if self._seen.contains(k, ts):
            return 1
        self._seen.put(k, ts, 1)
        return 0

    def _read(self, t: Any) -> tuple[Any, int] | None:
        try:
            k = self._key(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.key))
            return None
        try:
            return k, event_millis(self._time(t))
        except (KeyError, IndexError) as exc:
            self._error(t, unreadable(exc, t, self.time))
        except TypeError as exc:
            self._error(t, str(exc))  # a time of no time type: event_millis says which
        return None

    def process(self, t: Any) -> None:
        kt = self._read(t)
        if kt is None:
            return
        if self._null(kt[0]):
            if self.null_keys == "error":
                self._refuse_null(t, kt[0])
                return
            label = 2 if self._expired(kt[1]) else 0  # "unique": nothing remembered
        else:
            label = self._label(*kt)
        if label == _REFUSED:
            self._refuse(t, kt[0])
            return
        if label != 2:
            self._newest(kt[1])
        (self.unique, self.duplicate, self.expired)[label].emit(t)

    def _newest(self, ts: int) -> None:
        newest = self.window_max
        if newest is None or ts > newest:
            self.window_max = ts

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            keys = column(batch, self.key)
            times = column(batch, self.time)
        except KeyError:
            keys = None
        if (
            keys is None
            or (self.key is None and batch.num_columns > 1)  # the key is the whole row
            or pa.types.is_nested(keys.type)  # lists, structs: not storable, per tuple
            or times.null_count
            or not (pa.types.is_integer(times.type) or pa.types.is_timestamp(times.type))
            # a uint64 time past 2**63 - 1 is no epoch-ms time: its row goes to error
            or (times.type == pa.uint64() and pc.max(times).as_py() > I64_MAX)
        ):
            for row in batch_rows(batch):
                self.process(row)
            return
        stamps = epoch_millis(times)  # floored to the millisecond, as a tuple's time is

        def decide(keys: pa.Array, rows: np.ndarray | None) -> np.ndarray:
            return self._decide(keys, stamps if rows is None else stamps[rows])

        labels = self._labels(keys, decide, lambda rows: self._null_labels(stamps[rows]))
        live = stamps[labels < 2]
        if len(live):
            self._newest(int(live.max()))
        self._refuse_rows(batch, keys, labels)
        self._emit_split(batch, labels, [self.unique, self.duplicate, self.expired])

    def _decide(self, keys: pa.Array, stamps: np.ndarray) -> np.ndarray:
        """The labels of :meth:`_label` for a batch's keys and times, vectorized where the
        key sets hold the keys."""
        sets, held, rest = self._held_keys(keys)
        if sets is None:
            return self._classify_rows(keys, stamps)
        if rest is None:
            return self._classify_sets(keys, sets, held, stamps)
        # str or bytes keys too long for the key sets are another key's, in seen: the
        # two groups are decided apart (expiry does not move inside a window)
        labels = np.empty(len(stamps), np.int8)
        fit = np.flatnonzero(~rest)
        labels[fit] = self._classify_sets(keys, sets, held, stamps[fit], fit)
        long = np.flatnonzero(rest)
        labels[long] = self._classify_rows(keys.take(long), stamps[long])
        return labels

    def _null_labels(self, stamps: np.ndarray) -> np.ndarray:
        """The labels of null-key rows set apart: :data:`_NULL` ("error"), or unique unless
        expired ("unique"), as :meth:`process` decides them."""
        if self.null_keys == "error":
            return np.full(len(stamps), _NULL, np.int8)
        labels, _ = self._alive(stamps)
        labels[labels == 1] = 0
        return labels

    def _alive(self, stamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Labels with the expired rows (2) and the rest duplicates (1) for now, and the row
        indexes of the rest."""
        # expiry does not move inside a window (expire_before runs at its end), and the four
        # structures expire together there: the int sets' horizon is every key's
        horizon = self._ints.horizon
        if self._horizon is not None:
            horizon = max(horizon, self._horizon)
        labels = np.full(len(stamps), 2, np.int8)
        alive = np.flatnonzero(stamps >= horizon)
        labels[alive] = 1
        return labels, alive

    def _classify_rows(self, keys: pa.Array, stamps: np.ndarray) -> np.ndarray:
        """:meth:`_label` of each row, one key at a time (keys the key sets do not hold)."""
        pairs = zip(keys.to_pylist(), stamps.tolist(), strict=True)
        return np.array([self._label(k, ts) for k, ts in pairs], np.int8)

    def _held_keys(
        self, keys: pa.Array
    ) -> tuple[TimeBucketedKeySets | None, np.ndarray | None, np.ndarray | None]:
        """The key sets for the column, the keys they hold (as held), and a mask of the rows
        whose keys are too long for them (None: no such row). ``(None, None, None)``: the
        column's type is not one the key sets hold (or it has nulls)."""
        ints = _int64_keys(keys)
        if ints is not None:
            return self._ints, ints, None
        buffers = _offsets_and_data(keys)
        if buffers is None:
            return None, None, None
        offsets, data, text = buffers
        sets = self._strs if text else self._bytes
        held = sets.keys_of(offsets, data)
        if held is not None:
            return sets, held, None
        rest = np.diff(offsets) > MAX_KEY_BYTES
        fit = _offsets_and_data(keys.filter(pa.array(~rest)))
        assert fit is not None
        return sets, sets.keys_of(fit[0], fit[1]), rest

    def _classify_sets(
        self,
        keys: pa.Array,
        sets: TimeBucketedKeySets,
        held: np.ndarray,
        stamps: np.ndarray,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """The labels of :meth:`_classify` for a batch of keys the key sets hold (``held``,
        ``stamps``: of the ``rows`` of the column ``keys``; None: all): they add the live
        rows in order, in numpy (the first row of a (bucket, key) pair new to them is
        unique)."""
        labels, alive = self._alive(stamps)
        if not len(alive):
            return labels
        buckets = stamps[alive] // self.bucket_span
        legacy = self.keys_in_seen_to
        if legacy is not None and (old := np.flatnonzero(buckets <= legacy)).size:
            # keys of a checkpoint from before the key sets: found in seen, duplicates
            # (every row of the pair); the others go to the key sets
            was = np.array(
                self._seen.contains_many(
                    keys.take(
                        pa.array(alive[old] if rows is None else rows[alive[old]])
                    ).to_pylist(),
                    (buckets[old] * self.bucket_span).tolist(),
                ),
                bool,
            )
            if was.any():
                keep = np.ones(len(alive), bool)
                keep[old[was]] = False
                alive, buckets = alive[keep], buckets[keep]
        added = sets.add_many(held[alive], buckets)
        labels[alive[added]] = 0
        return labels

    def end_window(self) -> None:
        newest = self.window_max
        if newest is not None and (self.max_time is None or newest > self.max_time):
            self.max_time = newest
            horizon = self.max_time - self.expire_after
            self._seen.expire_before(horizon)
            self._strs.expire_before(horizon)
            self._bytes.expire_before(horizon)
            first_live = self._ints.expire_before(horizon)
            if self.keys_in_seen_to is not None and self.keys_in_seen_to < first_live:
                self.keys_in_seen_to = None
        self.window_max = None


def _int64_keys(keys: pa.Array) -> np.ndarray | None:
    """The keys as int64 numpy values, if they are all 64-bit ints (None: nulls, another
    type, or unsigned values past ``2**63 - 1``)."""
    t = keys.type
    if keys.null_count or not pa.types.is_integer(t):
        return None
    if t == pa.uint64():
        if len(keys) and pc.max(keys).as_py() > I64_MAX:
            return None
        keys = keys.cast(pa.int64())
    return keys.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _offsets_and_data(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """The value offsets and data bytes of a string or binary column without nulls, and
    whether it is text (None: another type, or nulls)."""
    t = keys.type
    if keys.null_count:
        return None
    if pa.types.is_string(t) or pa.types.is_binary(t):
        width: Any = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        width = np.int64
    else:
        return None
    _, offsets, data = keys.buffers()
    offs = np.frombuffer(offsets, width)[keys.offset : keys.offset + len(keys) + 1]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offs, raw, pa.types.is_string(t) or pa.types.is_large_string(t)


class BoundedDedup(_Dedup):
    """Drops repeated tuples by key, remembering the last ``max_keys`` distinct keys of each
    partition (Malhar's ``BoundedDedupOperator``): the oldest key is forgotten first, and
    is unique again when it comes back. A key managed state cannot store (a Decimal, a
    date, an integer past 64 bits) sends its tuple to ``error``, in a batch too.

    **Null keys** (``null_keys``, default ``"match"``): a None key is a key like any other,
    as in Spark's ``dropDuplicates`` (which keeps one row of the null key): the first tuple
    without a key is unique, every later one a ``duplicate`` while None is remembered; two
    different records that lack their id collapse into one. ``null_keys="error"`` sends a
    tuple whose key is null to ``error`` (the reason names the key field; counted as
    errors); ``"unique"`` passes each as unique and remembers none (SQL's view: a null
    equals nothing). A key of several fields (a tuple key) is null when any part is None,
    as the joins' null keys are (``malhar.util.null_keys``); with ``"match"`` each part is
    a value, as in ``dropDuplicates(["a", "b"])``.

    Example:
        >>> import tempfile
        >>> from malhar import OperatorContext
        >>> from malhar.algo import BoundedDedup
        >>> from malhar.testing.harness import OperatorHarness
        >>> ctx = OperatorContext(name="dedup", checkpoint=tempfile.mkdtemp())
        >>> h = OperatorHarness(BoundedDedup(max_keys=2), ctx)
        >>> h.run_window([("input", k) for k in ["a", "b", "a", "c", "a"]])
        >>> h.sink("unique").tuples, h.sink("duplicate").tuples
        (['a', 'b', 'c', 'a'], ['a'])
        >>> h.teardown()
    """

    max_keys = Property(int, default=1_000_000, min=1, doc="distinct keys remembered per partition")

    #: sequence number of the next new key, and of the oldest key remembered
    next_seq = State(default=0)
    oldest = State(default=0)

    def __init__(self, key: FieldSpec = None, max_keys: int = 1_000_000, **props: Any) -> None:
        self.configure(key=key, max_keys=max_keys, **props)

    def cannot_repartition(self) -> str | None:
        return (
            "each partition forgets its oldest keys in its own order (max_keys per "
            "partition), which cannot be split by key; set PARTITIONS before the first launch"
        )

    def setup(self, context: Any) -> None:
        self._apart = self.null_keys != "match"  # read per tuple: not through the Property
        state = context.managed_state(budget_bytes=self.budget_bytes)
        self._keys = state.map("keys", value_codec=INT_VALUE)
        self._order = state.map("order", key_codec=INT)
        self._key = getter(self.key)

    def _classify(self, k: Any) -> int:
        if k in self._keys:
            return 1
        seq = self.next_seq
        self._keys[k] = seq
        self._order[seq] = k
        self.next_seq = seq + 1
        while self.next_seq - self.oldest > self.max_keys:
            old = self._order.pop(self.oldest)
            if self._keys.get(old) == self.oldest:
                del self._keys[old]
            self.oldest += 1
        return 0

    def process(self, t: Any) -> None:
        try:
            k = self._key(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.key))
            return
        if self._null(k):
            if self.null_keys == "error":
                self._refuse_null(t, k)
            else:  # "unique": nothing remembered
                self.unique.emit(t)
            return
        label = self._label(k)
        if label == _REFUSED:
            self._refuse(t, k)
            return
        (self.unique, self.duplicate)[label].emit(t)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            keys = column(batch, self.key)
        except KeyError:
            keys = None
        if (
            keys is None
            or (self.key is None and batch.num_columns > 1)
            or pa.types.is_nested(keys.type)  # lists, structs: not storable, per tuple
        ):
            for row in batch_rows(batch):
                self.process(row)
            return
        unique = 0 if self.null_keys == "unique" else _NULL
        labels = self._labels(
            keys, lambda keys, _: self._decide(keys), lambda rows: np.full(len(rows), unique)
        )
        self._refuse_rows(batch, keys, labels)
        self._emit_split(batch, labels, [self.unique, self.duplicate])

    def _decide(self, keys: pa.Array) -> np.ndarray:
        """The labels of :meth:`_label` for a batch's keys (:data:`_REFUSED` included)."""
        encoded = encode_keys(self._keys.key_codec, keys)
        if encoded is None:  # a key type without a vectorized encoding: one key at a time
            return np.array([self._label(k) for k in keys.to_pylist()], np.int8)
        return np.asarray(self._classify_batch(keys, encoded), np.int8)

    def _classify_batch(self, keys: pa.Array, encoded: list[bytes]) -> list[int]:
        """The labels of :meth:`_classify` for a whole batch, and the same final state, with
        a few many-key state calls instead of ~6 state calls per new key.

        The rows are walked in order against a batch-local ``key -> seq`` (read once for
        the distinct keys): a key is remembered iff its newest seq is ``>= oldest``, and
        ``oldest`` moves as new keys push the count past ``max_keys``, exactly as one
        tuple at a time. Then the differences are written: new ``keys``/``order``
        entries that survive the batch, and the evicted ones removed.
        """
        distinct = list(dict.fromkeys(encoded))
        start = dict(zip(distinct, self._keys.get_many(distinct, encoded=True), strict=True))
        seq_of = dict(start)
        first_seq, first_oldest = self.next_seq, self.oldest
        nxt, oldest, cap = first_seq, first_oldest, self.max_keys
        labels = []
        added = []  # row index of each new seq, in seq order
        for row, ek in enumerate(encoded):
            s = seq_of[ek]
            if s is not None and s >= oldest:
                labels.append(1)
                continue
            labels.append(0)
            seq_of[ek] = nxt
            added.append(row)
            nxt += 1
            if nxt - oldest > cap:
                oldest = nxt - cap
        self.next_seq, self.oldest = nxt, oldest
        if not added:
            return labels
        # the order map: the previous state's evicted seqs leave, new seqs that survive enter
        gone_to = min(oldest, first_seq)
        evicted = dict(self._order.range(first_oldest, gone_to)) if first_oldest < gone_to else {}
        if evicted:
            self._order.delete_many(list(evicted))
        kept = [(seq, row) for seq, row in enumerate(added, first_seq) if seq >= oldest]
        if kept:
            rows = keys.take(pa.array([row for _, row in kept], pa.int64())).to_pylist()
            self._order.put_many([seq for seq, _ in kept], rows)
        # the keys map: a key of the batch keeps its newest seq while that survives and
        # leaves once it does not; a key outside the batch leaves with its evicted seq
        puts = [
            (ek, s) for ek, s in seq_of.items() if s is not None and s >= oldest and s != start[ek]
        ]
        drops = [ek for ek, s in seq_of.items() if start[ek] is not None and s < oldest]
        encode = self._keys.key_codec.encode
        outside = [(encode(k), seq) for seq, k in evicted.items()]
        outside = [(ek, seq) for ek, seq in outside if ek not in seq_of]
        if outside:
            named = self._keys.get_many([ek for ek, _ in outside], encoded=True)
            drops += [ek for (ek, seq), now in zip(outside, named, strict=True) if now == seq]
        if drops:
            self._keys.delete_many(drops, encoded=True)
        if puts:
            self._keys.put_many([ek for ek, _ in puts], [s for _, s in puts], encoded=True)
        return labels
