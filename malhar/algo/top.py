"""Ranking operators (Malhar's ``lib/algo``): TopN, BottomN, TopNUnique, BottomNUnique,
MostFrequentKey, LeastFrequentKey and MergeSort, each with the unifier that merges its
partitions.

Ties are broken by the tuple itself (its fields in order, then values), never by arrival
order, so every partitioning and every replay gives the same ranks.
"""

from __future__ import annotations

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
    TieBreak,
    batch_rows,
    column,
    getter,
    key_bytes,
    one_nan,
    order_key,
    rekey_nan,
    require,
    rows_of,
    unreadable,
)
from malhar.operator import Unifier
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property
from malhar.state import State
from malhar.util.nan_order import nan_mask

__all__ = [
    "BottomN",
    "BottomNUnique",
    "FrequentKeyUnifier",
    "LeastFrequentKey",
    "MergeSort",
    "MergeSortUnifier",
    "MostFrequentKey",
    "TopN",
    "TopNUnifier",
    "TopNUnique",
]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_GLOBAL = ()


# -- ranking -----------------------------------------------------------------------------------
class _Ranking:
    """What a ranked row is: its group, its ranking value and its tie-break."""

    def __init__(self, order_by: FieldSpec, key: FieldSpec, bottom: bool) -> None:
        self.order_by, self.key, self.bottom = order_by, key, bottom
        self.get_order, self.get_key = getter(order_by), getter(key)

    def row(self, item: Any, rank_name: str) -> dict[str, Any]:
        """The output row of ``item`` without its rank."""
        if isinstance(item, dict):
            return dict(item)
        return {"value": item}

    def sort_key(self, value: Any, row: dict[str, Any]) -> tuple:
        return (order_key(value), TieBreak(row))


def _keep(items: list, n: int, bottom: bool) -> list:
    """The best ``n`` of ``(sort key, row)`` items, best first."""
    items.sort(key=lambda it: it[0], reverse=not bottom)
    del items[n:]
    return items


def _written(rank_name: str, window_field: str | None) -> list[tuple[str, str, str]]:
    """``(property, field, what)`` of every field the ranking writes into its output rows."""
    out = [("rank_name", rank_name, "rank")]
    if window_field:
        out.append(("window_field", window_field, "application window id"))
    return out


def clash_problems(
    name: str, order_by: FieldSpec, key: FieldSpec, rank_name: str, window_field: str | None
) -> list[str]:
    """Why a ranking's settings make it read or write a field it also writes (empty: none).

    The rank and the window id are written into every output row: ranking or grouping by
    one of those fields would read the written value, and the unifier (which drops them
    from its input rows) could not find it, so the result would depend on the partitioning.
    """
    out = []
    if window_field and window_field == rank_name:
        out.append(
            f"{name}: rank_name and window_field are both {rank_name!r}: the window id would "
            "overwrite the rank; give window_field another name"
        )
    for prop, spec in (("order_by", order_by), ("key", key)):
        for wprop, field, what in _written(rank_name, window_field):
            if isinstance(spec, str) and spec == field:
                other = "position" if wprop == "rank_name" else "window_id"
                other = "top_" + other if other in (order_by, key) else other
                out.append(
                    f"{name}: {prop} {spec!r} is also {wprop}, the field {name} writes the "
                    f"{what} into: set {wprop} to another name (e.g. {wprop}={other!r})"
                )
    return out


def _clash(written: list[tuple[str, str, str]], names: Any, name: str, wrapped: bool) -> str | None:
    """Why a tuple whose output row has the fields ``names`` cannot be ranked (None: it can)."""
    for prop, field, what in written:
        if field in names:
            if wrapped:
                return (
                    f"a tuple that is not a record is output as {{'value': tuple}}, and {name} "
                    f"writes the {what} into {field!r} ({prop}): set {prop} to another name"
                )
            return (
                f"the tuple already has a field {field!r}, which {name} writes the {what} "
                f"into ({prop}); it is not overwritten: set {prop} to a name the tuples do not use"
            )
    return None


