"""The catalogue-wide properties (issue 17): for random inputs (tuples, Arrow batches, bad
tuples), 1, 3 and 8 partitions with the operator's unifier give the one-partition result,
and a window replayed from the checkpoint before it emits the same tuples."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar import registry
from tests.algo.cases import CASES, Case
from tests.algo.partitions import (
    normalized,
    run_application_window,
    run_partitioned,
    run_with_replay,
)

# Bounded and derandomized: the same examples on every run. Profiles (select one with
# MALHAR_ALGO_PROFILE): "algo-ci" (the default, for the whole suite in CI: 10 examples
# per case, 4 for operators on managed state) and "algo-thorough" (50 and 12).
_EXAMPLES = {"algo-ci": (10, 4), "algo-thorough": (50, 12)}
for _name, (_plain, _managed) in _EXAMPLES.items():
    settings.register_profile(
        _name,
        max_examples=_plain,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    settings.register_profile(
        f"{_name}-managed", settings.get_profile(_name), max_examples=_managed
    )
_PROFILE = os.environ.get("MALHAR_ALGO_PROFILE", "algo-ci")
if _PROFILE not in _EXAMPLES:
    raise ValueError(f"MALHAR_ALGO_PROFILE={_PROFILE!r}: use one of {sorted(_EXAMPLES)}")
_SETTINGS = settings.get_profile(_PROFILE)
# operators on managed state open a local store per partition: fewer, larger examples
_MANAGED = settings.get_profile(f"{_PROFILE}-managed")


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


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_restored_inside_an_application_window_gives_the_uninterrupted_result(
    case: Case,
) -> None:
    # APPLICATION_WINDOW_COUNT > 1: a partition can be rebuilt from its checkpoint between
    # two streaming windows of one application window, without a new begin_window
    @(_MANAGED if case.managed else _SETTINGS)
    @given(windows=case.windows, data=st.data())
    def check(windows, data) -> None:
        cut = data.draw(st.integers(0, max(0, len(windows) - 2)))
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Path(tmp) if case.managed else None
            whole = run_application_window(case.make, windows, None, ckpt and ckpt / "a")
            again = run_application_window(case.make, windows, cut, ckpt and ckpt / "b")
            assert normalized(again, case.ordered) == normalized(whole, case.ordered)

    check()


def test_every_catalogue_operator_has_a_case() -> None:
    covered = {n for c in CASES for n in (c.registered or (c.name.split("/")[0],))}
    catalogue = {
        name
        for name, entry in registry.available().items()
        if entry.target.startswith("malhar.algo") and entry.kind != "unifier"
    }
    assert catalogue - covered == set()
