"""The windowed operators' vectorized path: an Arrow batch assigned to windows and folded
into the cells with one hash aggregation (``WindowedCore._ingest_batch``).

A batch goes row by row instead (``_ingest_batch`` returns False) wherever Arrow's kernels
could give another result than the accumulation value by value: a merging window option,
nested keys, an int64 sum that could wrap, a min or max over NaN, rows without a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from malhar.util.epoch_millis import epoch_millis
from malhar.util.int_sums import may_wrap
from malhar.util.nan_order import nan_mask
from malhar.window.windows import MAX_TIMESTAMP, MIN_TIMESTAMP, Window

#: what ``WindowedCore._add`` is given: a value, a second input's value, an accumulation
#: (a partial, or Arrow aggregates), an Arrow slice of values
_VALUE, _VALUE2, _PARTIAL, _BATCH = 0, 1, 2, 3


class BatchIngest:
    """The Arrow batch path of :class:`~malhar.window.impl.core.WindowedCore` (a mixin: it
    uses the core's settings, ``horizon``, ``_late``, ``_add`` and ``_local``)."""

    def _timestamps(self, batch: pa.RecordBatch, column: Any) -> np.ndarray | None:
        """Epoch milliseconds of a batch's rows; None when some row has none (a null, a
        value that is not a time): the batch then goes row by row, and those rows to the
        error port with their reasons."""
        if column is None:
            return np.full(batch.num_rows, self.now(), dtype=np.int64)
        arr = batch.column(column)
        if arr.null_count:
            return None
        try:  # floored to the millisecond, as a tuple's time is
            ts = epoch_millis(arr)
        except (ValueError, TypeError, pa.ArrowInvalid):
            return None
        first, last = self._times
        if (first > MIN_TIMESTAMP or last < MAX_TIMESTAMP) and (
            ts.min() < first or ts.max() > last  # windows past the last timestamp there is
        ):
            return None
        return ts

    def _ingest_batch(
        self,
        batch: pa.RecordBatch,
        keys: Sequence[str],
        value: str | None,
        timestamp: str | None,
        port: int = 0,
    ) -> bool:
        """A batch, vectorized: timestamps, the late filter, window assignment and one
        Arrow hash aggregation per batch. Returns False when the batch cannot be handled
        vectorized (the caller then goes row by row)."""
        if not self._vectorizable(batch, keys, value, port):
            return False
        if batch.num_rows == 0:
            return True
        ts = self._timestamps(batch, timestamp)
        if ts is None:
            return False
        batch, ts = self._drop_late(batch, ts)
        if batch.num_rows:
            self._fold(self._grouped(batch, ts, keys, value), len(keys))
        return True

    def _vectorizable(
        self, batch: pa.RecordBatch, keys: Sequence[str], value: str | None, port: int
    ) -> bool:
        """Whether Arrow's kernels give what the accumulation gives value by value."""
        acc = self._acc
        # the second input of a merge accumulates value by value (accumulate2)
        if port != 0:
            return False
        option, fast = self._option, acc.arrow_aggregations is not None
        if option is None or option.merging or not (fast or value is not None):
            return False
        if any(pa.types.is_nested(batch.schema.field(k).type) for k in keys):
            return False  # Arrow groups by no list or struct: row by row, which says why
        return not (
            fast
            and value is not None
            and batch.num_rows
            and _arrow_differs(acc.arrow_aggregations or (), batch.column(value))
        )

    def _drop_late(self, batch: pa.RecordBatch, ts: Any) -> tuple[pa.RecordBatch, Any]:
        """``batch`` and its times without the rows behind the horizon (each to _late)."""
        horizon = self.horizon()
        if horizon is None:
            return batch, ts
        late = ts < horizon
        if not late.any():
            return batch, ts
        for row in batch.filter(pa.array(late)).to_pylist():
            self._late(row)
        keep = ~late
        return batch.filter(pa.array(keep)), ts[keep]

    def _grouped(
        self, batch: pa.RecordBatch, ts: Any, keys: Sequence[str], value: str | None
    ) -> pa.Table:
        """One row per (window, key): its count and the accumulation's Arrow aggregates,
        or the list of its values when the accumulation has none."""
        rows, starts, ends = self._option.assign_batch(ts)
        take = None if len(rows) == batch.num_rows else pa.array(rows)
        columns: dict[str, Any] = {"__start": starts, "__end": ends}
        for i, name in enumerate(keys):
            col = batch.column(name)
            columns[f"__k{i}"] = col if take is None else col.take(take)
        if value is not None:
            col = batch.column(value)
            columns["__v"] = col if take is None else col.take(take)
        group_by = ["__start", "__end", *(f"__k{i}" for i in range(len(keys)))]
        aggregations: list[tuple[Any, str]] = [([], "count_all")]
        functions = self._acc.arrow_aggregations
        if functions is None:
            aggregations.append(("__v", "list"))
        else:
            aggregations += [("__v", fn) for fn in functions if fn != "count_all"]
        return pa.table(columns).group_by(group_by, use_threads=False).aggregate(aggregations)

    def _fold(self, grouped: pa.Table, nk: int) -> None:
        """Add each (window, key) row of :meth:`_grouped` to the panes."""
        cols = [grouped.column(i).to_pylist() for i in range(2 + nk)]
        counts = grouped.column("count_all").to_pylist()
        acc = self._acc
        functions = acc.arrow_aggregations
        if functions is not None:
            results = [
                counts if fn == "count_all" else grouped.column(f"__v_{fn}").to_pylist()
                for fn in functions
            ]
            from_aggregates = acc.from_aggregates
            partials = (from_aggregates(*(r[i] for r in results)) for i in range(len(counts)))
            kind = _PARTIAL
        else:
            lists = grouped.column("__v_list").combine_chunks()
            offsets, flat = lists.offsets.to_numpy(), lists.values
            partials = (
                flat.slice(int(offsets[i]), int(offsets[i + 1] - offsets[i]))
                for i in range(len(counts))
            )
            kind = _BATCH
        add = self._local if self._partial else self._add
        for i, (n, partial) in enumerate(zip(counts, partials, strict=True)):
            window = Window(cols[0][i], cols[1][i])
            key = None if nk == 0 else cols[2][i] if nk == 1 else tuple(c[i] for c in cols[2:])
            add(window, key, partial, kind, n)


def _arrow_differs(aggregations: Sequence[str], values: Any) -> bool:
    """Whether Arrow's aggregation of ``values`` could differ from the tuples' (then a batch
    goes row by row): an int64 sum that could wrap, a min or max over NaN (Arrow skips it;
    malhar ranks it above every number, as Spark does)."""
    if "sum" in aggregations and may_wrap(values):
        return True
    return ("min" in aggregations or "max" in aggregations) and nan_mask(values) is not None
