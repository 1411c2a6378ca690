"""``budget_bytes`` of managed state: a wrong type or a too small value fails clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from malhar.errors import ConfigError
from malhar.util.state import ManagedState


@pytest.mark.parametrize("value", ["64MB", 64.0 * (1 << 20), None, True])
def test_budget_bytes_of_another_type_is_named(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        ManagedState(str(tmp_path), "op", partition=0, budget_bytes=value)  # type: ignore[arg-type]
    shown = f"{type(value).__name__} {value!r}"
    assert f"budget_bytes must be an int (bytes), got {shown}" in str(err.value)


def test_budget_bytes_below_the_minimum(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"budget_bytes must be at least 8 MiB .*got 32768"):
        ManagedState(str(tmp_path), "op", partition=0, budget_bytes=32 << 10)
    with pytest.raises(ValueError):  # ConfigError is a ValueError, as the check was
        ManagedState(str(tmp_path), "op", partition=0, budget_bytes=(8 << 20) - 1)


def test_budget_bytes_at_the_minimum_is_accepted(tmp_path: Path) -> None:
    ms = ManagedState(str(tmp_path), "op", partition=0, budget_bytes=8 << 20)
    assert ms.budget_bytes == 8 << 20
    ms.close()


def test_spillable_window_storage_refuses_a_small_budget_when_built() -> None:
    """Found when the application is built (``malhar validate``), not in a task's setup."""
    from malhar.window import WindowedOperator
    from malhar.window.impl.spillable import SpillableWindowedStorage

    with pytest.raises(ConfigError, match=r"SpillableWindowedStorage: budget_bytes must be at"):
        SpillableWindowedStorage(32 << 10)
    with pytest.raises(ConfigError, match=r"budget_bytes must be at least 8 MiB .*got 1000"):
        WindowedOperator().configure(storage={"SpillableWindowedStorage": {"budget_bytes": 1000}})
