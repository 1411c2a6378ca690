"""User-defined control tuples (Apex's ``UserDefinedControlTuple``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class DeliveryType(enum.Enum):
    """When a control tuple reaches a control-aware input port."""

    #: in stream order, as soon as it arrives
    IMMEDIATE = "immediate"
    #: just before ``end_window`` of the window it belongs to
    END_WINDOW = "end_window"


@dataclass(frozen=True)
class ControlTuple:
    """A control tuple: any picklable, comparable ``payload`` plus its delivery type.

    Two control tuples of the same window that are equal are one: a copy
    arriving from every partition of a partitioned upstream is delivered once.
    """

    payload: Any
    delivery: DeliveryType = DeliveryType.IMMEDIATE


@dataclass(frozen=True)
class ControlSender:
    """Which upstream partition sent a control tuple.

    A control-aware input port whose handler takes a second parameter,
    ``process_control(self, payload, sender)``, receives **every copy** of a control
    tuple with its sender (no de-duplication: the operator sees that partitions 0 and 1
    both sent ``Watermark(100)``). A handler with one parameter gets each distinct
    control tuple of a window once, as the control-tuples guide asks.

    Attributes:
        stream: the stream the control tuple was emitted on.
        operator: the upstream operator that emitted it; a unifier, an operator that is
            not control aware, or a handler that declines the tuple, in between passes the
            copy on with this identity.
        partition: the upstream partition that sent this copy.
        partitions: how many partitions of that operator feed this port's partition
            (1 across a fused, parallel edge): the senders to hear from before a
            per-partition minimum (a watermark) can advance.
    """

    stream: str
    operator: str
    partition: int
    partitions: int


class PerSenderMinimum:
    """The minimum over upstream partitions of the latest value each one sent.

    Until every partition feeding the port has sent a value the minimum is None: a
    partition that has sent nothing holds it back (the rule for watermarks). Keep the
    instance in a ``State`` field so that it is checkpointed with the operator.

    Example:
        >>> m = PerSenderMinimum()
        >>> m.update(100, ControlSender("s", "up", 0, 2)) is None   # partition 1 silent
        True
        >>> m.update(80, ControlSender("s", "up", 1, 2))
        80
        >>> m.update(120, ControlSender("s", "up", 1, 2))
        100
    """

    #: how senders are named (see :attr:`malhar.window.watermark.WatermarkTracker.FORMAT`)
    FORMAT = 2

    def __init__(self) -> None:
        self.latest: dict[tuple[str, int], Any] = {}
        self.expected: dict[str, int] = {}
        self.format = self.FORMAT

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if state.get("format") != self.FORMAT:
            # checkpointed with copies passed on under the forwarding operator's name: those
            # senders are gone, and their values would hold the minimum for good
            self.latest, self.expected = {}, {}
            self.format = self.FORMAT

    def update(self, value: Any, sender: ControlSender) -> Any:
        """Record ``value`` from ``sender``; return the minimum, or None while incomplete."""
        self.latest[(sender.stream, sender.partition)] = value
        self.expected[sender.stream] = sender.partitions
        return self.minimum()

    def minimum(self) -> Any:
        """The current minimum, or None while some partition has sent nothing."""
        for stream, n in self.expected.items():
            if sum(1 for s, _ in self.latest if s == stream) < n:
                return None
        return min(self.latest.values()) if self.latest else None
