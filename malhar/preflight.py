"""Checking, before a launch, that the systems an application reads and writes are there:
each operator's :meth:`~malhar.Operator.preflight` (a Kafka cluster and its topics, a
database and its table and columns, an input or output path), run on the driver, changing
nothing. ``malhar validate --connect`` prints the result.

Example:
    >>> import os, tempfile
    >>> from malhar import DAG
    >>> from malhar.io.fs import LinesFileInput, LinesFileOutput
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "a-file"), "w").write("x\\n")
    >>> dag = DAG("preflight-doc")
    >>> src = dag.add_operator("in", LinesFileInput(path=folder))
    >>> out = dag.add_operator("out", LinesFileOutput(path=os.path.join(folder, "a-file", "out")))
    >>> _ = dag.add_stream("lines", src.output, out.input)
    >>> for check in check_connections(dag, timeout=5):
    ...     print(check.operator, check.ok, (check.found or check.problem).split(": ", 1)[1])
    in True 1 file(s) to read now, 2 bytes
    out False the output path file://.../a-file/out cannot be created: file://.../a-file is a file on its way
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from malhar.errors import MalharError

if TYPE_CHECKING:
    from malhar.dag import DAG

__all__ = ["ConnectionCheck", "check_connections"]

#: seconds a check waits for a system that does not answer (``--connect-timeout``)
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ConnectionCheck:
    """What the check of one operator found (``found``) or what is wrong (``problem``)."""

    operator: str
    found: str | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def check_connections(dag: DAG, timeout: float = DEFAULT_TIMEOUT_S) -> list[ConnectionCheck]:
    """The checks of every operator that reads or writes an external system, upstream
    first; an operator that touches none is left out. A check waits at most about
    ``timeout`` seconds for a system that does not answer, so a whole run takes at most
    about that per connector. Secret references (``${env:X}``, ``${file:...}``) are read
    here, in this process."""
    from malhar.validation import typed_inputs

    order = dag.topological_order()  # a cycle is said here (typed_inputs needs none)
    typed = typed_inputs(dag)
    out: list[ConnectionCheck] = []
    for name in order:
        meta = dag.operators[name]
        operator = meta.operator
        label = f"operator {name!r}"
        inputs = {p: typed[f"{name}.{p}"][0] for p in meta.inputs if f"{name}.{p}" in typed}
        try:
            if _takes_inputs(operator.preflight):
                found = operator.preflight(label, timeout, inputs=inputs)
            else:  # an override written without the parameter
                found = operator.preflight(label, timeout)
        except MalharError as exc:
            out.append(ConnectionCheck(name, problem=str(exc)))
            continue
        except Exception as exc:  # a check that broke is a finding too, not a crash
            out.append(
                ConnectionCheck(
                    name,
                    problem=f"{label}: the check failed unexpectedly: {type(exc).__name__}: {exc}",
                )
            )
            continue
        if found is not None:
            out.append(ConnectionCheck(name, found=found))
    return out


def _takes_inputs(check: Callable[..., Any]) -> bool:
    """Whether a ``preflight`` (perhaps a user's override) has the ``inputs`` parameter."""
    try:
        parameters = inspect.signature(check).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "inputs" or p.kind is p.VAR_KEYWORD for p in parameters)
