"""How an application is named and loaded (``malhar run APP``, ``malhar validate APP``).

An application populates a :class:`~malhar.dag.DAG`. It can be:

- a function ``app(dag, config)`` (or ``app(dag)``), or a function of no arguments
  returning a DAG;
- a class with ``populate_dag(self, dag, config)`` (Apex's ``StreamingApplication``),
  or an instance of one;
- a ready :class:`~malhar.dag.DAG` object;
- a JSON file naming registered operators (see :func:`application_from_json`).

``APP`` names it as one of:

- ``package.module:attr`` (the current directory is importable, as with ``python -m``);
- ``path/to/file.py:attr``, or ``path/to/file.py`` alone (then ``application`` or ``app``,
  or the module's only class with ``populate_dag``);
- ``path/to/app.json``;
- the name of an entry point in the ``malhar.applications`` group (what an installed
  pack registers; see :mod:`malhar.registry`).

``config`` is a plain dict handed to the application. Keys in Apex's form set
attributes and properties after the DAG is populated, whatever kind of application
it is (``*`` as operator name means every operator)::

    dt.attr.STREAMING_WINDOW_MS=200
    dt.operator.src.attr.PARTITIONS=2
    dt.operator.src.prop.topic=words
    dt.operator.count.port.input.attr.PARALLEL_PARTITION=true
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import warnings
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from malhar import attributes as A
from malhar import registry
from malhar.dag import DAG, OperatorHandle, PortHandle
from malhar.errors import ConfigWarning, MalharError
from malhar.operator import Operator
from malhar.ports import ports_of
from malhar.properties import PropertyError, properties_of
from malhar.redaction import Scrubber
from malhar.suggest import did_you_mean

#: attribute names looked up when ``APP`` names a module or a file without ``:attr``
DEFAULT_ATTRIBUTES = ("application", "app")
#: prefixes of configuration keys that set attributes and properties (Apex's ``dt.``)
CONFIG_PREFIXES = ("dt.", "apex.")

_TOP_KEYS = {"name", "description", "attributes", "operators", "streams"}
_OPERATOR_KEYS = {"class", "args", "properties", "attributes", "port_attributes", "description"}
_STREAM_KEYS = {"from", "to", "description"}


class ApplicationError(MalharError, ValueError):
    """The application cannot be loaded or built; ``problems`` lists every reason."""

    def __init__(self, problems: list[str], app: str | None = None) -> None:
        self.problems = list(problems)
        self.app = app
        head = f"cannot load application {app!r}" if app else "cannot load the application"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


# -- configuration -------------------------------------------------------------------------
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


def _apply_key(dag: DAG, key: str, value: Any, problems: list[str]) -> None:
    prefix = next((p for p in CONFIG_PREFIXES if key.startswith(p)), None)
    if prefix is None:
        return
    parts = key[len(prefix) :].split(".")
    if parts[0] == "application" and len(parts) > 2:
        if parts[1] in (dag.name, "*"):
            _apply_key(dag, prefix + ".".join(parts[2:]), value, problems)
        return
    if parts[0] == "attr" and len(parts) == 2:
        _set_app_attribute(dag, parts[1], value, problems, f"config {key}")
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
                _set_property(name, meta.operator, parts[3], value, problems, where)
            elif parts[2] == "attr" and len(parts) == 4:
                _set_operator_attribute(dag, name, parts[3], value, problems, where)
            elif parts[2] == "port" and len(parts) == 6 and parts[4] == "attr":
                _set_port_attribute(dag, name, parts[3], parts[5], value, problems, where)
            else:
                problems.append(_bad_key(key))
        return
    problems.append(_bad_key(key))


def _bad_key(key: str) -> str:
    return (
        f"config {key}: not understood; use dt.attr.NAME, dt.operator.OP.attr.NAME, "
        "dt.operator.OP.prop.NAME or dt.operator.OP.port.PORT.attr.NAME"
    )


def _hide(text: str, name: str, value: Any) -> str:
    scrub = Scrubber()
    scrub.add(value, name)
    return scrub(text)


def _coerce(attribute: A.Attribute, value: Any) -> Any:
    if isinstance(value, Mapping) and "class" in value:
        return construct(value)
    return value


def construct(spec: Mapping[str, Any]) -> Any:
    """An object from ``{"class": "module:Class" | "KeyCodec", "args": [...] | {...}}``.

    A class name without a module is looked up in :mod:`malhar` (``KeyCodec``, ...).
    Used for attribute values such as ``STREAM_CODEC``.
    """
    import malhar

    name = str(spec["class"])
    cls = registry.import_object(name) if ":" in name else getattr(malhar, name, None)
    if cls is None:
        raise ValueError(f"unknown class {name!r}: name it as 'module:Class'")
    args = spec.get("args", [])
    return cls(**args) if isinstance(args, Mapping) else cls(*args)


def _set_app_attribute(dag: DAG, key: str, value: Any, problems: list[str], where: str) -> None:
    if key not in A.APPLICATION:
        problems.append(
            f"{where}: unknown application attribute {key!r}{did_you_mean(key, list(A.APPLICATION))}"
            f" (known: {', '.join(sorted(A.APPLICATION))})"
        )
        return
    try:
        dag.set_attribute(key, _coerce(A.APPLICATION[key], value))
    except Exception as exc:
        problems.append(f"{where}: application attribute {key}: {exc}")
        return
    if key == A.APPLICATION_NAME.name:
        dag.name = str(value)


def _set_operator_attribute(
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
        problems.append(f"{where}: attribute {key}: {exc}")


def _set_port_attribute(
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
        problems.append(f"{where}: port attribute {key}: {exc}")


def _set_property(
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
        problems.append(f"{where}: property {name!r}: {_hide(why, name, value)}")


# -- JSON applications ---------------------------------------------------------------------
def application_from_json(doc: Any, *, name: str | None = None, source: str = "") -> DAG:
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
    raised together in one :class:`ApplicationError`.
    """
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
        _set_app_attribute(dag, key, value, problems, f"{where}: attributes")
    if name:
        dag.name = name
        dag.set_attribute(A.APPLICATION_NAME.name, name)

    found = registry.available()
    handles: dict[str, OperatorHandle] = {}
    operators = _mapping(doc, "operators", where, problems)
    loaded: list[str] = []  # operators created with every property set
    for op, spec in operators.items():
        handle = _json_operator(dag, op, spec, found, problems, where, loaded)
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
            problems += [
                f"{where}: operator {op!r}: {p}"
                for p in operator_problems(dag.operators[op].operator)
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
    try:
        operator = cls(**args) if isinstance(args, Mapping) else cls(*args)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(args, Mapping):
            for key, value in args.items():
                text = _hide(text, str(key), value)
        problems.append(f"{here}: cannot create {cls.__name__} with its 'args': {text}")
        return None
    before = len(problems)
    for key, value in _mapping(spec, "properties", here, problems).items():
        _set_property(op, operator, str(key), value, problems, here)
    if loaded is not None and len(problems) == before:
        loaded.append(op)
    handle = dag.add_operator(op, operator)
    for key, value in _mapping(spec, "attributes", here, problems).items():
        _set_operator_attribute(dag, op, str(key), value, problems, here)
    for port, attrs in _mapping(spec, "port_attributes", here, problems).items():
        if not isinstance(attrs, Mapping):
            problems.append(f"{here}: port_attributes[{port!r}] must be an object")
            continue
        for key, value in attrs.items():
            _set_port_attribute(dag, op, str(port), str(key), value, problems, here)
    return handle


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


# -- naming and loading ---------------------------------------------------------------------
@dataclass
class Resolved:
    """What ``APP`` named: the application object (or a JSON document) and a default name."""

    obj: Any
    name: str
    source: str
    json_doc: Any = None


def _add_path(directory: str) -> None:
    """Make ``directory`` importable here and in Spark's Python workers started later."""
    if directory not in sys.path:
        sys.path.insert(0, directory)
        importlib.invalidate_caches()
    current = os.environ.get("PYTHONPATH", "")
    if directory not in current.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (directory, current) if p)


