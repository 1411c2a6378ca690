"""Expressions over tuple fields, for filters and transforms: one text, two evaluators.

The text is parsed with Python's :mod:`ast` and only the constructs below are accepted;
nothing is ever passed to ``eval`` or ``exec``. :func:`compile_expression` returns an
:class:`Expression` that evaluates a dict row in Python (``expr.row(row)``) and a whole
Arrow batch with ``pyarrow.compute`` (``expr.batch(batch)``); both give the same values,
except in edge cases of the two arithmetics: a fractional power of a negative number
(Python: complex, Arrow: NaN), ``round`` of a float exactly between two (Python rounds the
binary value, Arrow half to even on the decimal), ``%`` of floats, ``upper`` of ``ß``,
``min``/``max`` with a NaN, and ``-0.0 in [0.0]``.

Grammar (a subset of Python's expression syntax)::

    expr      := literal | field | expr op expr | unary expr | comparison
               | expr "and" expr | expr "or" expr | "not" expr
               | expr "if" expr "else" expr | function "(" args ")" | "(" expr ")"
    literal   := integer | float | 'string' | "string" | True | False | None
    field     := identifier                       (the field of that name)
               | col("any field name")            (names that are not identifiers)
    op        := + - * / // % **                  (+ joins strings)
    unary     := - | +
    comparison:= expr (== | != | < | <= | > | >=) expr [...chained]
               | expr [not] in [literal, ...]    | expr is [not] None
    function  := abs(x) | round(x [, digits]) | min(x, y) | max(x, y) | int(x) | float(x)
               | lower(s) | upper(s) | strip(s) | length(s) | len(s)
               | startswith(s, 'lit') | endswith(s, 'lit') | contains(s, 'lit')
               | is_null(x) | coalesce(x, y, ...) | if_else(cond, x, y)

Nulls follow SQL: an arithmetic operation, comparison or function (but ``is_null``,
``coalesce``, ``min``/``max``, which skip nulls) with a None operand gives None; ``and``
and ``or`` are three-valued (``None and False`` is False); a None condition of
``x if c else y`` or ``if_else`` gives None. ``/`` is true division; ``/``, ``//`` and
``%`` by zero give None. ``int(x)`` truncates toward zero. An integer power must stay
within 64 bits and a repeated string (``s * n``) within 1,000,000 characters: a tuple that
exceeds either goes to the error port, a constant that does is refused at setup. Decimal
and binary fields are evaluated row by row (Arrow would make a decimal a float). A filter passes a tuple only when
its condition is True.

Example:
    >>> from malhar.algo.expr import compile_expression
    >>> e = compile_expression("price * qty > 100 and lower(country) in ['fr', 'de']")
    >>> e.row({"price": 30, "qty": 4, "country": "FR"})
    True
    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"price": [30, 1], "qty": [4, 2], "country": ["DE", None]})
    >>> e.batch(batch).to_pylist()
    [True, False]
    >>> compile_expression("__import__('os')")
    Traceback (most recent call last):
    ...
    malhar.algo.expr.ExpressionError: function '__import__' is not allowed in 'expression'; ...
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar.errors import ConfigError, MalharError
from malhar.util.arrow_types import is_binary, is_text

__all__ = ["Expression", "ExpressionError", "compile_expression"]

MAX_LENGTH = 10_000
MAX_DEPTH = 60
#: an integer power must stay within 64 bits and a repeated string within this length:
#: ``9 ** 9 ** 9`` or ``'a' * 10 ** 12`` would take the worker's time or memory
INT_RANGE = (-(2**63), 2**63 - 1)
MAX_REPEAT = 1_000_000

FUNCTIONS = [
    "abs",
    "round",
    "min",
    "max",
    "int",
    "float",
    "lower",
    "upper",
    "strip",
    "length",
    "len",
    "startswith",
    "endswith",
    "contains",
    "is_null",
    "coalesce",
    "if_else",
    "col",
]


class ExpressionError(ConfigError):
    """An expression that is not in the grammar (the message names the construct)."""


class EvalError(MalharError, ValueError):
    """A row the expression cannot evaluate (a missing field, a type mismatch)."""


class TooLarge(MalharError, ValueError):
    """A result beyond :data:`INT_RANGE` or :data:`MAX_REPEAT` (of a row, or of constants)."""


Row = dict[str, Any]


@dataclass
class Expression:
    """A compiled expression: ``row(dict)`` in Python, ``batch(RecordBatch)`` with Arrow."""

    text: str
    fields: set[str] = field(default_factory=set)
    _row: Callable[[Row], Any] = field(default=None, repr=False)  # type: ignore[assignment]
    _batch: Callable[[pa.RecordBatch], Any] = field(default=None, repr=False)  # type: ignore[assignment]

    def row(self, row: Row) -> Any:
        """The value for one dict row; raises :class:`EvalError` when it cannot."""
        try:
            return self._row(row)
        except EvalError:
            raise
        except KeyError as exc:
            raise EvalError(f"no field {exc.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError, ArithmeticError) as exc:
            raise EvalError(f"{self.text!r}: {exc}") from None

    def batch(self, batch: pa.RecordBatch) -> pa.Array:
        """The values for a whole batch, vectorized; raises when Arrow cannot (the caller
        then evaluates row by row to tell good rows from bad ones)."""
        missing_fields = self.fields - set(batch.schema.names)
        if missing_fields:
            raise EvalError(f"no field {sorted(missing_fields)[0]!r}")
        for name in self.fields:
            kind = batch.schema.field(name).type
            if pa.types.is_decimal(kind) or is_binary(kind):
                # Arrow's kernels make a decimal a float64 (and a binary column text):
                # the caller evaluates row by row, exactly as for single tuples
                raise EvalError(f"field {name!r} ({kind}) is evaluated row by row")
        value = self._batch(batch)
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        if not isinstance(value, pa.Array):
            value = pa.array([_py(value)] * batch.num_rows)
        return value

    def __getstate__(self) -> dict[str, Any]:
        return {"text": self.text}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(compile_expression(state["text"]).__dict__)


def compile_expression(text: str, where: str = "expression") -> Expression:
    """Parse ``text`` (see the module docstring) into an :class:`Expression`."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError(f"{where}: an expression is a non-empty string, got {text!r}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"{where}: longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{where}: {text!r} is not an expression: {exc.msg}") from None
    c = _Compiler(text, where)
    row, batch = c.node(tree.body, 0)
    return Expression(text, c.fields, row, batch)


