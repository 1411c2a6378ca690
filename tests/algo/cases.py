"""The catalogue's operators as property-test cases: how to build one, random input windows.

Every registered ``malhar.algo`` operator appears here (``test_every_operator_has_a_case``
checks it), with inputs that mix clean tuples, Arrow batches and bad tuples.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from malhar import algo
from malhar.operator import Operator

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
INTS = st.integers(-20, 20)
POSITIVE = st.integers(1, 40)


@dataclass
class Case:
    name: str
    make: Callable[[], Operator]
    windows: st.SearchStrategy
    ordered: bool = False  # outputs compared as sequences (else as multisets)
    managed: bool = False  # needs a checkpoint folder (managed state)
    registered: tuple[str, ...] = ()  # the registry names it covers (default: name)


def _batched(rows: list[dict], schema: pa.Schema | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=schema)


@st.composite
def window(
    draw: Any,
    ports: dict[str, st.SearchStrategy],
    bad: st.SearchStrategy | None = None,
    schema: pa.Schema | None = None,
    max_size: int = 10,
) -> list[tuple[str, Any]]:
    """One window: tuples on each port, some of the clean ones as one Arrow batch per port."""
    out: list[tuple[str, Any]] = []
    for port, rows in ports.items():
        clean = draw(st.lists(rows, max_size=max_size))
        as_batch = schema is not None and clean and draw(st.booleans())
        if as_batch:
            cut = draw(st.integers(0, len(clean)))
            out.extend((port, r) for r in clean[:cut])
            out.append((port, _batched(clean[cut:], schema)))
        else:
            out.extend((port, r) for r in clean)
        if bad is not None:
            out.extend((port, b) for b in draw(st.lists(bad, max_size=2)))
    return out


def windows(one: st.SearchStrategy, max_windows: int = 4) -> st.SearchStrategy:
    return st.lists(one, min_size=1, max_size=max_windows)


KV = st.fixed_dictionaries({"k": KEYS, "v": INTS})
KV_SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
BAD_KV = st.sampled_from([{"k": "a"}, {"k": "b", "v": "x"}, {"v": 3}, {"k": "c", "v": None}])
POS_KV = st.fixed_dictionaries({"k": KEYS, "v": POSITIVE})


def _math_cases() -> list[Case]:
    out = []
    kv = windows(window({"data": KV}, BAD_KV, KV_SCHEMA))
    for cls in (algo.Sum, algo.Min, algo.Max, algo.Average, algo.Range, algo.CountKeyVal):
        out.append(Case(cls.__name__, lambda c=cls: c(key="k", value="v"), kv))
        out.append(Case(f"{cls.__name__}/global", lambda c=cls: c(value="v"), kv))
    out.append(Case("RunningAverage", lambda: algo.RunningAverage(key="k", value="v"), kv))
    two = windows(window({"numerator": KV, "denominator": KV}, BAD_KV, KV_SCHEMA))
    out.append(Case("Quotient", lambda: algo.Quotient(key="k", value="v", mult_by=10), two))
    out.append(Case("Margin", lambda: algo.Margin(value="v", percent=True), two))
    base = windows(window({"base": POS_KV, "data": KV}, BAD_KV, KV_SCHEMA))
    out.append(Case("Change", lambda: algo.Change(key="k", value="v"), base))
    alerts = windows(window({"data": KV}, BAD_KV, KV_SCHEMA))
    out.append(
        Case("ChangeAlert", lambda: algo.ChangeAlert(key="k", value="v", threshold=50), alerts)
    )
    return out


def _counter_cases() -> list[Case]:
    words = windows(
        window({"data": st.fixed_dictionaries({"w": KEYS})}, None, pa.schema([("w", pa.string())]))
    )
    return [Case("UniqueCounter", lambda: algo.UniqueCounter(key_column="w"), words)]


ROW = st.fixed_dictionaries({"k": KEYS, "v": INTS, "s": st.sampled_from(["x", "y"])})
ROW_SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("s", pa.string())])
BAD_ROW = st.sampled_from(
    [{"k": "a", "s": "x"}, {"s": "y", "v": 1}, {"k": "b", "v": None, "s": "x"}]
)


def _top_cases() -> list[Case]:
    rows = windows(window({"data": ROW}, BAD_ROW, ROW_SCHEMA))
    scalars = windows(window({"data": INTS}))
    out = []
    for cls in (algo.TopN, algo.BottomN, algo.TopNUnique, algo.BottomNUnique):
        out.append(Case(cls.__name__, lambda c=cls: c(n=2, order_by="v", key="k"), rows))
        out.append(
            Case(
                f"{cls.__name__}/global", lambda c=cls: c(n=3, order_by="v", window_field="w"), rows
            )
        )
        out.append(Case(f"{cls.__name__}/scalars", lambda c=cls: c(n=3), scalars))
    for cls in (algo.MostFrequentKey, algo.LeastFrequentKey):
        out.append(Case(cls.__name__, lambda c=cls: c(key="k"), rows))
        out.append(Case(f"{cls.__name__}/scalars", lambda c=cls: c(), scalars))
    out.append(Case("MergeSort", lambda: algo.MergeSort(order_by="v"), rows, ordered=True))
    out.append(
        Case("MergeSort/desc", lambda: algo.MergeSort(descending=True), scalars, ordered=True)
    )
    return out


def _distinct_cases() -> list[Case]:
    rows = windows(window({"data": ROW}, BAD_ROW, ROW_SCHEMA))
    scalars = windows(window({"data": INTS}))
    words = st.lists(KEYS, max_size=3)
    docs = windows(window({"data": st.fixed_dictionaries({"d": INTS, "w": words})}))
    return [
        Case("Distinct", lambda: algo.Distinct(field="k"), rows),
        Case("Distinct/scalars", lambda: algo.Distinct(), scalars),
        Case("UniqueValueCount", lambda: algo.UniqueValueCount(key="k", value="v"), rows),
        Case("FilterValues", lambda: algo.FilterValues(values=["a", "c"], field="k"), rows),
        Case(
            "FilterValues/typed",
            lambda: algo.FilterValues(
                values=[1, 2, 3], field="v", inverse=True, schema="k string, v bigint, s string"
            ),
            rows,
        ),
        Case("FilterKeys", lambda: algo.FilterKeys(keys=["k", "s"]), rows),
        Case("InvertIndex", lambda: algo.InvertIndex(key="d", value="w"), docs),
        Case("InvertIndex/rows", lambda: algo.InvertIndex(key="k", value="s"), rows),
        Case("Sampler", lambda: algo.Sampler(rate=0.5, field="k"), rows),
        Case("Sampler/rows", lambda: algo.Sampler(rate=0.3, seed=7), rows),
    ]


def _plumbing_cases() -> list[Case]:
    rows = windows(window({"data": ROW}, BAD_ROW, ROW_SCHEMA))
    two = windows(window({"data1": ROW, "data2": ROW}, None, ROW_SCHEMA))
    inputs = windows(window({"input": ROW}, BAD_ROW, ROW_SCHEMA))
    return [
        Case("StreamMerger", lambda: algo.StreamMerger(), two),
        Case(
            "StreamMerger/typed",
            lambda: algo.StreamMerger(schema="k string, v bigint, s string"),
            two,
        ),
        Case("StreamDuplicater", lambda: algo.StreamDuplicater(), rows),
        Case("Counter", lambda: algo.Counter(), inputs),
        Case("DevNull", lambda: algo.DevNull(), rows),
        Case("Throttle", lambda: algo.Throttle(rate=10_000_000), rows),
    ]


EXPR_ROW = st.fixed_dictionaries(
    {
        "k": st.one_of(st.none(), KEYS),
        "v": st.one_of(st.none(), INTS),
        "s": st.sampled_from(["x", "Yy", " z "]),
    }
)
EXPR_SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("s", pa.string())])


def _transform_cases() -> list[Case]:
    inputs = windows(window({"input": EXPR_ROW}, BAD_ROW, EXPR_SCHEMA))
    return [
        Case(
            "FilterOperator", lambda: algo.FilterOperator("v % 3 == 1 or k in ['a', 'b']"), inputs
        ),
        Case(
            "FilterOperator/callable",
            lambda: algo.FilterOperator(predicate=lambda t: t.get("v") == 1),
            inputs,
        ),
        Case(
            "TransformOperator",
            lambda: algo.TransformOperator(
                {"x": "v * 2 + 1", "u": "upper(strip(s))", "d": "10 / v"}, copy_fields=True
            ),
            inputs,
        ),
        Case(
            "ProjectionOperator",
            lambda: algo.ProjectionOperator(
                select_fields=["v", "k"], rename={"v": "value"}, schema="value bigint, k string"
            ),
            inputs,
        ),
    ]


LINE = st.builds(
    lambda i, w, p: f"{i},{w},{p}",
    st.integers(-99, 99),
    st.sampled_from(["tea", "jam", '"a,b"']),
    st.sampled_from(["1.5", "2", "", "x"]),
)
LINES_SCHEMA = pa.schema([("line", pa.string())])
JSON_LINE = st.one_of(
    st.builds(
        lambda i, t: json.dumps({"id": i, "t": t, "z": 0}),
        st.integers(-9, 9),
        st.sampled_from(["a", "b"]),
    ),
    st.sampled_from(['{"id": "x"}', "[1]", "{", '{"id": 1.5}']),
)


def _line_windows(lines: st.SearchStrategy) -> st.SearchStrategy:
    return windows(window({"input": lines}, st.sampled_from([b"\xff", 7, "1,2"]), None))


def _parse_cases() -> list[Case]:
    csv_rows = windows(window({"input": st.fixed_dictionaries({"line": LINE})}, None, LINES_SCHEMA))
    fixed = st.builds(
        lambda a, b: f"{a:<4}{b:>3}",
        st.sampled_from(["AB", "CDEF", ""]),
        st.sampled_from(["1", "22", "x", ""]),
    )
    regex = st.sampled_from(["1.2.3.4 GET 200", "h POST 404", "bad", "x y 2000"])
    rows = windows(window({"input": ROW}, BAD_ROW, ROW_SCHEMA))
    return [
        Case(
            "CsvParser",
            lambda: algo.CsvParser(schema="id bigint, name string, price double"),
            _line_windows(LINE),
        ),
        Case(
            "CsvParser/batches",
            lambda: algo.CsvParser(schema="id bigint, name string, price double"),
            csv_rows,
        ),
        Case(
            "JsonParser",
            lambda: algo.JsonParser(schema="id bigint, t string"),
            _line_windows(JSON_LINE),
        ),
        Case(
            "JsonParser/untyped",
            lambda: algo.JsonParser(
                json_schema={
                    "type": "object",
                    "required": ["id"],
                    "properties": {"id": {"type": "integer"}},
                }
            ),
            _line_windows(JSON_LINE),
        ),
        Case(
            "FixedWidthParser",
            lambda: algo.FixedWidthParser(schema="code string, n int", widths=[4, 3]),
            _line_windows(fixed),
        ),
        Case(
            "RegexParser",
            lambda: algo.RegexParser(
                schema="host string, status int", pattern=r"^(?P<host>\S+) \w+ (?P<status>\d+)$"
            ),
            _line_windows(regex),
        ),
        Case("CsvFormatter", lambda: algo.CsvFormatter(fields=["k", "v"]), rows),
        Case("JsonFormatter", lambda: algo.JsonFormatter(), rows),
    ]


@st.composite
def _events(draw: Any, max_windows: int = 4) -> list[list[tuple[str, Any]]]:
    """Windows of events {id, t}; t within window w is in [w*1000, w*1000+999] (never later
    than the expiry horizon), some of them repeated, some as a batch."""
    out = []
    schema = pa.schema([("id", pa.int64()), ("t", pa.int64())])
    for w in range(draw(st.integers(1, max_windows))):
        events = draw(
            st.lists(
                st.builds(
                    lambda i, o, w=w: {"id": i, "t": w * 1000 + o},
                    st.integers(0, 6),
                    st.sampled_from([0, 10, 999]),
                ),
                max_size=10,
            )
        )
        events += draw(st.lists(st.sampled_from(events), max_size=4)) if events else []
        items: list[tuple[str, Any]] = [("input", e) for e in events]
        if events and draw(st.booleans()):
            items = [("input", pa.RecordBatch.from_pylist(events, schema=schema))]
        items += [
            ("input", b)
            for b in draw(
                st.lists(
                    st.sampled_from([{"id": 1}, {"id": 2, "t": "x"}, {"id": {"d": 1}, "t": 5}]),
                    max_size=2,
                )
            )
        ]
        out.append(items)
    return out


def _dedup_cases() -> list[Case]:
    return [
        Case(
            "TimeBasedDedup",
            lambda: algo.TimeBasedDedup(key="id", time="t", expire_after=5000, bucket_span=2000),
            _events(),
            managed=True,
        ),
        Case(
            "BoundedDedup",
            lambda: algo.BoundedDedup(key="id", max_keys=100),
            _events(),
            managed=True,
        ),
    ]


def _join_cases() -> list[Case]:
    left = st.fixed_dictionaries({"k": st.integers(0, 4), "a": INTS, "t": st.integers(0, 50)})
    right = st.fixed_dictionaries({"k": st.integers(0, 4), "b": INTS, "t": st.integers(0, 50)})
    schema = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("t", pa.int64())])
    bad = st.sampled_from([{"a": 1}, "text", {"k": {"x": 1}, "t": 1}])
    both = windows(window({"left": left, "right": right}, bad, schema), max_windows=5)
    table = st.fixed_dictionaries({"k": st.integers(0, 4), "name": st.sampled_from(["p", "q"])})
    lookup = windows(window({"table": table, "stream": left}, bad, None), max_windows=4)
    return [
        Case("StreamJoin", lambda: algo.StreamJoin("k", expiry_windows=2), both, managed=True),
        Case(
            "StreamJoin/outer",
            lambda: algo.StreamJoin(
                "k", join_type="outer", expiry_windows=2, within=20, left_time="t", right_time="t"
            ),
            both,
            managed=True,
        ),
        Case(
            "StreamJoin/left",
            lambda: algo.StreamJoin("k", join_type="left", expiry_windows=1),
            both,
            managed=True,
        ),
        Case("LookupJoin", lambda: algo.LookupJoin("k", join_type="left"), lookup, managed=True),
    ]


_LOOKUP_DIR = tempfile.mkdtemp(prefix="malhar-cases-")
_LOOKUP = os.path.join(_LOOKUP_DIR, "keys.csv")
with open(_LOOKUP, "w") as _f:
    _f.write("k,label\na,first\nb,second\nc,\n")


def _enrich_cases() -> list[Case]:
    rows = windows(window({"input": ROW}, BAD_ROW, ROW_SCHEMA))
    return [
        Case(
            "Enricher",
            lambda: algo.Enricher(
                algo.FileLookup(_LOOKUP), lookup_fields=["k"], miss_policy="error"
            ),
            rows,
        ),
        Case(
            "Enricher/pass",
            lambda: algo.Enricher(
                algo.FileLookup(_LOOKUP), lookup_fields=["k"], miss_policy="pass"
            ),
            rows,
        ),
    ]


CASES: list[Case] = [
    *_enrich_cases(),
    *_join_cases(),
    *_dedup_cases(),
    *_parse_cases(),
    *_math_cases(),
    *_counter_cases(),
    *_top_cases(),
    *_distinct_cases(),
    *_plumbing_cases(),
    *_transform_cases(),
]