class TopNUnifier(Unifier):
    """Keeps the best ``n`` rows per group over every partition's ranked rows and re-ranks."""

    n = Property(int, default=10, min=1)
    order_by = Property(FIELD_TYPES, default=None)
    key = Property(FIELD_TYPES, default=None)
    bottom = Property(bool, default=False)
    unique = Property(bool, default=False)
    rank_name = Property(str, default="rank", pattern=_NAME)
    window_field = Property(str, default=None, pattern=_NAME)

    def __init__(self, **props: Any) -> None:
        self.configure(**props)

    def setup(self, context: Any) -> None:
        problems = clash_problems(
            "TopNUnifier", self.order_by, self.key, self.rank_name, self.window_field
        )
        require(not problems, "; ".join(problems))

    def begin_window(self, window_id: int) -> None:
        self._groups: dict[Any, list] = {}
        self._window: Any = None

    def process(self, row: dict[str, Any]) -> None:
        base = {k: v for k, v in row.items() if k not in (self.rank_name, self.window_field)}
        if self.window_field:
            self._window = row.get(self.window_field)
        # a non-dict tuple came as {"value": tuple}; a dict one of that single field only
        # when every field read is None or "value" (any other name was missing from it)
        if set(base) == {"value"} and any(
            spec not in (None, "value") for spec in (self.order_by, self.key)
        ):
            item = base["value"]
        else:
            item = base
        value = getter(self.order_by)(item)
        group = _GLOBAL if self.key is None else one_nan(getter(self.key)(item))
        self._groups.setdefault(group, []).append(((order_key(value), TieBreak(base)), base))

    def end_window(self) -> None:
        for items in self._groups.values():
            if self.unique:
                items = list({key_bytes(r): (s, r) for s, r in items}.values())
            for rank, (_, row) in enumerate(_keep(items, self.n, self.bottom), 1):
                out = {**row, self.rank_name: rank}
                if self.window_field:
                    out[self.window_field] = self._window
                self.output.emit(out)


