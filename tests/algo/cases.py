"""The catalogue's operators as property-test cases: how to build one, random input windows.

Every registered ``malhar.algo`` operator appears here (``test_every_operator_has_a_case``
checks it), with inputs that mix clean tuples, Arrow batches and bad tuples.
"""

from __future__ import annotations

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


CASES: list[Case] = [*_math_cases(), *_counter_cases()]
