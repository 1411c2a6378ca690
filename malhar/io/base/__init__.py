"""Connector bases: what a connector author subclasses (see ``docs/howto-output.md``)."""

from malhar.io.base.output import (
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
)

__all__ = [
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
]
