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