def _py(v: Any) -> Any:
    return v.as_py() if isinstance(v, pa.Scalar) else v


# -- null-aware Python semantics ---------------------------------------------------------------
def _null_safe(fn: Callable[..., Any]) -> Callable[..., Any]:
    def f(*args: Any) -> Any:
        if any(a is None for a in args):
            return None
        return fn(*args)

    return f


def _truediv(a: Any, b: Any) -> Any:
    return None if b == 0 else a / b


def _floordiv(a: Any, b: Any) -> Any:
    return None if b == 0 else a // b


def _mod(a: Any, b: Any) -> Any:
    return None if b == 0 else a % b


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if b < 0:
            raise ValueError("an integer to a negative integer power")
        if b >= 64 and abs(a) > 1:  # certainly beyond 64 bits: not computed
            raise TooLarge(f"{a} ** {b} is beyond 64-bit integers")
        value = a**b
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise TooLarge(f"{a} ** {b} is beyond 64-bit integers")
        return value
    return a**b


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, str | bytes) or isinstance(b, str | bytes):
        text, n = (a, b) if isinstance(a, str | bytes) else (b, a)
        if isinstance(n, int) and len(text) * n > MAX_REPEAT:
            raise TooLarge(f"a repeated string longer than {MAX_REPEAT} characters")
    return a * b


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, str) != isinstance(b, str):
        raise TypeError(f"cannot add {type(a).__name__} and {type(b).__name__}")
    return a + b


