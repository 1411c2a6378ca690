"""The rows of a partly committed micro-batch, kept aside until the driver applies them.

A Spark sink's partition that did not commit batch ``N``, in a batch other partitions
committed in an earlier execution, stages its rows instead of writing them
(:class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`). A store that cannot stage
inside its own system (a directory, a Kafka topic) keeps them here: one Arrow IPC file per
partition, batch and run, ``staged-<batch, 20 digits>-<run>.arrow``, in a folder of a malhar
filesystem (local or HDFS) that the driver can read too.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from malhar.util.fs import StorageNotFoundError

__all__ = ["STAGED_PREFIX", "StagedBatches", "staged_batch_window"]

STAGED_PREFIX = "staged-"


def staged_batch_window(name: str) -> int | None:
    """The batch of a staged file's name (None: not a staged batch)."""
    if name.startswith(STAGED_PREFIX) and name.endswith(".arrow"):
        head = name[len(STAGED_PREFIX) :].split("-", 1)[0]
        return int(head) if head.isdigit() else None
    return None


class StagedBatches:
    """One sink partition's staged batches in ``folder`` of ``fs``.

    The folder may hold other files (the file store keeps its pieces beside them): only
    ``staged-*.arrow`` names are read or deleted.
    """

    def __init__(self, fs: Any, folder: str) -> None:
        self.fs = fs
        self.folder = folder.rstrip("/")

    def path(self, window: int, run: str) -> str:
        return f"{self.folder}/{STAGED_PREFIX}{window:020d}-{run}.arrow"

    def stage(self, window: int, run: str, rows: pa.Table) -> None:
        """Keep ``rows`` as this partition's input of ``window`` in ``run`` (atomically,
        replacing an earlier staging of the same run)."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows)
        self.fs.mkdirs(self.folder)
        self.fs.write_atomic(self.path(window, run), memoryview(sink.getvalue()))

    def staged(self, window: int, run: str) -> pa.Table | None:
        """The rows :meth:`stage` kept (None: none)."""
        try:
            data = self.fs.read_all(self.path(window, run))
        except StorageNotFoundError:
            return None
        return pa.ipc.open_file(pa.py_buffer(data)).read_all()

    def drop(self, window: int) -> None:
        """Delete the staged batches up to ``window`` (of every run)."""
        try:
            entries = self.fs.list(self.folder)
        except StorageNotFoundError:
            return
        for entry in entries:
            staged = staged_batch_window(entry.name)
            if staged is not None and staged <= window:
                try:
                    self.fs.delete(entry.path)
                except StorageNotFoundError:
                    pass  # dropped by a step run again after a crash
