"""What a windowed operator emits: panes of a window, with their pane info.

A *pane* is one firing of a trigger for a window (and key): the accumulation's output
at that moment. Every emitted :class:`WindowedTuple` carries its :class:`PaneInfo`:

- ``index``: 0, 1, 2 ... per window and key (retractions repeat the index they retract);
- ``timing``: :attr:`Timing.EARLY` (the watermark has not passed the window's end),
  :attr:`Timing.ON_TIME` (the first pane once it has), :attr:`Timing.LATE` (later ones);
- ``is_first``, ``is_last`` (the trigger finished, or the window is purged with this
  pane), ``is_retraction`` (ACCUMULATING_AND_RETRACTING: this tuple takes back the
  pane with the same index).

Example:
    >>> t = WindowedTuple(Window(0, 10), 3, key="a",
    ...                   pane=PaneInfo(0, Timing.ON_TIME, is_first=True, is_last=True))
    >>> t.event_time
    9
    >>> t.to_row()["timing"]
    'ON_TIME'
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from malhar.window.windows import Window

__all__ = ["AccumulationMode", "PaneInfo", "Timing", "WindowedTuple"]


class Timing(enum.Enum):
    """When a pane fired relative to the watermark."""

    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"


class AccumulationMode(enum.Enum):
    """What happens to a window's state when a trigger fires (Malhar's and Beam's modes)."""

    #: the state is kept until the window is purged: each pane holds everything so far
    ACCUMULATING = "ACCUMULATING"
    #: the state is cleared after each pane: each pane holds what arrived since the last one
    DISCARDING = "DISCARDING"
    #: like ACCUMULATING, and each pane after the first is preceded by a retraction of the
    #: previous one (beyond Beam's Python SDK, which has no retractions)
    ACCUMULATING_AND_RETRACTING = "ACCUMULATING_AND_RETRACTING"

    @classmethod
    def parse(cls, value: Any) -> AccumulationMode:
        if isinstance(value, cls):
            return value
        from malhar.window.errors import WindowConfigError

        text = str(value).strip().upper()
        for member in cls:
            if text == member.value:
                return member
        raise WindowConfigError(f"accumulation mode {value!r}: use one of {[m.value for m in cls]}")


class PaneInfo(NamedTuple):
    """Where a pane stands among the firings of its window (and key)."""

    index: int
    timing: Timing
    is_first: bool = False
    is_last: bool = False
    is_retraction: bool = False


class WindowedTuple(NamedTuple):
    """A value with its window: what windowed operators emit, and what a windowed operator
    without a window option consumes (window propagation).

    Attributes:
        window: the event-time window.
        value: the pane's value (the accumulation's output, or its retraction).
        key: the key (keyed operators), else None.
        pane: the pane info (None on tuples not made by a trigger).
        timestamp: the event time the value stands for; None means the window's
            ``max_timestamp`` (what panes carry); see :attr:`event_time`.
    """

    window: Window
    value: Any
    key: Any = None
    pane: PaneInfo | None = None
    timestamp: int | None = None

    @property
    def event_time(self) -> int:
        """``timestamp``, or the window's ``max_timestamp`` when it is None."""
        return self.window.end - 1 if self.timestamp is None else self.timestamp

    def to_row(self, key_names: Any = "key", value_name: str = "value") -> dict[str, Any]:
        """A flat dict for table sinks: the key (one column per name in ``key_names``),
        ``window_start``, ``window_end``, the value and the pane info."""
        row: dict[str, Any] = {}
        if isinstance(key_names, str):
            row[key_names] = self.key
        else:
            key = self.key if isinstance(self.key, tuple) else (self.key,)
            row.update(zip(key_names, key, strict=True))
        pane = self.pane
        row["window_start"] = self.window.start
        row["window_end"] = self.window.end
        row[value_name] = self.value
        if pane is None:
            row.update(
                pane_index=None, timing=None, is_first=None, is_last=None, is_retraction=False
            )
        else:
            row["pane_index"] = pane.index
            row["timing"] = pane.timing.value
            row["is_first"] = pane.is_first
            row["is_last"] = pane.is_last
            row["is_retraction"] = pane.is_retraction
        return row
