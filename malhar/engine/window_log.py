"""The application's record of completed windows (driver side).

A window is complete once its micro-batch is in Spark's commit log. The source
records it (``MalharStreamReader.commit``, and ``latestOffset`` for the last
window of a run), in Spark's driver-side source process: the only writer while
the query runs. Read at start-up: a run that finds no Spark checkpoint continues
after the largest completed window instead of restarting at 0, so window ids
never go backwards. Backed by the storage manager (``FSWindowDataManager``) under
``<checkpoint>/malhar/wal/__app__``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

APP_OPERATOR = "__app__"


class WindowLog:
    def __init__(self, checkpoint: str, integrity_key: str | bytes | None = None) -> None:
        self.checkpoint = checkpoint.rstrip("/")
        self.integrity_key = integrity_key

    def __getstate__(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "integrity_key": self.integrity_key}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.checkpoint = state["checkpoint"]
        self.integrity_key = state.get("integrity_key")

    @property
    def root(self) -> str:
        """The window data managers' root (:func:`malhar.operator.wal_root`)."""
        from malhar.operator import wal_root

        return wal_root(self.checkpoint)

    @cached_property
    def _manager(self) -> Any:
        from malhar.util import FSWindowDataManager

        manager = FSWindowDataManager(
            self.root,
            APP_OPERATOR,
            serializer="json",
            segment_bytes=1 << 20,
            integrity_key=self.integrity_key,
        )
        manager.setup()
        return manager

    def largest_completed(self) -> int:
        return self._manager.largest_completed_window()

    def record(self, window: int, info: dict[str, Any]) -> bool:
        """Record ``window`` as completed; False if it already was (a replayed commit).

        The recorder is the log's only writer while the query runs, so its own view of
        the log decides (no listing of the log's folder per window: a round trip on
        HDFS)."""
        if window <= self._manager.partition_largest_window():
            return False
        self._manager.save(info, window)
        return True

    def get(self, window: int) -> dict[str, Any] | None:
        return self._manager.retrieve(window)

    def purge(self, committed: int) -> None:
        self._manager.committed(committed)

    def close(self) -> None:
        """Release the log's files (the manager reopens them on next use)."""
        manager = self.__dict__.pop("_manager", None)
        if manager is not None:
            manager.teardown()
