"""Whether Arrow's integer sum of a column could wrap around.

Arrow sums an integer column in 64 bits and wraps on overflow; Python's ints, which the
per-tuple paths of the operators add, do not. A vectorized path asks :func:`may_wrap`
first and leaves a column that could wrap to the per-tuple path (exact, slower): its
largest magnitude times its length must stay below 2**63, which no real-world count or
amount comes near.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["may_wrap"]

_LIMIT = 1 << 63


def may_wrap(values: Any) -> bool:
    """Whether summing ``values`` (an Arrow array or chunked array) in 64 bits could wrap."""
    if not pa.types.is_integer(values.type) or len(values) == 0:
        return False
    bounds = pc.min_max(values).as_py()
    if bounds["min"] is None:
        return False
    return max(abs(bounds["min"]), abs(bounds["max"])) * len(values) >= _LIMIT