def _import_file(path: Path) -> ModuleType:
    path = path.resolve()
    _add_path(str(path.parent))
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None and Path(getattr(existing, "__file__", "") or "").resolve() == path:
        return existing
    if existing is not None or not name.isidentifier():
        name = f"_malhar_app_{zlib.crc32(str(path).encode()):08x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ApplicationError([f"cannot import {path}"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    # Spark workers get the classes defined in the file by value (they may not see the file).
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module


def _default_attribute(module: ModuleType, spec: str) -> tuple[Any, str]:
    for attr in DEFAULT_ATTRIBUTES:
        if hasattr(module, attr):
            return getattr(module, attr), attr
    classes = [
        (obj, n)
        for n, obj in vars(module).items()
        if isinstance(obj, type)
        and obj.__module__ == module.__name__
        and hasattr(obj, "populate_dag")
    ]
    if len(classes) == 1:
        return classes[0]
    raise ApplicationError(
        [
            f"{spec} defines no {' or '.join(DEFAULT_ATTRIBUTES)} and no single class with "
            f"populate_dag: name the application as {spec}:ATTR"
        ]
    )


def _attribute(module: ModuleType, attr: str, spec: str) -> Any:
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ApplicationError(
                [f"{spec}: {module.__name__} has no attribute {part!r}{did_you_mean(part, names)}"]
            )
        obj = getattr(obj, part)
    return obj