def _as_bool(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    raise TypeError(f"expected a boolean, got {type(v).__name__} {v!r}")


def _and(a: Any, b: Any) -> Any:
    a, b = _as_bool(a), _as_bool(b)
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: Any, b: Any) -> Any:
    a, b = _as_bool(a), _as_bool(b)
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _int(x: Any) -> int:
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"int({x})")
    return int(x)


def _str_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    def f(s: Any, *rest: Any) -> Any:
        if not isinstance(s, str):
            raise TypeError(f"expected a string, got {type(s).__name__}")
        return fn(s, *rest)

    return f


_PY_BIN = {
    ast.Add: _null_safe(_add),
    ast.Sub: _null_safe(lambda a, b: a - b),
    ast.Mult: _null_safe(_mul),
    ast.Div: _null_safe(_truediv),
    ast.FloorDiv: _null_safe(_floordiv),
    ast.Mod: _null_safe(_mod),
    ast.Pow: _null_safe(_pow),
}
_PY_CMP = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
_ARROW_CMP = {
    ast.Eq: pc.equal,
    ast.NotEq: pc.not_equal,
    ast.Lt: pc.less,
    ast.LtE: pc.less_equal,
    ast.Gt: pc.greater,
    ast.GtE: pc.greater_equal,
}


def _is_str(v: Any) -> bool:
    if isinstance(v, pa.Array | pa.ChunkedArray):
        return is_text(v.type)
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    if isinstance(v, pa.Array | pa.ChunkedArray):
        return pa.types.is_integer(v.type)
    return isinstance(v, int) and not isinstance(v, bool)


def _float(v: Any) -> Any:
    if isinstance(v, pa.Array | pa.ChunkedArray):
        return pc.cast(v, pa.float64())
    return None if v is None else float(v)


def _zero_to_null(b: Any) -> Any:
    if isinstance(b, pa.Array | pa.ChunkedArray):
        return pc.if_else(pc.equal(b, 0), pa.scalar(None, b.type), b)
    return None if b == 0 else b


def _arrow_floordiv(a: Any, b: Any) -> Any:
    q = pc.floor(pc.divide(_float(a), _float(_zero_to_null(b))))
    if _is_int(a) and _is_int(b):
        return pc.cast(q, pa.int64())
    return q


def _arrow_mod(a: Any, b: Any) -> Any:
    b = _zero_to_null(b)
    q = pc.floor(pc.divide(_float(a), _float(b)))
    if _is_int(a) and _is_int(b):
        return pc.subtract(a, pc.multiply(b, pc.cast(q, pa.int64())))
    return pc.subtract(_float(a), pc.multiply(_float(b), q))


def _arrow_add(a: Any, b: Any) -> Any:
    if _is_str(a) or _is_str(b):
        if not (_is_str(a) and _is_str(b)):
            raise TypeError("cannot add a string and a number")
        return pc.binary_join_element_wise(a, b, "")
    return pc.add_checked(a, b)


_ARROW_BIN = {
    ast.Add: _arrow_add,
    ast.Sub: pc.subtract_checked,
    ast.Mult: pc.multiply_checked,
    ast.Div: lambda a, b: pc.divide(_float(a), _float(_zero_to_null(b))),
    ast.FloorDiv: _arrow_floordiv,
    ast.Mod: _arrow_mod,
    ast.Pow: pc.power_checked,
}


