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
import logging
from typing import Any

from malhar.io.base.output import rows_json
from malhar.util.fs import StorageError, StorageNotFoundError
from malhar.util.fs.names import encode_segment
from malhar.util.fs.resolve import filesystem_for
from malhar.util.fs.urls import child_url

__all__ = ["RejectedLog"]

log = logging.getLogger("malhar.io")


class RejectedLog:
    """The rejected rows of one output partition's windows, one file per window.

    Args:
        checkpoint: the application's checkpoint root (local path or ``hdfs://``).
        operator: the operator's name.
        partition: the output partition.
    """

    def __init__(self, checkpoint: str, operator: str, partition: int) -> None:
        self.url = child_url(
            checkpoint, "malhar", "rejected", encode_segment(operator), str(partition)
        )
        self.fs, self.root = filesystem_for(self.url)
        #: windows with a file (None: not listed yet; listed on the first purge)
        self._kept: set[int] | None = None
        #: windows this process saved rows for, and whether the attempt in progress did
        self._mine: set[int] = set()
        self._saved_now = False

    def _path(self, window: int) -> str:
        return self.fs.join(self.root, f"{window}.json")

    def begin(self) -> None:
        """An attempt at a window begins (the store's ``begin``)."""
        self._saved_now = False

    def save(self, window: int, rows: list[dict[str, Any]]) -> None:
        """Keep ``rows`` as ``window``'s (replacing what an earlier attempt kept)."""
        self.fs.write_atomic(self._path(window), rows_json(rows).encode())
        self._saved_now = True
        self._mine.add(window)
        if self._kept is not None:
            self._kept.add(window)

    def settle(self, window: int) -> None:
        """The attempt at ``window`` is about to commit (the store's ``store_committed``):
        an earlier attempt's rows that this one did not reject go."""
        if not self._saved_now and window in self._mine:
            self.fs.delete(self._path(window))
            self._mine.discard(window)

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
            except StorageError as exc:
                log.info("malhar: could not list %s: %s", self.root, exc)
                return
            self._kept = {int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()}
        for window in sorted(w for w in self._kept if w <= upto):
            try:
                self.fs.delete(self._path(window))
            except StorageError as exc:  # housekeeping: the next purge tries again
                log.info("malhar: could not delete %s: %s", self._path(window), exc)
                return
            self._kept.discard(window)
            self._mine.discard(window)
