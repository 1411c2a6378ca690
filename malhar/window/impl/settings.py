"""The configuration windowed operators and their unifier share: :class:`WindowedSettings`
and the checks of its properties (and of extractor properties elsewhere)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from malhar.properties import Configurable, Property, PropertyError
from malhar.window import specs
from malhar.window.errors import WindowConfigError
from malhar.window.panes import AccumulationMode
from malhar.window.protocol import Accumulation
from malhar.window.storage import WindowedStorage
from malhar.window.triggers import Trigger, TriggerOption
from malhar.window.windows import WindowOption, to_millis

#: the streaming window period used when neither the engine nor the operator says
DEFAULT_STREAMING_WINDOW_MS = 500


# -- property checks ------------------------------------------------------------------------
def _check_option(value: Any) -> str | None:
    if value is None or isinstance(value, WindowOption):
        return None
    return (
        "expected GlobalWindow(), TimeWindows(...) or SessionWindows(...) (or None); as JSON: "
        f'"GlobalWindow", {{"TimeWindows": 10000}} ... (got {type(value).__name__} {value!r})'
    )


def _check_accumulation(value: Any) -> str | None:
    if value is None or isinstance(value, Accumulation):
        return None
    return (
        'expected an Accumulation (Count(), Sum(), ...); as JSON: "Count", {"TopN": {"n": 3}} '
        f"... (got {type(value).__name__} {value!r})"
    )


def _check_trigger(value: Any) -> str | None:
    if value is None or isinstance(value, Trigger | TriggerOption):
        return None
    return (
        "expected a Trigger (AfterWatermark(...)) or a TriggerOption; as JSON: "
        f'{{"AfterCount": 2}}, "AfterWatermark" ... (got {type(value).__name__} {value!r})'
    )


def _check_mode(value: Any) -> str | None:
    if value is None:
        return None
    try:
        AccumulationMode.parse(value)
    except WindowConfigError as exc:
        return str(exc)
    return None


def check_millis(value: Any) -> str | None:
    """``check=`` of a duration: non-negative milliseconds (int) or a timedelta."""
    numeric = isinstance(value, int | _dt.timedelta) and not isinstance(value, bool)
    if numeric and to_millis(value) >= 0:
        return None
    return f"expected non-negative milliseconds (int) or a timedelta, got {value!r}"


def _check_optional_millis(value: Any) -> str | None:
    why = None if value is None else check_millis(value)
    return why and why.replace(", got", " (or None), got", 1)


def _check_storage(value: Any) -> str | None:
    if value is None or isinstance(value, WindowedStorage):
        return None
    return (
        "expected a WindowedStorage (InMemoryWindowedStorage()); as JSON: "
        f'"InMemoryWindowedStorage" ... (got {type(value).__name__} {value!r})'
    )


def check_extractor(value: Any) -> str | None:
    """A property check: a column name, a list of names, a callable, or None."""
    if value is None or isinstance(value, str) or callable(value):
        return None
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return None
    return "expected a column name, a list of column names, a callable, or None"


class JsonSetting(Property):
    """A property whose value may also be given as a JSON value naming a built-in class
    (``"Count"``, ``{"TimeWindows": 10000}``; see :mod:`malhar.window.specs`): ``read``
    turns such a value into the object when it is assigned, so constructor arguments,
    ``properties`` of a JSON application and ``--config`` all take it."""

    def __init__(self, type_: Any, *, read: Any, **options: Any) -> None:
        super().__init__(type_, **options)
        self.read = read

    def __set__(self, instance: Any, value: Any) -> None:
        try:
            value = self.read(value)
        except WindowConfigError as exc:
            raise PropertyError(f"{type(instance).__name__}.{self.name}: {exc}") from None
        super().__set__(instance, value)


class WindowedSettings(Configurable):
    """The configuration shared by windowed operators and their unifier."""

    window_option = JsonSetting(
        object,
        read=specs.window_option_from_json,
        default=None,
        check=_check_option,
        doc="GlobalWindow(), TimeWindows(d)[.slide_by(s)], SessionWindows(gap); None: the "
        'input\'s windows (window propagation). JSON: "GlobalWindow", {"TimeWindows": ms}, '
        '{"TimeWindows": {"duration": ms, "slide": ms}}, {"SessionWindows": ms}',
    )
    accumulation = JsonSetting(
        object,
        read=specs.accumulation_from_json,
        default=None,
        check=_check_accumulation,
        doc='the Accumulation (Count() ...). JSON: a name ("Count", "Sum", "Average" ...) or '
        '{"TopN": {"n": 3}}',
    )
    trigger = JsonSetting(
        object,
        read=specs.trigger_from_json,
        default=None,
        check=_check_trigger,
        doc="a Trigger or a TriggerOption; default DefaultTrigger(): on time, then per late "
        'batch. JSON: {"AfterCount": 2}, {"AfterWatermark": {"early": {"AfterCount": 1}}} ...',
    )
    accumulation_mode = Property(
        object,
        default=None,
        check=_check_mode,
        doc="ACCUMULATING, DISCARDING (default) or ACCUMULATING_AND_RETRACTING; overrides the "
        "TriggerOption's",
    )
    fire_only_updated_panes = Property(
        bool, default=None, doc="skip panes equal to the previous one (not with DISCARDING)"
    )
    allowed_lateness = Property(
        object,
        default=0,
        check=_check_optional_millis,
        doc="ms (or timedelta) behind the watermark that tuples are still accepted; None: "
        "forever (windows are never purged)",
    )
    fixed_watermark = Property(
        object,
        default=None,
        check=_check_optional_millis,
        doc="watermark = the streaming window's implicit time minus this (ms); replaces "
        "upstream watermarks",
    )
    idle_timeout_windows = Property(
        int,
        default=None,
        min=1,
        doc="an upstream partition silent for this many streaming windows no longer holds "
        "the watermark back (None: it always does)",
    )
    storage = JsonSetting(
        object,
        read=specs.storage_from_json,
        default=None,
        check=_check_storage,
        doc="the storage of window state (a template); default InMemoryWindowedStorage(). "
        'JSON: "InMemoryWindowedStorage", {"SpillableWindowedStorage": {"budget_bytes": n}}',
    )
    output_format = Property(
        str,
        default="tuple",
        one_of=("tuple", "row"),
        doc="'tuple': WindowedTuple objects; 'row': flat dicts (WindowedTuple.to_row)",
    )
    key_names = Property(
        (str, list, tuple),
        default=None,
        doc="key column name(s) in rows (default: the key property's names, else 'key')",
    )
    value_name = Property(str, default="value", doc="the value's column name in rows")
    streaming_window_ms = Property(
        int,
        default=None,
        min=1,
        doc="the streaming window period for processing time when the engine does not say "
        f"(STREAMING_WINDOW_MS); default {DEFAULT_STREAMING_WINDOW_MS}",
    )
    combine_partitions = Property(
        bool,
        default=None,
        doc="partitions send partial accumulations to a unifier that fires the panes "
        "(default: True when not keyed)",
    )

    #: subclasses: True for operators with state per key
    keyed = False

    def settings_problems(self) -> list[str]:
        """Every reason these settings cannot work (``DAG.validate`` reports them before
        Spark starts; ``setup`` would fail on the executors)."""
        from malhar.window.protocol import MergeAccumulation

        out = self.property_problems()
        acc = self.accumulation
        if acc is None:
            out.append(
                'accumulation is not set: give one, e.g. Count() (in JSON: "Count"; see '
                "malhar.window.specs for the names)"
            )
        elif getattr(self, "inputs", 1) > 1 and not isinstance(acc, MergeAccumulation):
            out.append(
                f"accumulation {type(acc).__name__}: a merge operator needs a MergeAccumulation "
                "(InnerJoin(), Cogroup() ...)"
            )
        mode = self.accumulation_mode
        if mode is None and isinstance(self.trigger, TriggerOption):
            mode = self.trigger.accumulation_mode
        only = self.fire_only_updated_panes
        if only is None and isinstance(self.trigger, TriggerOption):
            only = self.trigger.fire_only_updated_panes
        discarding = _check_mode(mode) is None and (
            mode is None or AccumulationMode.parse(mode) is AccumulationMode.DISCARDING
        )
        if only and discarding:
            out.append(
                "fire_only_updated_panes needs accumulation_mode ACCUMULATING or "
                "ACCUMULATING_AND_RETRACTING, not DISCARDING"
            )
        return out

    def combines(self) -> bool:
        """Whether partitions of this operator are combined by a unifier."""
        return (
            (not self.keyed) if self.combine_partitions is None else bool(self.combine_partitions)
        )

    def settings(self) -> dict[str, Any]:
        """The shared settings as set on this instance (to configure a unifier alike)."""
        from malhar.properties import properties_of

        return {n: self.__dict__[n] for n in properties_of(WindowedSettings) if n in self.__dict__}
