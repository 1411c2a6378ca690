"""Math operators (Malhar's ``lib/math``): Sum, Min, Max, Average, Range, CountKeyVal,
RunningAverage, Margin, Quotient, Change and ChangeAlert.

Each works per key (``key`` names the key field) or over the whole stream (``key=None``),
on single tuples (numbers, dicts, tuples) and on Arrow batches (grouped with
``pyarrow``). Aggregates emit at the end of every application window a row per key
holding what their unifier needs (``sum`` and ``count`` beside an ``average``), so any
partitioning gives the one-partition result. A value that is not a number, or a tuple
without the field, goes to the ``error`` port with the reason.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    FIELD_TYPES,
    AlgoOperator,
    FieldCodec,
    FieldSpec,
    Partitioning,
    column,
    getter,
    missing,
    one_nan,
    rekey_nan,
    rows_of,
)
from malhar.operator import Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.util.int_sums import may_wrap
from malhar.util.nan_order import highest, lowest, nan_mask

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_FLOAT_INTS = 2**53  # a float64 holds every int up to it
GLOBAL = ()  # the accumulator key of a global (unkeyed) aggregate

__all__ = [
    "Average",
    "Change",
    "ChangeAlert",
    "CountKeyVal",
    "Margin",
    "MathUnifier",
    "Max",
    "Min",
    "Quotient",
    "Range",
    "RunningAverage",
    "Sum",
]


def is_number(v: Any) -> bool:
    return isinstance(v, int | float | decimal.Decimal) and not isinstance(v, bool)


#: adds Decimals exactly: the default context keeps 28 digits and rounds a larger sum
#: silently (a decimal128 column holds 38, and Python Decimals any number)
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_DECIMAL = decimal.Decimal


def _exact_add(a: Any, b: Any) -> Any:
    """``a + b``, exact when either is a Decimal (a float with a Decimal raises TypeError)."""
    if a.__class__ is _DECIMAL or b.__class__ is _DECIMAL:
        return _EXACT.add(a, b)
    return a + b


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


# -- aggregations: partial accumulators that merge ---------------------------------------------
class Agg:
    """One aggregation: ``add`` a value, ``merge`` two partials, to and from output rows."""

    fields: tuple[str, ...] = ()
    numeric = True

    def new(self, v: Any) -> Any:
        raise NotImplementedError

    def add(self, acc: Any, v: Any) -> Any:
        return self.merge(acc, self.new(v))

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def row(self, acc: Any) -> dict[str, Any]:
        raise NotImplementedError

    def from_row(self, row: dict[str, Any]) -> Any:
        raise NotImplementedError

    def batch(self, table: pa.Table) -> pa.Table:
        """Partials per key of a ``k``/``v`` table (``k`` absent for a global aggregate),
        with columns ``k`` and this aggregation's ``fields``."""
        raise NotImplementedError


def _group(table: pa.Table, aggs: list[tuple[str, str]]) -> pa.Table:
    if "k" in table.column_names:
        return table.group_by("k", use_threads=False).aggregate(aggs)
    v = table.column("v")
    values = {f"v_{fn}": [_scalar(fn, v)] for _, fn in aggs}
    return pa.table(values)


def _scalar(fn: str, v: pa.ChunkedArray) -> Any:
    return {
        "sum": lambda: pc.sum(v).as_py(),
        "count": lambda: pc.count(v).as_py(),
        "min": lambda: pc.min(v).as_py(),
        "max": lambda: pc.max(v).as_py(),
    }[fn]()


class SumAgg(Agg):
    fields = ("sum",)

    def new(self, v: Any) -> Any:
        return v

    def merge(self, a: Any, b: Any) -> Any:
        return _exact_add(a, b)

    def row(self, acc: Any) -> dict[str, Any]:
        return {"sum": acc}

    def from_row(self, row: dict[str, Any]) -> Any:
        return row["sum"]

    def batch(self, table: pa.Table) -> pa.Table:
        return _group(table, [("v", "sum")]).rename_columns(
            {"v_sum": "sum"} if "k" not in table.column_names else {"v_sum": "sum", "k": "k"}
        )


class MinAgg(Agg):
    fields = ("min",)

    def new(self, v: Any) -> Any:
        return v

    def merge(self, a: Any, b: Any) -> Any:
        return lowest(a, b)

    def row(self, acc: Any) -> dict[str, Any]:
        return {"min": acc}

    def from_row(self, row: dict[str, Any]) -> Any:
        return row["min"]

    def batch(self, table: pa.Table) -> pa.Table:
        return _group(table, [("v", "min")]).rename_columns(_renamer(table, {"v_min": "min"}))


