"""Typed, validated operator properties (Apex's ``@NotNull``, ``@Min``, ``@Pattern`` ...)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Self, TypeVar, overload

from malhar.errors import ConfigError
from malhar.redaction import is_secret_key, redact
from malhar.suggest import did_you_mean

T = TypeVar("T")
_UNSET: Any = object()
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class PropertyError(ConfigError):
    """A property value that breaks its declared constraints, or an unknown property name."""


def unknown_name(owner: str, what: str, name: str, known: Iterable[str]) -> str:
    """The message for an unknown setting name: what, the closest names, all names."""
    known = sorted(known)
    return f"{owner} has no {what} {name!r}{did_you_mean(name, known)} (known: {known})"


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
        references: bool = False,
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
        #: the operator reads ``${env:...}`` / ``${file:...}`` references in this value
        #: (the whole value, or the values under secret keys of a mapping), so ``launch``
        #: may ship a literal secret to the executors that way instead of in the plan
        self.references = references or secret
        self.__doc__ = doc
        self.name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = owner.__name__
        self.secret = self.secret or is_secret_key(name)
        self.references = self.references or self.secret

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

    def parse(self, text: Any) -> Any:
        """The value of a setting given as text (Spark options, ``--config``, JSON apps).

        Text is converted to the property's type: ``"true"`` for a bool, ``"3"`` for an
        int, a JSON array or ``"a,b"`` for a list, a JSON object for a dict. A value that
        already has the type, or any value of an ``object`` property, is returned as is.
        """
        if not isinstance(text, str) or _accepts(self.type, str) or _accepts(self.type, object):
            return text  # an ``object`` property takes the value as it is (a column name ...)
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        raw = text.strip()
        for kind in types:
            try:
                if kind is bool:
                    if raw.lower() in _TRUE + _FALSE:
                        return raw.lower() in _TRUE
                elif kind is int:
                    return int(raw)
                elif kind is float:
                    return float(raw)
                elif kind in (list, tuple):
                    if raw.startswith("["):
                        return kind(json.loads(raw))
                    return kind(p.strip() for p in raw.split(",") if p.strip())
                elif kind is dict:
                    value = json.loads(raw)
                    if isinstance(value, dict):
                        return value
            except ValueError:
                continue
        names = "/".join(getattr(k, "__name__", str(k)) for k in types)
        shown = "***" if self.secret else repr(redact(text))
        raise PropertyError(f"property {self.name!r}: cannot read {shown} as {names}")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable, or None (secrets in it are never shown)."""
        why = self._problem(value)
        if why and value is not None:
            from malhar.redaction import Scrubber

            scrub = Scrubber()
            scrub.add(value, self.name, secret=self.secret)
            why = scrub(why)
        return why

    def _problem(self, value: Any) -> str | None:
        # a secret's value is never shown: short ones (a password "123") would stay in the
        # text, where masking every "123" would garble it
        shown = "***" if self.secret else repr(value)
        if value is None or value is _UNSET:
            return "must be set (it is required)" if self.not_null else None
        if not self.references and isinstance(value, str) and value.lstrip().startswith("${"):
            from malhar.secrets import is_reference

            if is_reference(value):  # it would be used as it is: a host named "${env:..."
                return (
                    f"{value!r} is a reference, which only secret properties read (passwords, "
                    "URLs, client configs); give the value itself (from a shell: -c "
                    f'dt.operator.OP.prop.{self.name}="$VARIABLE")'
                )
        if not isinstance(value, self.type) or (
            isinstance(value, bool) and self.type in (int, float)
        ):
            why = f"expected {getattr(self.type, '__name__', self.type)}, got {type(value).__name__} {shown}"
            if self.type is str and isinstance(value, int | float):
                # -c values are read as JSON: a password of digits comes as a number
                why += f" (as text: quote it; on the command line -c ...{self.name}='\"...\"')"
            return why
        if self.min is not None and value < self.min:
            return f"{shown} is below the minimum {self.min}"
        if self.max is not None and value > self.max:
            return f"{shown} is above the maximum {self.max}"
        if self.pattern is not None and not self.pattern.fullmatch(str(value)):
            return f"{shown} does not match the pattern {self.pattern.pattern!r}"
        if self.one_of is not None and value not in self.one_of:
            return f"{shown} is not one of {list(self.one_of)}"
        if self.check is not None:
            return self.check(value)
        return None


def _accepts(kind: type | tuple[type, ...], t: type) -> bool:
    return t in kind if isinstance(kind, tuple) else kind is t


@functools.cache
def properties_of(cls: type) -> dict[str, Property]:
    """All properties declared on ``cls`` and its bases."""
    found: dict[str, Property] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Property):
                found[name] = value
    return found


class Configurable:
    """Something configured by :class:`Property` declarations: every operator, and the
    settings classes that a connector shares between its operator and its Spark data
    source (one declaration per setting, one place that checks it)."""

    def configure(self, **values: Any) -> Self:
        """Set properties by name; an unknown name fails naming the closest known ones."""
        known = properties_of(type(self))
        for name, value in values.items():
            if name not in known:
                raise PropertyError(unknown_name(type(self).__name__, "property", name, known))
            setattr(self, name, value)
        return self

    def configure_from_strings(self, options: Mapping[str, Any]) -> Self:
        """Set properties from text values (Spark's ``.option(k, v)``: names match
        case-insensitively, since Spark lower-cases them)."""
        known = properties_of(type(self))
        by_lower = {n.lower(): n for n in known}
        for key, text in options.items():
            name = by_lower.get(str(key).lower())
            if name is None:
                raise PropertyError(unknown_name(type(self).__name__, "option", str(key), known))
            setattr(self, name, known[name].parse(text))
        return self

    def property_problems(self) -> list[str]:
        """``"name: why"`` for every property whose value breaks its declaration."""
        out = []
        for name, prop in properties_of(type(self)).items():
            why = prop.problem(getattr(self, name))
            if why:
                out.append(f"property {name!r} {why}")
        return out
