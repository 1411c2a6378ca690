"""Math operators (Malhar's ``lib/math``): Sum, Min, Max, Average, Range, CountKeyVal,
RunningAverage, Margin, Quotient, Change and ChangeAlert.

Each works per key (``key`` names the key field) or over the whole stream (``key=None``),
on single tuples (numbers, dicts, tuples) and on Arrow batches (grouped with
``pyarrow``). Aggregates emit at the end of every application window a row per key
holding what their unifier needs (``sum`` and ``count`` beside an ``average``), so any
partitioning gives the one-partition result. A value that is not a number, or a tuple
without the field, goes to the ``error`` port with the reason.
"""

from malhar.algo.math.accumulators import AGGREGATIONS as AGGREGATIONS
from malhar.algo.math.accumulators import Agg as Agg
from malhar.algo.math.accumulators import AverageAgg as AverageAgg
from malhar.algo.math.accumulators import CountAgg as CountAgg
from malhar.algo.math.accumulators import MathUnifier
from malhar.algo.math.accumulators import MaxAgg as MaxAgg
from malhar.algo.math.accumulators import MinAgg as MinAgg
from malhar.algo.math.accumulators import RangeAgg as RangeAgg
from malhar.algo.math.accumulators import SumAgg as SumAgg
from malhar.algo.math.aggregates import (
    Average,
    CountKeyVal,
    Max,
    Min,
    Range,
    RunningAverage,
    Sum,
)
from malhar.algo.math.changes import Change, ChangeAlert
from malhar.algo.math.common import GLOBAL as GLOBAL
from malhar.algo.math.common import is_number as is_number
from malhar.algo.math.ratios import Margin, Quotient
from malhar.algo.math.ratios import RatioUnifier as RatioUnifier

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
