"""The windowed aggregate operators: Sum, Min, Max, Average, Range, CountKeyVal and
RunningAverage.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    FIELD_TYPES,
    AlgoOperator,
    FieldSpec,
    Partitioning,
    column,
    getter,
    missing,
    one_nan,
    rekey_nan,
    rows_of,
    unreadable,
)
from malhar.algo.math.accumulators import AGGREGATIONS, MathUnifier, MinAgg, RangeAgg, _partials
from malhar.algo.math.common import (
    _EXACT,
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
from malhar.util.int_sums import may_wrap
from malhar.util.nan_order import nan_mask


def _decimal_may_overflow(values: Any) -> bool:
    """Whether Arrow's sum of a decimal column could overflow its precision (Arrow then
    wraps silently): its largest magnitude times its length reaches 10**(precision - scale)."""
    if not pa.types.is_decimal(values.type) or len(values) == 0:
        return False
    bounds = pc.min_max(values).as_py()
    if bounds["min"] is None:
        return False
    largest = max(abs(bounds["min"]), abs(bounds["max"]))
    limit = 10 ** (values.type.precision - values.type.scale)
    return _EXACT.multiply(largest, len(values)) >= limit


class _Aggregate(AlgoOperator):
    """Per-key (or global) aggregation over each application window, with a unifier."""

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; partial aggregates are merged)"
    AGG: ClassVar[str] = "sum"
    OUT: ClassVar[str] = "sum"

    data = InputPort()
    error = OutputPort(error=True)

    FIELDS_READ = {"data": ("key", "value")}

    key = Property(
        FIELD_TYPES, default=None, doc="key field (dict key or tuple index); None: global"
    )
    value = Property(FIELD_TYPES, default=None, doc="value field; None: the tuple itself")
    key_name = Property(
        str, default=None, pattern=_NAME, doc="key field of the output (default: key)"
    )
    cumulative = Property(bool, default=False, doc="keep the aggregates across application windows")

    #: key -> partial aggregate of the open application window (all windows if cumulative)
    acc = State(dict)

    def __init__(
        self,
        key: FieldSpec = None,
        value: FieldSpec = None,
        *,
        key_name: str | None = None,
        cumulative: bool | None = None,
    ) -> None:
        self.configure(key=key, value=value, key_name=key_name)
        if cumulative is not None:
            self.cumulative = cumulative

    @property
    def _out_key(self) -> str | None:
        return _key_name(self.key, self.key_name)

    def cannot_repartition(self) -> str | None:
        if self.cumulative:
            return (
                "cumulative aggregates are partial per partition (the unifier merges them) "
                "and cannot be split by key"
            )
        return None

    def get_unifier(self, port: str) -> MathUnifier | None:
        if port == self.OUT:
            return MathUnifier(self.AGG, self._out_key)
        return None

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def setup(self, context: Any) -> None:
        self._agg = AGGREGATIONS[self.AGG]
        self._get_key = getter(self.key)
        self._get_value = getter(self.value)
        rekey_nan(self.acc)  # restored: its NaN key is a copy

    def process(self, t: Any) -> None:
        try:
            k = GLOBAL if self.key is None else self._get_key(t)
            v = self._get_value(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.key, self.value))
            return
        if self._agg.numeric and not is_number(v):
            self._error(t, f"value {v!r} is not a number")
            return
        acc = self.acc
        k = one_nan(k)
        try:
            acc[k] = self._agg.add(acc[k], v) if k in acc else self._agg.new(v)
        except TypeError:  # a Decimal after floats, or the other way round
            self._error(t, _unmixable(v))

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            v = column(batch, self.value)
            k = None if self.key is None else column(batch, self.key)
        except KeyError as exc:
            for row in rows_of(batch, self.value):
                self._error(row, missing(exc.args[0]))
            return
        if self._agg.numeric and not (
            pa.types.is_integer(v.type)
            or pa.types.is_floating(v.type)
            or pa.types.is_decimal(v.type)
        ):
            for row, value in zip(rows_of(batch, self.value), v.to_pylist(), strict=True):
                self._error(row, f"value {value!r} is not a number")
            return
        if self._agg.numeric and v.null_count:
            nulls = pc.is_null(v)
            for row in rows_of(batch.filter(nulls), self.value):
                self._error(row, "value None is not a number")
            keep = pc.invert(nulls)
            batch, v = batch.filter(keep), v.filter(keep)
            k = None if k is None else k.filter(keep)
            if len(v) == 0:
                return
        if "sum" in self._agg.fields and (may_wrap(v) or _decimal_may_overflow(v)):
            # Arrow's int64 (or decimal) sum would wrap: Python's ints and Decimals do not
            for row in rows_of(batch, self.value):
                self.process(row)
            return
        nan = nan_mask(v) if isinstance(self._agg, MinAgg | RangeAgg) else None
        if nan is not None:  # Arrow's min and max skip NaN: these rows per tuple
            for row in rows_of(batch.filter(nan), self.value):
                self.process(row)
            keep = pc.invert(nan)
            batch, v = batch.filter(keep), v.filter(keep)
            k = None if k is None else k.filter(keep)
            if len(v) == 0:
                return
        table = pa.table({"v": v} if k is None else {"k": k, "v": v})
        acc, agg = self.acc, self._agg
        refused = set()
        for key, part in _partials(agg, table):
            key = one_nan(key)
            try:
                acc[key] = agg.merge(acc[key], part) if key in acc else part
            except TypeError:  # a Decimal column after floats, or the other way round
                refused.add(key)
        if refused:  # those keys' rows, as the per-tuple path refuses each of them
            keys = [GLOBAL] * len(v) if k is None else [one_nan(x) for x in k.to_pylist()]
            for row, key, value in zip(
                rows_of(batch, self.value), keys, v.to_pylist(), strict=True
            ):
                if key in refused:
                    self._error(row, _unmixable(value))

    def end_window(self) -> None:
        out, name, agg = getattr(self, self.OUT), self._out_key, self._agg
        for k, a in self.acc.items():
            out.emit(_out_row(name, k, agg.row(a)))
        if not self.cumulative:
            self.acc = {}


def _example(cls_name: str, port: str, result: str) -> str:
    return f"""
    Example:
        >>> from malhar.algo import {cls_name}
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness({cls_name}(key="k", value="v"))
        >>> h.run_window([("data", {{"k": "a", "v": 2}}), ("data", {{"k": "a", "v": 4}})])
        >>> h.sink("{port}").tuples
        [{result}]
    """


class Sum(_Aggregate):
    __doc__ = """Sums the values per key (or of the whole stream) over each application window.

    Output ``sum``: ``{key_name: key, "sum": total}`` per key (``{"sum": total}`` when global).""" + _example(
        "Sum", "sum", "{'k': 'a', 'sum': 6}"
    )

    AGG, OUT = "sum", "sum"
    sum = OutputPort()


class Min(_Aggregate):
    __doc__ = """The smallest value per key (or of the whole stream) in each application window.

    Output ``min``: ``{key_name: key, "min": smallest}``.""" + _example(
        "Min", "min", "{'k': 'a', 'min': 2}"
    )

    AGG, OUT = "min", "min"
    min = OutputPort()


class Max(_Aggregate):
    __doc__ = """The largest value per key (or of the whole stream) in each application window.

    Output ``max``: ``{key_name: key, "max": largest}``.""" + _example(
        "Max", "max", "{'k': 'a', 'max': 4}"
    )

    AGG, OUT = "max", "max"
    max = OutputPort()


class Average(_Aggregate):
    __doc__ = """The average value per key (or of the whole stream) in each application window.

    Output ``average``: ``{key_name: key, "average": mean, "sum": total, "count": n}``
    (sum and count let the unifier merge partitions exactly).""" + _example(
        "Average", "average", "{'k': 'a', 'average': 3.0, 'sum': 6, 'count': 2}"
    )

    AGG, OUT = "average", "average"
    average = OutputPort()


class Range(_Aggregate):
    __doc__ = """The lowest and highest value per key (or of the whole stream) in each window.

    Malhar's ``HighLow``, per application window.

    Output ``range``: ``{key_name: key, "low": lowest, "high": highest}``.""" + _example(
        "Range", "range", "{'k': 'a', 'low': 2, 'high': 4}"
    )

    AGG, OUT = "range", "range"
    range = OutputPort()


class CountKeyVal(_Aggregate):
    __doc__ = """How many tuples each key had in each application window (any values).

    Output ``count``: ``{key_name: key, "count": n}`` (``{"count": n}`` when global).""" + _example(
        "CountKeyVal", "count", "{'k': 'a', 'count': 2}"
    )

    AGG, OUT = "count", "count"
    count = OutputPort()


class RunningAverage(_Aggregate):
    """The average of every value seen so far, per key, emitted every application window.

    State is kept across windows; every key seen so far is emitted.

    Output ``average``: ``{key_name: key, "average": mean, "sum": total, "count": n}``.

    Example:
        >>> from malhar.algo import RunningAverage
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(RunningAverage())
        >>> h.run_window([("data", 1), ("data", 2)])
        >>> h.run_window([("data", 6)])
        >>> h.sink("average").per_window[1]
        [{'average': 3.0, 'sum': 9, 'count': 3}]
    """

    AGG, OUT = "average", "average"
    average = OutputPort()
    cumulative = Property(bool, default=True, doc="always True: the average runs across windows")
