"""malhar.algo: the operator catalogue (Malhar's ``lib/algo``, ``lib/math`` and friends)."""

from malhar.algo._base import FieldCodec, Partitioning
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
from malhar.algo.unique_counter import UniqueCounter, UniqueCountUnifier

__all__ = [
    "Average",
    "Change",
    "ChangeAlert",
    "CountKeyVal",
    "FieldCodec",
    "Margin",
    "Max",
    "Min",
    "Partitioning",
    "Quotient",
    "Range",
    "RunningAverage",
    "Sum",
    "UniqueCountUnifier",
    "UniqueCounter",
]
