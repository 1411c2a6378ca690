"""StreamJoin's null keys: an inner side's tuple with a null key is dropped and counted in
``metrics()`` (``left_null_keys`` / ``right_null_keys``), an outer side's is emitted alone,
one tuple at a time and in Arrow batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from malhar import OperatorContext
from malhar.algo import StreamJoin
from malhar.testing.harness import OperatorHarness

SCHEMAS = {
    "left": pa.schema([("id", pa.int64()), ("n", pa.int64())]),
    "right": pa.schema([("id", pa.int64()), ("m", pa.int64())]),
}
LEFT = [{"id": 1, "n": 0}, {"id": None, "n": 1}, {"id": 2, "n": 2}, {"id": None, "n": 3}]
RIGHT = [{"id": None, "m": 10}, {"id": 1, "m": 11}]
ZERO = {"errors": 0.0, "left_null_keys": 0.0, "right_null_keys": 0.0}


def _harness(tmp_path: Path, **props: Any) -> OperatorHarness:
    return OperatorHarness(
        StreamJoin(left_key="id", **props), OperatorContext(name="op", checkpoint=str(tmp_path))
    )


def _feed(port: str, rows: list[dict], as_batch: bool) -> list[tuple[str, Any]]:
    if as_batch:
        return [(port, pa.RecordBatch.from_pylist(rows, schema=SCHEMAS[port]))]
    return [(port, r) for r in rows]


def _window(h: OperatorHarness, as_batch: bool) -> None:
    h.run_window(_feed("left", LEFT, as_batch) + _feed("right", RIGHT, as_batch))


def _sorted(pairs: Any) -> list[tuple[Any, Any]]:
    return sorted(pairs, key=lambda p: [(v is None, v or 0) for v in p])


def _out(h: OperatorHarness) -> list[tuple[Any, Any]]:
    """The (left n, right m) of the joined rows, None for a side emitted alone."""
    return _sorted((r.get("n"), r.get("m")) for r in h.sink("output").tuples)


@pytest.mark.parametrize("as_batch", [False, True])
def test_inner_join_counts_the_null_keys_it_drops(tmp_path: Path, as_batch: bool) -> None:
    h = _harness(tmp_path)
    h.run_window([])
    assert h.operator.metrics() == ZERO
    _window(h, as_batch)
    assert _out(h) == [(0, 11)]
    assert h.sink("error").tuples == []  # counted, not errors
    assert h.operator.metrics() == {**ZERO, "left_null_keys": 2.0, "right_null_keys": 1.0}
    h.run_window(_feed("left", LEFT[:1], as_batch))
    assert h.operator.metrics() == ZERO  # per window
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize(
    ("how", "alone", "counted"),
    [
        ("left", [(1, None), (2, None), (3, None)], {"right_null_keys": 1.0}),
        ("right", [(None, 10)], {"left_null_keys": 2.0}),
        ("outer", [(1, None), (2, None), (3, None), (None, 10)], {}),
    ],
)
def test_outer_side_null_keys_are_emitted_alone_not_counted(
    tmp_path: Path, how: str, alone: list, counted: dict, as_batch: bool
) -> None:
    h = _harness(tmp_path, join_type=how)
    _window(h, as_batch)
    h.run_window([])  # the window after: unmatched tuples have expired
    assert _out(h) == _sorted([(0, 11), *alone])
    _window(h, as_batch)
    assert h.operator.metrics() == {**ZERO, **counted}
    h.teardown()


@pytest.mark.parametrize("as_batch", [False, True])
def test_null_keys_match_counts_nothing(tmp_path: Path, as_batch: bool) -> None:
    h = _harness(tmp_path, null_keys_match=True)
    _window(h, as_batch)
    assert _out(h) == [(0, 11), (1, 10), (3, 10)]
    assert h.operator.metrics() == ZERO
    h.teardown()


def test_a_key_tuple_with_a_null_part_is_counted(tmp_path: Path) -> None:
    h = _harness(tmp_path, right_key="k")
    h.run_window(
        [
            ("left", {"id": ("a", None), "n": 0}),
            ("left", {"id": ("a", 1), "n": 1}),
            ("right", {"k": ("a", None), "m": 2}),
            ("right", {"k": ("a", 1), "m": 3}),
        ]
    )
    assert _out(h) == [(1, 3)]
    assert h.operator.metrics() == {**ZERO, "left_null_keys": 1.0, "right_null_keys": 1.0}
    h.teardown()
