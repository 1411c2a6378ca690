"""Standard accumulations (Malhar's ``lib/window/accumulation``) and merge accumulations.

Example:
    >>> from malhar.window.accumulation import Average
    >>> a = Average()
    >>> a.output(a.merge(a.accumulate((0, 0), 4), a.accumulate((0, 0), 8)))
    6.0
"""

from malhar.window.accumulation.basic import (
    Average,
    Count,
    Fold,
    Max,
    Min,
    Reduce,
    RemoveDuplicates,
    SequenceCount,
    Sum,
    ToList,
    TopN,
    TopNByKey,
)
from malhar.window.accumulation.joins import (
    Cogroup,
    FullOuterJoin,
    InnerJoin,
    LeftOuterJoin,
    RightOuterJoin,
)

__all__ = [
    "Average",
    "Cogroup",
    "Count",
    "Fold",
    "FullOuterJoin",
    "InnerJoin",
    "LeftOuterJoin",
    "Max",
    "Min",
    "Reduce",
    "RemoveDuplicates",
    "RightOuterJoin",
    "SequenceCount",
    "Sum",
    "ToList",
    "TopN",
    "TopNByKey",
]
