"""Configuration of an application: ``KEY=VALUE`` pairs, the ``dt.*`` keys that set
attributes and properties after the DAG is populated, and the config handed to the
application, which notes the keys it reads."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from malhar import attributes as A
from malhar import registry
from malhar.dag import DAG
from malhar.errors import ApplicationError
from malhar.operator import Operator
from malhar.properties import PropertyError, properties_of
from malhar.redaction import Scrubber
from malhar.suggest import did_you_mean

#: prefixes of configuration keys that set attributes and properties (Apex's ``dt.``)
CONFIG_PREFIXES = ("dt.", "apex.")


def parse_value(text: str) -> Any:
    """A ``--config`` value: JSON when it parses (``3``, ``true``, ``[1, 2]``), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_config(pairs: Iterable[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{"k": v}`` with values parsed by :func:`parse_value`."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"config {pair!r} is not of the form KEY=VALUE")
        out[key.strip()] = parse_value(value)
    return out


def apply_config(dag: DAG, config: Mapping[str, Any]) -> None:
    """Apply the ``dt.*`` keys of ``config`` to ``dag`` (other keys are the application's).

    Raises:
        ApplicationError: listing every key that names an unknown operator, port,
            attribute or property, or whose value a property rejects.
    """
    problems: list[str] = []
    for key, value in config.items():
        _apply_key(dag, str(key), value, problems)
    if problems:
        raise ApplicationError(problems, dag.name)


def _scoped(key: str, app: str) -> tuple[str, list[str]] | None:
    """A ``dt.*`` key of application ``app`` without its ``application.APP.`` scope, and its
    parts after the prefix (None: not a ``dt.*`` key, or another application's)."""
    prefix = next((p for p in CONFIG_PREFIXES if key.startswith(p)), None)
    if prefix is None:
        return None
    parts = key[len(prefix) :].split(".")
    while parts[0] == "application" and len(parts) > 2:
        if parts[1] not in (app, "*"):
            return None
        parts = parts[2:]
    return prefix + ".".join(parts), parts


def _apply_key(dag: DAG, key: str, value: Any, problems: list[str]) -> None:
    scoped = _scoped(key, dag.name)
    if scoped is None:
        return
    key, parts = scoped
    if parts[0] == "attr" and len(parts) == 2:
        set_app_attribute(dag, parts[1], value, problems, f"config {key}")
        return
    if parts[0] == "operator" and len(parts) >= 4:
        names = list(dag.operators) if parts[1] == "*" else [parts[1]]
        for name in names:
            if name not in dag.operators:
                hint = did_you_mean(name, list(dag.operators))
                problems.append(f"config {key}: no operator {name!r} in the application{hint}")
                continue
            meta = dag.operators[name]
            where = f"config {key}"
            if parts[2] == "prop" and len(parts) == 4:
                set_property(name, meta.operator, parts[3], value, problems, where)
            elif parts[2] == "attr" and len(parts) == 4:
                set_operator_attribute(dag, name, parts[3], value, problems, where)
            elif parts[2] == "port" and len(parts) == 6 and parts[4] == "attr":
                set_port_attribute(dag, name, parts[3], parts[5], value, problems, where)
            else:
                problems.append(_bad_key(key))
        return
    problems.append(_bad_key(key))


def configured_properties(config: Mapping[str, Any], app: str, op: str) -> dict[str, Any]:
    """The properties ``config`` sets on operator ``op`` of application ``app`` (name ->
    value as given), as :func:`apply_config` will apply them."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        scoped = _scoped(str(key), app)
        if scoped is None:
            continue
        parts = scoped[1]
        if (
            len(parts) == 4
            and parts[0] == "operator"
            and parts[1] in (op, "*")
            and parts[2] == "prop"
        ):
            out[parts[3]] = value
    return out


def _bad_key(key: str) -> str:
    return (
        f"config {key}: not understood; use dt.attr.NAME, dt.operator.OP.attr.NAME, "
        "dt.operator.OP.prop.NAME or dt.operator.OP.port.PORT.attr.NAME"
    )


def hide(text: str, name: str, value: Any) -> str:
    scrub = Scrubber()
    scrub.add(value, name)
    return scrub(text)


def _coerce(attribute: A.Attribute, value: Any) -> Any:
    if isinstance(value, Mapping) and "class" in value:
        return construct(value)
    return value


def construct(spec: Mapping[str, Any]) -> Any:
    """An object from ``{"class": "module:Class" | "KeyCodec", "args": [...] | {...}}``.

    A class name without a module is looked up in :mod:`malhar` (``KeyCodec``, ...), then
    in :mod:`malhar.algo` (``FieldCodec``). Used for attribute values such as
    ``STREAM_CODEC``.
    """
    import malhar
    import malhar.algo

    name = str(spec["class"])
    places = (malhar, malhar.algo)
    if ":" in name:
        cls = registry.import_object(name)
    else:
        cls = next((getattr(m, name) for m in places if hasattr(m, name)), None)
    if cls is None:
        from malhar.suggest import did_you_mean

        known = [n for m in places for n in getattr(m, "__all__", ()) if n[:1].isupper()]
        raise ValueError(
            f"unknown class {name!r}: a bare name is looked up in malhar and malhar.algo; "
            f"name others as 'module:Class'{did_you_mean(name, known)}"
        )
    args = spec.get("args", [])
    return cls(**args) if isinstance(args, Mapping) else cls(*args)


def _attribute_problem(kind: str, key: str, exc: Exception) -> str:
    """``<kind>attribute KEY: ...``, the name once (the attribute's own errors name it)."""
    text = str(exc)
    return (
        f"{kind}{text}" if text.startswith(f"attribute {key}") else f"{kind}attribute {key}: {text}"
    )


def set_app_attribute(dag: DAG, key: str, value: Any, problems: list[str], where: str) -> None:
    if key not in A.APPLICATION:
        problems.append(
            f"{where}: unknown application attribute {key!r}{did_you_mean(key, list(A.APPLICATION))}"
            f" (known: {', '.join(sorted(A.APPLICATION))})"
        )
        return
    try:
        dag.set_attribute(key, _coerce(A.APPLICATION[key], value))
    except Exception as exc:
        problems.append(f"{where}: {_attribute_problem('application ', key, exc)}")
        return
    if key == A.APPLICATION_NAME.name:
        dag.name = str(value)


def set_operator_attribute(
    dag: DAG, op: str, key: str, value: Any, problems: list[str], where: str
) -> None:
    if key not in A.OPERATOR:
        problems.append(
            f"{where}: unknown operator attribute {key!r}{did_you_mean(key, list(A.OPERATOR))}"
            f" (known: {', '.join(sorted(A.OPERATOR))})"
        )
        return
    try:
        dag.set_operator_attribute(op, key, _coerce(A.OPERATOR[key], value))
    except Exception as exc:
        problems.append(f"{where}: {_attribute_problem('', key, exc)}")


def set_port_attribute(
    dag: DAG, op: str, port: str, key: str, value: Any, problems: list[str], where: str
) -> None:
    meta = dag.operators[op]
    ports = [*meta.inputs, *meta.outputs]
    if port not in ports:
        problems.append(
            f"{where}: {type(meta.operator).__name__} has no port {port!r}"
            f"{did_you_mean(port, ports)} (ports: {', '.join(sorted(ports))})"
        )
        return
    if key not in A.PORT:
        problems.append(
            f"{where}: unknown port attribute {key!r}{did_you_mean(key, list(A.PORT))}"
            f" (known: {', '.join(sorted(A.PORT))})"
        )
        return
    try:
        dag.set_port_attribute(op, port, key, _coerce(A.PORT[key], value))
    except Exception as exc:
        problems.append(f"{where}: {_attribute_problem('port ', key, exc)}")


def set_property(
    op: str, operator: Operator, name: str, value: Any, problems: list[str], where: str
) -> None:
    cls = type(operator)
    known = properties_of(cls)
    if name not in known:
        names = sorted(known)
        problems.append(
            f"{where}: {cls.__name__} has no property {name!r}"
            f"{did_you_mean(name, names)} (properties: {', '.join(names) or 'none'})"
        )
        return
    try:
        setattr(operator, name, known[name].parse(value))
    except Exception as exc:
        why = str(exc)
        if isinstance(exc, PropertyError):  # it names the property already: once is enough
            why = why.removeprefix(f"property {name!r}: ").removeprefix(f"{cls.__name__}.{name}: ")
        problems.append(f"{where}: property {name!r}: {hide(why, name, value)}")


class ReadConfig(dict):
    """The config handed to an application, noting the keys it reads (any iteration
    counts as reading them all)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(data)
        self.handed = False  # given to the application at all
        self.read: set[Any] = set()
        self.read_all = False

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.read.add(key)
        return super().pop(key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().setdefault(key, default)

    def __iter__(self) -> Any:
        self.read_all = True
        return super().__iter__()

    def keys(self) -> Any:
        self.read_all = True
        return super().keys()

    def items(self) -> Any:
        self.read_all = True
        return super().items()

    def values(self) -> Any:
        self.read_all = True
        return super().values()

    def copy(self) -> dict[str, Any]:
        self.read_all = True
        return dict(super().items())


def unread_keys(dag: DAG, config: Mapping[str, Any], read: ReadConfig | None) -> list[str]:
    """What to say of the application's own (not ``dt.*``) keys that nothing read while
    it built its DAG: most often a property meant as ``dt.operator.OP.prop.NAME``. Said as a
    warning: a shared config file may hold other applications' keys, and an application
    given the config may read a key later."""
    if read is not None and read.read_all:
        return []
    out = []
    for key in config:
        if str(key).startswith(CONFIG_PREFIXES) or (read is not None and key in read.read):
            continue
        op, _, prop = str(key).partition(".")
        # a key the application asked for but that was not given: a misspelling of it?
        asked = [str(k) for k in (read.read if read is not None else ()) if k not in config]
        close = did_you_mean(str(key), asked)
        if op in dag.operators and prop in properties_of(type(dag.operators[op].operator)):
            hint = f"; to set the property, use dt.operator.{op}.prop.{prop}"
        elif close:
            hint = f"{close} (a key the application reads)"
        else:
            hint = "; dt.operator.OP.prop.NAME sets a property, dt.attr.NAME an attribute"
        given = "did not read it" if read is not None and read.handed else "reads no config"
        out.append(f"config {key}: the application {given} while building its DAG{hint}")
    return out