class TopN(AlgoOperator):
    """The ``n`` largest tuples per key (or overall) in each application window.

    ``order_by`` names the field that ranks (None: the tuple itself), ``key`` the group
    (None: one ranking over the stream). Output ``top``: per group its best ``n`` tuples,
    best first, each as a dict row (a non-dict tuple as ``{"value": tuple}``) with its
    ``rank`` (1 is the best), and the application window's first window id in
    ``window_field`` when set. Tuples without the fields, or whose ranking value is None,
    go to ``error``.

    The rank (``rank_name``) and window id (``window_field``) fields are added, never
    overwritten: a tuple that already holds a field of either name (a non-dict tuple: when
    either is ``"value"``) goes to ``error``, a batch holding such a column sends every
    row there, and an ``order_by`` or ``key`` naming either field (or the two sharing one
    name) is refused when configured; give ``rank_name`` (``window_field``) another name.
    One partition and several give the same output.

    Example:
        >>> from malhar.algo import TopN
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(TopN(n=2, order_by="n"))
        >>> h.run_window(
        ...     [("data", {"w": "a", "n": 3}), ("data", {"w": "b", "n": 9}), ("data", {"w": "c", "n": 5})]
        ... )
        >>> h.sink("top").tuples
        [{'w': 'b', 'n': 9, 'rank': 1}, {'w': 'c', 'n': 5, 'rank': 2}]
    """

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; the unifier keeps the best n)"
    BOTTOM: ClassVar[bool] = False
    UNIQUE: ClassVar[bool] = False

    data = InputPort()
    top = OutputPort()
    error = OutputPort(error=True)

    n = Property(int, default=10, min=1, doc="how many tuples per group")
    FIELDS_READ = {"data": ("order_by", "key")}

    order_by = Property(FIELD_TYPES, default=None, doc="ranking field; None: the tuple")
    key = Property(FIELD_TYPES, default=None, doc="group field; None: one global ranking")
    rank_name = Property(str, default="rank", pattern=_NAME, doc="the rank field of the output")
    window_field = Property(
        str, default=None, pattern=_NAME, doc="adds the application window's id as this field"
    )

    #: group -> [(sort key, row)] candidates of the open application window
    held = State(dict)
    #: the first window id of the open application window
    window = State(default=None)

    def __init__(
        self, n: int = 10, order_by: FieldSpec = None, key: FieldSpec = None, **props: Any
    ) -> None:
        self.configure(n=n, order_by=order_by, key=key, **props)

    def configure(self, **values: Any) -> TopN:
        super().configure(**values)
        problems = self._clash_problems()
        require(not problems, "; ".join(problems))
        return self

    def _clash_problems(self) -> list[str]:
        return clash_problems(
            type(self).__name__, self.order_by, self.key, self.rank_name, self.window_field
        )

    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work (``DAG.validate`` reports them)."""
        return self.property_problems() + self._clash_problems()

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def get_unifier(self, port: str) -> TopNUnifier | None:
        if port != "top":
            return None
        return TopNUnifier(
            n=self.n,
            order_by=self.order_by,
            key=self.key,
            bottom=self.BOTTOM,
            unique=self.UNIQUE,
            rank_name=self.rank_name,
            window_field=self.window_field,
        )

    def setup(self, context: Any) -> None:
        problems = self._clash_problems()  # properties set one by one (app files)
        require(not problems, "; ".join(problems))
        self._rank = _Ranking(self.order_by, self.key, self.BOTTOM)
        self._written = _written(self.rank_name, self.window_field)
        rekey_nan(self.held)  # restored: its NaN key is a copy

    def begin_window(self, window_id: int) -> None:
        if self.window is None:
            self.window = window_id

    def _add(self, group: Any, sort_key: tuple, row: dict[str, Any]) -> None:
        items = self.held.setdefault(group, [])
        items.append((sort_key, row))
        if len(items) > 4 * self.n + 16:
            self._trim(group)

    def _trim(self, group: Any) -> None:
        items = self.held[group]
        if self.UNIQUE:
            items = list({key_bytes(r): (s, r) for s, r in items}.values())
        self.held[group] = _keep(items, self.n, self.BOTTOM)

    def process(self, t: Any) -> None:
        rank = self._rank
        record = isinstance(t, dict)
        why = _clash(self._written, t if record else ("value",), type(self).__name__, not record)
        if why:
            self._error(t, why)
            return
        try:
            value = rank.get_order(t)
            group = _GLOBAL if self.key is None else one_nan(rank.get_key(t))
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.order_by, self.key))
            return
        if value is None:
            self._error(t, f"ranking value of field {self.order_by!r} is None")
            return
        row = rank.row(t, self.rank_name)
        self._add(group, rank.sort_key(value, row), row)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        why = _clash(self._written, batch.schema.names, type(self).__name__, False)
        if why:  # one check per batch: every row holds the field
            for row in batch.to_pylist():
                self._error(row, why)
            return
        if self.order_by is None and batch.num_columns == 1:
            # a one-column row is a record, as the stream's tuples are: its field name is
            # kept (bare values came out as {"value": v} from a batch, {"v": v} from tuples)
            for row in batch.to_pylist():
                self.process(row)
            return
        if not isinstance(self.order_by, str) or (
            self.key is not None and not isinstance(self.key, str)
        ):
            for row in rows_of(batch, self.order_by):
                self.process(row)
            return
        try:
            value = column(batch, self.order_by)
            if self.key is not None:
                column(batch, self.key)
        except KeyError:
            for row in rows_of(batch, self.order_by):
                self.process(row)
            return
        odd = pc.is_null(value) if value.null_count else None
        nan = nan_mask(value)  # Arrow sorts NaN last either way: NaN rows per tuple
        if nan is not None:
            odd = nan if odd is None else pc.or_(odd, nan)
        if odd is not None:
            for row in batch_rows(batch.filter(odd)):
                self.process(row)
            batch = batch.filter(pc.invert(odd))
            if batch.num_rows == 0:
                return
        batch = self._above_thresholds(batch)
        if batch.num_rows == 0:
            return
        order_by, key, add = self.order_by, self.key, self._add
        try:
            rows = _preselect(batch, order_by, key, self.n, self.BOTTOM, self.UNIQUE)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            # a column Arrow cannot group or sort (lists): per row
            for row in rows_of(batch, self.order_by):
                self.process(row)
            return
        for row in rows:
            group = _GLOBAL if key is None else one_nan(row[key])
            add(group, (order_key(row[order_by]), TieBreak(row)), row)

    def _above_thresholds(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of ``batch`` that can still rank: those of groups holding fewer than
        ``n`` tuples, and those at least as good as their group's ``n``-th (vectorized)."""
        groups, limits = [], []
        for group in list(self.held):
            if len(self.held[group]) >= self.n:
                self._trim(group)
                items = self.held[group]
                if len(items) >= self.n:
                    groups.append(group)
                    limits.append(items[-1][1][self.order_by])
        if not groups:
            return batch
        value = batch.column(self.order_by)
        try:
            limit_values = pa.array(limits, type=value.type)
            if self.key is None:
                where = pa.array([0] * batch.num_rows, pa.int32())
            else:
                col = batch.column(self.key)
                where = pc.index_in(col, value_set=pa.array(groups, type=col.type))
            limit = limit_values.take(where)
            compare = pc.less_equal if self.BOTTOM else pc.greater_equal
            good = pc.or_kleene(pc.is_null(where), compare(value, limit))
            if pa.types.is_floating(value.type):
                # NaN ranks above every number (order_key) but compares false in Arrow
                good = pc.or_kleene(good, pc.or_kleene(pc.is_nan(value), pc.is_nan(limit)))
        except (pa.ArrowException, TypeError, ValueError):
            return batch  # keys or values Arrow cannot compare: every row goes on
        return batch.filter(pc.fill_null(good, True))

    def end_window(self) -> None:
        for group in list(self.held):
            self._trim(group)
            for rank, (_, row) in enumerate(self.held[group], 1):
                out = {**row, self.rank_name: rank}
                if self.window_field:
                    out[self.window_field] = self.window
                self.top.emit(out)
        self.held = {}
        self.window = None


