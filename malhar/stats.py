"""Operator statistics: what each partition did in each window, and who listens.

Every partition runtime reports, at the end of every window, a :class:`WindowStats`
(tuples in per input port, tuples out per output port, payload bytes in, the
window's processing time, an input's backlog, and the operator's own
:meth:`~malhar.operator.Operator.metrics`). The reports travel with the window's
data to the end of the query and reach the driver in the query progress
(``observedMetrics``). There:

- ``RunningApplication.metrics()`` turns recent windows into one
  :class:`OperatorMetrics` row per operator (what ``malhar run --progress`` shows);
- each :class:`StatsListener` of an operator (the ``STATS_LISTENERS`` attribute,
  Apex's ``StatsListener``) gets the operator's recent windows about once per second
  as an :class:`OperatorStats` and answers with a :class:`Response`; a response with
  ``repartition_required`` asks the engine to call the operator's partitioner.

Example:
    >>> from malhar.stats import OperatorStats, Response, WindowStats
    >>> class Busy:
    ...     def process_stats(self, stats: OperatorStats) -> Response:
    ...         return Response(repartition_required=stats.tuples_in_per_second() > 1000)
    >>> w = WindowStats(window=3, partition=0, tuples_in={"input": 600},
    ...                 tuples_out={}, started=10.0, ended=10.5)
    >>> Busy().process_stats(OperatorStats("count", 1, [w])).repartition_required
    True
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["OperatorMetrics", "OperatorStats", "Response", "StatsListener", "WindowStats"]


@dataclass(frozen=True)
class WindowStats:
    """What one operator partition did in one window.

    ``started`` / ``ended`` are wall-clock seconds (``time.time()``) of the worker at
    the window's begin and end: the window's processing time is their difference.
    """

    window: int
    partition: int
    tuples_in: Mapping[str, int] = field(default_factory=dict)
    tuples_out: Mapping[str, int] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    bytes_in: int = 0
    #: what an input still has to read after this window (e.g. Kafka lag), if it knows
    backlog: int | None = None
    #: the operator's own metrics (``Operator.metrics()``)
    metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def process_ms(self) -> float:
        return max(0.0, (self.ended - self.started) * 1000)

    def to_json(self) -> dict[str, Any]:
        return {
            "w": self.window,
            "p": self.partition,
            "i": dict(self.tuples_in),
            "o": dict(self.tuples_out),
            "s": self.started,
            "e": self.ended,
            "b": self.bytes_in,
            "l": self.backlog,
            "m": dict(self.metrics),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WindowStats:
        return cls(
            window=int(d["w"]),
            partition=int(d["p"]),
            tuples_in=d["i"],
            tuples_out=d["o"],
            started=float(d["s"]),
            ended=float(d["e"]),
            bytes_in=int(d["b"]),
            backlog=d["l"],
            metrics=d["m"],
        )


@dataclass
class OperatorStats:
    """An operator's recent windows, for a :class:`StatsListener` (Apex's
    ``BatchedOperatorStats``).

    Attributes:
        operator: the operator's name.
        partitions: its current partition count.
        windows: the windows reported since the last call, all partitions, oldest first.
    """

    operator: str
    partitions: int
    windows: Sequence[WindowStats]
    #: the streaming window period: a window's tuples are spread over at least this much
    #: wall time, whatever its processing took
    window_ms: float = 0.0

    def by_partition(self) -> dict[int, list[WindowStats]]:
        out: dict[int, list[WindowStats]] = {}
        for w in self.windows:
            out.setdefault(w.partition, []).append(w)
        return out

    def _rate(
        self, stats: Sequence[WindowStats], pick: str, exclude: Collection[str] = ()
    ) -> float:
        if not stats:
            return 0.0
        tuples = sum(
            sum(n for port, n in getattr(w, pick).items() if port not in exclude) for w in stats
        )
        span = max(w.ended for w in stats) - min(w.started for w in stats)
        span = max(span, len({w.window for w in stats}) * self.window_ms / 1000)
        return tuples / span if span > 0 else 0.0

    def tuples_in_per_second(self, partition: int | None = None) -> float:
        """Tuples in per second over the reported windows (one partition, or all)."""
        stats = self.windows if partition is None else self.by_partition().get(partition, [])
        return self._rate(stats, "tuples_in")

    def tuples_out_per_second(
        self, partition: int | None = None, *, exclude: Collection[str] = ()
    ) -> float:
        """Tuples out per second over the reported windows (one partition, or all), on
        every output port but those in ``exclude`` (e.g. the error ports)."""
        stats = self.windows if partition is None else self.by_partition().get(partition, [])
        return self._rate(stats, "tuples_out", exclude)


@dataclass(frozen=True)
class Response:
    """A stats listener's answer: ``repartition_required`` asks for the partitioner."""

    repartition_required: bool = False
    reason: str = ""


@runtime_checkable
class StatsListener(Protocol):
    """Called on the driver about once per second with an operator's recent windows."""

    def process_stats(self, stats: OperatorStats) -> Response: ...


@dataclass(frozen=True)
class OperatorMetrics:
    """One row of the live metrics view (``RunningApplication.metrics()``)."""

    operator: str
    partitions: int
    tuples_in_per_second: float
    tuples_out_per_second: float
    window_ms: float  #: mean processing time of a window, over partitions and windows
    backlog: int | None  #: summed over partitions that report one
    last_window: int
    metrics: Mapping[str, float] = field(default_factory=dict)  #: summed over partitions
    #: tuples sent to the operator's error ports since the run started
    errors: int = 0

    @classmethod
    def of(
        cls,
        operator: str,
        partitions: int,
        windows: Sequence[WindowStats],
        window_ms: float = 0.0,
        errors: int = 0,
        error_ports: Collection[str] = (),
    ) -> OperatorMetrics:
        """The row of ``operator`` from its recent windows; ``error_ports`` (port names)
        count in ``errors``, not in ``tuples_out_per_second``."""
        stats = OperatorStats(operator, partitions, windows, window_ms)
        latest: dict[int, WindowStats] = {}
        custom: dict[str, float] = {}
        for w in windows:
            latest[w.partition] = w
        for w in latest.values():
            for k, v in w.metrics.items():
                custom[k] = custom.get(k, 0.0) + float(v)
        backlogs = [w.backlog for w in latest.values() if w.backlog is not None]
        return cls(
            operator=operator,
            partitions=partitions,
            tuples_in_per_second=stats.tuples_in_per_second(),
            tuples_out_per_second=stats.tuples_out_per_second(exclude=error_ports),
            window_ms=sum(w.process_ms for w in windows) / len(windows) if windows else 0.0,
            backlog=sum(backlogs) if backlogs else None,
            last_window=max((w.window for w in windows), default=-1),
            metrics=custom,
            errors=errors,
        )
