"""Window settings written as JSON values: the accumulation, window option, trigger and
storage of a windowed operator by name, for JSON applications and ``--config``.

A setting is a name (``"Count"``) or an object of one name and its parameters:
keywords (``{"TopN": {"n": 3}}``), positional arguments (``{"TimeWindows": [10000, 5000]}``)
or one positional argument (``{"TimeWindows": 10000}``). Only the library's built-in
classes are offered, through the explicit tables below: nothing is imported or evaluated
from the configuration. Classes that take Python functions (``Fold``, ``Reduce``, a
``TopN`` key) and your own subclasses are set in Python.

Example:
    >>> from malhar.window.specs import (
    ...     accumulation_from_json, trigger_from_json, window_option_from_json)
    >>> accumulation_from_json({"TopN": {"n": 3}}).n
    3
    >>> window_option_from_json({"TimeWindows": {"duration": 10000, "slide": 5000}})
    TimeWindows(10000).slide_by(5000)
    >>> trigger_from_json({"AfterWatermark": {"early": {"AfterCount": 2}}})
    AfterWatermark(early=AfterCount(2))
    >>> accumulation_from_json("Cont")
    Traceback (most recent call last):
    ...
    malhar.window.errors.WindowConfigError: unknown accumulation 'Cont'; did you mean 'Count'? (known: Average, Cogroup, Count, FullOuterJoin, InnerJoin, LeftOuterJoin, Max, Min, RemoveDuplicates, RightOuterJoin, SequenceCount, Sum, ToList, TopN, TopNByKey)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from malhar.suggest import did_you_mean
from malhar.window.errors import WindowConfigError

__all__ = [
    "accumulation_from_json",
    "accumulations",
    "storage_from_json",
    "trigger_from_json",
    "triggers",
    "window_option_from_json",
    "window_options",
]


# -- the tables: name -> factory with JSON parameters --------------------------------------------
def accumulations() -> dict[str, Callable[..., Any]]:
    """The accumulations a JSON value can name (``malhar.window.accumulation``)."""
    from malhar.window import accumulation as acc

    def top_n(n: int = 10) -> Any:
        return acc.TopN(n)  # its ``key`` is a Python function: not from JSON

    def top_n_by_key(n: int = 10) -> Any:
        return acc.TopNByKey(n)

    def to_list(sort: bool = False) -> Any:
        return acc.ToList(sort)

    return {
        "Average": acc.Average,
        "Cogroup": acc.Cogroup,
        "Count": acc.Count,
        "FullOuterJoin": acc.FullOuterJoin,
        "InnerJoin": acc.InnerJoin,
        "LeftOuterJoin": acc.LeftOuterJoin,
        "Max": acc.Max,
        "Min": acc.Min,
        "RemoveDuplicates": acc.RemoveDuplicates,
        "RightOuterJoin": acc.RightOuterJoin,
        "SequenceCount": acc.SequenceCount,
        "Sum": acc.Sum,
        "ToList": to_list,
        "TopN": top_n,
        "TopNByKey": top_n_by_key,
    }


def window_options() -> dict[str, Callable[..., Any]]:
    """The window options a JSON value can name (durations in ms)."""
    from malhar.window.windows import GlobalWindow, SessionWindows, TimeWindows

    def time_windows(duration: int, slide: int | None = None) -> Any:
        return TimeWindows(duration, slide)

    def session_windows(min_gap: int) -> Any:
        return SessionWindows(min_gap)

    return {
        "GlobalWindow": GlobalWindow,
        "SessionWindows": session_windows,
        "TimeWindows": time_windows,
    }


def triggers() -> dict[str, Callable[..., Any]]:
    """The triggers a JSON value can name; a trigger's triggers are JSON values too."""
    from malhar.window import triggers as t

    def after_watermark(early: Any = None, late: Any = None) -> Any:
        return t.AfterWatermark(early=early, late=late)

    def after_count(count: int) -> Any:
        return t.AfterCount(count)

    def after_processing_time(delay: int = 0) -> Any:
        return t.AfterProcessingTime(delay)

    def repeatedly(underlying: Any) -> Any:
        return t.Repeatedly(underlying)

    def or_finally(main: Any, until: Any) -> Any:
        return t.OrFinally(main, until)

    return {
        "AfterAll": t.AfterAll,
        "AfterAny": t.AfterAny,
        "AfterCount": after_count,
        "AfterEach": t.AfterEach,
        "AfterProcessingTime": after_processing_time,
        "AfterWatermark": after_watermark,
        "Always": t.Always,
        "DefaultTrigger": t.DefaultTrigger,
        "Never": t.Never,
        "OrFinally": or_finally,
        "Repeatedly": repeatedly,
    }


def storages() -> dict[str, Callable[..., Any]]:
    """The window state storages a JSON value can name."""
    from malhar.window.impl.memory import InMemoryWindowedStorage
    from malhar.window.impl.spillable import SpillableWindowedStorage

    def spillable(budget_bytes: int = 64 << 20) -> Any:
        return SpillableWindowedStorage(budget_bytes)

    return {
        "InMemoryWindowedStorage": InMemoryWindowedStorage,
        "SpillableWindowedStorage": spillable,
    }