def _preselect(
    batch: pa.RecordBatch, order_by: str, key: str | None, n: int, bottom: bool, unique: bool
) -> list[dict[str, Any]]:
    """The rows of ``batch`` that can be among the best ``n`` of their group (vectorized).

    Rows are ranked by group and value only; every row that ties with its group's ``n``-th
    value is kept too, so the exact tie-break (by the row's content) happens in Python on
    few rows."""
    table = pa.Table.from_batches([batch])
    if unique:
        table = table.group_by(table.column_names, use_threads=False).aggregate([])
        table = table.select(batch.schema.names)
    direction = "ascending" if bottom else "descending"
    keys = [] if key is None else [(key, "ascending", "at_end")]
    keys.append((order_by, direction, "at_end"))
    table = table.take(pc.sort_indices(table, sort_keys=keys))
    values = table.column(order_by).combine_chunks()
    if key is None:
        starts, sizes = np.array([0]), np.array([table.num_rows])
    else:
        groups = pc.dictionary_encode(table.column(key)).combine_chunks().indices
        codes = pc.fill_null(groups, -1).to_numpy(zero_copy_only=False)
        starts = np.r_[0, np.flatnonzero(np.diff(codes)) + 1]
        sizes = np.diff(np.r_[starts, len(codes)])
    position = np.arange(table.num_rows) - np.repeat(starts, sizes)
    nth = np.repeat(starts + np.minimum(n, sizes) - 1, sizes)
    ties = pc.equal(values, values.take(pa.array(nth))).to_numpy(zero_copy_only=False)
    return table.filter(pa.array((position < n) | ties)).to_pylist()


class BottomN(TopN):
    """The ``n`` smallest tuples per key (or overall) in each application window.

    Like :class:`TopN`, ranked from the smallest; output port ``top``.

    Example:
        >>> from malhar.algo import BottomN
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(BottomN(n=2))
        >>> h.run_window([("data", 7), ("data", 3), ("data", 5)])
        >>> h.sink("top").tuples
        [{'value': 3, 'rank': 1}, {'value': 5, 'rank': 2}]
    """

    BOTTOM = True


