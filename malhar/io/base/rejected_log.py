"""Rejected rows kept beside the checkpoint, for stores that cannot keep them in their own
transaction (a Kafka transaction holds only records of its topics).

A window's error-port rows must come back when the window is replayed after its
transaction committed (the driver died before the window was complete in the whole
application): the committer then skips the window and re-emits what
:meth:`~malhar.io.base.output.TransactionalStore.read_rejected` gives. Here they are a JSON
file per window (``<checkpoint>/malhar/rejected/<operator>/<partition>/<window>.json``,
values that JSON has no form for as their ``str``, as the file output keeps them), written
inside the window's transaction, before its commit, and deleted once ``committed(W)`` says
no replay can ask for them again.
"""

from __future__ import annotations

import json
from typing import Any

from malhar.util.fs import StorageNotFoundError
from malhar.util.fs.resolve import filesystem_for
from malhar.util.fs.urls import child_url

__all__ = ["RejectedLog"]


class RejectedLog:
    """The rejected rows of one output partition's windows, one file per window.

    Args:
        checkpoint: the application's checkpoint root (local path or ``hdfs://``).
        operator: the operator's name.
        partition: the output partition.
    """

    def __init__(self, checkpoint: str, operator: str, partition: int) -> None:
        self.url = child_url(checkpoint, "malhar", "rejected", operator, str(partition))
        self.fs, self.root = filesystem_for(self.url)
        #: windows with a file (None: not listed yet; listed on the first purge)
        self._kept: set[int] | None = None

    def _path(self, window: int) -> str:
        return self.fs.join(self.root, f"{window}.json")

    def save(self, window: int, rows: list[dict[str, Any]]) -> None:
        """Keep ``rows`` as ``window``'s (replacing what an earlier attempt kept)."""
        self.fs.write_atomic(self._path(window), json.dumps(rows, default=str).encode())
        if self._kept is not None:
            self._kept.add(window)

    def load(self, window: int) -> list[dict[str, Any]]:
        """The rows kept with ``window`` ([] when it had none)."""
        try:
            return json.loads(self.fs.read_all(self._path(window)))
        except StorageNotFoundError:
            return []

    def purge(self, upto: int) -> None:
        """Delete the files of windows up to ``upto`` (complete in the whole application)."""
        if self._kept is None:
            try:
                names = [s.name for s in self.fs.list(self.root)]
            except StorageNotFoundError:
                names = []
            self._kept = {int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()}
        for window in sorted(w for w in self._kept if w <= upto):
            self.fs.delete(self._path(window))
            self._kept.discard(window)