class MaxAgg(MinAgg):
    fields = ("max",)

    def merge(self, a: Any, b: Any) -> Any:
        return highest(a, b)

    def row(self, acc: Any) -> dict[str, Any]:
        return {"max": acc}

    def from_row(self, row: dict[str, Any]) -> Any:
        return row["max"]

    def batch(self, table: pa.Table) -> pa.Table:
        return _group(table, [("v", "max")]).rename_columns(_renamer(table, {"v_max": "max"}))


class AverageAgg(Agg):
    fields = ("average", "sum", "count")

    def new(self, v: Any) -> Any:
        return (v, 1)

    def merge(self, a: Any, b: Any) -> Any:
        return (_exact_add(a[0], b[0]), a[1] + b[1])

    def row(self, acc: Any) -> dict[str, Any]:
        return {"average": acc[0] / acc[1], "sum": acc[0], "count": acc[1]}

    def from_row(self, row: dict[str, Any]) -> Any:
        return (row["sum"], row["count"])

    def batch(self, table: pa.Table) -> pa.Table:
        g = _group(table, [("v", "sum"), ("v", "count")])
        g = g.rename_columns(_renamer(table, {"v_sum": "sum", "v_count": "count"}))
        return g


class RangeAgg(Agg):
    fields = ("low", "high")

    def new(self, v: Any) -> Any:
        return (v, v)

    def merge(self, a: Any, b: Any) -> Any:
        return (lowest(a[0], b[0]), highest(a[1], b[1]))

    def row(self, acc: Any) -> dict[str, Any]:
        return {"low": acc[0], "high": acc[1]}

    def from_row(self, row: dict[str, Any]) -> Any:
        return (row["low"], row["high"])

    def batch(self, table: pa.Table) -> pa.Table:
        g = _group(table, [("v", "min"), ("v", "max")])
        return g.rename_columns(_renamer(table, {"v_min": "low", "v_max": "high"}))


class CountAgg(Agg):
    fields = ("count",)
    numeric = False

    def new(self, v: Any) -> Any:
        return 1

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def row(self, acc: Any) -> dict[str, Any]:
        return {"count": acc}

    def from_row(self, row: dict[str, Any]) -> Any:
        return row["count"]

    def batch(self, table: pa.Table) -> pa.Table:
        if "k" not in table.column_names:
            return pa.table({"count": [table.num_rows]})
        g = table.group_by("k", use_threads=False).aggregate(
            [("k", "count", pc.CountOptions("all"))]
        )
        return g.rename_columns(_renamer(table, {"k_count": "count"}))


def _renamer(table: pa.Table, names: dict[str, str]) -> dict[str, str]:
    return {**names, "k": "k"} if "k" in table.column_names else names


def _partials(agg: Agg, table: pa.Table) -> list[tuple[Any, Any]]:
    """``(key, partial)`` pairs of a ``k``/``v`` table."""
    g = agg.batch(table)
    cols = {name: g.column(name).to_pylist() for name in g.column_names}
    keys = cols.pop("k", [GLOBAL] * g.num_rows)
    out = []
    for i, k in enumerate(keys):
        row = {name: values[i] for name, values in cols.items()}
        if isinstance(agg, AverageAgg):
            out.append((k, (row["sum"], row["count"])))
        elif row and all(v is None for v in row.values()):
            continue  # an empty global batch
        else:
            out.append((k, agg.from_row(row)))
    return out


class MathUnifier(Unifier):
    """Merges the partial aggregates that every partition emitted for the window (per key)."""

    kind = Property(str, default="sum", doc="the aggregation: sum, min, max, average, range, count")
    key_name = Property(str, default=None, doc="the key field of the rows; None: global")

    def __init__(self, kind: str = "sum", key_name: str | None = None) -> None:
        self.configure(kind=kind, key_name=key_name)

    def setup(self, context: Any) -> None:
        self._agg = AGGREGATIONS[self.kind]

    def begin_window(self, window_id: int) -> None:
        self._acc: dict[Any, Any] = {}
        self._extra: dict[Any, dict[str, Any]] = {}

    def process(self, row: dict[str, Any]) -> None:
        k = one_nan(row[self.key_name]) if self.key_name else GLOBAL
        part = self._agg.from_row(row)
        acc = self._acc
        acc[k] = self._agg.merge(acc[k], part) if k in acc else part

    def end_window(self) -> None:
        for k, acc in self._acc.items():
            self.output.emit(_out_row(self.key_name, k, self._agg.row(acc)))