class TopNUnique(TopN):
    """The ``n`` largest distinct tuples per key (or overall) in each application window.

    Like :class:`TopN`, but equal tuples count once.

    Example:
        >>> from malhar.algo import TopNUnique
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(TopNUnique(n=2))
        >>> h.run_window([("data", 7), ("data", 7), ("data", 5)])
        >>> [r["value"] for r in h.sink("top").tuples]
        [7, 5]
    """

    UNIQUE = True


class BottomNUnique(TopN):
    """The ``n`` smallest distinct tuples per key (or overall) in each application window.

    Example:
        >>> from malhar.algo import BottomNUnique
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(BottomNUnique(n=2))
        >>> h.run_window([("data", 7), ("data", 3), ("data", 3)])
        >>> [r["value"] for r in h.sink("top").tuples]
        [3, 7]
    """

    BOTTOM = True
    UNIQUE = True


# -- frequent keys -----------------------------------------------------------------------------
class FrequentKeyUnifier(Unifier):
    """Picks the most (or least) frequent keys among every partition's winners."""

    least = Property(bool, default=False)
    as_list = Property(bool, default=False, doc="rows are lists of tied keys (the list port)")

    def __init__(self, least: bool = False, as_list: bool = False) -> None:
        self.configure(least=least, as_list=as_list)

    def begin_window(self, window_id: int) -> None:
        self._rows: list[dict[str, Any]] = []

    def process(self, value: Any) -> None:
        self._rows.extend(value if self.as_list else [value])

    def end_window(self) -> None:
        winners = _winners(self._rows, self.least)
        if winners:
            self.output.emit(winners if self.as_list else winners[0])


def _winners(rows: list[dict[str, Any]], least: bool) -> list[dict[str, Any]]:
    if not rows:
        return []
    best = (min if least else max)(r["count"] for r in rows)
    return sorted((r for r in rows if r["count"] == best), key=lambda r: order_key(r["key"]))


class MostFrequentKey(AlgoOperator):
    """The key (or keys, on a tie) that occurred most often in each application window.

    Output ``most``: ``{"key": k, "count": n}`` (the smallest key on a tie); output ``list``:
    one list of every tied ``{"key": k, "count": n}``. Partition by key (each key's count in
    one partition); the unifiers pick the winners among partitions.

    Example:
        >>> from malhar.algo import MostFrequentKey
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(MostFrequentKey())
        >>> h.run_window([("data", "x"), ("data", "y"), ("data", "x")])
        >>> h.sink("most").tuples
        [{'key': 'x', 'count': 2}]
    """

    PARTITIONING: ClassVar[str] = "keyed by `key` (whole tuple by default), with unifiers"
    LEAST: ClassVar[bool] = False

    data = InputPort()
    most = OutputPort()
    list = OutputPort()
    error = OutputPort(error=True)

    FIELDS_READ = {"data": ("key",)}

    key = Property(FIELD_TYPES, default=None, doc="the field counted; None: the tuple itself")

    #: key bytes -> [key, count] of the open application window
    counts = State(dict)

    def __init__(self, key: FieldSpec = None) -> None:
        self.configure(key=key)

    def partitioning(self) -> Partitioning:
        return Partitioning("keyed", {"data": FieldCodec(self.key)})

    def get_unifier(self, port: str) -> FrequentKeyUnifier | None:
        if port in ("most", "list"):
            return FrequentKeyUnifier(least=self.LEAST, as_list=port == "list")
        return None

    def setup(self, context: Any) -> None:
        self._get = getter(self.key)

    def _count(self, k: Any, n: int) -> None:
        b = key_bytes(k)
        entry = self.counts.get(b)
        if entry is None:
            self.counts[b] = [k, n]
        else:
            entry[1] += n

    def process(self, t: Any) -> None:
        try:
            k = self._get(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.key))
            return
        self._count(k, 1)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        try:
            col = column(batch, self.key)
        except KeyError:
            for row in rows_of(batch, self.key):
                self.process(row)
            return
        if self.key is None and batch.num_columns > 1:
            for row in batch.to_pylist():
                self.process(row)
            return
        counted = pc.value_counts(col)
        for k, n in zip(
            counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True
        ):
            self._count(k, n)

    def end_window(self) -> None:
        winners = _winners([{"key": k, "count": n} for k, n in self.counts.values()], self.LEAST)
        if winners:
            self.most.emit(winners[0])
            self.list.emit(winners)
        self.counts = {}


