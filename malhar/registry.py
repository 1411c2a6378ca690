"""The plugin registry: operators, connectors and applications found through entry points.

Everything a ``malhar`` application can name (built-ins included) is registered
through Python entry-point groups, so an operator pack installed with ``pip``
shows up in ``malhar list`` and can be named in an application file:

- ``malhar.operators``: operators, input operators and unifiers
  (``name = "module:Class"``; the class is an :class:`~malhar.operator.Operator`);
- ``malhar.connectors``: connectors to external systems (Kafka, JDBC, files ...),
  same form; they share one namespace with ``malhar.operators``;
- ``malhar.applications``: applications (``name = "module:attr"``, see
  :mod:`malhar.app`).

A pack declares them in its ``pyproject.toml``:

.. code-block:: toml

    [project.entry-points."malhar.operators"]
    Doubler = "acme_pack.ops:Doubler"

    [project.entry-points."malhar.connectors"]
    RedisOutput = "acme_pack.redis:RedisOutput"

An entry point that cannot be imported never breaks a listing: its
:class:`Entry` carries the error instead, and only naming it fails.

Example:
    >>> from malhar import registry
    >>> registry.load("Collector").__name__
    'Collector'
    >>> registry.available()["ListInput"].kind
    'input'
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from malhar.errors import MalharError
from malhar.operator import InputOperator, Operator, Unifier
from malhar.ports import ports_of
from malhar.suggest import close_matches

OPERATORS_GROUP = "malhar.operators"
CONNECTORS_GROUP = "malhar.connectors"
APPLICATIONS_GROUP = "malhar.applications"

#: entry-point group -> the namespace it belongs to
COMPONENT_GROUPS = (OPERATORS_GROUP, CONNECTORS_GROUP)
GROUPS = (*COMPONENT_GROUPS, APPLICATIONS_GROUP)

#: every kind an entry can have, in listing order
KINDS = ("input", "operator", "unifier", "connector", "application")


class RegistryError(MalharError, LookupError):
    """A name that the registry cannot turn into a class or an application."""


class UnknownNameError(RegistryError):
    """No entry point has this name; ``suggestions`` are the close matches."""

    def __init__(self, name: str, what: str, suggestions: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"unknown {what} {name!r}{hint} (`malhar list` shows every registered name; "
            "a class can also be named as 'module:Class')"
        )


class BrokenEntryError(RegistryError):
    """The entry point exists but cannot be loaded (import error, wrong type, name clash)."""


@dataclass(frozen=True)
class Entry:
    """One registered operator, connector or application.

    Attributes:
        name: the registered name (what an application file uses).
        kind: ``input``, ``operator``, ``unifier``, ``connector`` or ``application``.
        target: where it lives, ``module:attr``.
        group: the entry-point group it was found in.
        distribution: the installed distribution ("pack") that registers it.
        version: that distribution's version.
        doc: the first line of its docstring.
        inputs, outputs: port names (operators and connectors).
        error: why it cannot be loaded, or None when it can.
    """

    name: str
    kind: str
    target: str
    group: str
    distribution: str | None
    version: str | None
    doc: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    error: str | None = None
    obj: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def pack(self) -> str:
        """``distribution version`` (``-`` when unknown)."""
        if not self.distribution:
            return "-"
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("obj")
        out["inputs"], out["outputs"] = list(self.inputs), list(self.outputs)
        return out

    def load(self) -> Any:
        """The registered class (or application object); raises if the entry is broken."""
        if self.error is not None:
            raise BrokenEntryError(
                f"{self.kind} {self.name!r} ({self.target}, from {self.pack}) cannot be loaded: "
                f"{self.error}"
            )
        return self.obj


def first_line(obj: Any) -> str:
    """The first line of ``obj``'s own docstring (not one inherited from a base class)."""
    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    text = inspect.cleandoc(own or "")
    return text.splitlines()[0] if text else ""