AGGREGATIONS: dict[str, Agg] = {
    "sum": SumAgg(),
    "min": MinAgg(),
    "max": MaxAgg(),
    "average": AverageAgg(),
    "range": RangeAgg(),
    "count": CountAgg(),
}


def _out_row(key_name: str | None, k: Any, fields: dict[str, Any]) -> dict[str, Any]:
    return {key_name: k, **fields} if key_name else fields


def _key_name(key: FieldSpec, key_name: str | None) -> str | None:
    if key is None:
        return None
    return key_name or (key if isinstance(key, str) else "key")


class _Aggregate(AlgoOperator):
    """Per-key (or global) aggregation over each application window, with a unifier."""

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; partial aggregates are merged)"
    AGG: ClassVar[str] = "sum"
    OUT: ClassVar[str] = "sum"

    data = InputPort()
    error = OutputPort(error=True)

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
            self._error(t, missing(exc.args[0] if exc.args else self.value))
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


def _unmixable(value: Any) -> str:
    return (
        f"value {value!r} ({type(value).__name__}) cannot be combined with the values before "
        "it: give the field one numeric type (Decimal and float do not mix)"
    )


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


# -- two-input ratios --------------------------------------------------------------------------
class RatioUnifier(Unifier):
    """Adds the numerator and denominator sums of every partition and recomputes the ratio."""

    key_name = Property(str, default=None)
    ratio = Property(str, default="quotient", one_of=("quotient", "margin"))
    mult_by = Property(float, default=1.0)

    def __init__(
        self, ratio: str = "quotient", key_name: str | None = None, mult_by: float = 1.0
    ) -> None:
        self.configure(ratio=ratio, key_name=key_name, mult_by=float(mult_by))

    def begin_window(self, window_id: int) -> None:
        self._acc: dict[Any, list] = {}

    def process(self, row: dict[str, Any]) -> None:
        k = one_nan(row[self.key_name]) if self.key_name else GLOBAL
        a = self._acc.setdefault(k, [0, 0])
        a[0] = _exact_add(a[0], row["numerator"])
        a[1] = _exact_add(a[1], row["denominator"])

    def end_window(self) -> None:
        for k, (n, d) in self._acc.items():
            self.output.emit(_ratio_row(self.ratio, self.key_name, k, n, d, self.mult_by))


def _ratio_row(ratio: str, key_name: str | None, k: Any, n: Any, d: Any, mult: float) -> dict:
    if d == 0:
        value = None
    elif ratio == "margin":
        value = (1 - _divide(n, d)) * mult
    else:
        value = _divide(n, d) * mult
    return _out_row(key_name, k, {"numerator": n, "denominator": d, ratio: value})


def _divide(n: Any, d: Any) -> float:
    """``n / d`` as a float (what it is for ints and floats), also when a sum is a Decimal
    (Decimal times the float ``mult`` raises TypeError) or one side a Decimal and the
    other a float."""
    try:
        return float(n / d)
    except TypeError:
        return float(n) / float(d)


