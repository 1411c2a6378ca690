"""malhar.algo: the operator catalogue (Malhar's ``lib/algo``, ``lib/math`` and friends)."""

from malhar.algo._base import FieldCodec, Partitioning
from malhar.algo.distinct import (
    Distinct,
    FilterKeys,
    FilterValues,
    InvertIndex,
    Sampler,
    UniqueValueCount,
)
from malhar.algo.math import (
    Average,
    Change,
    ChangeAlert,
    CountKeyVal,
    Margin,
    Max,
    Min,
    Quotient,
    Range,
    RunningAverage,
    Sum,
)
from malhar.algo.top import (
    BottomN,
    BottomNUnique,
    LeastFrequentKey,
    MergeSort,
    MostFrequentKey,
    TopN,
    TopNUnique,
)
from malhar.algo.unique_counter import UniqueCounter, UniqueCountUnifier

__all__ = [
    "Average",
    "BottomN",
    "BottomNUnique",
    "Change",
    "ChangeAlert",
    "CountKeyVal",
    "Distinct",
    "FieldCodec",
    "FilterKeys",
    "FilterValues",
    "InvertIndex",
    "LeastFrequentKey",
    "Margin",
    "Max",
    "MergeSort",
    "Min",
    "MostFrequentKey",
    "Partitioning",
    "Quotient",
    "Range",
    "RunningAverage",
    "Sampler",
    "Sum",
    "TopN",
    "TopNUnique",
    "UniqueCountUnifier",
    "UniqueCounter",
    "UniqueValueCount",
]
