"""The windowed operators: non-keyed, keyed, and their two-input (merge) variants."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pyarrow as pa

from malhar.codec import KeyCodec, StreamCodec
from malhar.control import ControlSender
from malhar.operator import CheckpointListener, Operator, OperatorContext, Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.window.errors import BadTupleError, WindowError
from malhar.window.impl.core import WindowedCore
from malhar.window.impl.fields import columns_of, extractor, has_columns, named_fields
from malhar.window.impl.settings import check_extractor
from malhar.window.panes import WindowedTuple
from malhar.window.protocol import Accumulation
from malhar.window.windows import Window, WindowOption

__all__ = [
    "KeyedWindowedMergeOperator",
    "KeyedWindowedOperator",
    "WindowKeyCodec",
    "WindowedMergeOperator",
    "WindowedOperator",
]


def _identity(t: Any) -> Any:
    return t


def _first(t: Any) -> Any:
    return _of_pair(t, 0)


def _second(t: Any) -> Any:
    return _of_pair(t, 1)


def _of_pair(t: Any, i: int) -> Any:
    if not isinstance(t, dict | str | bytes):
        try:
            return t[i]
        except (TypeError, IndexError, KeyError):
            pass
    raise BadTupleError(
        "a keyed windowed operator without a key property takes (key, value) pairs, got "
        f"{type(t).__name__} {t!r}: set key= (a column name, several, or a callable)"
    )


class WindowedOperator(WindowedCore, Operator, CheckpointListener):
    """Event-time windows over a stream: state per window (Malhar's ``WindowedOperatorImpl``).

    Input ``input`` (control aware): any tuples, or Arrow batches from a typed stream;
    ``Watermark`` control tuples. Output ``output``: the panes, as
    :class:`~malhar.window.WindowedTuple` (or rows, ``output_format="row"``), then the
    operator's watermark at every boundary. Output ``late``: tuples beyond the allowed
    lateness, as they came (rows for batches); an error port, so the engine counts them
    per window. Output ``error``: tuples it cannot take (:class:`~malhar.window.BadTupleError`:
    a missing field, a null timestamp or one that is not a time, a key that cannot be
    one) as ``{"tuple": ..., "reason": ...}``; the window goes on.

    Properties: those of :class:`~malhar.window.impl.settings.WindowedSettings`, plus
    ``timestamp`` (a column name or a callable on the tuple; None: ingestion time, the
    streaming window's implicit time) and ``value`` (what is accumulated: a column name
    or a callable; None: the tuple).

    Partitioned (``PARTITIONS=n``), each partition accumulates what it receives and its
    unifier (:class:`~malhar.window.impl.unifier.WindowedUnifier`) merges the partitions'
    accumulations with ``Accumulation.merge`` and fires the panes. The operator
    downstream must then have one partition (or partition its input by window).

    Example:
        >>> from malhar.testing import OperatorHarness
        >>> from malhar.window import TimeWindows, Watermark
        >>> from malhar.window.accumulation import Count
        >>> op = WindowedOperator(Count(), TimeWindows(10), timestamp="t")
        >>> h = OperatorHarness(op)
        >>> h.run_window([("input", {"t": 1}), ("input", {"t": 4}), ("input", {"t": 12})])
        >>> h.put_control("input", Watermark(10))
        True
        >>> h.run_window()
        >>> [(p.window.start, p.value, p.pane.timing.value) for p in h.sink("output").tuples]
        [(0, 2, 'ON_TIME')]
    """

    input = InputPort(control_aware=True)
    output = OutputPort(control_aware=True)
    late = OutputPort(error=True)
    #: tuples it cannot take (BadTupleError): ``{"tuple": ..., "reason": ...}``
    error = OutputPort(error=True)

    timestamp = Property(
        object,
        default=None,
        check=check_extractor,
        doc="event time: a column name or a callable on the tuple (ms, datetime); None: "
        "ingestion time",
    )
    value = Property(
        object,
        default=None,
        check=check_extractor,
        doc="what is accumulated: a column name or a callable on the tuple; None: the tuple",
    )

    def __init__(
        self,
        accumulation: Accumulation | None = None,
        window_option: WindowOption | None = None,
        **properties: Any,
    ) -> None:
        if accumulation is not None:
            self.accumulation = accumulation
        if window_option is not None:
            self.window_option = window_option
        self.configure(**properties)

    # -- lifecycle -----------------------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._core_setup(context)
        self._extractors()

    def _extractors(self) -> None:
        who = self._who()
        self._ts = [extractor(self.timestamp, None, "timestamp", who)]
        self._val = [extractor(self.value, _identity, "value", who)]
        self._keyf: list[Any] = [None]

    def _who(self) -> str:
        return f"{type(self).__name__} {self._name!r}"

    def fields_read(self, port: str) -> list[str]:
        """The columns named by ``timestamp``, ``value`` (and ``key``; ``timestamp2``,
        ``value2``, ``key2`` for ``input2``), checked against a typed stream by
        ``DAG.validate()``."""
        return _fields_of(self, port)

    def begin_window(self, window_id: int) -> None:
        self._core_begin(window_id)

    def end_window(self) -> None:
        self._core_boundary()

    def checkpointed(self, window_id: int) -> None:
        self._core_checkpointed(window_id)

    def committed(self, window_id: int) -> None:
        self._store.committed(window_id)

    def teardown(self) -> None:
        store = self.__dict__.get("_store")
        if store is not None:
            store.teardown()

    def get_unifier(self, port: str) -> Unifier | None:
        """The accumulation-merging unifier on ``output`` when partitions are combined."""
        if port == "output" and self.combines():
            from malhar.window.impl.unifier import WindowedUnifier

            settings = self.settings()
            if settings.get("key_names") is None:
                # the unifier has no key property: its rows name the key as this
                # operator's do (the key column(s), else "key"), whatever the partitions
                settings["key_names"] = self._key_names()
            unifier = WindowedUnifier(**settings)
            unifier.keyed = self.keyed  # its cells are per key as this operator's (joins)
            return unifier
        return None

    # -- input -----------------------------------------------------------------------------------
    def process(self, value: Any) -> None:
        self._process(value, 0)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self._process_batch(batch, 0)

    def process_control(self, payload: Any, sender: ControlSender | None = None) -> bool:
        return self._on_control(payload, sender, 0)

    def _process(self, t: Any, port: int) -> None:
        # one call per tuple: the try costs nothing until a tuple is refused
        try:
            if self._option is None:
                window, key, value, ts = self._propagated(t, port)
                self._ingest(t, key, value, ts, port, windows=[window])
                return
            ts_fn = self._ts[port]
            key_fn = self._keyf[port]
            ts = None
            if ts_fn is not None and (ts := ts_fn(t)) is None:
                # as a batch's null timestamps: an event without a time is not given one
                raise BadTupleError(
                    f"{type(self).__name__} {self._name!r}: a tuple's timestamp is null"
                )
            key = None
            if key_fn is not None:
                key = key_fn(t)
                try:
                    hash(key)
                except TypeError:
                    self._refuse_key(key, port)
            self._ingest(t, key, self._val[port](t), ts, port)
        except BadTupleError as exc:
            # nothing of the tuple is accumulated yet: a field or its time was read first
            self.error.emit({"tuple": t, "reason": str(exc)})

    def _refuse_key(self, key: Any, port: int) -> None:
        setting = "key2" if port and getattr(self, "key2", None) is not None else "key"
        raise BadTupleError(
            f"{type(self).__name__} {self._name!r}: the tuple's key {key!r} "
            f"({type(key).__name__}) cannot be a key (it is not hashable): set {setting!r} to "
            "a field of text, numbers or other hashable values, or a function returning one "
            "(a tuple for several)"
        )

    def _propagated(self, t: Any, port: int) -> tuple[Window, Any, Any, int]:
        """Window propagation: the window, key, value and timestamp of an upstream pane."""
        if isinstance(t, WindowedTuple):
            if t.pane is not None and t.pane.is_retraction:
                self._refuse_retraction(t)
            inner, window, ts = t.value, t.window, t.event_time
            key = t.key
        elif isinstance(t, dict) and "window_start" in t and "window_end" in t:
            if t.get("is_retraction"):
                self._refuse_retraction(t)
            inner, window = t, Window(t["window_start"], t["window_end"])
            ts, key = window.max_timestamp, t.get("key")
        else:
            raise WindowError(
                f"{type(self).__name__} {self._name!r} has no window_option, so it takes the "
                "windows of its input (window propagation), but got "
                f"{type(t).__name__} {t!r}: send it WindowedTuples (or rows with window_start "
                "and window_end), or set window_option"
            )
        return window, *self._propagated_key_value(key, inner, port), ts  # type: ignore[return-value]

    def _refuse_retraction(self, t: Any) -> None:
        raise WindowError(
            f"{type(self).__name__} {self._name!r}: window propagation got a retraction "
            f"({t!r}); a retraction cannot be accumulated: use ACCUMULATING or "
            "DISCARDING upstream, or filter retractions out before this operator"
        )

    def _propagated_key_value(self, key: Any, inner: Any, port: int) -> tuple[Any, Any]:
        value_spec = self.value if port == 0 else getattr(self, "value2", None) or self.value
        value = inner if value_spec is None else self._val[port](inner)
        if value_spec is None and key is not None:
            value = (key, inner)  # a keyed upstream into a non-keyed operator: the pair
        return None, value

    def _process_batch(self, batch: pa.RecordBatch, port: int) -> None:
        timestamp = (
            self.timestamp if port == 0 else getattr(self, "timestamp2", None) or self.timestamp
        )
        value = self.value if port == 0 else getattr(self, "value2", None) or self.value
        keys = self._batch_keys(port)
        if (
            keys is not None
            and (timestamp is None or isinstance(timestamp, str))
            and (value is None or isinstance(value, str))
            and has_columns(batch.schema, keys, value, timestamp)
            and self._ingest_batch(batch, keys, value, timestamp, port)
        ):
            return
        for row in batch.to_pylist():
            self._process(row, port)

    def _batch_keys(self, port: int) -> list[str] | None:
        return []


def _fields_of(op: Any, port: str) -> list[str]:
    """The columns a windowed operator reads from ``port`` (see Operator.fields_read)."""
    keyed = getattr(op, "keyed", False)
    key = getattr(op, "key", None) if keyed else None
    if port == "input2":
        ts2, value2, key2 = op.timestamp2, op.value2, getattr(op, "key2", None)
        return named_fields(
            ts2 if ts2 is not None else op.timestamp,
            value2 if value2 is not None else op.value,
            (key2 if key2 is not None else key) if keyed else None,
        )
    return named_fields(op.timestamp, op.value, key) if port == "input" else []


class KeyedWindowedOperator(WindowedOperator):
    """State and triggers per key per window (Malhar's ``KeyedWindowedOperatorImpl``).

    ``key``: a column name (or several, the key is then a tuple) or a callable on the
    tuple; None: tuples are ``(key, value)`` pairs. ``value``: what is accumulated; None:
    the pair's value, or the whole tuple when ``key`` is set. Partition it by key:
    ``input.set_attribute("STREAM_CODEC", op.key_codec())``; each partition's panes are
    then final (no unifier).

    Example:
        >>> from malhar.testing import OperatorHarness
        >>> from malhar.window import TimeWindows, Watermark
        >>> from malhar.window.accumulation import Sum
        >>> h = OperatorHarness(KeyedWindowedOperator(Sum(), TimeWindows(10), timestamp=lambda kv: kv[1]))
        >>> h.run_window([("input", ("a", 1)), ("input", ("b", 2)), ("input", ("a", 3))])
        >>> h.put_control("input", Watermark(10))
        True
        >>> h.run_window()
        >>> [(p.key, p.value) for p in h.sink("output").tuples]
        [('a', 4), ('b', 2)]
    """

    keyed = True

    key = Property(
        object,
        default=None,
        check=check_extractor,
        doc="the key: column name(s) or a callable on the tuple; None: (key, value) pairs",
    )

    def _extractors(self) -> None:
        who = self._who()  # type: ignore[attr-defined]
        self._ts = [extractor(self.timestamp, None, "timestamp", who)]
        self._keyf = [extractor(self.key, _first, "key", who)]
        self._val = [
            extractor(self.value, _second if self.key is None else _identity, "value", who)
        ]

    def _propagated_key_value(self, key: Any, inner: Any, port: int) -> tuple[Any, Any]:
        key_spec = self.key if port == 0 else getattr(self, "key2", None) or self.key
        value_spec = self.value if port == 0 else getattr(self, "value2", None) or self.value
        if key_spec is not None:
            key = self._keyf[port](inner)
        elif key is None:
            raise WindowError(
                f"{type(self).__name__} {self._name!r}: a propagated tuple has no key; set "
                "the key property"
            )
        return key, (inner if value_spec is None else self._val[port](inner))

    def _batch_keys(self, port: int) -> list[str] | None:
        spec = self.key if port == 0 else getattr(self, "key2", None) or self.key
        return columns_of(spec)

    def key_codec(self) -> StreamCodec:
        """The stream codec that partitions this operator's input by its key."""
        columns = columns_of(self.key)
        return KeyCodec(*columns) if columns else WindowKeyCodec(self.key)


class WindowKeyCodec(StreamCodec):
    """Partitions by a key extractor (a callable, or None for ``(key, value)`` pairs and
    :class:`WindowedTuple`'s key); stable across processes."""

    def __init__(self, key: Any = None) -> None:
        self.key = key

    def partition(self, value: Any) -> int:
        if isinstance(value, WindowedTuple) and self.key is None:
            k = value.key
        else:
            k = extractor(self.key, _first, "key", "WindowKeyCodec")(value)  # type: ignore[misc]
        return zlib.crc32(repr(k).encode())

    def hash_keys(self, keys: list[Any], typed: Any) -> np.ndarray:
        """State keys (the extracted keys) hashed as :meth:`partition` hashes their tuples."""
        return np.array([zlib.crc32(repr(k).encode()) for k in keys], dtype=np.int64)

    def __repr__(self) -> str:
        return f"WindowKeyCodec({self.key!r})"


class _TwoInputs:
    """The second input of the merge operators (Malhar's ``WindowedMergeOperator``)."""

    input2 = InputPort(control_aware=True)
    inputs = 2

    timestamp2 = Property(
        object, default=None, check=check_extractor, doc="event time of input2 (default: timestamp)"
    )
    value2 = Property(
        object, default=None, check=check_extractor, doc="value of input2 (default: value)"
    )

    def _extractors(self) -> None:
        super()._extractors()  # type: ignore[misc]
        ts2 = self.timestamp2 if self.timestamp2 is not None else self.timestamp  # type: ignore[attr-defined]
        who = self._who()  # type: ignore[attr-defined]
        ts_setting = "timestamp2" if self.timestamp2 is not None else "timestamp"
        self._ts.append(extractor(ts2, None, ts_setting, who))  # type: ignore[attr-defined]
        key2 = getattr(self, "key2", None)
        keyed = getattr(self, "keyed", False)
        key_spec = (key2 if key2 is not None else self.key) if keyed else None  # type: ignore[attr-defined]
        key_setting = "key2" if key2 is not None else "key"
        self._keyf.append(extractor(key_spec, _first, key_setting, who) if keyed else None)  # type: ignore[attr-defined]
        value2 = self.value2 if self.value2 is not None else self.value  # type: ignore[attr-defined]
        default = _second if keyed and key_spec is None else _identity
        value_setting = "value2" if self.value2 is not None else "value"
        self._val.append(extractor(value2, default, value_setting, who))  # type: ignore[attr-defined]

    def process_input(self, value: Any) -> None:
        self._process(value, 0)  # type: ignore[attr-defined]

    def process_input2(self, value: Any) -> None:
        self._process(value, 1)  # type: ignore[attr-defined]

    def process_batch_input(self, batch: pa.RecordBatch) -> None:
        self._process_batch(batch, 0)  # type: ignore[attr-defined]

    def process_batch_input2(self, batch: pa.RecordBatch) -> None:
        self._process_batch(batch, 1)  # type: ignore[attr-defined]

    def process_control_input(self, payload: Any, sender: ControlSender | None = None) -> bool:
        return self._on_control(payload, sender, 0)  # type: ignore[attr-defined]

    def process_control_input2(self, payload: Any, sender: ControlSender | None = None) -> bool:
        return self._on_control(payload, sender, 1)  # type: ignore[attr-defined]


class WindowedMergeOperator(_TwoInputs, WindowedOperator):
    """Two streams into one state per window with a
    :class:`~malhar.window.MergeAccumulation` (``accumulate`` for ``input``,
    ``accumulate2`` for ``input2``). Its watermark is the earlier of its inputs'
    watermarks (each the minimum over that input's upstream partitions); it waits for
    both. Malhar's ``WindowedMergeOperatorImpl``."""


class KeyedWindowedMergeOperator(_TwoInputs, KeyedWindowedOperator):
    """:class:`WindowedMergeOperator` with state per key per window: joins by key
    (``key2``: the second input's key, default ``key``). Malhar's
    ``KeyedWindowedMergeOperatorImpl``.

    Example:
        >>> from malhar.testing import OperatorHarness
        >>> from malhar.window import TimeWindows, Watermark
        >>> from malhar.window.accumulation import InnerJoin
        >>> op = KeyedWindowedMergeOperator(InnerJoin(), TimeWindows(10), key="id",
        ...                                 timestamp="t", value="v")
        >>> h = OperatorHarness(op)
        >>> h.run_window([("input", {"id": 1, "t": 2, "v": "order"}),
        ...               ("input2", {"id": 1, "t": 5, "v": "payment"})])
        >>> h.put_control("input", Watermark(10)), h.put_control("input2", Watermark(12))
        (True, True)
        >>> h.run_window()
        >>> [(p.key, p.value) for p in h.sink("output").tuples]
        [(1, [('order', 'payment')])]
    """

    key2 = Property(
        object, default=None, check=check_extractor, doc="the key of input2 (default: key)"
    )
