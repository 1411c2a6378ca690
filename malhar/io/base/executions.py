"""Whether a Spark sink's micro-batch runs for the first time: read where Spark builds the
batch's writer, so that its tasks can skip the search for a partly committed batch.

A batch is *partly committed* when an earlier execution of it committed some partitions and
died before the others (:class:`~malhar.io.base.spark_sink.TransactionalStreamWriter`).
Learning that costs every task of every batch a look at every partition's committed batch
(a listing of folders, a meta-table query, every commit group of a Kafka output). Only a
batch that ran before can be partly committed, and the driver knows which batch it plans:
Spark writes a batch's offsets (``<checkpointLocation>/offsets/<batch>``) before it builds
the batch's writer, once per execution. The writer reads the newest batch there and the
batch recorded in ``<checkpointLocation>/malhar-executions/<sink name>``; another batch
means a first execution, and the record becomes this one. A re-run finds its batch
recorded (by the execution that died), so its tasks search as before; so does every batch
when the checkpoint is not a folder malhar reads where Spark does (:func:`checkpoint_folder`).
"""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import urlsplit

from malhar.util.fs import StorageConfigError, StorageError, filesystem_for
from malhar.util.fs.names import encode_segment

__all__ = ["checkpoint_folder", "checkpoint_option", "first_execution"]

log = logging.getLogger("malhar.io.output")

#: Spark's offset log in a streaming query's checkpoint: a file per planned batch
SPARK_OFFSETS = "offsets"
EXECUTIONS = "malhar-executions"


def checkpoint_option(options: dict[str, Any]) -> str | None:
    """The ``checkpointLocation`` option Spark passes to a sink (None: set another way)."""
    return next(
        (str(v) for k, v in options.items() if str(k).lower() == "checkpointlocation"), None
    )


def checkpoint_folder(checkpoint: str) -> tuple[Any, str] | str:
    """The filesystem and path of a query's ``checkpoint`` as Spark sees it, or why malhar
    cannot be sure to read it there.

    A path without a scheme is on Spark's default filesystem (often HDFS on a cluster):
    taken as local only when Spark's offset log exists there on this machine."""
    scheme = urlsplit(checkpoint).scheme
    if scheme:
        try:
            return filesystem_for(checkpoint)
        except StorageConfigError as exc:
            return f"checkpointLocation {checkpoint!r} is not a filesystem malhar reads ({exc})"
    if os.path.isabs(checkpoint) and os.path.isdir(os.path.join(checkpoint, SPARK_OFFSETS)):
        return filesystem_for(checkpoint)
    return (
        f"checkpointLocation {checkpoint!r} may be on Spark's default filesystem, not this "
        "machine's"
    )


def first_execution(checkpoint: str | None, sink: str) -> int | None:
    """The batch that sink ``sink`` of the query at ``checkpoint`` runs for the first time
    (None: a re-run, or unknown). Called where Spark builds the batch's writer (module doc)."""
    if not checkpoint:
        return None
    found = checkpoint_folder(checkpoint)
    if isinstance(found, str):
        return None
    fs, root = found
    root = root.rstrip("/")
    try:
        planned = [int(e.name) for e in fs.list(f"{root}/{SPARK_OFFSETS}") if e.name.isdigit()]
        if not planned:
            return None
        batch = max(planned)
        record = f"{root}/{EXECUTIONS}/{encode_segment(sink)}"
        if fs.exists(record) and fs.read_all(record).strip() == str(batch).encode():
            return None  # an earlier execution of it (or this one's second writer)
        fs.mkdirs(f"{root}/{EXECUTIONS}")
        fs.write_atomic(record, str(batch).encode())
    except StorageError as exc:
        log.info("%s: cannot tell a first execution from %s (%s)", sink, checkpoint, exc)
        return None
    return batch
