"""malhar.algo: the operator catalogue (Malhar's ``lib/algo``, ``lib/math`` and friends)."""

from malhar.algo._base import FieldCodec, Partitioning, partition_by_key
from malhar.algo.dedup import BoundedDedup, TimeBasedDedup
from malhar.algo.distinct import (
    Distinct,
    FilterKeys,
    FilterValues,
    InvertIndex,
    Sampler,
    UniqueValueCount,
)
from malhar.algo.enrich import Enricher, FileLookup, JdbcLookup
from malhar.algo.format import CsvFormatter, JsonFormatter
from malhar.algo.join import LookupJoin, StreamJoin
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
from malhar.algo.parse import CsvParser, FixedWidthParser, JsonParser, RegexParser
from malhar.algo.stream import Counter, DevNull, StreamDuplicater, StreamMerger, Throttle
from malhar.algo.top import (
    BottomN,
    BottomNUnique,
    LeastFrequentKey,
    MergeSort,
    MostFrequentKey,
    TopN,
    TopNUnique,
)
from malhar.algo.transform import FilterOperator, ProjectionOperator, TransformOperator
from malhar.algo.unique_counter import UniqueCounter, UniqueCountUnifier

__all__ = [
    "Average",
    "BottomN",
    "BottomNUnique",
    "BoundedDedup",
    "Change",
    "ChangeAlert",
    "CountKeyVal",
    "Counter",
    "CsvFormatter",
    "CsvParser",
    "DevNull",
    "Distinct",
    "Enricher",
    "FieldCodec",
    "FileLookup",
    "FilterKeys",
    "FilterOperator",
    "FilterValues",
    "FixedWidthParser",
    "InvertIndex",
    "JdbcLookup",
    "JsonFormatter",
    "JsonParser",
    "LeastFrequentKey",
    "LookupJoin",
    "Margin",
    "Max",
    "MergeSort",
    "Min",
    "MostFrequentKey",
    "Partitioning",
    "ProjectionOperator",
    "Quotient",
    "Range",
    "RegexParser",
    "RunningAverage",
    "Sampler",
    "StreamDuplicater",
    "StreamJoin",
    "StreamMerger",
    "Sum",
    "Throttle",
    "TimeBasedDedup",
    "TopN",
    "TopNUnique",
    "TransformOperator",
    "UniqueCountUnifier",
    "UniqueCounter",
    "UniqueValueCount",
    "partition_by_key",
]
