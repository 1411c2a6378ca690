"""Partial aggregations that merge (sum, min, max, average, range, count) and
:class:`MathUnifier`, which merges the partials of every partition.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    one_nan,
)
from malhar.algo.math.common import GLOBAL, _exact_add, _out_row
from malhar.operator import Unifier
from malhar.properties import Property
from malhar.util.nan_order import highest, lowest


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
