"""Typed, validated operator properties (Apex's ``@NotNull``, ``@Min``, ``@Pattern`` ...)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
_UNSET: Any = object()


class PropertyError(ValueError):
    """A property value that breaks its declared constraints."""


class Property(Generic[T]):
    """A typed operator property, checked on assignment and by ``DAG.validate()``.

    Example:
        >>> from malhar import Operator, Property
        >>> class Filter(Operator):
        ...     threshold = Property(int, default=10, min=0)
        ...     mode = Property(str, default="keep", one_of=("keep", "drop"))
    """

    def __init__(
        self,
        type_: type[T] | tuple[type, ...],
        *,
        default: T = _UNSET,
        not_null: bool = False,
        min: float | None = None,
        max: float | None = None,
        pattern: str | None = None,
        one_of: Iterable[T] | None = None,
        check: Callable[[T], str | None] | None = None,
        secret: bool = False,
        doc: str = "",
    ) -> None:
        self.type = type_
        self.default = default
        self.not_null = not_null
        self.min, self.max = min, max
        self.pattern = re.compile(pattern) if pattern else None
        self.one_of = tuple(one_of) if one_of is not None else None
        self.check = check
        self.secret = secret
        self.__doc__ = doc
        self.name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        from malhar.redaction import is_secret_key

        self.name = name
        self.owner = owner.__name__
        self.secret = self.secret or is_secret_key(name)

    @overload
    def __get__(self, instance: None, owner: type) -> Property[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        value = instance.__dict__.get(self.name, self.default)
        return None if value is _UNSET else value

    def __set__(self, instance: Any, value: T) -> None:
        problem = self.problem(value)
        if problem:
            raise PropertyError(f"{type(instance).__name__}.{self.name}: {problem}")
        instance.__dict__[self.name] = value

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable, or None (a secret's value is never shown)."""
        why = self._problem(value)
        if why and self.secret and value is not None:
            why = why.replace(repr(value), "***").replace(str(value), "***")
        return why

    def _problem(self, value: Any) -> str | None:
        if value is None or value is _UNSET:
            return "must be set (it is required)" if self.not_null else None
        if not isinstance(value, self.type) or (
            isinstance(value, bool) and self.type in (int, float)
        ):
            return f"expected {getattr(self.type, '__name__', self.type)}, got {type(value).__name__} {value!r}"
        if self.min is not None and value < self.min:
            return f"{value!r} is below the minimum {self.min}"
        if self.max is not None and value > self.max:
            return f"{value!r} is above the maximum {self.max}"
        if self.pattern is not None and not self.pattern.fullmatch(str(value)):
            return f"{value!r} does not match the pattern {self.pattern.pattern!r}"
        if self.one_of is not None and value not in self.one_of:
            return f"{value!r} is not one of {list(self.one_of)}"
        if self.check is not None:
            return self.check(value)
        return None


def properties_of(cls: type) -> dict[str, Property]:
    """All properties declared on ``cls`` and its bases."""
    found: dict[str, Property] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Property):
                found[name] = value
    return found
