"""Applications described in JSON: registered operators, their arguments, properties and
attributes, and the streams between their ports."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from malhar import attributes as A
from malhar import registry
from malhar.app.config import (
    configured_properties,
    hide,
    set_app_attribute,
    set_operator_attribute,
    set_port_attribute,
    set_property,
)
from malhar.dag import DAG, OperatorHandle, PortHandle
from malhar.errors import ApplicationError
from malhar.ports import ports_of
from malhar.properties import PropertyError, properties_of
from malhar.suggest import did_you_mean

_TOP_KEYS = {"name", "description", "attributes", "operators", "streams"}
_OPERATOR_KEYS = {"class", "args", "properties", "attributes", "port_attributes", "description"}
_STREAM_KEYS = {"from", "to", "description"}


def application_from_json(
    doc: Any,
    *,
    name: str | None = None,
    source: str = "",
    config: Mapping[str, Any] | None = None,
) -> DAG:
    """Build a DAG from a JSON application description.

    Example (``"to"`` may also be a single string; ``"args"`` are constructor
    arguments, ``"properties"`` are set afterwards so their constraints apply)::

        {
          "name": "numbers",
          "attributes": {"STREAMING_WINDOW_MS": 200},
          "operators": {
            "src": {"class": "ListInput", "args": {"windows": [[1, 2], [3]]},
                    "attributes": {"PARTITIONS": 2}},
            "out": {"class": "Collector",
                    "port_attributes": {"input": {"PARALLEL_PARTITION": true}}}
          },
          "streams": {"numbers": {"from": "src.output", "to": ["out.input"]}}
        }

    ``class`` is a name registered in ``malhar.operators`` / ``malhar.connectors``
    (see ``malhar list``) or ``module:Class``. Every problem is collected and
    raised together in one :class:`ApplicationError`. ``config``: the ``dt.*`` settings
    applied afterwards; a required property they (or ``"properties"``) set is given to
    a constructor that refuses to build the operator without it.
    """
    config = config or {}
    where = source or "<json>"
    if not isinstance(doc, Mapping):
        raise ApplicationError([f"{where}: the top level must be a JSON object"], name)
    problems: list[str] = []
    for key in doc:
        if key not in _TOP_KEYS:
            problems.append(
                f"{where}: unknown key {key!r}{did_you_mean(key, sorted(_TOP_KEYS))}"
                f" (keys: {', '.join(sorted(_TOP_KEYS))})"
            )
    dag = DAG(str(name or doc.get("name") or Path(source).stem or "app"))
    for key, value in _mapping(doc, "attributes", where, problems).items():
        set_app_attribute(dag, key, value, problems, f"{where}: attributes")
    if name:
        dag.name = name
        dag.set_attribute(A.APPLICATION_NAME.name, name)

    found = registry.available()
    handles: dict[str, OperatorHandle] = {}
    operators = _mapping(doc, "operators", where, problems)
    loaded: list[str] = []  # operators created with every property set
    for op, spec in operators.items():
        given = configured_properties(config, dag.name, op)
        handle = _json_operator(dag, op, spec, found, problems, where, loaded, given)
        if handle is not None:
            handles[op] = handle
    for stream, spec in _mapping(doc, "streams", where, problems).items():
        _json_stream(dag, stream, spec, operators, handles, problems, where)
    if not doc.get("operators"):
        problems.append(f"{where}: no operators: add an 'operators' object")
    if problems:
        # the file does not load, so DAG.validate() will not run yet: report what is wrong
        # with each operator on its own too (partition_by against schema, a windowed
        # operator without accumulation ...), so that one round shows every such problem
        from malhar.validation import operator_problems

        for op in loaded:
            given = configured_properties(config, dag.name, op)  # not applied yet
            problems += [
                f"{where}: operator {op!r}: {p}"
                for p in operator_problems(dag.operators[op].operator)
                if not any(p.startswith(f"property {g!r} must be set") for g in given)
            ]
        raise ApplicationError(problems, dag.name)
    return dag


def _mapping(doc: Mapping[str, Any], key: str, where: str, problems: list[str]) -> Mapping:
    value = doc.get(key, {})
    if not isinstance(value, Mapping):
        problems.append(f"{where}: {key!r} must be an object, got {type(value).__name__}")
        return {}
    return value


def _json_operator(
    dag: DAG,
    op: str,
    spec: Any,
    found: dict[str, registry.Entry],
    problems: list[str],
    where: str,
    loaded: list[str] | None = None,
    given: Mapping[str, Any] | None = None,
) -> OperatorHandle | None:
    here = f"{where}: operator {op!r}"
    if isinstance(spec, str):
        spec = {"class": spec}
    if not isinstance(spec, Mapping) or "class" not in spec:
        problems.append(f"{here}: expected an object with a 'class' (see `malhar list`)")
        return None
    for key in spec:
        if key not in _OPERATOR_KEYS:
            problems.append(
                f"{here}: unknown key {key!r}{did_you_mean(key, sorted(_OPERATOR_KEYS))}"
                f" (keys: {', '.join(sorted(_OPERATOR_KEYS))})"
            )
    try:
        cls = registry.load(str(spec["class"]), found)
    except registry.RegistryError as exc:
        problems.append(f"{here}: {exc}")
        return None
    args = spec.get("args", {})
    settings = {**(given or {}), **_mapping(spec, "properties", here, [])}
    try:
        operator = _construct(cls, args, settings)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(args, Mapping):
            for key, value in args.items():
                text = hide(text, str(key), value)
        if isinstance(exc, PropertyError) and "must be set" in text:
            text += (
                f' (give it in the operator\'s "args" or "properties", or as '
                f"-c dt.operator.{op}.prop.NAME=...)"
            )
        problems.append(f"{here}: cannot create {cls.__name__} with its 'args': {text}")
        return None
    before = len(problems)
    for key, value in _mapping(spec, "properties", here, problems).items():
        set_property(op, operator, str(key), value, problems, here)
    if loaded is not None and len(problems) == before:
        loaded.append(op)
    handle = dag.add_operator(op, operator)
    for key, value in _mapping(spec, "attributes", here, problems).items():
        set_operator_attribute(dag, op, str(key), value, problems, here)
    for port, attrs in _mapping(spec, "port_attributes", here, problems).items():
        if not isinstance(attrs, Mapping):
            problems.append(f"{here}: port_attributes[{port!r}] must be an object")
            continue
        for key, value in attrs.items():
            set_port_attribute(dag, op, str(port), str(key), value, problems, here)
    return handle


def _construct(cls: type, args: Any, settings: Mapping[str, Any]) -> Any:
    """``cls(*args)`` / ``cls(**args)``; when that refuses a required property that
    ``settings`` (the operator's ``"properties"`` and config) set, again with it: a
    constructor may check them, while the settings are applied after it."""
    if not isinstance(args, Mapping):
        return cls(*args)
    try:
        return cls(**args)
    except PropertyError as exc:
        known = properties_of(cls)
        required = {
            name: known[name].parse(value)
            for name, value in settings.items()
            if name in known and known[name].not_null and name not in args
        }
        if not required or "must be set" not in str(exc):
            raise
        try:
            return cls(**args, **required)
        except TypeError:  # a constructor that names its arguments otherwise
            raise exc from None


def _json_port(
    ref: Any,
    handles: dict[str, OperatorHandle],
    failed: set[str],
    problems: list[str],
    here: str,
) -> PortHandle | None:
    if not isinstance(ref, str) or "." not in ref:
        problems.append(f"{here}: {ref!r} is not a port reference 'operator.port'")
        return None
    op, port = ref.rsplit(".", 1)
    handle = handles.get(op)
    if handle is None:
        if op in failed:
            problems.append(f"{here}: operator {op!r} could not be created (see above)")
        else:
            problems.append(f"{here}: no operator {op!r}{did_you_mean(op, list(handles))}")
        return None
    inputs, outputs = ports_of(type(handle.operator))
    ports = [*inputs, *outputs]
    if port not in ports:
        problems.append(
            f"{here}: {type(handle.operator).__name__} {op!r} has no port {port!r}"
            f"{did_you_mean(port, ports)} (ports: {', '.join(sorted(ports)) or 'none'})"
        )
        return None
    return getattr(handle, port)


def _json_stream(
    dag: DAG,
    stream: str,
    spec: Any,
    operators: Mapping[str, Any],
    handles: dict[str, OperatorHandle],
    problems: list[str],
    where: str,
) -> None:
    here = f"{where}: stream {stream!r}"
    if not isinstance(spec, Mapping) or "from" not in spec or "to" not in spec:
        problems.append(f"{here}: expected an object with 'from' and 'to'")
        return
    for key in spec:
        if key not in _STREAM_KEYS:
            problems.append(
                f"{here}: unknown key {key!r} (keys: {', '.join(sorted(_STREAM_KEYS))})"
            )
    targets = [spec["to"]] if isinstance(spec["to"], str) else spec["to"]
    if not isinstance(targets, list):
        problems.append(f"{here}: 'to' must be a port reference or a list of them")
        return
    failed = set(operators) - set(handles)
    source = _json_port(spec["from"], handles, failed, problems, here)
    sinks = [_json_port(t, handles, failed, problems, here) for t in targets]
    if source is None or any(s is None for s in sinks):
        return
    dag.add_stream(stream, source, *sinks)
