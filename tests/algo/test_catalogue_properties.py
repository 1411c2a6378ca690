"""The catalogue-wide properties (issue 17): for random inputs (tuples, Arrow batches, bad
tuples), 1, 3 and 8 partitions with the operator's unifier give the one-partition result,
and a window replayed from the checkpoint before it emits the same tuples."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar import registry
from tests.algo.cases import CASES, Case
from tests.algo.partitions import normalized, run_partitioned, run_with_replay

_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
# operators on managed state open a local store per partition: fewer, larger examples
_MANAGED = settings(_SETTINGS, max_examples=8)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_partitions_give_the_one_partition_result(case: Case) -> None:
    @(_MANAGED if case.managed else _SETTINGS)
    @given(windows=case.windows, seed=st.integers(0, 2**16))
    def check(windows, seed) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Path(tmp) if case.managed else None
            one = normalized(run_partitioned(case.make, windows, 1, ckpt=ckpt), case.ordered)
            for n in (3, 8):
                got = run_partitioned(case.make, windows, n, seed=seed, ckpt=ckpt)
                assert normalized(got, case.ordered) == one, f"{n} partitions"

    check()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_replayed_window_emits_the_same_tuples(case: Case) -> None:
    @(_MANAGED if case.managed else _SETTINGS)
    @given(windows=case.windows, data=st.data())
    def check(windows, data) -> None:
        replayed = data.draw(st.integers(0, len(windows) - 1))
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Path(tmp) if case.managed else None
            [first], second = run_with_replay(case.make, windows, replayed, ckpt)
            assert second == first  # the very same tuples, in the same order

    check()


def test_every_catalogue_operator_has_a_case() -> None:
    covered = {n for c in CASES for n in (c.registered or (c.name.split("/")[0],))}
    catalogue = {
        name
        for name, entry in registry.available().items()
        if entry.target.startswith("malhar.algo") and entry.kind != "unifier"
    }
    assert catalogue - covered == set()
