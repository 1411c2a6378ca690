"""Connector bases: what a connector author subclasses (see ``docs/howto-output.md``)."""

from malhar.io.base.output import (
    NO_WINDOW,
    CommitMark,
    OutputError,
    RetryPolicy,
    TransactionalOutputOperator,
    TransactionalSettings,
    TransactionalSinkSettings,
    TransactionalStore,
    TransactionalStreamWriter,
    WindowCommitter,
    WindowKey,
    WindowRegressionError,
    rejected_row,
)

__all__ = [
    "NO_WINDOW",
    "CommitMark",
    "OutputError",
    "RetryPolicy",
    "TransactionalOutputOperator",
    "TransactionalSettings",
    "TransactionalSinkSettings",
    "TransactionalStore",
    "TransactionalStreamWriter",
    "WindowCommitter",
    "WindowKey",
    "WindowRegressionError",
    "rejected_row",
]