#: names that exist but take Python functions: why they cannot come from JSON
_PYTHON_ONLY = {
    "Fold": "it takes Python functions",
    "Reduce": "it takes a Python function",
    "TriggerOption": "it is a Python builder: use AfterWatermark with early/late triggers, "
    "and the accumulation_mode and fire_only_updated_panes properties",
}


# -- reading a JSON value ------------------------------------------------------------------------
def _build(
    what: str,
    value: Any,
    table: dict[str, Callable[..., Any]],
    arg: Callable[[Any], Any] = lambda v: v,
) -> Any:
    """``value`` (a name or ``{name: params}``) made with ``table``; ``arg`` reads each
    parameter (a trigger's triggers)."""
    known = ", ".join(sorted(table))
    if isinstance(value, str):
        name, params = value, None
    elif isinstance(value, Mapping) and len(value) == 1:
        ((name, params),) = value.items()
    else:
        raise WindowConfigError(
            f"{what} {value!r}: expected a name ({known}) or an object of one name and its "
            'parameters, e.g. {"Name": {"param": value}}'
        )
    factory = table.get(name)
    if factory is None:
        why = _PYTHON_ONLY.get(name)
        if why:
            raise WindowConfigError(
                f"{what} {name!r} cannot be given as a JSON value: {why}; set it in Python "
                f"(a .py application) or use one of: {known}"
            )
        raise WindowConfigError(
            f"unknown {what} {name!r}{did_you_mean(name, table)} (known: {known})"
        )
    if params is None:
        args, kwargs = [], {}
    elif isinstance(params, Mapping):
        args, kwargs = [], {str(k): arg(v) for k, v in params.items()}
    elif isinstance(params, list):
        args, kwargs = [arg(v) for v in params], {}
    else:
        args, kwargs = [arg(params)], {}
    signature = inspect.signature(factory)
    takes = ", ".join(map(_shown, signature.parameters.values())) or "no parameters"
    named = [n for n, p in signature.parameters.items() if p.kind is not p.VAR_POSITIONAL]
    for key in kwargs:
        if key not in named:
            raise WindowConfigError(
                f"{what} {name}: unknown parameter {key!r}{did_you_mean(key, named)} "
                f"({name} takes {takes})"
            )
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise WindowConfigError(f"{what} {name}: {exc} ({name} takes {takes})") from None
    try:
        return factory(*args, **kwargs)
    except (TypeError, ValueError) as exc:  # WindowConfigError is a ValueError
        text = str(exc)
        raise WindowConfigError(text if text.startswith(name) else f"{name}: {text}") from None


def _shown(p: inspect.Parameter) -> str:
    if p.kind is p.VAR_POSITIONAL:
        return f"[{p.name} ...]"
    return p.name if p.default is p.empty else f"{p.name}={p.default!r}"


def _is_json(value: Any) -> bool:
    return isinstance(value, str | Mapping)


def accumulation_from_json(value: Any) -> Any:
    """An :class:`~malhar.window.Accumulation` from ``"Count"``, ``{"TopN": {"n": 3}}`` ...;
    any other value is returned as it is."""
    return _build("accumulation", value, accumulations()) if _is_json(value) else value


def window_option_from_json(value: Any) -> Any:
    """A window option from ``"GlobalWindow"``, ``{"TimeWindows": 10000}``,
    ``{"TimeWindows": {"duration": 10000, "slide": 5000}}``, ``{"SessionWindows": 60000}``;
    any other value is returned as it is."""
    return _build("window option", value, window_options()) if _is_json(value) else value


def trigger_from_json(value: Any) -> Any:
    """A trigger from ``"DefaultTrigger"``, ``{"AfterCount": 2}``,
    ``{"AfterWatermark": {"early": {"AfterCount": 1}}}``,
    ``{"AfterAny": [{"AfterCount": 5}, "AfterWatermark"]}`` ...; any other value is
    returned as it is."""
    return _build("trigger", value, triggers(), _trigger_param) if _is_json(value) else value


def _trigger_param(value: Any) -> Any:
    """A trigger's parameter: a trigger (``early``, ``AfterAny``'s items; a name that is
    none is refused with the names there are), or a number as given (``AfterCount``'s
    count "3" was said to be an unknown trigger; the trigger says what it takes)."""
    if isinstance(value, str) and value.strip().lstrip("+-").replace(".", "", 1).isdigit():
        return value
    return trigger_from_json(value)


def storage_from_json(value: Any) -> Any:
    """A window state storage from ``"InMemoryWindowedStorage"`` or
    ``{"SpillableWindowedStorage": {"budget_bytes": 16777216}}``; any other value is returned
    as it is."""
    return _build("storage", value, storages()) if _is_json(value) else value
