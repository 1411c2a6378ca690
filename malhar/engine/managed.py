"""The managed state of one partition's operators, driven by the windows.

An operator asks for its store with ``context.managed_state()`` (usually in
``setup``); the engine then owns the store's life (see ``docs/state.md``):

- created on first use, and brought to exactly "after the previous window"
  (``restore``), on any worker: a worker that lost its disk rebuilds it from the
  checkpoint filesystem;
- ``checkpoint(w)`` after ``end_window`` of every window, before the window counts
  as done: only what changed in ``w`` is written;
- ``committed(w)`` merges and purges files no restore can need;
- ``close()`` when the partition is torn down (the checkpoint stays).

The operator keeps the store and its structures as runtime attributes: they are
not part of the operator's pickled snapshot.
"""

from __future__ import annotations

from typing import Any

from malhar import secrets

#: memory budget of one operator partition's managed state, unless the operator asks
DEFAULT_BUDGET_BYTES = 64 << 20


class ManagedStates:
    """The managed stores of the operators of one group partition (or one harness)."""

    def __init__(
        self,
        root: str | None,
        partition: int,
        integrity_key: str | bytes | None = None,
        *,
        roots: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        #: operators whose managed state lives under another root (a repartitioning moved it)
        self.roots = dict(roots or {})
        self.partition = partition
        self.integrity_key = integrity_key
        self.stores: dict[str, Any] = {}

    def get(self, operator: str, after_window: int, **options: Any) -> Any:
        """``operator``'s store, restored to the state after ``after_window`` when created."""
        store = self.stores.get(operator)
        if store is not None:
            return store
        if self.root is None:
            raise RuntimeError(
                f"operator {operator!r}: managed state needs a checkpoint location "
                "(launch(..., checkpoint=...) or the CHECKPOINT attribute)"
            )
        from malhar.util.state import ManagedState
        from malhar.util.state.manager import default_local_dir

        key = secrets.resolve(self.integrity_key, "CHECKPOINT_INTEGRITY_KEY")
        options.setdefault("budget_bytes", DEFAULT_BUDGET_BYTES)
        root = self.roots.get(operator, self.root)
        # by the application's checkpoint, not the generation's root: every partitioning
        # uses the same local directories (a store of another chain is rebuilt)
        options.setdefault("local_dir", default_local_dir(self.root, operator, self.partition))
        store = ManagedState(root, operator, self.partition, signer=key, **options)
        store.restore(after_window)
        self.stores[operator] = store
        return store

    def checkpoint(self, window: int) -> None:
        for store in self.stores.values():
            store.checkpoint(window)

    def committed(self, window: int) -> None:
        for store in self.stores.values():
            store.committed(window)

    def close(self) -> None:
        stores, self.stores = self.stores, {}
        for store in stores.values():
            store.close()
