"""Naming and loading an application: what ``APP`` names (a module attribute, a file, a
JSON document, a registered entry point) and the DAG it populates."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import warnings
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from malhar import attributes as A
from malhar import registry
from malhar.app.config import ReadConfig, apply_config, unread_keys
from malhar.app.json_doc import application_from_json
from malhar.dag import DAG
from malhar.errors import ApplicationError, ConfigWarning
from malhar.suggest import did_you_mean

#: attribute names looked up when ``APP`` names a module or a file without ``:attr``
DEFAULT_ATTRIBUTES = ("application", "app")


@dataclass
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


def _call(obj: Any, dag: DAG, config: ReadConfig) -> Any:
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
        raise ApplicationError(
            [f"{spec}: import failed{_where(exc)}: {type(exc).__name__}: {exc}"]
        ) from exc
    handed: ReadConfig | None = None
    if found.json_doc is not None:
        dag = application_from_json(found.json_doc, name=name, source=spec, config=config)
    elif isinstance(found.obj, DAG):
        dag = found.obj
        if name:
            dag.name = name
            dag.set_attribute(A.APPLICATION_NAME.name, name)
    else:
        dag = DAG(name or found.name)
        handed = ReadConfig(config)
        try:
            result = _call(found.obj, dag, handed)
        except Exception as exc:
            raise ApplicationError(
                [
                    f"{found.source}: building the DAG failed{_where(exc)}: "
                    f"{type(exc).__name__}: {exc}"
                ],
                name or found.name,
            ) from exc
        if isinstance(result, DAG):
            dag = result
        elif result is not None and not dag.operators:
            raise ApplicationError(
                [
                    f"{found.source}: returned {type(result).__name__} {result!r:.60}, not a "
                    "DAG, and added no operator to the one it was given: return the DAG, or "
                    "take it as the first argument and add operators to it"
                ],
                name or found.name,
            )
        if name:
            dag.name = name
            dag.set_attribute(A.APPLICATION_NAME.name, name)
    for unread in unread_keys(dag, config, handed):
        warnings.warn(unread, ConfigWarning, stacklevel=2)
    apply_config(dag, config)
    return dag


def _where(exc: BaseException) -> str:
    """`` (at FILE:LINE)``: the last line of the application's own code in ``exc``'s
    traceback (a file of its own: not malhar's, not the standard library's or an installed
    package's, not a compiled module's), or ``""``."""
    import sysconfig
    import traceback

    paths = sysconfig.get_paths()
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the malhar package
    skipped = tuple(
        os.path.join(p, "") for p in (own, paths["stdlib"], paths["purelib"], paths["platlib"])
    )
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if os.path.isabs(f.filename) and not f.filename.startswith(skipped)
    ]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
