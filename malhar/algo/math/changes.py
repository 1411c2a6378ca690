"""The keyed change operators: Change (against a base value) and ChangeAlert."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from malhar.algo._base import (
    FIELD_TYPES,
    AlgoOperator,
    FieldCodec,
    FieldSpec,
    Partitioning,
    column,
    getter,
    one_nan,
    rekey_nan,
    rows_of,
    unreadable,
)
from malhar.algo.math.common import (
    _NAME,
    GLOBAL,
    _key_name,
    _out_row,
    _unmixable,
    is_number,
)
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State

_FLOAT_INTS = 2**53  # a float64 holds every int up to it


# -- changes -----------------------------------------------------------------------------------
class _Keyed(AlgoOperator):
    PARTITIONING: ClassVar[str] = "keyed by `key` (one partition when key is None)"

    FIELDS_READ = {"data": ("key", "value"), "base": ("key", "value")}

    key = Property(FIELD_TYPES, default=None, doc="key field; None: the whole stream")
    value = Property(FIELD_TYPES, default=None, doc="value field; None: the tuple itself")
    key_name = Property(str, default=None, pattern=_NAME, doc="key field of the output")

    def cannot_repartition(self) -> str | None:
        if self.key is None:
            return "without a key it keeps one state for the whole stream (set key)"
        return None

    def partitioning(self) -> Partitioning:
        if self.key is None:
            return Partitioning("single")
        ports = [p for p in ("data", "base") if isinstance(getattr(type(self), p, None), InputPort)]
        return Partitioning("keyed", {p: FieldCodec(self.key) for p in ports})

    #: the keyed State fields (their NaN key is made one again after a restore)
    KEYED_STATE: ClassVar[tuple[str, ...]] = ()

    def setup(self, context: Any) -> None:
        self._get_key, self._get_value = getter(self.key), getter(self.value)
        for name in self.KEYED_STATE:
            rekey_nan(getattr(self, name))  # restored: its NaN key is a copy

    def _read(self, t: Any) -> tuple[Any, Any] | None:
        try:
            k = GLOBAL if self.key is None else one_nan(self._get_key(t))
            v = self._get_value(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.key, self.value))
            return None
        if not is_number(v):
            self._error(t, f"value {v!r} is not a number")
            return None
        return k, v

    def _row(self, k: Any, fields: dict[str, Any]) -> dict[str, Any]:
        return _out_row(_key_name(self.key, self.key_name), k, fields)

    def _batch_rows(
        self, batch: pa.RecordBatch, each: Callable[[Any], None]
    ) -> tuple[list[Any], np.ndarray] | None:
        """Keys and float values of a clean batch, or None after sending it row by row."""
        if batch.num_rows == 0:
            return None
        try:
            v = column(batch, self.value)
            k = None if self.key is None else column(batch, self.key)
        except KeyError:
            k = v = None
        if (
            v is None
            or v.null_count
            or not (pa.types.is_integer(v.type) or pa.types.is_floating(v.type))
        ):
            for row in rows_of(batch, self.value):
                each(row)
            return None
        keys = [GLOBAL] * len(v) if k is None else [one_nan(x) for x in k.to_pylist()]
        return keys, v.to_numpy(zero_copy_only=False)


class Change(_Keyed):
    """The change of each ``data`` value against the latest ``base`` value of its key.

    Output ``change``: ``{key_name: key, "value": v, "base": b, "change": v - b,
    "percent": (v - b) / b * 100}`` per data tuple whose key has a base (``percent`` None
    when the base is 0). A base tuple takes effect at the end of its window, so what a data
    tuple is compared with does not depend on how the two ports interleave (deterministic
    on replay). Data tuples before any base are dropped (counted in the metric ``no_base``).

    Example:
        >>> from malhar.algo import Change
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Change())
        >>> h.run_window([("base", 10)])
        >>> h.run_window([("data", 12), ("data", 9)])
        >>> [r["percent"] for r in h.sink("change").tuples]
        [20.0, -10.0]
    """

    data = InputPort()
    base = InputPort()
    change = OutputPort()
    error = OutputPort(error=True)

    #: key -> base value in force
    bases = State(dict, keyed=True)
    #: key -> base value received in the open application window (in force at its end)
    pending = State(dict, keyed=True)
    KEYED_STATE = ("bases", "pending")

    def __init__(self, key: FieldSpec = None, value: FieldSpec = None, **props: Any) -> None:
        self.configure(key=key, value=value, **props)

    def setup(self, context: Any) -> None:
        super().setup(context)
        self._no_base = 0  # data tuples without a base (metrics)

    def begin_window(self, window_id: int) -> None:
        self._no_base = 0

    def process_base(self, t: Any) -> None:
        kv = self._read(t)
        if kv is not None:
            self.pending[kv[0]] = kv[1]

    def process_data(self, t: Any) -> None:
        kv = self._read(t)
        if kv is None:
            return
        k, v = kv
        b = self.bases.get(k)
        if b is None:
            self._no_base += 1
            return
        try:
            diff = v - b
        except TypeError:  # a Decimal and a float
            self._error(t, _unmixable(v))
            return
        self.change.emit(
            self._row(
                k, {"value": v, "base": b, "change": diff, "percent": diff / b * 100 if b else None}
            )
        )

    def process_batch_data(self, batch: pa.RecordBatch) -> None:
        got = self._batch_rows(batch, self.process_data)
        if got is None:
            return
        keys, values = got
        rows = None
        for i, (k, v) in enumerate(zip(keys, values.tolist(), strict=True)):
            b = self.bases.get(k)
            if b is None:
                self._no_base += 1
                continue
            try:
                diff = v - b
            except TypeError:  # a float after a Decimal base, as per tuple
                rows = rows_of(batch, self.value) if rows is None else rows
                self._error(rows[i], _unmixable(v))
                continue
            self.change.emit(
                self._row(
                    k,
                    {
                        "value": v,
                        "base": b,
                        "change": diff,
                        "percent": diff / b * 100 if b else None,
                    },
                )
            )

    def end_window(self) -> None:
        if self.pending:
            self.bases = {**self.bases, **self.pending}
            self.pending = {}

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "no_base": float(self._no_base)}


class ChangeAlert(_Keyed):
    """Alerts when consecutive values of a key change by more than ``threshold`` percent.

    Malhar's ``ChangeAlert``/``ChangeAlertKeyVal``.

    Output ``alert``: ``{key_name: key, "value": v, "previous": p, "percent": |v - p| / p * 100}``
    when that percentage is above ``threshold``. A previous value of 0 is replaced without an
    alert. Consecutive means in arrival order: deterministic when each key comes from one
    upstream partition (or in order through a keyed stream).

    Example:
        >>> from malhar.algo import ChangeAlert
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(ChangeAlert(threshold=10))
        >>> h.run_window([("data", 100), ("data", 105), ("data", 120)])
        >>> [(r["value"], round(r["percent"], 2)) for r in h.sink("alert").tuples]
        [(120, 14.29)]
    """

    data = InputPort()
    alert = OutputPort()
    error = OutputPort(error=True)

    threshold = Property((int, float), default=0, min=0, doc="percent change that alerts")

    #: key -> the last value seen
    last = State(dict, keyed=True)
    KEYED_STATE = ("last",)

    def __init__(self, key: FieldSpec = None, value: FieldSpec = None, **props: Any) -> None:
        self.configure(key=key, value=value, **props)

    def _step(self, t: Any, k: Any, v: Any) -> None:
        p = self.last.get(k)
        if not p:
            self.last[k] = v
            return
        try:
            pct = abs((v - p) / p * 100)
        except TypeError:  # a Decimal and a float: refused, the previous value stays
            self._error(t, _unmixable(v))
            return
        self.last[k] = v
        if pct > self.threshold:
            self.alert.emit(self._row(k, {"value": v, "previous": p, "percent": pct}))

    def process(self, t: Any) -> None:
        kv = self._read(t)
        if kv is not None:
            self._step(t, *kv)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        got = self._batch_rows(batch, self.process)
        if got is None:
            return
        keys, values = got
        if not self._floats_exact(values, keys):
            for row in rows_of(batch, self.value):
                self.process(row)
            return
        if self.key is None:
            self._alerts_in_order(GLOBAL, values)
            return
        codes: dict[Any, int] = {}
        idx = np.fromiter(
            (codes.setdefault(k, len(codes)) for k in keys), dtype=np.int64, count=len(keys)
        )
        order = np.argsort(idx, kind="stable")
        bounds = np.flatnonzero(np.diff(idx[order])) + 1
        groups = np.split(order, bounds)
        alerts: list[tuple[int, Any, np.ndarray]] = []
        inverse = list(codes)
        for g in groups:
            alerts.extend(self._group_alerts(inverse[idx[g[0]]], values[g], g))
        alerts.sort(key=lambda a: a[0])  # arrival order
        for _, k, fields in alerts:
            self.alert.emit(self._row(k, fields))

    def _floats_exact(self, values: np.ndarray, keys: list[Any]) -> bool:
        """Whether the float64 arithmetic of the columnar path gives what the per-tuple
        path gives: not for ints beyond 2**53 nor a previous value that is a Decimal (a
        float with it is refused) or such an int."""
        if values.dtype.kind in "iu" and len(values) and np.abs(values).max() > _FLOAT_INTS:
            return False
        last = self.last
        for k in set(keys) if last else ():
            p = last.get(k)
            if p is not None and not (
                p.__class__ is float or (p.__class__ is int and abs(p) <= _FLOAT_INTS)
            ):
                return False
        return True

    def _alerts_in_order(self, k: Any, values: np.ndarray) -> None:
        for _, key, fields in self._group_alerts(k, values, np.arange(len(values))):
            self.alert.emit(self._row(key, fields))

    def _group_alerts(self, k: Any, values: np.ndarray, positions: np.ndarray) -> list:
        prev = np.empty(len(values), dtype=np.float64)
        first = self.last.get(k)
        prev[0] = np.nan if first is None else first
        prev[1:] = values[:-1]
        py_values = values.tolist()
        self.last[k] = py_values[-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.abs((values - prev) / prev * 100)
        hit = np.flatnonzero((prev != 0) & ~np.isnan(prev) & (pct > self.threshold))
        out = []
        for i in hit.tolist():
            p = py_values[i - 1] if i else first
            out.append(
                (
                    int(positions[i]),
                    k,
                    {
                        "value": py_values[i],
                        "previous": p,
                        "percent": abs((py_values[i] - p) / p * 100),
                    },
                )
            )
        return out
