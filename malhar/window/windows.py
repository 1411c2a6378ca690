"""Windows and window options: which event-time windows a tuple belongs to.

Time is event time in **milliseconds** (ints). A :class:`Window` is the half-open
interval ``[start, end)``; its ``max_timestamp`` is ``end - 1``. Durations may be
given as ``int`` milliseconds or :class:`datetime.timedelta`.

Window options (Malhar's ``WindowOption``, Beam's ``WindowFn``):

- :class:`GlobalWindow`: one window for all time (fires only on count or processing-time
  triggers, or on the final watermark :data:`MAX_TIMESTAMP`);
- :class:`TimeWindows`: fixed windows of ``duration`` aligned on the epoch;
  ``TimeWindows(d).slide_by(s)``: sliding windows, each tuple in ``d / s`` of them;
- :class:`SessionWindows`: per-key sessions, a tuple at ``t`` opens the proto-session
  ``[t, t + min_gap)`` and sessions that overlap are merged.

Example:
    >>> from datetime import timedelta
    >>> TimeWindows(timedelta(minutes=10)).assign(601_000)
    [Window(start=600000, end=1200000)]
    >>> [w.start for w in TimeWindows(10_000).slide_by(2_000).assign(12_345)]
    [4000, 6000, 8000, 10000, 12000]
    >>> SessionWindows(60_000).proto(1_000)
    Window(start=1000, end=61000)
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, ClassVar, NamedTuple

import numpy as np

from malhar.window.errors import WindowConfigError

__all__ = [
    "GLOBAL_WINDOW",
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "GlobalWindow",
    "SessionWindows",
    "TimeWindows",
    "Window",
    "WindowOption",
    "to_millis",
]

#: the smallest and largest event times; a watermark of MAX_TIMESTAMP closes every window
MIN_TIMESTAMP = -(2**63)
MAX_TIMESTAMP = 2**63 - 1


def to_millis(value: Any, *, what: str = "duration") -> int:
    """The duration ``value`` as integer milliseconds: an int, a float that is a whole
    number (``10.0``), or a ``timedelta`` of whole milliseconds. ``1.5``,
    ``timedelta(microseconds=1500)`` and points in time (``datetime``) are refused, not
    truncated."""
    if isinstance(value, bool):
        raise WindowConfigError(
            f"{what}: expected a whole number of milliseconds (int) or a timedelta, got {value!r}"
        )
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        # truncated, TimeWindows(1.5) made windows of 1 ms (and a NaN raised ValueError)
        raise WindowConfigError(
            f"{what}: {value!r} is not a whole number of milliseconds: give an int of "
            "milliseconds or a timedelta (1500 or timedelta(seconds=1.5) for 1.5 s)"
        )
    if isinstance(value, _dt.timedelta):
        if value.microseconds % 1000:
            raise WindowConfigError(
                f"{what}: {value!r} is not a whole number of milliseconds (windows and "
                "event times are in milliseconds): round it, e.g. timedelta(milliseconds=2)"
            )
        return (value.days * 86_400 + value.seconds) * 1000 + value.microseconds // 1000
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, _dt.datetime | _dt.date | np.datetime64):
        raise WindowConfigError(
            f"{what}: {value!r} is a point in time, not a duration: give an int of "
            "milliseconds or a timedelta"
        )
    raise WindowConfigError(
        f"{what}: expected a whole number of milliseconds (int) or a timedelta, got "
        f"{type(value).__name__} {value!r}"
    )


class Window(NamedTuple):
    """The event-time interval ``[start, end)`` (a named tuple: hashing and comparing it,
    which the operator does per tuple, stays in C)."""

    start: int
    end: int

    @property
    def max_timestamp(self) -> int:
        """The last event time inside the window (``end - 1``)."""
        return self.end - 1

    @property
    def is_global(self) -> bool:
        return self.start == MIN_TIMESTAMP and self.end == MAX_TIMESTAMP

    def intersects(self, other: Window) -> bool:
        """True when the two intervals overlap (adjacent ones do not)."""
        return self.start < other.end and other.start < self.end

    def contains(self, other: Window) -> bool:
        return self.start <= other.start and other.end <= self.end

    def span(self, other: Window) -> Window:
        """The smallest window covering both."""
        return Window(min(self.start, other.start), max(self.end, other.end))

    def __repr__(self) -> str:
        if self.is_global:
            return "GLOBAL_WINDOW"
        return f"Window(start={self.start}, end={self.end})"


#: the one window of :class:`GlobalWindow`
GLOBAL_WINDOW = Window(MIN_TIMESTAMP, MAX_TIMESTAMP)


class WindowOption:
    """How tuples are assigned to windows (a small immutable value)."""

    #: windows that merge as tuples arrive (sessions)
    merging: ClassVar[bool] = False

    def assign(self, timestamp: int) -> list[Window]:
        """The windows a tuple with event time ``timestamp`` belongs to."""
        raise NotImplementedError

    @property
    def time_range(self) -> tuple[int, int]:
        """The event times (first, last) whose windows fit between ``MIN_TIMESTAMP`` and
        ``MAX_TIMESTAMP`` (excluded: the end of the global window); a tuple outside goes to
        the error port."""
        return MIN_TIMESTAMP, MAX_TIMESTAMP

    def assign_batch(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized :meth:`assign`: ``(rows, starts, ends)`` with one entry per (row,
        window) pair; ``rows`` indexes ``timestamps`` and does not decrease, so the rows of
        each window are in the order of ``timestamps``."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))


class GlobalWindow(WindowOption):
    """One window for the whole life of the application (Malhar's ``GlobalWindow``)."""

    def assign(self, timestamp: int) -> list[Window]:
        return [GLOBAL_WINDOW]

    def assign_batch(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(timestamps)
        return (
            np.arange(n, dtype=np.int64),
            np.full(n, MIN_TIMESTAMP, dtype=np.int64),
            np.full(n, MAX_TIMESTAMP, dtype=np.int64),
        )

    def __repr__(self) -> str:
        return "GlobalWindow()"


class TimeWindows(WindowOption):
    """Fixed windows of ``duration``, or sliding ones with :meth:`slide_by`.

    Windows are aligned on the epoch: ``[k * slide, k * slide + duration)``. ``slide``
    must divide ``duration``; a tuple then lands in exactly ``duration / slide`` windows.
    """

    def __init__(self, duration: int | _dt.timedelta, slide: int | _dt.timedelta | None = None):
        self.duration = to_millis(duration, what="TimeWindows duration")
        self.slide = self.duration if slide is None else to_millis(slide, what="slide_by")
        if self.duration <= 0:
            raise WindowConfigError(f"TimeWindows: duration must be > 0 ms, got {self.duration}")
        if self.slide <= 0 or self.slide > self.duration or self.duration % self.slide:
            raise WindowConfigError(
                f"TimeWindows({self.duration} ms).slide_by({self.slide} ms): the slide must be "
                "positive, at most the duration, and divide it"
            )

    def slide_by(self, step: int | _dt.timedelta) -> TimeWindows:
        """Sliding windows: a new window every ``step`` (which must divide the duration)."""
        return TimeWindows(self.duration, step)

    @property
    def sliding(self) -> bool:
        return self.slide != self.duration

    @property
    def windows_per_tuple(self) -> int:
        return self.duration // self.slide

    @property
    def time_range(self) -> tuple[int, int]:
        d, s = self.duration, self.slide
        first = -((MIN_TIMESTAMP + d - s) // -s) * s  # its earliest window starts at or after
        last = (MAX_TIMESTAMP - 1 - d) // s * s + s - 1  # its latest one ends before
        return first, last

    def assign(self, timestamp: int) -> list[Window]:
        last = timestamp - timestamp % self.slide  # Python's % floors: right for negatives
        d, s = self.duration, self.slide
        return [Window(last - i * s, last - i * s + d) for i in range(d // s - 1, -1, -1)]

    def assign_batch(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ts = np.asarray(timestamps, dtype=np.int64)
        last = ts - np.mod(ts, self.slide)  # numpy's mod floors too
        k = self.windows_per_tuple
        rows = np.arange(len(ts), dtype=np.int64)
        if k == 1:
            return rows, last, last + self.duration
        # row by row (each row's windows in start order, as assign gives them): the rows of
        # one window stay in arrival order, which ToList and the like keep
        offsets = np.arange((k - 1) * self.slide, -1, -self.slide, dtype=np.int64)
        starts = np.subtract.outer(last, offsets).reshape(-1)
        rows = np.broadcast_to(rows[:, None], (len(ts), k)).reshape(-1)
        return rows, starts, starts + self.duration

    def __repr__(self) -> str:
        if self.sliding:
            return f"TimeWindows({self.duration}).slide_by({self.slide})"
        return f"TimeWindows({self.duration})"


class SessionWindows(WindowOption):
    """Per-key sessions separated by at least ``min_gap`` (Malhar's ``SessionWindows``).

    A tuple at ``t`` opens the proto-session ``[t, t + min_gap)``. When it arrives, the
    operator checks the key's sessions: the proto-session *fits* into one (nothing
    changes but the state), *extends* one (that session is replaced by a longer one), or
    *bridges* two (both are replaced by one covering them). Windows merged away are
    retracted in ACCUMULATING_AND_RETRACTING mode. A session is ``[first, last + min_gap)``.
    """

    merging = True

    def __init__(self, min_gap: int | _dt.timedelta) -> None:
        self.min_gap = to_millis(min_gap, what="SessionWindows min_gap")
        if self.min_gap <= 0:
            raise WindowConfigError(f"SessionWindows: min_gap must be > 0 ms, got {self.min_gap}")

    @property
    def time_range(self) -> tuple[int, int]:
        return MIN_TIMESTAMP, MAX_TIMESTAMP - 1 - self.min_gap

    def proto(self, timestamp: int) -> Window:
        """The proto-session of a tuple at ``timestamp``."""
        return Window(timestamp, timestamp + self.min_gap)

    def assign(self, timestamp: int) -> list[Window]:
        return [self.proto(timestamp)]

    def assign_batch(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ts = np.asarray(timestamps, dtype=np.int64)
        return np.arange(len(ts), dtype=np.int64), ts, ts + self.min_gap

    def __repr__(self) -> str:
        return f"SessionWindows({self.min_gap})"
