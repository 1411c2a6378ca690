"""Connector bases: the contracts a connector author subclasses.

- :class:`ReplayableInput`: an input operator that replays a window exactly, recording
  per window what it read in the partition's window data manager
  (``docs/howto-input.md``);
- :class:`DealtPositions`: an input that is its own partitioner, moving its read positions
  to a new partition count (``docs/partitioning.md``, "Inputs");
- :class:`TransactionalStore`, :class:`WindowCommitter`,
  :class:`TransactionalOutputOperator`, :class:`TransactionalStreamWriter`: an output
  that commits each window's data and its window id in one transaction, as an operator
  and as a Spark sink from the same store (``docs/howto-output.md``).
"""

from malhar.io.base.committer import WindowCommitter
from malhar.io.base.dealing import DealtPositions
from malhar.io.base.input import ReplayableInput, ReplayError, WindowRecord
from malhar.io.base.output import (
    NO_WINDOW,
    CommitMark,
    OutputError,
    RetryPolicy,
    TransactionalSettings,
    TransactionalStore,
    WindowKey,
    WindowRegressionError,
    rejected_row,
)
from malhar.io.base.output_operator import TransactionalOutputOperator
from malhar.io.base.spark_sink import TransactionalSinkSettings, TransactionalStreamWriter

__all__ = [
    "NO_WINDOW",
    "CommitMark",
    "DealtPositions",
    "OutputError",
    "ReplayError",
    "ReplayableInput",
    "RetryPolicy",
    "TransactionalOutputOperator",
    "TransactionalSettings",
    "TransactionalSinkSettings",
    "TransactionalStore",
    "TransactionalStreamWriter",
    "WindowCommitter",
    "WindowKey",
    "WindowRecord",
    "WindowRegressionError",
    "rejected_row",
]