def _import_module(module_name: str, spec: str) -> ModuleType:
    _add_path(os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise ApplicationError(
                [f"{spec}: no module named {module_name!r} (looked in the current directory too)"]
            ) from exc
        raise


def _looks_like_file(text: str) -> bool:
    return text.endswith(".py") or os.sep in text or "/" in text or Path(text).is_file()


def _object_name(obj: Any, fallback: str) -> str:
    if isinstance(obj, DAG):
        return obj.name
    own = getattr(obj, "__name__", None) or type(obj).__name__
    return fallback if own in (*DEFAULT_ATTRIBUTES, "populate_dag") else own


def resolve(spec: str) -> Resolved:
    """Find what ``spec`` names (see the module documentation) without building it."""
    if spec.lower().endswith(".json"):
        path = Path(spec)
        if not path.is_file():
            raise ApplicationError([f"no application file {spec}"])
        try:
            doc = json.loads(path.read_text())
        except ValueError as exc:
            raise ApplicationError([f"{spec} is not valid JSON: {exc}"]) from exc
        name = doc.get("name") if isinstance(doc, Mapping) else None
        return Resolved(None, str(name or path.stem), spec, json_doc=doc)
    target, sep, attr = spec.rpartition(":")
    if sep and target and attr:
        if _looks_like_file(target):
            path = Path(target)
            if not path.is_file():
                raise ApplicationError([f"no application file {target}"])
            module = _import_file(path)
        else:
            module = _import_module(target, spec)
        obj = _attribute(module, attr, spec)
        return Resolved(obj, _object_name(obj, module.__name__.rsplit(".", 1)[-1]), spec)
    apps = registry.applications()
    if spec in apps:
        try:
            obj = apps[spec].load()
        except registry.RegistryError as exc:
            raise ApplicationError([str(exc)]) from exc
        return Resolved(obj, spec, f"{spec} ({apps[spec].target}, from {apps[spec].pack})")
    if _looks_like_file(spec):
        path = Path(spec)
        if not path.is_file():
            raise ApplicationError([f"no application file {spec}"])
        module = _import_file(path)
        obj, attr = _default_attribute(module, spec)
        return Resolved(obj, _object_name(obj, path.stem), f"{spec}:{attr}")
    if all(part.isidentifier() for part in spec.split(".")):
        try:
            module = _import_module(spec, spec)
        except ApplicationError:
            pass
        else:
            obj, attr = _default_attribute(module, spec)
            return Resolved(obj, _object_name(obj, spec.rsplit(".", 1)[-1]), f"{spec}:{attr}")
    hint = did_you_mean(spec, list(apps))
    raise ApplicationError(
        [
            f"no application {spec!r}: name a registered application (`malhar list "
            f"--kind application`), module:attr, file.py[:attr] or file.json{hint}"
        ]
    )


class _ReadConfig(dict):
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


def _call(obj: Any, dag: DAG, config: _ReadConfig) -> Any:
    if isinstance(obj, type) and hasattr(obj, "populate_dag"):
        obj = obj()
    if hasattr(obj, "populate_dag"):
        config.handed = True
        return obj.populate_dag(dag, config)
    if not callable(obj):
        raise TypeError(registry.application_problem(obj))
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        config.handed = True
        return obj(dag, config)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 2:
        config.handed = True
        return obj(dag, config)
    if len(positional) == 1:
        return obj(dag)
    return obj()


def _unread_keys(dag: DAG, config: Mapping[str, Any], read: _ReadConfig | None) -> list[str]:
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
        if op in dag.operators and prop in properties_of(type(dag.operators[op].operator)):
            hint = f"; to set the property, use dt.operator.{op}.prop.{prop}"
        else:
            hint = "; dt.operator.OP.prop.NAME sets a property, dt.attr.NAME an attribute"
        given = "did not read it" if read is not None and read.handed else "reads no config"
        out.append(f"config {key}: the application {given} while building its DAG{hint}")
    return out


def load_application(
    spec: str, config: Mapping[str, Any] | None = None, *, name: str | None = None
) -> DAG:
    """The DAG of the application named ``spec``, populated with ``config``.

    Args:
        spec: ``module:attr``, ``file.py[:attr]``, ``app.json`` or a registered name.
        config: handed to the application; its ``dt.*`` keys are applied afterwards.
        name: the application's name (its ``APPLICATION_NAME``); by default the JSON
            ``name``, the registered name, the class or function name, or the module name.

    Raises:
        ApplicationError: the application cannot be found, imported or built.

    Example:
        >>> import json, pathlib, tempfile
        >>> from malhar.app import load_application
        >>> spec = pathlib.Path(tempfile.mkdtemp()) / "numbers.json"
        >>> _ = spec.write_text(json.dumps({
        ...     "name": "numbers",
        ...     "operators": {"src": {"class": "ListInput", "args": [[[1, 2], [3]]]},
        ...                   "out": {"class": "Collector"}},
        ...     "streams": {"s": {"from": "src.output", "to": "out.input"}}}))
        >>> dag = load_application(str(spec), {"dt.attr.STREAMING_WINDOW_MS": 200})
        >>> dag.name, dag.attributes["STREAMING_WINDOW_MS"], sorted(dag.operators)
        ('numbers', 200, ['out', 'src'])
    """
    config = dict(config or {})
    try:
        found = resolve(spec)
    except ApplicationError:
        raise
    except Exception as exc:
        raise ApplicationError([f"{spec}: import failed: {type(exc).__name__}: {exc}"]) from exc
    handed: _ReadConfig | None = None
    if found.json_doc is not None:
        dag = application_from_json(found.json_doc, name=name, source=spec)
    elif isinstance(found.obj, DAG):
        dag = found.obj
        if name:
            dag.name = name
            dag.set_attribute(A.APPLICATION_NAME.name, name)
    else:
        dag = DAG(name or found.name)
        handed = _ReadConfig(config)
        try:
            result = _call(found.obj, dag, handed)
        except Exception as exc:
            raise ApplicationError(
                [f"{found.source}: building the DAG failed: {type(exc).__name__}: {exc}"],
                name or found.name,
            ) from exc
        if isinstance(result, DAG):
            dag = result
        if name:
            dag.name = name
            dag.set_attribute(A.APPLICATION_NAME.name, name)
    for unread in _unread_keys(dag, config, handed):
        warnings.warn(unread, ConfigWarning, stacklevel=2)
    apply_config(dag, config)
    return dag