class _Compiler:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        self.fields: set[str] = set()
        self.field_uses = 0  # a subtree that adds none is a constant

    def fail(self, what: str) -> ExpressionError:
        return ExpressionError(
            f"{what} is not allowed in {self.where!r}; see malhar.algo.expr for the grammar "
            f"(expression: {self.text!r})"
        )

    def node(self, n: ast.AST, depth: int) -> tuple[Callable, Callable]:
        if depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH}")
        method = getattr(self, f"n_{type(n).__name__}", None)
        if method is None:
            raise self.fail(f"{type(n).__name__} ({ast.unparse(n)!r})")
        return method(n, depth + 1)

    # literals and fields
    def n_Constant(self, n: ast.Constant, d: int) -> tuple[Callable, Callable]:
        v = n.value
        if not (v is None or isinstance(v, bool | int | float | str)):
            raise self.fail(f"the literal {v!r}")
        return (lambda row: v), (lambda batch: v)

    def _field(self, name: str) -> tuple[Callable, Callable]:
        self.fields.add(name)
        self.field_uses += 1
        return (lambda row: row[name]), (lambda batch: batch.column(name))

    def n_Name(self, n: ast.Name, d: int) -> tuple[Callable, Callable]:
        return self._field(n.id)

    def literals(self, n: ast.AST) -> list[Any]:
        if not isinstance(n, ast.List | ast.Tuple | ast.Set) or not all(
            isinstance(e, ast.Constant) for e in n.elts
        ):
            raise self.fail("'in' with something other than a list of literals")
        return [e.value for e in n.elts]

    # operators
    def n_BinOp(self, n: ast.BinOp, d: int) -> tuple[Callable, Callable]:
        op = type(n.op)
        if op not in _PY_BIN:
            raise self.fail(f"the operator {type(n.op).__name__}")
        uses = self.field_uses
        (lr, lb), (rr, rb) = self.node(n.left, d), self.node(n.right, d)
        py, ar = _PY_BIN[op], _ARROW_BIN[op]
        if op in (ast.Pow, ast.Mult) and self.field_uses == uses:
            self._check_constant(py, lr, rr, n)
        return (lambda row: py(lr(row), rr(row))), (lambda b: _const(ar, py, lb(b), rb(b)))

    def _check_constant(self, py: Callable, left: Callable, right: Callable, n: ast.AST) -> None:
        """Refuse constants whose value is too large (every tuple would fail on it)."""
        try:
            py(left({}), right({}))
        except TooLarge as exc:
            raise ExpressionError(
                f"{self.where}: {ast.unparse(n)!r} is too large ({exc}) in {self.text!r}"
            ) from None
        except (TypeError, ValueError, ArithmeticError, EvalError):
            pass  # reported per tuple, as before

    def n_UnaryOp(self, n: ast.UnaryOp, d: int) -> tuple[Callable, Callable]:
        r, b = self.node(n.operand, d)
        if isinstance(n.op, ast.USub):
            neg = _null_safe(lambda v: -v)
            return (lambda row: neg(r(row))), (lambda x: _const(pc.negate_checked, neg, b(x)))
        if isinstance(n.op, ast.UAdd):
            return r, b
        if isinstance(n.op, ast.Not):

            def py_not(v: Any) -> Any:
                v = _as_bool(v)
                return None if v is None else not v

            return (lambda row: py_not(r(row))), (lambda x: _const(pc.invert, py_not, b(x)))
        raise self.fail(f"the operator {type(n.op).__name__}")

    def n_BoolOp(self, n: ast.BoolOp, d: int) -> tuple[Callable, Callable]:
        parts = [self.node(v, d) for v in n.values]
        py = _and if isinstance(n.op, ast.And) else _or
        ar = pc.and_kleene if isinstance(n.op, ast.And) else pc.or_kleene

        def row_fn(row: Row) -> Any:
            acc = parts[0][0](row)
            for r, _ in parts[1:]:
                acc = py(acc, r(row))
            return _as_bool(acc)

        def batch_fn(batch: pa.RecordBatch) -> Any:
            acc = parts[0][1](batch)
            for _, b in parts[1:]:
                acc = _const(ar, py, acc, b(batch))
            return acc

        return row_fn, batch_fn

    def n_Compare(self, n: ast.Compare, d: int) -> tuple[Callable, Callable]:
        left = self.node(n.left, d)
        steps: list[tuple[Callable, Callable]] = []
        prev = left
        for op, comparator in zip(n.ops, n.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                steps.append(self._in(prev, self.literals(comparator), isinstance(op, ast.NotIn)))
                prev = None  # type: ignore[assignment]
                continue
            if isinstance(op, ast.Is | ast.IsNot):
                if not (isinstance(comparator, ast.Constant) and comparator.value is None):
                    raise self.fail("'is' with something other than None")
                steps.append(self._is_none(prev, isinstance(op, ast.IsNot)))
                prev = None  # type: ignore[assignment]
                continue
            if prev is None:
                raise self.fail("a comparison chained after 'in' or 'is'")
            right = self.node(comparator, d)
            steps.append(self._cmp(prev, right, type(op)))
            prev = right
        if len(steps) == 1:
            return steps[0]
        return self._all(steps)

    def _cmp(self, left: tuple, right: tuple, op: type) -> tuple[Callable, Callable]:
        py, ar = _null_safe(_PY_CMP[op]), _ARROW_CMP[op]
        (lr, lb), (rr, rb) = left, right
        return (lambda row: py(lr(row), rr(row))), (lambda b: _const(ar, py, lb(b), rb(b)))

    def _in(self, left: tuple, values: list, negate: bool) -> tuple[Callable, Callable]:
        lr, lb = left
        keys = set(values)

        def row_fn(row: Row) -> Any:
            v = lr(row)
            return None if v is None else (v in keys) != negate

        def batch_fn(batch: pa.RecordBatch) -> Any:
            v = lb(batch)
            if not isinstance(v, pa.Array | pa.ChunkedArray):
                return None if v is None else (v in keys) != negate
            hit = pc.is_in(v, value_set=pa.array(values, type=v.type))
            hit = pc.invert(hit) if negate else hit
            return pc.if_else(pc.is_null(v), pa.scalar(None, pa.bool_()), hit)

        return row_fn, batch_fn

    def _is_none(self, left: tuple, negate: bool) -> tuple[Callable, Callable]:
        lr, lb = left

        def batch_fn(batch: pa.RecordBatch) -> Any:
            v = lb(batch)
            if not isinstance(v, pa.Array | pa.ChunkedArray):
                return (v is None) != negate
            return pc.is_valid(v) if negate else pc.is_null(v)

        return (lambda row: (lr(row) is None) != negate), batch_fn

    def _all(self, steps: list[tuple[Callable, Callable]]) -> tuple[Callable, Callable]:
        def row_fn(row: Row) -> Any:
            acc: Any = True
            for r, _ in steps:
                acc = _and(acc, r(row))
            return acc

        def batch_fn(batch: pa.RecordBatch) -> Any:
            acc: Any = True
            for _, b in steps:
                acc = _const(pc.and_kleene, _and, acc, b(batch))
            return acc

        return row_fn, batch_fn

    def n_IfExp(self, n: ast.IfExp, d: int) -> tuple[Callable, Callable]:
        return self._if(self.node(n.test, d), self.node(n.body, d), self.node(n.orelse, d))

    def _if(self, test: tuple, body: tuple, orelse: tuple) -> tuple[Callable, Callable]:
        (tr, tb), (br, bb), (er, eb) = test, body, orelse

        def row_fn(row: Row) -> Any:
            c = _as_bool(tr(row))
            if c is None:
                return None
            return br(row) if c else er(row)

        def batch_fn(batch: pa.RecordBatch) -> Any:
            c, x, y = tb(batch), bb(batch), eb(batch)
            if not isinstance(c, pa.Array | pa.ChunkedArray):
                c = pa.array([c] * batch.num_rows, pa.bool_())
            return pc.if_else(c, x, y)

        return row_fn, batch_fn

    def n_Call(self, n: ast.Call, d: int) -> tuple[Callable, Callable]:
        if not isinstance(n.func, ast.Name):
            raise self.fail(f"calling {ast.unparse(n.func)!r}")
        name = n.func.id
        if name not in FUNCTIONS:
            raise self.fail(f"function {name!r}")
        if n.keywords:
            raise self.fail(f"keyword arguments to {name}()")
        if name == "col":
            if (
                len(n.args) != 1
                or not isinstance(n.args[0], ast.Constant)
                or not isinstance(n.args[0].value, str)
            ):
                raise self.fail("col() with something other than one string literal")
            return self._field(n.args[0].value)
        if name in ("startswith", "endswith", "contains"):
            if (
                len(n.args) != 2
                or not isinstance(n.args[1], ast.Constant)
                or not isinstance(n.args[1].value, str)
            ):
                raise self.fail(f"{name}() with something other than (text, 'literal')")
            return self._match(name, self.node(n.args[0], d), n.args[1].value)
        args = [self.node(a, d) for a in n.args]
        arity = {
            "round": (1, 2),
            "min": (2, 2),
            "max": (2, 2),
            "if_else": (3, 3),
            "coalesce": (1, 99),
        }
        lo, hi = arity.get(name, (1, 1))
        if not lo <= len(args) <= hi:
            raise self.fail(f"{name}() with {len(args)} arguments")
        if name == "if_else":
            return self._if(*args)
        return self._function(name, args)

    def _match(self, name: str, arg: tuple, pattern: str) -> tuple[Callable, Callable]:
        r, b = arg
        py = _null_safe(
            _str_only(
                {
                    "startswith": lambda s: s.startswith(pattern),
                    "endswith": lambda s: s.endswith(pattern),
                    "contains": lambda s: pattern in s,
                }[name]
            )
        )
        ar = {
            "startswith": lambda v: pc.starts_with(v, pattern=pattern),
            "endswith": lambda v: pc.ends_with(v, pattern=pattern),
            "contains": lambda v: pc.match_substring(v, pattern=pattern),
        }[name]
        return (lambda row: py(r(row))), (lambda x: _const(ar, py, b(x)))

    def _function(self, name: str, args: list[tuple]) -> tuple[Callable, Callable]:
        rows = [a[0] for a in args]
        batches = [a[1] for a in args]
        py, ar = _FUNCS[name]
        return (lambda row: py(*(r(row) for r in rows))), (
            lambda x: _const(ar, py, *(b(x) for b in batches))
        )


def _skip_none(fn: Callable[..., Any]) -> Callable[..., Any]:
    def f(*args: Any) -> Any:
        present = [a for a in args if a is not None]
        return fn(*present) if present else None

    return f


def _coalesce(*args: Any) -> Any:
    return next((a for a in args if a is not None), None)


def _round_py(x: Any, nd: Any = None) -> Any:
    return round(x) if nd is None else round(x, nd)


def _round_arrow(x: Any, nd: Any = None) -> Any:
    if nd is None:
        return pc.cast(pc.round(x, round_mode="half_to_even"), pa.int64()) if not _is_int(x) else x
    return pc.round(x, ndigits=int(_py(nd)), round_mode="half_to_even")


def _int_arrow(x: Any) -> Any:
    if _is_int(x):
        return x
    return pc.cast(pc.trunc(x), pa.int64())


_FUNCS: dict[str, tuple[Callable, Callable]] = {
    "abs": (_null_safe(abs), pc.abs_checked),
    "round": (lambda x, nd=None: None if x is None else _round_py(x, nd), _round_arrow),
    "min": (_skip_none(min), pc.min_element_wise),
    "max": (_skip_none(max), pc.max_element_wise),
    "int": (_null_safe(_int), _int_arrow),
    "float": (_null_safe(float), _float),
    "lower": (_null_safe(_str_only(str.lower)), pc.utf8_lower),
    "upper": (_null_safe(_str_only(str.upper)), pc.utf8_upper),
    "strip": (_null_safe(_str_only(str.strip)), pc.utf8_trim_whitespace),
    "length": (_null_safe(_str_only(len)), pc.utf8_length),
    "len": (_null_safe(_str_only(len)), pc.utf8_length),
    "is_null": (
        lambda x: x is None,
        lambda x: pc.is_null(x) if isinstance(x, pa.Array | pa.ChunkedArray) else x is None,
    ),
    "coalesce": (_coalesce, pc.coalesce),
}


def _const(arrow_fn: Callable, py_fn: Callable, *args: Any) -> Any:
    """Apply ``arrow_fn`` to arrays, or ``py_fn`` when every argument is a Python constant."""
    if not any(isinstance(a, pa.Array | pa.ChunkedArray) for a in args):
        return py_fn(*(_py(a) for a in args))
    return arrow_fn(*args)
