"""The unifier of partitioned windowed operators: merges partial accumulations, fires panes."""

from __future__ import annotations

from typing import Any

from malhar.control import ControlSender
from malhar.operator import CheckpointListener, OperatorContext, Unifier
from malhar.ports import InputPort
from malhar.window.errors import WindowError
from malhar.window.impl.core import Partial, WindowedCore

__all__ = ["WindowedUnifier"]


class WindowedUnifier(WindowedCore, Unifier, CheckpointListener):
    """Runs the windowing of a partitioned operator over its partitions' partials.

    Each partition of a combined operator sends, at every boundary, one
    :class:`~malhar.window.impl.core.Partial` per window (and key) it accumulated into;
    this unifier merges them into its own state with ``Accumulation.merge`` (merging
    session windows across partitions too), takes the watermark as the minimum over the
    partitions' watermark control tuples (which it passes on unchanged, with their
    senders, so the operator downstream sees every partition), and fires the panes with
    the operator's triggers and accumulation mode. Late tuples were already sent to the
    partitions' ``late`` ports.

    The engine runs one copy per downstream partition: every partial of a window must
    reach the same copy, so the operator downstream has one partition, or partitions its
    input by window.
    """

    input = InputPort(control_aware=True)

    emits_watermarks = False
    cascades = False  # it makes panes of partials: a cascade level would get panes

    def __init__(self, **settings: Any) -> None:
        self.configure(**settings)

    def setup(self, context: OperatorContext) -> None:
        self._core_setup(context)
        self._partial = False  # the unifier is where the panes are made
        self._name = f"{context.name} (unifier)"

    def begin_window(self, window_id: int) -> None:
        self._core_begin(window_id)

    def process(self, item: Any) -> None:
        if not isinstance(item, Partial):
            raise WindowError(
                f"{self._name}: expected the partial accumulations of a partitioned windowed "
                f"operator, got {type(item).__name__} {item!r}"
            )
        self._add_partial(item.window, item.key, item.acc, item.n)

    def process_control(self, payload: Any, sender: ControlSender | None = None) -> bool:
        return self._on_control(payload, sender, 0)

    def end_window(self) -> None:
        self._core_boundary()

    def checkpointed(self, window_id: int) -> None:
        self._core_checkpointed(window_id)

    def committed(self, window_id: int) -> None:
        self._store.committed(window_id)

    def teardown(self) -> None:
        store = self.__dict__.get("_store")
        if store is not None:
            store.teardown()
