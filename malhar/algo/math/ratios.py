"""The two-input ratio operators Quotient and Margin, and their :class:`RatioUnifier`."""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa

from malhar.algo._base import (
    FIELD_TYPES,
    AlgoOperator,
    FieldSpec,
    Partitioning,
    column,
    getter,
    one_nan,
    rekey_nan,
    rows_of,
    unreadable,
)
from malhar.algo.math.accumulators import AGGREGATIONS, _partials
from malhar.algo.math.common import (
    _NAME,
    GLOBAL,
    _exact_add,
    _key_name,
    _out_row,
    _unmixable,
    is_number,
)
from malhar.operator import Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.util.int_sums import may_wrap


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

    FIELDS_READ = {"numerator": ("key", "value"), "denominator": ("key", "value")}

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
            self._error(t, unreadable(exc, t, self.key, self.value))
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
