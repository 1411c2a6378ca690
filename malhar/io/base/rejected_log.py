"""Rejected rows kept beside the checkpoint, for stores that cannot keep them in their own
transaction (a Kafka transaction holds only records of its topics).

A window's error-port rows must come back when the window is replayed after its
transaction committed (the driver died before the window was complete in the whole
application): the committer then skips the window and re-emits what
:meth:`~malhar.io.base.output.TransactionalStore.read_rejected` gives. Here they are a JSON
file per window (``<checkpoint>/malhar/rejected/<operator>/<partition>/<window>.json``,
values that JSON has no form for as their ``str``, as the file output keeps them), written
inside the window's transaction, before its commit, and deleted once ``committed(W)`` says
no replay can ask for them again. Partition 0 also purges the folders of partitions a
repartitioning removed (their index is at least the partition count now).
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
        partitions: how many partitions the operator has now.
    """

    def __init__(self, checkpoint: str, operator: str, partition: int, partitions: int = 1) -> None:
        self.url = child_url(
            checkpoint, "malhar", "rejected", encode_segment(operator), str(partition)
        )
        self.fs, self.root = filesystem_for(self.url)
        self.operator_root = self.fs.dirname(self.root)
        #: partition 0 looks once for the folders of partitions that no longer exist
        self._removed: list[str] | None = None if partition == 0 else []
        self.partitions = partitions
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
            windows = self._windows(self.root)
            if windows is None:
                return
            self._kept = windows
        for window in sorted(w for w in self._kept if w <= upto):
            if not self._delete(self._path(window)):
                return
            self._kept.discard(window)
            self._mine.discard(window)
        self._purge_removed(upto)

    def _purge_removed(self, upto: int) -> None:
        """Partition 0: the windows up to ``upto`` of partitions a repartitioning removed
        (no replay asks for a complete window, whichever partitioning wrote it)."""
        if self._removed is None:
            names = self._names(self.operator_root)
            if names is None:
                return
            self._removed = [
                self.fs.join(self.operator_root, n)
                for n in names
                if n.isdigit() and int(n) >= self.partitions
            ]
        for folder in list(self._removed):
            windows = self._windows(folder)
            if windows is None:
                return
            for window in sorted(w for w in windows if w <= upto):
                if not self._delete(self.fs.join(folder, f"{window}.json")):
                    return
            if all(w <= upto for w in windows) and self._delete(folder):
                self._removed.remove(folder)

    def _names(self, folder: str) -> list[str] | None:
        try:
            return [s.name for s in self.fs.list(folder)]
        except StorageNotFoundError:
            return []
        except StorageError as exc:
            log.info("malhar: could not list %s: %s", folder, exc)
            return None

    def _windows(self, folder: str) -> set[int] | None:
        names = self._names(folder)
        if names is None:
            return None
        return {int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()}

    def _delete(self, path: str) -> bool:
        try:
            self.fs.delete(path)
        except StorageError as exc:  # housekeeping: the next purge tries again
            log.info("malhar: could not delete %s: %s", path, exc)
            return False
        return True
