"""Filter, transform and project (Malhar's ``lib/filter``, ``lib/transform``,
``lib/projection``): by a Python callable, or by an expression string (see
:mod:`malhar.algo.expr` for its grammar) that runs vectorized on Arrow batches.

A tuple the expression or the callable cannot handle (a missing field, a type mismatch,
an exception) goes to the ``error`` port with the reason; the others go on. Set ``schema``
(Spark DDL) to type the output ports, so that batches stay Arrow between tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from malhar.algo._base import (
    AlgoOperator,
    SchemaProperty,
    TypedOutputs,
    emit_table,
)
from malhar.algo.expr import EvalError, Expression, ExpressionError, compile_expression
from malhar.errors import ConfigError
from malhar.ports import InputPort, OutputPort
from malhar.properties import Property

__all__ = ["FilterOperator", "ProjectionOperator", "TransformOperator"]


def _expression_problem(text: str) -> str | None:
    try:
        compile_expression(text)
    except ExpressionError as exc:
        return str(exc)
    return None


def _expressions_problem(value: dict) -> str | None:
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            return f"expected {{field: expression text}}, got {name!r}: {text!r}"
        why = _expression_problem(text)
        if why:
            return f"field {name!r}: {why}"
    return None


def _callable_problem(instead: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if callable(value):
            return None
        return (
            f"expected a Python function, got {type(value).__name__} {value!r} (in a JSON "
            f"application or --config, give {instead!r} instead)"
        )

    return check


def _as_row(t: Any) -> dict[str, Any]:
    if isinstance(t, dict):
        return t
    raise EvalError(f"expected a dict tuple, got {type(t).__name__}")


class FilterOperator(TypedOutputs, AlgoOperator):
    """Splits a stream by a condition: tuples for which it is True to ``truePort``, the
    others (False or None) to ``falsePort``.

    The condition is an expression string over the fields of dict tuples (``condition``;
    compiled to ``pyarrow.compute`` for batches) or a Python callable (``predicate``, given
    the tuple, any tuple type). ``schema`` types both outputs.

    Example:
        >>> from malhar.algo import FilterOperator
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(FilterOperator("amount >= 100 and country in ['FR', 'DE']"))
        >>> h.run_window(
        ...     [
        ...         ("input", {"amount": 120, "country": "FR"}),
        ...         ("input", {"amount": 20, "country": "DE"}),
        ...         ("input", {"amount": 5}),
        ...     ]
        ... )
        >>> h.sink("truePort").tuples, h.sink("falsePort").tuples
        ([{'amount': 120, 'country': 'FR'}], [{'amount': 20, 'country': 'DE'}])
        >>> h.sink("error").tuples
        [{'tuple': {'amount': 5}, 'reason': "no field 'country'"}]
    """

    PARTITIONING: ClassVar[str] = "stateless"

    input = InputPort()
    truePort = OutputPort()
    falsePort = OutputPort()
    error = OutputPort(error=True)

    condition = Property(str, default=None, check=_expression_problem, doc="an expression")
    predicate = Property(
        object,
        default=None,
        check=_callable_problem("condition"),
        doc="a callable(tuple) -> bool, instead",
    )
    schema = SchemaProperty("truePort", "falsePort", doc="Spark DDL of the stream")

    def __init__(
        self,
        condition: str | None = None,
        *,
        predicate: Callable[[Any], Any] | None = None,
        schema: str | None = None,
    ) -> None:
        self.configure(condition=condition, predicate=predicate, schema=schema)

    def setup(self, context: Any) -> None:
        if (self.condition is None) == (self.predicate is None):
            raise ConfigError(
                f"{context.name}: give FilterOperator exactly one of condition or predicate"
            )
        self._expr: Expression | None = (
            compile_expression(self.condition) if self.condition else None
        )

    def _test(self, t: Any) -> Any:
        if self._expr is not None:
            return self._expr.row(_as_row(t))
        try:
            return self.predicate(t)
        except Exception as exc:
            raise EvalError(f"predicate failed: {type(exc).__name__}: {exc}") from None

    def process(self, t: Any) -> None:
        try:
            ok = self._test(t)
        except EvalError as exc:
            self._error(t, str(exc))
            return
        if ok is not None and not isinstance(ok, bool):
            self._error(t, f"the condition gave {ok!r}, not a boolean")
        elif ok:
            self.truePort.emit(t)
        else:
            self.falsePort.emit(t)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._expr is None:
            for row in batch.to_pylist():
                self.process(row)
            return
        try:
            mask = self._expr.batch(batch)
            if not pa.types.is_boolean(mask.type):
                raise EvalError("not a boolean")
        except (EvalError, pa.ArrowException, TypeError, ValueError):
            for row in batch.to_pylist():  # find the bad rows the Python way
                self.process(row)
            return
        yes = pc.fill_null(mask, False)
        emit_table(self.truePort, batch.filter(yes))
        emit_table(self.falsePort, batch.filter(pc.invert(yes)))


class TransformOperator(TypedOutputs, AlgoOperator):
    """Computes output fields from expressions (Malhar's ``TransformOperator``).

    ``expressions`` maps each output field to an expression over the input fields; with
    ``copy_fields`` the input fields are kept too (computed ones replace them). A Python
    ``function`` (tuple -> dict) can be given instead. ``schema`` types ``output``.

    Example:
        >>> from malhar.algo import TransformOperator
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(TransformOperator({"total": "price * qty", "who": "upper(name)"}))
        >>> h.run_window([("input", {"price": 2.5, "qty": 4, "name": "ann"})])
        >>> h.sink("output").tuples
        [{'total': 10.0, 'who': 'ANN'}]
    """

    PARTITIONING: ClassVar[str] = "stateless"

    input = InputPort()
    output = OutputPort()
    error = OutputPort(error=True)

    expressions = Property(
        dict, default=None, check=_expressions_problem, doc="field -> expression"
    )
    function = Property(
        object,
        default=None,
        check=_callable_problem("expressions"),
        doc="a callable(tuple) -> dict, instead",
    )
    copy_fields = Property(bool, default=False, doc="keep the input fields as well")
    schema = SchemaProperty("output", doc="Spark DDL of the output")

    def __init__(
        self,
        expressions: dict[str, str] | None = None,
        *,
        function: Callable[[Any], dict] | None = None,
        copy_fields: bool = False,
        schema: str | None = None,
    ) -> None:
        self.configure(
            expressions=expressions, function=function, copy_fields=copy_fields, schema=schema
        )

    def setup(self, context: Any) -> None:
        if (self.expressions is None) == (self.function is None):
            raise ConfigError(
                f"{context.name}: give TransformOperator exactly one of expressions or function"
            )
        self._exprs = {k: compile_expression(v) for k, v in (self.expressions or {}).items()}

    def process(self, t: Any) -> None:
        try:
            if self.function is not None:
                try:
                    out = self.function(t)
                except Exception as exc:
                    raise EvalError(f"function failed: {type(exc).__name__}: {exc}") from None
            else:
                row = _as_row(t)
                computed = {k: e.row(row) for k, e in self._exprs.items()}
                out = {**row, **computed} if self.copy_fields else computed
        except EvalError as exc:
            self._error(t, str(exc))
            return
        self.output.emit(out)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.function is not None:
            for row in batch.to_pylist():
                self.process(row)
            return
        try:
            computed = {k: e.batch(batch) for k, e in self._exprs.items()}
        except (EvalError, pa.ArrowException, TypeError, ValueError):
            for row in batch.to_pylist():
                self.process(row)
            return
        columns = {n: batch.column(n) for n in batch.schema.names} if self.copy_fields else {}
        columns.update(computed)
        emit_table(self.output, pa.RecordBatch.from_pydict(columns))


class ProjectionOperator(TypedOutputs, AlgoOperator):
    """Keeps some fields of each tuple and renames them (Malhar's ``ProjectionOperator``).

    ``select_fields`` (or, instead, ``drop_fields``) chooses the projected fields, in that
    order; ``rename`` maps old names to new ones. Output ``projected`` has the projection,
    ``remainder`` the other fields. A tuple without a selected field goes to ``error``.
    ``schema`` / ``remainder_schema`` type the outputs.

    Example:
        >>> from malhar.algo import ProjectionOperator
        >>> from malhar.testing.harness import OperatorHarness
        >>> h = OperatorHarness(ProjectionOperator(select_fields=["id", "n"], rename={"n": "count"}))
        >>> h.run_window([("input", {"id": 1, "n": 5, "note": "x"})])
        >>> h.sink("projected").tuples, h.sink("remainder").tuples
        ([{'id': 1, 'count': 5}], [{'note': 'x'}])
    """

    PARTITIONING: ClassVar[str] = "stateless"

    input = InputPort()
    projected = OutputPort()
    remainder = OutputPort()
    error = OutputPort(error=True)

    select_fields = Property(list, default=None, doc="the fields kept, in order")
    drop_fields = Property(list, default=None, doc="the fields dropped (instead of select)")
    rename = Property(dict, default={}, doc="old name -> new name, of projected fields")
    schema = SchemaProperty("projected", doc="Spark DDL of the projection")
    remainder_schema = SchemaProperty("remainder", doc="Spark DDL of the remainder")

    def __init__(
        self,
        select_fields: list[str] | None = None,
        *,
        drop_fields: list[str] | None = None,
        rename: dict[str, str] | None = None,
        schema: str | None = None,
        remainder_schema: str | None = None,
    ) -> None:
        self.configure(
            select_fields=select_fields,
            drop_fields=drop_fields,
            rename=dict(rename or {}),
            schema=schema,
            remainder_schema=remainder_schema,
        )

    def setup(self, context: Any) -> None:
        if (self.select_fields is None) == (self.drop_fields is None):
            raise ConfigError(
                f"{context.name}: give ProjectionOperator exactly one of select_fields or "
                "drop_fields"
            )
        self._drop = set(self.drop_fields or ())

    def _split(self, names: list[str]) -> tuple[list[str], list[str]]:
        if self.select_fields is not None:
            keep = list(self.select_fields)
        else:
            keep = [n for n in names if n not in self._drop]
        chosen = set(keep)
        return keep, [n for n in names if n not in chosen]

    def process(self, t: Any) -> None:
        if not isinstance(t, dict):
            self._error(t, f"expected a dict tuple, got {type(t).__name__}")
            return
        keep, rest = self._split(list(t))
        absent = [n for n in keep if n not in t]
        if absent:
            self._error(t, f"no field {absent[0]!r}")
            return
        rename = self.rename
        self.projected.emit({rename.get(n, n): t[n] for n in keep})
        if rest:
            self.remainder.emit({n: t[n] for n in rest})

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        keep, rest = self._split(batch.schema.names)
        if any(n not in batch.schema.names for n in keep):
            for row in batch.to_pylist():
                self.process(row)
            return
        projected = batch.select(keep).rename_columns([self.rename.get(n, n) for n in keep])
        emit_table(self.projected, projected)
        if rest:
            emit_table(self.remainder, batch.select(rest))
