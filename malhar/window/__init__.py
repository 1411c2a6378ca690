"""malhar.window: event-time windows, watermarks, triggers, accumulations and retractions.

Malhar's ``WindowedOperator`` (``lib/window``) with Apache Beam's windowing semantics,
on malhar's operator model. Interfaces and value types live here; the operators in
:mod:`malhar.window.impl`, the standard accumulations in :mod:`malhar.window.accumulation`.

- windows: :class:`GlobalWindow`, :class:`TimeWindows` (``.slide_by``),
  :class:`SessionWindows`; the :class:`Window` value; :class:`Watermark`, :class:`WatermarkIdle`;
- operators: :class:`WindowedOperator`, :class:`KeyedWindowedOperator`,
  :class:`WindowedMergeOperator`, :class:`KeyedWindowedMergeOperator`,
  :class:`WatermarkGenerator`;
- triggers: :class:`TriggerOption` (Malhar's builder) and Beam's composable triggers;
  :class:`AccumulationMode`; what is emitted: :class:`WindowedTuple` with :class:`PaneInfo`;
- the protocols: :class:`Accumulation`, :class:`MergeAccumulation`, :class:`WindowedStorage`;
  the storages :class:`InMemoryWindowedStorage` (default) and
  :class:`SpillableWindowedStorage` (managed state).

See ``docs/window.md``.

Example:
    >>> from malhar.testing import OperatorHarness
    >>> from malhar.window import KeyedWindowedOperator, TimeWindows, Watermark
    >>> from malhar.window.accumulation import Count
    >>> op = KeyedWindowedOperator(Count(), TimeWindows(1000), key="user", timestamp="ts")
    >>> h = OperatorHarness(op)
    >>> h.run_window([("input", {"user": "ann", "ts": 10}), ("input", {"user": "ann", "ts": 20})])
    >>> h.put_control("input", Watermark(1000))
    True
    >>> h.run_window()
    >>> [(p.key, p.window.start, p.value) for p in h.sink("output").tuples]
    [('ann', 0, 2)]
"""

from malhar.window.errors import (
    AccumulationError,
    BadTupleError,
    WindowConfigError,
    WindowError,
)
from malhar.window.impl.generator import WatermarkGenerator
from malhar.window.impl.memory import InMemoryWindowedStorage
from malhar.window.impl.operator import (
    KeyedWindowedMergeOperator,
    KeyedWindowedOperator,
    WindowedMergeOperator,
    WindowedOperator,
)
from malhar.window.impl.spillable import SpillableWindowedStorage
from malhar.window.panes import AccumulationMode, PaneInfo, Timing, WindowedTuple
from malhar.window.protocol import Accumulation, MergeAccumulation
from malhar.window.storage import WindowedStorage
from malhar.window.triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    Never,
    OrFinally,
    Repeatedly,
    Trigger,
    TriggerOption,
)
from malhar.window.watermark import Watermark, WatermarkIdle
from malhar.window.windows import (
    GLOBAL_WINDOW,
    MAX_TIMESTAMP,
    GlobalWindow,
    SessionWindows,
    TimeWindows,
    Window,
)

__all__ = [
    "GLOBAL_WINDOW",
    "MAX_TIMESTAMP",
    "Accumulation",
    "AccumulationError",
    "AccumulationMode",
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "BadTupleError",
    "DefaultTrigger",
    "GlobalWindow",
    "InMemoryWindowedStorage",
    "KeyedWindowedMergeOperator",
    "KeyedWindowedOperator",
    "MergeAccumulation",
    "Never",
    "OrFinally",
    "PaneInfo",
    "Repeatedly",
    "SessionWindows",
    "SpillableWindowedStorage",
    "TimeWindows",
    "Timing",
    "Trigger",
    "TriggerOption",
    "Watermark",
    "WatermarkGenerator",
    "WatermarkIdle",
    "Window",
    "WindowConfigError",
    "WindowError",
    "WindowedMergeOperator",
    "WindowedOperator",
    "WindowedStorage",
    "WindowedTuple",
]