class LeastFrequentKey(MostFrequentKey):
    """The key (or keys, on a tie) that occurred least often in each application window.

    Like :class:`MostFrequentKey`; its output port ``most`` carries the least frequent key.

    Example:
        >>> from malhar.algo import LeastFrequentKey
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(LeastFrequentKey())
        >>> h.run_window([("data", "x"), ("data", "y"), ("data", "x")])
        >>> h.sink("most").tuples
        [{'key': 'y', 'count': 1}]
    """

    LEAST = True


# -- merge sort --------------------------------------------------------------------------------
class MergeSortUnifier(Unifier):
    """Merges the sorted runs of every partition into one sorted window."""

    order_by = Property(FIELD_TYPES, default=None)
    descending = Property(bool, default=False)

    def __init__(self, order_by: FieldSpec = None, descending: bool = False) -> None:
        self.configure(order_by=order_by, descending=descending)

    def setup(self, context: Any) -> None:
        self._get = getter(self.order_by)

    def begin_window(self, window_id: int) -> None:
        self._items: list[tuple[tuple, Any]] = []

    def process(self, t: Any) -> None:
        self._items.append(((order_key(self._get(t)), TieBreak(t)), t))

    def end_window(self) -> None:
        # Timsort finds the partitions' sorted runs and merges them: O(n log partitions)
        self._items.sort(key=lambda it: it[0], reverse=self.descending)
        for _, t in self._items:
            self.output.emit(t)


class MergeSort(AlgoOperator):
    """Sorts each application window's tuples by ``order_by``; the unifier merges the sorted
    partitions (Malhar's ``MergeSort``).

    Output ``sort``: the window's tuples in order (ties broken by the tuple itself).

    Example:
        >>> from malhar.algo import MergeSort
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(MergeSort(order_by="t"))
        >>> h.run_window([("data", {"t": 3}), ("data", {"t": 1}), ("data", {"t": 2})])
        >>> [r["t"] for r in h.sink("sort").tuples]
        [1, 2, 3]
    """

    PARTITIONING: ClassVar[str] = "unifier (any partitioning; the unifier merges sorted runs)"

    data = InputPort()
    sort = OutputPort()
    error = OutputPort(error=True)

    FIELDS_READ = {"data": ("order_by",)}

    order_by = Property(FIELD_TYPES, default=None, doc="sort field; None: the tuple itself")
    descending = Property(bool, default=False, doc="largest first")

    #: [(sort key, tuple)] of the open application window
    held = State(list)

    def __init__(self, order_by: FieldSpec = None, descending: bool = False) -> None:
        self.configure(order_by=order_by, descending=descending)

    def partitioning(self) -> Partitioning:
        return Partitioning("unifier")

    def get_unifier(self, port: str) -> MergeSortUnifier | None:
        return MergeSortUnifier(self.order_by, self.descending) if port == "sort" else None

    def setup(self, context: Any) -> None:
        self._get = getter(self.order_by)

    def process(self, t: Any) -> None:
        try:
            v = self._get(t)
        except (KeyError, IndexError, TypeError) as exc:
            self._error(t, unreadable(exc, t, self.order_by))
            return
        self.held.append(((order_key(v), TieBreak(t)), t))

    def process_batch(self, batch: pa.RecordBatch) -> None:
        for row in rows_of(batch, self.order_by):  # dict rows when a field is named
            self.process(row)

    def end_window(self) -> None:
        self.held.sort(key=lambda it: it[0], reverse=self.descending)
        for _, t in self.held:
            self.sort.emit(t)
        self.held = []
