"""What a failed application tells its user: the operator's error, not Spark's plan dump.

An exception in operator code reaches the driver as Spark's
``StreamingQueryException`` whose text holds the query's state, the logical plan
and the Python worker's traceback; the one line that matters (the
:class:`~malhar.errors.OperatorError` naming operator, partition and
window) sits in the middle. :func:`explain` turns it into an
:class:`ApplicationFailed` whose message starts with that line; Spark's
exception stays attached as ``__cause__`` and ``spark_exception``.
"""

from __future__ import annotations

import re

from malhar.errors import MalharError

_OPERATOR_ERROR = re.compile(r"^(?:malhar(?:\.\w+)*\.)?OperatorError: (.+)$", re.M)
_PYTHON_ERROR = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)): (.+)$", re.M
)
_SPARK_NOISE = ("StreamingQueryException", "PythonException", "SparkException", "Py4JJavaError")


class ApplicationFailed(MalharError, RuntimeError):
    """The application's streaming query failed.

    Attributes:
        application: the application's name.
        reason: the first line worth reading: the operator error (``operator 'words'
            partition 0 failed in setup of window 0: ...``) or the innermost Python error.
        spark_exception: what Spark raised, with the full traceback and plan.
    """

    def __init__(self, application: str, reason: str, spark_exception: BaseException) -> None:
        self.application = application
        self.reason = reason
        self.spark_exception = spark_exception
        super().__init__(
            f"application {application!r} failed: {reason}\n"
            "(the Spark exception is chained as __cause__; the driver log has the full trace)"
        )


def summary(text: str) -> str:
    """The line of a Spark failure's ``text`` that says what went wrong: the operator error
    (``OperatorError: operator 'x' partition 0 failed in ...``), else the first Python
    error, else the text's first 20 lines."""
    found = _OPERATOR_ERROR.findall(text)
    if found:
        return f"OperatorError: {found[-1].strip()}"
    for kind, message in _PYTHON_ERROR.findall(text):
        if not any(noise in kind for noise in _SPARK_NOISE):
            return f"{kind.rsplit('.', 1)[-1]}: {message.strip()}"
    lines = text.strip().splitlines()
    return "\n    ".join(lines[:20]) if lines else "(no message)"


def reason_of(exc: BaseException) -> str:
    """:func:`summary` of ``exc``'s message."""
    return summary(str(exc) or type(exc).__name__)


def explain(application: str, exc: BaseException) -> ApplicationFailed:
    """An :class:`ApplicationFailed` for the query exception ``exc`` (raise it ``from exc``)."""
    if isinstance(exc, ApplicationFailed):
        return exc
    return ApplicationFailed(application, reason_of(exc), exc)
