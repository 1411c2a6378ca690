"""Checkpointing a group partition's operator state with its window.

What is saved per window (see :mod:`malhar.state`): each operator's and unifier's
``State`` fields and custom ``snapshot()``, and which application windows are
open. Configuration is not saved: a restore clones the configured operators of the
plan and puts the state back into the clones. The bytes are written only when they
differ from the last ones written (a stateless chain writes once).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from pyspark import cloudpickle

from malhar.engine.state_store import StateStore
from malhar.errors import StateError
from malhar.state import explain_snapshot_failure, restore_window_snapshot, window_snapshot


class PartitionSnapshots:
    """Saves and loads the state of one group partition (None ``store``: not kept)."""

    def __init__(self, store: StateStore | None) -> None:
        self.store = store
        self.last_saved: bytes | None = None

    def load(self, window: int) -> dict[str, Any] | None:
        """The state after window ``window`` (the newest snapshot at or before it)."""
        if self.store is None:
            return None
        found = self.store.load(window)
        if found is None:
            return None
        _, data = found
        self.last_saved = data
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise StateError(
                f"the state snapshot of {self.store.describe(found[0])} cannot be read: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def save(
        self,
        window: int,
        ops: dict[str, Any],
        unifiers: dict[str, Any],
        open_windows: dict[str, bool],
        names: Iterator[tuple[str, Any]],
    ) -> bool:
        """Write the state after ``window`` if it changed; True when written."""
        if self.store is None:
            return False
        state = {
            "ops": {n: window_snapshot(op) for n, op in ops.items()},
            "unifiers": {key: window_snapshot(u) for key, u in unifiers.items()},
            "open": dict(open_windows),
        }
        try:
            data = cloudpickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            for name, op in names:
                try:
                    cloudpickle.dumps(window_snapshot(op), protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:
                    raise explain_snapshot_failure(name, op, exc) from exc
            raise
        if data == self.last_saved:
            return False
        self.store.save(window, data)
        self.last_saved = data
        return True


def restore_into(ops: dict[str, Any], saved: dict[str, dict[str, Any]]) -> None:
    """Put saved operator states back into fresh clones (by name or route id)."""
    for key, op in ops.items():
        if key in saved:
            restore_window_snapshot(op, saved[key])