def component_kind(cls: type, group: str = OPERATORS_GROUP) -> str:
    """``connector`` for the connectors group; otherwise ``unifier``, ``input`` or ``operator``."""
    if group == CONNECTORS_GROUP:
        return "connector"
    if issubclass(cls, Unifier):
        return "unifier"
    if issubclass(cls, InputOperator):
        return "input"
    return "operator"


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _dist(ep: metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    try:
        return dist.metadata["Name"] or dist.name, dist.version
    except Exception:  # a damaged METADATA file must not break the listing
        return getattr(dist, "name", None), None


def _entry(ep: metadata.EntryPoint) -> Entry:
    dist, version = _dist(ep)
    base: dict[str, Any] = {
        "name": ep.name,
        "target": ep.value,
        "group": ep.group,
        "distribution": dist,
        "version": version,
    }
    default_kind = "application" if ep.group == APPLICATIONS_GROUP else "operator"
    if ep.group == CONNECTORS_GROUP:
        default_kind = "connector"
    try:
        obj = ep.load()
    except Exception as exc:
        return Entry(kind=default_kind, error=_error_text(exc), **base)
    if ep.group == APPLICATIONS_GROUP:
        problem = application_problem(obj)
        if problem:
            return Entry(kind=default_kind, error=problem, **base)
        return Entry(kind="application", doc=first_line(obj), obj=obj, **base)
    if not (isinstance(obj, type) and issubclass(obj, Operator)):
        return Entry(
            kind=default_kind,
            error=f"{ep.value} is a {type(obj).__name__}, not an Operator subclass",
            **base,
        )
    inputs, outputs = ports_of(obj)
    return Entry(
        kind=component_kind(obj, ep.group),
        doc=first_line(obj),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        obj=obj,
        **base,
    )


def application_problem(obj: Any) -> str | None:
    """Why ``obj`` cannot be an application, or None (see :mod:`malhar.app`)."""
    from malhar.dag import DAG

    if isinstance(obj, DAG) or hasattr(obj, "populate_dag") or callable(obj):
        return None
    return (
        f"a {type(obj).__name__} is not an application: expected a function "
        "app(dag, config), a class with populate_dag(dag, config), or a DAG"
    )


def _collect(groups: tuple[str, ...]) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for group in groups:
        for ep in metadata.entry_points(group=group):
            entry = _entry(ep)
            seen = found.get(entry.name)
            if seen is None:
                found[entry.name] = entry
            elif seen.target != entry.target:
                clash = (
                    f"the name {entry.name!r} is registered twice: {seen.target} (from "
                    f"{seen.pack}) and {entry.target} (from {entry.pack}); name the class "
                    "as 'module:Class' instead, or uninstall one of the packs"
                )
                found[entry.name] = Entry(
                    name=seen.name,
                    kind=seen.kind,
                    target=f"{seen.target} | {entry.target}",
                    group=seen.group,
                    distribution=seen.distribution,
                    version=seen.version,
                    doc=seen.doc,
                    inputs=seen.inputs,
                    outputs=seen.outputs,
                    error=clash,
                )
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def available() -> dict[str, Entry]:
    """Every registered operator and connector, by name (broken ones carry ``error``)."""
    return _collect(COMPONENT_GROUPS)


def applications() -> dict[str, Entry]:
    """Every registered application, by name."""
    return _collect((APPLICATIONS_GROUP,))


def entries(kinds: tuple[str, ...] | None = None) -> list[Entry]:
    """Everything registered (operators, connectors, applications), filtered by kind."""
    out = [*available().values(), *applications().values()]
    if kinds:
        out = [e for e in out if e.kind in kinds]
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(out, key=lambda e: (order.get(e.kind, len(KINDS)), e.name.lower()))


def import_object(target: str) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted, ``module:Outer.Inner``)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise RegistryError(f"{target!r} is not of the form 'module:attr'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"cannot import {module_name!r} (from {target!r}): {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("_")]
            hint = close_matches(part, names)
            more = f"; did you mean {' or '.join(map(repr, hint))}?" if hint else ""
            raise RegistryError(
                f"{target!r}: {module_name} has no attribute {part!r}{more}"
            ) from None
    return obj


def load(name: str, registered: dict[str, Entry] | None = None) -> type[Operator]:
    """The operator or connector class registered as ``name`` (or named ``module:Class``).

    Raises:
        UnknownNameError: nothing is registered under ``name``; the message suggests close
            matches.
        BrokenEntryError: the entry point exists but does not load.
    """
    if ":" in name:
        obj = import_object(name)
        if not (isinstance(obj, type) and issubclass(obj, Operator)):
            raise RegistryError(f"{name!r} is a {type(obj).__name__}, not an Operator class")
        return obj
    found = available() if registered is None else registered
    entry = found.get(name) or _by_class_name(name, found)
    if entry is None:
        raise UnknownNameError(name, "operator or connector", close_matches(name, list(found)))
    return entry.load()


def _by_class_name(name: str, found: dict[str, Entry]) -> Entry | None:
    """The one entry whose class is called ``name`` (``JdbcOutputOperator`` is registered
    as ``JdbcOutput``): users copy class names from the docs and code."""
    same = [e for e in found.values() if e.target.rsplit(":", 1)[-1].rsplit(".", 1)[-1] == name]
    return same[0] if len(same) == 1 else None


def load_application_entry(name: str) -> Entry:
    """The application registered as ``name`` in ``malhar.applications``."""
    found = applications()
    if name not in found:
        raise UnknownNameError(name, "application", close_matches(name, list(found)))
    found[name].load()
    return found[name]


def describe_class(cls: type) -> dict[str, Any]:
    """Ports and properties of an operator class, for ``malhar info`` and docs."""
    from malhar.properties import _UNSET, properties_of

    inputs, outputs = ports_of(cls)
    ports = []
    for name, port in inputs.items():
        ports.append(
            {
                "name": name,
                "direction": "input",
                "schema": _schema_text(port),
                "optional": port.optional,
            }
        )
    for name, port in outputs.items():
        ports.append(
            {
                "name": name,
                "direction": "output",
                "schema": _schema_text(port),
                "optional": port.optional,
                "error": bool(getattr(port, "error", False)),
            }
        )
    props = []
    for name, prop in properties_of(cls).items():
        kind = prop.type
        type_name = (
            " | ".join(t.__name__ for t in kind)
            if isinstance(kind, tuple)
            else getattr(kind, "__name__", str(kind))
        )
        constraints = []
        if prop.not_null:
            constraints.append("required")
        if prop.min is not None:
            constraints.append(f">= {prop.min}")
        if prop.max is not None:
            constraints.append(f"<= {prop.max}")
        if prop.pattern is not None:
            constraints.append(f"pattern {prop.pattern.pattern!r}")
        if prop.one_of is not None:
            constraints.append(f"one of {list(prop.one_of)}")
        default = None if prop.default is _UNSET else prop.default
        props.append(
            {
                "name": name,
                "type": type_name,
                "default": default,
                "constraints": constraints,
                "doc": inspect.cleandoc(prop.__doc__ or ""),
            }
        )
    init = cls.__init__
    args = []
    if init is not object.__init__:
        params = list(inspect.signature(init).parameters.values())[1:]
        args = [
            p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
            for p in params
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    return {
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "doc": inspect.cleandoc(cls.__dict__.get("__doc__") or ""),
        "args": args,
        "ports": ports,
        "properties": props,
    }


def _schema_text(port: Any) -> str | None:
    spec = port.schema_spec
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec
    try:
        struct = port.schema
    except Exception as exc:
        return f"<invalid: {exc}>"
    return struct.simpleString() if struct is not None else None
