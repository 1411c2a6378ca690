"""What the driver learns from each batch's progress: error counts and operator statistics.

``build_dataframe`` observes, as ``observe("malhar", ...)``, the window of the batch
(``max(window)``), the sum of each error port, and the list of every partition's
:class:`~malhar.stats.WindowStats` (``collect_list`` of the STATS envelope rows).
Spark reports them in the progress of each batch once the batch is in its commit
log; :class:`ProgressListener` keeps them in driver memory for the running
application:

- error counts per window (``RunningApplication.error_counts``): the windows that
  had errors and the largest window reported (a window up to it without an entry
  had none);
- the recent windows of every operator (``RunningApplication.metrics()``) and, per
  operator with stats listeners, the windows not yet handed to them
  (:class:`StatsDispatcher`).

PySpark's own bridge converts every progress event field by field, dozens of py4j
calls per event (measured: ~0.06 CPU-s per window, about 40% of an empty window's
CPU); ``_jlistener`` (PySpark's private hook that ``addListener`` and
``removeListener`` use, checked on 4.3) wraps :class:`_ProgressJson` instead, which
asks the JVM for the progress JSON only: two py4j calls per batch.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from malhar.stats import OperatorMetrics, OperatorStats, Response, StatsListener, WindowStats

log = logging.getLogger("malhar")

#: windows of statistics kept per operator for the metrics view
RECENT_WINDOWS = 256


class ProgressListener(StreamingQueryListener):
    """Error-port counts and operator statistics of one query run (see the module doc)."""

    def __init__(
        self,
        query_name: str,
        ports: list[str],
        partitions: Mapping[str, int],
        window_ms: float = 0.0,
    ) -> None:
        self.query_name = query_name
        self.window_ms = window_ms
        self.ports = list(ports)
        self.partitions = dict(partitions)
        self.errors: dict[int, dict[str, int]] = {}
        #: operator -> tuples on its error ports over every window reported (kept as the
        #: windows come, replacing a window reported again; carried over by ``seed_totals``)
        self.error_totals: dict[str, int] = {}
        self.seen = -1
        self.recent: dict[str, deque[WindowStats]] = {
            op: deque(maxlen=RECENT_WINDOWS * max(1, n)) for op, n in self.partitions.items()
        }
        #: operators with stats listeners -> windows not handed to them yet
        self.pending: dict[str, list[WindowStats]] = {}
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        self.add(p.name, p.observedMetrics.get("malhar"))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    @property
    def _jlistener(self) -> Any:
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            jvm = SparkContext._jvm
            assert jvm is not None
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_ProgressJson(self))
        return self._jlistenerobj

    def listen_for(self, operators: list[str]) -> None:
        """Keep, for each of ``operators``, the windows not yet handed to its listeners."""
        with self._lock:
            for op in operators:
                self.pending.setdefault(op, [])

    def add(self, query_name: str | None, metrics: Any) -> None:
        """Take the ``observedMetrics["malhar"]`` (a Row or a dict) of one progress."""
        if query_name != self.query_name or metrics is None:
            return
        values = metrics.asDict() if hasattr(metrics, "asDict") else dict(metrics)
        if values.get("window") is None:
            return  # a trigger without a batch
        window = int(values["window"])
        counts = {ref: int(values.get(ref) or 0) for ref in self.ports}
        reports = [json.loads(r) for r in values.get("stats") or () if r]
        with self._lock:
            self._total(self.errors.get(window, {}), -1)
            if any(counts.values()):
                self.errors[window] = counts
                self._total(counts, 1)
            else:
                self.errors.pop(window, None)
            if window <= self.seen:
                return  # a progress seen before (``recentProgress`` after the listener)
            self.seen = window
            for report in reports:
                for op, raw in report.items():
                    stats = WindowStats.from_json(raw)
                    if op in self.recent:
                        self.recent[op].append(stats)
                    if op in self.pending:
                        self.pending[op].append(stats)

    def _total(self, counts: Mapping[str, int], sign: int) -> None:
        for ref, n in counts.items():
            op = ref.rsplit(".", 1)[0]
            self.error_totals[op] = self.error_totals.get(op, 0) + sign * n

    def seed_totals(self, earlier: ProgressListener) -> None:
        """Start the error totals from those of the listener of an earlier query of the same
        application object (a repartitioning restarts the query)."""
        with earlier._lock:
            totals = dict(earlier.error_totals)
        with self._lock:
            for op, n in totals.items():
                self.error_totals[op] = self.error_totals.get(op, 0) + n

    def get(self, window: int) -> dict[str, int] | None:
        """The error counts of ``window``; None if it was not reported (yet)."""
        with self._lock:
            if window in self.errors:
                return dict(self.errors[window])
            if window <= self.seen:
                return dict.fromkeys(self.ports, 0)
        return None

    def take_pending(self, operator: str) -> list[WindowStats]:
        with self._lock:
            taken, self.pending[operator] = self.pending.get(operator, []), []
        return taken

    def metrics(self, last_windows: int = 20) -> dict[str, OperatorMetrics]:
        """Per operator, the metrics of its ``last_windows`` most recent windows."""
        with self._lock:
            recent = {op: list(q) for op, q in self.recent.items()}
            errors = dict(self.error_totals)
        out = {}
        for op, windows in recent.items():
            if windows:
                newest = max(w.window for w in windows)
                windows = [w for w in windows if w.window > newest - last_windows]
            own = [ref.rsplit(".", 1)[1] for ref in self.ports if ref.rsplit(".", 1)[0] == op]
            out[op] = OperatorMetrics.of(
                op, self.partitions[op], windows, self.window_ms, errors.get(op, 0), own
            )
        return out


class _ProgressJson:
    """The py4j side of :class:`ProgressListener`: two py4j calls per progress event."""

    def __init__(self, listener: ProgressListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        progress = json.loads(jevent.progress().json())
        self.listener.add(progress.get("name"), progress.get("observedMetrics", {}).get("malhar"))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class StatsDispatcher:
    """Hands each operator's new windows to its stats listeners about once per second.

    Args:
        listeners: operator name -> its ``STATS_LISTENERS``.
        on_response: told about every response (operator, listener, response); the
            launcher acts on ``repartition_required``.
    """

    def __init__(
        self,
        progress: ProgressListener,
        listeners: Mapping[str, list[StatsListener]],
        on_response: Callable[[str, StatsListener, Response], None],
        every: float = 1.0,
    ) -> None:
        self.progress = progress
        self.listeners = {op: list(ls) for op, ls in listeners.items() if ls}
        self.on_response = on_response
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        progress.listen_for(list(self.listeners))

    def start(self) -> StatsDispatcher:
        if self.listeners:
            self._thread = threading.Thread(target=self._loop, name="malhar-stats", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.deliver()

    def deliver(self) -> None:
        """One round: every operator with new windows to each of its listeners."""
        for op, listeners in self.listeners.items():
            windows = self.progress.take_pending(op)
            if not windows:
                continue
            stats = OperatorStats(
                op, self.progress.partitions[op], windows, self.progress.window_ms
            )
            for listener in listeners:
                try:
                    response = listener.process_stats(stats)
                except Exception:
                    log.exception("malhar: stats listener %r of %r failed", listener, op)
                    continue
                if response is not None:
                    self.on_response(op, listener, response)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
