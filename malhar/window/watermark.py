"""Watermarks: control tuples saying "no more tuples with an event time below this".

A :class:`Watermark` travels as the payload of a control tuple (``emit_control``) on a
control-aware port. A watermark ``t`` tells a windowed operator that every window ending
at or before ``t`` is complete: its ON_TIME pane fires, and tuples with event times below
``t - allowed_lateness`` are too late.

Windowed operators process watermarks **only at streaming-window boundaries** (their
``end_window``), so a replayed window moves time exactly as the first attempt did. With
a partitioned upstream, the operator's watermark is the minimum over its upstream
partitions' latest watermarks (:class:`WatermarkTracker`): a partition that has sent
none holds it back, unless it stays silent longer than the idleness timeout (in
streaming windows, Flink's ``withIdleness``). It never goes backwards. When the upstream
is repartitioned, the watermarks of its former partitions are forgotten: the new ones
hold the minimum until each has sent one (the operator's own watermark stays).

A sender may also declare itself idle with a :class:`WatermarkIdle` control tuple (Flink's
``WatermarkStatus.IDLE``): a reader with nothing to read. It is left out of the minimum at
once, without the idleness timeout, and counts again from its next watermark. An operator
whose every input is idle is idle itself and says so downstream.

Example:
    >>> from malhar.control import ControlSender, DeliveryType
    >>> tracker = WatermarkTracker()
    >>> tracker.update(100, ControlSender("s", "up", 0, 2), window=0)
    >>> tracker.combined(window=0, idle_windows=3) is None     # partition 1 silent
    True
    >>> tracker.update(100, ControlSender("s", "up", 0, 2), window=3)
    >>> tracker.combined(window=3, idle_windows=3)             # ... for 3 windows: idle
    100
    >>> tracker.update(80, ControlSender("s", "up", 1, 2), window=4)
    >>> tracker.combined(window=4, idle_windows=3)             # it speaks again
    80
    >>> tracker.idle(ControlSender("s", "up", 1, 2), window=5)
    >>> tracker.combined(window=5, idle_windows=None)          # declared idle: left out
    100
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from malhar.control import ControlSender, DeliveryType

__all__ = ["Watermark", "WatermarkIdle", "WatermarkTracker", "send_from_input"]

_ANONYMOUS = ControlSender("", "", 0, 1)


@dataclass(frozen=True, slots=True, order=True)
class Watermark:
    """The payload of a watermark control tuple: an event time in milliseconds."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class WatermarkIdle:
    """The payload of a control tuple saying that its sender holds no event time back until
    it sends a :class:`Watermark` again (Flink's ``WatermarkStatus.IDLE``).

    A sender that has nothing to read (a Kafka reader dealt no partition, or whose every
    partition is idle) sends it at the end of each streaming window instead of falling
    silent: windowed operators leave it out of their minimum at once, with no
    ``idle_timeout_windows``, and take it back into the minimum with its next watermark
    (their own watermark never goes back: what it then sends behind that is late).
    """