class _Ratio(AlgoOperator):
    PARTITIONING: ClassVar[str] = "unifier (any partitioning; sums are merged)"
    RATIO: ClassVar[str] = "quotient"

    numerator = InputPort()
    denominator = InputPort()
    error = OutputPort(error=True)

    key = Property(FIELD_TYPES, default=None, doc="key field; None: global")
    value = Property(FIELD_TYPES, default=None, doc="value field; None: the tuple itself")
    key_name = Property(str, default=None, pattern=_NAME, doc="key field of the output")

    #: key -> [numerator sum, denominator sum] of the open application window
    sums = State(dict)

    def __init__(self, key: FieldSpec = None, value: FieldSpec = None, **props: Any) -> None:
        self.configure(key=key, value=value, **props)

    @property
    def _out_key(self) -> str | None:
        return _key_name(self.key, self.key_name)

    def _mult(self) -> float:
        return 1.0

    def get_unifier(self, port: str) -> RatioUnifier | None:
        if port == self.RATIO:
            return RatioUnifier(self.RATIO, self._out_key, self._mult())
        return None

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def setup(self, context: Any) -> None:
        self._get_key, self._get_value = getter(self.key), getter(self.value)
        rekey_nan(self.sums)  # restored: its NaN key is a copy

    def _add(self, t: Any, side: int) -> None:
        try:
            k = GLOBAL if self.key is None else self._get_key(t)
            v = self._get_value(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, missing(exc.args[0] if exc.args else self.value))
            return
        if not is_number(v):
            self._error(t, f"value {v!r} is not a number")
            return
        sums = self.sums.setdefault(one_nan(k), [0, 0])
        try:
            sums[side] = _exact_add(sums[side], v)
        except TypeError:  # a Decimal after floats, or the other way round
            self._error(t, _unmixable(v))

    def _add_batch(self, batch: pa.RecordBatch, side: int) -> None:
        if batch.num_rows == 0:
            return
        try:
            v = column(batch, self.value)
            k = None if self.key is None else column(batch, self.key)
        except KeyError:
            for row in rows_of(batch, self.value):
                self._add(row, side)
            return
        if (
            v.null_count
            or not (pa.types.is_integer(v.type) or pa.types.is_floating(v.type))
            or may_wrap(v)  # Arrow's int64 sum would wrap: Python's ints do not
        ):
            for row in rows_of(batch, self.value):
                self._add(row, side)
            return
        table = pa.table({"v": v} if k is None else {"k": k, "v": v})
        for key, s in _partials(AGGREGATIONS["sum"], table):
            sums = self.sums.setdefault(one_nan(key), [0, 0])
            try:
                sums[side] = _exact_add(sums[side], s)
            except TypeError:  # floats after Decimals: refused row by row, as per tuple
                rows = rows_of(batch, self.value)
                keys = [GLOBAL] * len(rows) if k is None else k.to_pylist()
                for row, x in zip(rows, keys, strict=True):
                    if one_nan(x) is one_nan(key) or x == key:
                        self._add(row, side)

    def process_numerator(self, t: Any) -> None:
        self._add(t, 0)

    def process_denominator(self, t: Any) -> None:
        self._add(t, 1)

    def process_batch_numerator(self, batch: pa.RecordBatch) -> None:
        self._add_batch(batch, 0)

    def process_batch_denominator(self, batch: pa.RecordBatch) -> None:
        self._add_batch(batch, 1)

    def end_window(self) -> None:
        out, name, mult = getattr(self, self.RATIO), self._out_key, self._mult()
        for k, (n, d) in self.sums.items():
            out.emit(_ratio_row(self.RATIO, name, k, n, d, mult))
        self.sums = {}


class Quotient(_Ratio):
    """The quotient ``mult_by * numerator / denominator`` of two summed ports, per key.

    Sums the ``numerator`` and ``denominator`` ports per key over each application window.

    Output ``quotient``: ``{key_name: key, "numerator": n, "denominator": d, "quotient": q}``;
    ``q`` is None when the denominator sums to 0 (the sums are kept so partitions merge).

    Example:
        >>> from malhar.algo import Quotient
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Quotient(mult_by=100))
        >>> h.run_window([("numerator", 1), ("numerator", 2), ("denominator", 12)])
        >>> h.sink("quotient").tuples
        [{'numerator': 3, 'denominator': 12, 'quotient': 25.0}]
    """

    RATIO = "quotient"
    quotient = OutputPort()
    mult_by = Property((int, float), default=1, doc="the quotient is multiplied by it")

    def _mult(self) -> float:
        return float(self.mult_by)


class Margin(_Ratio):
    """The margin ``1 - numerator / denominator`` of two summed ports, per key.

    Sums the ``numerator`` and ``denominator`` ports per key over each application window;
    with ``percent`` the margin is multiplied by 100.

    Output ``margin``: ``{key_name: key, "numerator": n, "denominator": d, "margin": m}``;
    ``m`` is None when the denominator sums to 0.

    Example:
        >>> from malhar.algo import Margin
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(Margin(percent=True))
        >>> h.run_window([("numerator", 3), ("denominator", 4)])
        >>> h.sink("margin").tuples
        [{'numerator': 3, 'denominator': 4, 'margin': 25.0}]
    """

    RATIO = "margin"
    margin = OutputPort()
    percent = Property(bool, default=False, doc="emit the margin as a percentage")

    def _mult(self) -> float:
        return 100.0 if self.percent else 1.0


# -- changes -----------------------------------------------------------------------------------
class _Keyed(AlgoOperator):
    PARTITIONING: ClassVar[str] = "keyed by `key` (one partition when key is None)"

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
            self._error(t, missing(exc.args[0] if exc.args else self.value))
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