class WatermarkTracker:
    """The latest watermark of every upstream partition, per stream, and their minimum.

    Checkpointed with the operator (plain dicts). ``window`` arguments are streaming
    window ids: when each partition was last heard from, for the idleness timeout.
    """

    #: how senders are named: 2 since a copy passed on by an operator that is not control
    #: aware keeps its first sender (malhar.engine.dispatch); before, it carried the
    #: forwarding operator's stream and partition, which no copy names any more
    FORMAT = 2

    def __init__(self) -> None:
        #: (stream, partition) -> (latest watermark, window it arrived in)
        self.latest: dict[tuple[str, int], tuple[int, int]] = {}
        #: stream -> how many partitions of its operator send on it
        self.expected: dict[str, int] = {}
        #: the first window the tracker was asked about (silence is counted from there)
        self.since: int | None = None
        #: (stream, partition) of the senders that declared themselves idle
        #: (:class:`WatermarkIdle`) and have sent no watermark since
        self.idle_senders: set[tuple[str, int]] = set()
        self.format = self.FORMAT

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if state.get("format") != self.FORMAT:
            # checkpointed with the senders named otherwise: their latest watermarks would
            # hold the minimum for good. Forgotten, each sender holds it until it sends
            # again (the operator's own watermark, kept elsewhere, does not go back).
            self.latest, self.expected, self.since = {}, {}, None
            self.idle_senders = set()
            self.format = self.FORMAT

    def for_partition(self, partition: int) -> WatermarkTracker:
        """A tracker of its own for ``partition`` of a divided operator (from a pooled one).

        A stream with one sender per partition (a fused edge: partition ``p`` hears only
        partition ``p`` upstream, ``partitions`` 1) keeps only that partition's sender: the
        others' watermarks, pooled from the old partitions, would never be heard again and
        would hold the minimum for good. Other streams' senders are every partition's."""
        single = {stream for stream, n in self.expected.items() if n == 1}

        def kept(key: tuple[str, int]) -> bool:
            return key[0] not in single or key[1] == partition

        twin = type(self)()
        twin.latest = {k: v for k, v in self.latest.items() if kept(k)}
        twin.expected, twin.since, twin.format = dict(self.expected), self.since, self.format
        twin.idle_senders = {k for k in self.idle_senders if kept(k)}
        return twin

    @classmethod
    def pooled(cls, trackers: Sequence[WatermarkTracker]) -> WatermarkTracker:
        """One tracker of several partitions' (a repartitioned operator's): they heard the
        same control tuples, so they agree; where not, each sender's furthest watermark,
        and idle only where every one of them says so (it holds the minimum until it
        speaks again, rather than let it go early)."""
        pool = cls()
        for t in trackers:
            for key, (ts, window) in t.latest.items():
                old = pool.latest.get(key)
                pool.latest[key] = (ts, window) if old is None else max(old, (ts, window))
            for stream, n in t.expected.items():
                pool.expected.setdefault(stream, n)
        starts = [t.since for t in trackers if t.since is not None]
        pool.since = min(starts) if starts else None
        idle = [t.idle_senders for t in trackers]
        pool.idle_senders = set.intersection(*idle) if idle else set()
        return pool

    def idle(self, sender: ControlSender | None, window: int) -> None:
        """Record that ``sender`` declared itself idle (:class:`WatermarkIdle`), unless it
        sent a watermark in the same streaming window: one active copy makes a sender
        active (Flink's valve), whatever the order the copies came in."""
        s = self._heard(sender, window)
        key = (s.stream, s.partition)
        last = self.latest.get(key)
        if last is None or last[1] != window:
            self.idle_senders.add(key)

    def _heard(self, sender: ControlSender | None, window: int) -> ControlSender:
        s = sender or _ANONYMOUS
        if self.expected.get(s.stream, s.partitions) != s.partitions:
            # the upstream was repartitioned (the senders of one partitioning agree on
            # the count): the watermarks of the partitions it had are gone with them, or a
            # removed partition's last one would hold the minimum back for good
            self.latest = {k: v for k, v in self.latest.items() if k[0] != s.stream}
            self.idle_senders.difference_update({k for k in self.idle_senders if k[0] == s.stream})
        self.expected[s.stream] = s.partitions
        if self.since is None:
            self.since = window
        return s

    def update(self, timestamp: int, sender: ControlSender | None, window: int) -> None:
        """Record a watermark from ``sender`` (None: the only sender, as in a unit test)."""
        s = self._heard(sender, window)
        key = (s.stream, s.partition)
        self.idle_senders.discard(key)
        old = self.latest.get(key)
        if old is None or timestamp >= old[0]:
            self.latest[key] = (timestamp, window)
        else:  # an older watermark (a restarted partition): heard from, no regression
            self.latest[key] = (old[0], window)

    def combined(self, window: int, idle_windows: int | None) -> int | None:
        """The minimum over the partitions that count, or None while one holds it back.

        A partition counts unless it declared itself idle, or has been silent for
        ``idle_windows`` streaming windows or more (never, when ``idle_windows`` is None).
        One that never sent a watermark holds it back until it is idle (declared, or silent
        since the tracker started).
        """
        if self.since is None:
            self.since = window
        if not self.expected:
            return None
        idle = self.idle_senders
        active: list[int] = []
        for stream, n in self.expected.items():
            declared = {k for k in idle if k[0] == stream}
            heard = [v for k, v in self.latest.items() if k[0] == stream and k not in declared]
            # the sender's partition numbers need not be 0..n-1 (a fused edge says
            # partition p of 1), so partitions that never sent are counted, not named
            silent = n - len(heard) - len(declared)
            if silent > 0 and (idle_windows is None or window - self.since < idle_windows):
                return None
            for ts, last in heard:
                if idle_windows is None or self._counts(last, window, idle_windows, silent):
                    active.append(ts)
        return min(active) if active else None

    def _counts(self, last: int, window: int, idle_windows: int, unheard: int) -> bool:
        """Whether a partition last heard from in ``last`` still counts in ``window``.

        It does for ``idle_windows`` windows after it spoke, and also in the window in which
        the partitions never heard from are let go (silent since the tracker started), when
        it spoke only in that first window: their silence is counted from the first window,
        its from the next, so it would go quiet in that very window and the watermark it sent,
        held back until then, would never count (as it does when it arrives a window later).
        """
        if window - last < idle_windows:
            return True
        since = window if self.since is None else self.since
        return unheard > 0 and window - since == idle_windows

    def highest(self) -> int | None:
        """The largest watermark any partition sent (idle ones included; None: none)."""
        return max((ts for ts, _ in self.latest.values()), default=None)

    def all_idle(self, window: int | None = None, idle_windows: int | None = None) -> bool:
        """Whether no partition counts: each declared itself idle or, given ``window`` and
        ``idle_windows``, has been silent for that many streaming windows (one never heard
        from: since the tracker started)."""
        if not self.expected:
            return False
        idle = self.idle_senders
        timeout = window is not None and idle_windows is not None
        for stream, n in self.expected.items():
            declared = sum(1 for k in idle if k[0] == stream)
            heard = [v for k, v in self.latest.items() if k[0] == stream and k not in idle]
            if heard and not timeout:
                return False
            unheard = n - len(heard) - declared
            if any(self._counts(last, window, idle_windows, unheard) for _, last in heard):  # type: ignore[arg-type]
                return False
            since = window if self.since is None else self.since
            if unheard > 0 and not (timeout and window - since >= idle_windows):  # type: ignore[operator]
                return False
        return True

    def __repr__(self) -> str:
        return f"WatermarkTracker({self.latest!r})"


def send_from_input(output: Any, payload: Watermark | WatermarkIdle) -> None:
    """Send a watermark status of an input operator (idle, the end of its input) at the end
    of the window, on its bound ``output`` port, when the port is control aware: a subclass
    that redeclared ``output`` without control tuples cannot say it, and reads as before."""
    if output.port.control_aware:
        output.emit_control(payload, DeliveryType.END_WINDOW)
