"""A running application: its query, windows, metrics, stop, and dynamic repartitioning."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from malhar import attributes as A
from malhar.dag import DAG
from malhar.engine.failure import ApplicationFailed, explain
from malhar.engine.spark_io import shutdown_flag_path, stopped_after
from malhar.engine.window_log import WindowLog
from malhar.stats import OperatorMetrics, OperatorStats, Response, StatsListener

if TYPE_CHECKING:
    from malhar.engine.generations import Generation
    from malhar.engine.launcher import Started
    from malhar.partitioning import Partitioner

log = logging.getLogger("malhar")

StartQuery = Callable[..., "Started"]


class RunningApplication:
    """A launched application: its query, its windows, its metrics; ``stop()`` it when done."""

    def __init__(
        self,
        dag: DAG,
        spark: SparkSession,
        checkpoint: str,
        windows: int | None,
        start_query: StartQuery,
    ) -> None:
        from malhar import attributes as A

        self.dag = dag
        self.checkpoint = checkpoint
        self.log = WindowLog(checkpoint, dag.attr(A.CHECKPOINT_INTEGRITY_KEY))
        self._spark: SparkSession | None = spark
        self._windows = windows
        self._start_query = start_query
        self._first = -1  # the first window of this application object
        self._repartitioning = threading.Event()
        #: held by a repartitioning from its orderly stop to its restart, and by ``stop()``
        self._repartition_lock = threading.Lock()
        #: ``stop()``/``abort()`` was called: no repartitioning starts the query again.
        #: Set under ``_control``, which a repartitioning holds to check it and restart.
        self._stopping = False
        self._control = threading.Lock()
        self.repartitions: list[Generation] = []  #: generations this object moved to

    def start(self) -> None:
        """Start (or, after a repartitioning, start again) the application's query."""
        if self._first < 0:
            from malhar.engine.reconcile import reconcile

            # PARTITIONS changed since the checkpoint's last run: move the state first
            last = self.last_window
            stopped = stopped_after(self.checkpoint, last)
            reconcile(self.dag, self.checkpoint, last, stopped=stopped)
            self._first = self.last_window + 1
        windows = self._windows
        if windows is not None:
            windows -= self.last_window + 1 - self._first
        started = self._start_query(
            self.dag, self._spark, self.checkpoint, windows, self._on_stats_response
        )
        self.plan = started.plan
        self.query = started.query
        earlier = getattr(self, "_progress", None)
        self._progress = started.progress
        if earlier is not None and self._progress is not None:
            self._progress.seed_totals(earlier)  # "since the run started": across restarts
        self._stats = started.stats
        self._listening = True  # the progress listener is registered with the session

    @property
    def resumed_after(self) -> int:
        """The last window the checkpoint had completed when this application launched
        (-1: it started from nothing); the windows after it that Spark had begun are
        replayed with the same ids and tuples."""
        return self._first - 1

    @property
    def last_window(self) -> int:
        """The largest completed window id (-1 before the first), from the window log.

        A window is recorded once its batch is in Spark's commit log, when the next
        window starts (one trigger late); ``stop()``/``await_completion()`` return with
        the last window of the run recorded.
        """
        return self.log.largest_completed()

    @property
    def active(self) -> bool:
        """The application runs: its query is active, or a repartitioning is restarting it."""
        return (self._repartitioning.is_set() and not self._stopping) or self.query.isActive

    def error_counts(self, window: int) -> dict[str, int]:
        """Tuples emitted on each error port ("operator.port") in ``window``.

        Known for the windows this run completed (from the query's observed metrics);
        ``{}`` for a window not completed yet, or completed by an earlier run.
        """
        if self._progress is not None:
            counts = self._progress.get(window)
            if counts is None:  # listener events are asynchronous: ask the query
                self._sync_progress()
                counts = self._progress.get(window)
            if counts is not None:
                return counts
        info = self.log.get(window) or {}  # windows recorded by the former Python sink
        return dict(info.get("errors", {}))

    def _sync_progress(self) -> None:
        if self._progress is not None:
            for p in self.query.recentProgress:
                self._progress.add(p.name, p.observedMetrics.get("malhar"))

    def metrics(self, last_windows: int = 20) -> dict[str, OperatorMetrics]:
        """Live per-operator metrics over the ``last_windows`` most recent windows:
        tuples/s in and out, mean window processing time, backlog, partitions, and the
        operators' own metrics (see :mod:`malhar.stats`)."""
        if self._progress is None:
            return {}
        return self._progress.metrics(last_windows)

    def _finish(self) -> None:
        """After the query ended: take its last metrics, unregister the listener."""
        if self._progress is None or self.query.isActive:
            return
        if self._stats is not None:
            self._stats.stop()
        self._sync_progress()
        if self._listening and self._spark is not None:
            self._listening = False
            try:
                self._spark.streams.removeListener(self._progress)
            except Exception:  # the session may be gone: nothing to unregister
                log.debug("malhar: could not remove the metrics listener", exc_info=True)

    def failure(self) -> ApplicationFailed | None:
        """Why the query failed (the operator's error first), or None while it has not."""
        exc = self.query.exception()
        return None if exc is None else explain(self.dag.name, exc)

    def raise_if_failed(self) -> None:
        """Raise :class:`ApplicationFailed` (chained to Spark's exception) if the query failed."""
        failed = self.failure()
        if failed is not None:
            raise failed from failed.spark_exception

    def await_window(self, window: int, timeout: float = 120.0) -> None:
        """Block until ``window`` is complete.

        Raises:
            ApplicationFailed: the query failed (its message starts with the operator error).
            TimeoutError: ``window`` did not complete within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.last_window < window:
            self.raise_if_failed()
            if self._repartitioning.is_set():
                self._repartitioning_done(deadline)
                continue
            if not self.query.isActive:
                # it may have failed since the check above: Spark records the exception
                # before the query turns inactive, so this check sees it
                self.raise_if_failed()
                raise RuntimeError(f"the query stopped before window {window} completed")
            if time.monotonic() > deadline:
                raise TimeoutError(f"window {window} not complete after {timeout:.0f}s")
            try:
                self.query.awaitTermination(0.05)
            except Exception:
                self.raise_if_failed()
                raise

    def _process_all_available(self, timeout: float | None, what: str) -> None:
        """``processAllAvailable()``, bounded by ``timeout`` seconds (None: no bound).

        Spark's call has no timeout, so a bounded wait runs it in a daemon thread;
        on timeout the query keeps running and :class:`TimeoutError` names ``what``.
        """
        failure: list[BaseException] = []

        def process() -> None:
            try:
                self.query.processAllAvailable()
            except BaseException as exc:  # re-raised in the caller's thread
                failure.append(exc)

        if timeout is None:
            process()
        else:
            waiter = threading.Thread(target=process, name="malhar-await", daemon=True)
            waiter.start()
            waiter.join(timeout)
            if waiter.is_alive():
                self.raise_if_failed()
                raise TimeoutError(f"{what}: not done after {timeout:g}s")
        if failure:
            # Spark's own exception names the Python worker, not the operator: ours first
            self.raise_if_failed()
            raise failure[0]

    def await_completion(self, timeout: float | None = None) -> None:
        """For a run with ``windows=N``: wait until the last window is processed, then stop.

        Raises:
            ApplicationFailed: the query failed.
            TimeoutError: the windows were not processed within ``timeout`` seconds; the
                application keeps running (``stop()``, ``abort()`` or wait again).
        """
        self._process_all_available(timeout, f"application {self.dag.name!r}")
        try:
            self.raise_if_failed()
            self.query.stop()
        finally:
            self._finish()

    @property
    def bounded(self) -> bool:
        """Whether every input operator ends (:meth:`~malhar.operator.InputOperator.
        is_bounded`: a file input with ``end_marker``, a JDBC poll input with ``bounded``,
        ``malhar.testing.EventTimeInput`` with ``rows``)."""
        return bool(self._inputs()) and not self._endless()

    def _inputs(self) -> list[str]:
        from malhar.operator import InputOperator

        ops = self.dag.operators.values()
        return [m.name for m in ops if isinstance(m.operator, InputOperator)]

    def _endless(self) -> list[str]:
        return [n for n in self._inputs() if not self.dag.operators[n].operator.is_bounded()]

    def input_ended(self) -> bool:
        """Whether the application is :attr:`bounded` and every partition of each input has
        reported that it ended (metric ``ended``) in its latest window."""
        return self.input_ended_at() is not None

    def input_ended_at(self) -> int | None:
        """The window in which the last of the inputs reported its end (see
        :meth:`input_ended`; None: not ended yet)."""
        if not self.bounded:
            return None
        view = self.metrics()
        windows = []
        for name in self._inputs():
            m = view.get(name)
            if m is None or m.metrics.get("ended", 0.0) < m.partitions:
                return None
            windows.append(m.last_window)
        return max(windows, default=None)

    def await_end_of_input(self, timeout: float | None = None) -> None:
        """For a :attr:`bounded` application (see :attr:`bounded`): wait until
        every partition of each input has read everything, then :meth:`stop` (an orderly
        last window, after the one in which the end-of-input watermark fired the windows).

        Raises:
            ValueError: an input never ends (a file input without ``end_marker``, a Kafka
                input ...).
            ApplicationFailed: the query failed.
            TimeoutError: the input did not end within ``timeout`` seconds; the application
                keeps running.
        """
        endless = self._endless()
        if endless or not self._inputs():
            raise ValueError(
                f"application {self.dag.name!r}: the input(s) {endless} never end (a file "
                "input ends with end_marker, a JDBC poll input with bounded=True): stop the "
                "application with stop(), or run it "
                "for a number of windows"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.input_ended():
            self.raise_if_failed()
            if not self.query.isActive and not self._repartitioning.is_set():
                raise RuntimeError("the query stopped before its input ended")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the input did not end within {timeout:g}s")
            try:
                self.query.awaitTermination(0.25)
            except Exception:
                self.raise_if_failed()  # ours, naming the operator, before Spark's
                raise
        self.stop()

    def stop(self, timeout: float = 120.0) -> None:
        """Orderly stop: a last window tears every operator down, then the query ends.

        An operator with ``APPLICATION_WINDOW_COUNT > 1`` ends its open application window
        early in that last window.

        Raises:
            TimeoutError: the last window did not complete within ``timeout`` seconds;
                the query was then stopped at once (as :meth:`abort`), and the next
                start replays the unfinished window.

        A repartitioning under way (e.g. one a stats listener asked for) ends first and
        does not start the query again; a later one is refused.
        """
        with self._control:
            self._stopping = True
        with self._repartition_lock:  # after a repartitioning under way, never during it
            self._stop(timeout, align=1)

    def _stop(self, timeout: float, *, align: int) -> None:
        """``stop()`` whose last window is the first one ending an application window of
        ``align`` streaming windows (``(id + 1) % align == 0``)."""
        from malhar.util.fs import filesystem_for

        if not self.query.isActive:
            self._finish()
            return
        fs, flag = filesystem_for(shutdown_flag_path(self.checkpoint))
        fs.mkdirs(fs.dirname(flag))
        fs.create(flag, str(align).encode() if align > 1 else b"", overwrite=True)
        try:
            # returns once the source found nothing after the shutdown window, which is
            # when it records that window as complete (``MalharStreamReader.latestOffset``)
            self._process_all_available(
                timeout, f"stopping application {self.dag.name!r} (the query was aborted)"
            )
        finally:
            fs.delete(flag)
            self.query.stop()
            self._finish()

    # -- dynamic repartitioning ------------------------------------------------------------
    def repartition(
        self, requests: Mapping[str, int | Partitioner | None], timeout: float = 120.0
    ) -> Generation:
        """Repartition operators between two windows, exactly once.

        The query stops after its current window (orderly: every operator ends the window
        and is torn down), each operator's partitioner defines its new partitions (a
        count asks for a :class:`~malhar.partitioning.StatelessPartitioner`, None for the
        operator's own ``PARTITIONER``), keyed state moves with its keys, and the query
        starts again: the next window runs on the new partitions and window ids continue.
        See ``docs/partitioning.md``.
        """
        from malhar.engine import generations
        from malhar.engine.repartition import check_requests, repartition

        check_requests(self.dag, requests, self.plan)  # a typo must not stop the application
        with self._repartition_lock:
            if self._stopping:
                raise RuntimeError(
                    f"application {self.dag.name!r} was stopped: it is not repartitioned"
                )
            self._repartitioning.set()
            try:
                stats = self._recent_stats()
                try:
                    # the last window ends every application window: none is cut short
                    self._stop(timeout, align=application_window_lcm(self.dag))
                except TimeoutError as exc:
                    # the query was stopped at once (as abort()): nothing changed, so the
                    # application goes on with the partitions it had, replaying the window
                    # that did not finish
                    self._restart()
                    raise TimeoutError(
                        f"repartitioning application {self.dag.name!r}: its orderly stop did "
                        f"not complete within {timeout:g}s; it goes on with the partitions "
                        "it had"
                    ) from exc
                if self._stopping:  # stop() or abort() came meanwhile: leave it stopped
                    raise RuntimeError(
                        f"application {self.dag.name!r} was stopped during its repartitioning: "
                        "it is not repartitioned"
                    )
                before = generations.load(self.checkpoint).generation
                try:
                    generation = repartition(
                        self.dag, self.checkpoint, self.last_window, requests, stats
                    )
                except BaseException:
                    # before its commit nothing of the new generation is in force: the
                    # application goes on with the partitions it had (after it, with the new
                    # ones: a partitioner's partitioned() failed), and the caller (or the
                    # stats listener's log) learns why
                    current = generations.load(self.checkpoint)
                    if current.generation > before:
                        self.repartitions.append(current)
                    self._restart()
                    raise
                self.repartitions.append(generation)
                self._restart()
                return generation
            finally:
                self._repartitioning.clear()

    def _restart(self) -> None:
        """Start the query again after a repartitioning's stop, unless the run has done its
        windows or ``stop()``/``abort()`` was called (checked under ``_control``, which they
        take to set ``_stopping``: one of the two sees the other)."""
        with self._control:
            more = self._windows is None or self.last_window + 1 - self._first < self._windows
            if more and not self._stopping:
                self.start()

    def _recent_stats(self) -> dict[str, OperatorStats]:
        if self._progress is None:
            return {}
        return {
            op: OperatorStats(
                op, self._progress.partitions[op], list(windows), self._progress.window_ms
            )
            for op, windows in self._progress.recent.items()
        }

    def _repartitioning_done(self, deadline: float) -> None:
        while self._repartitioning.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("a repartitioning did not finish in time")
            time.sleep(0.05)

    def _on_stats_response(
        self, operator: str, listener: StatsListener, response: Response
    ) -> None:
        """A stats listener asked to repartition: do it in the background, once at a time."""
        with self._control:
            if not response.repartition_required or self._stopping:
                return
            if self._repartitioning.is_set():
                return
            self._repartitioning.set()  # before the thread: no second request slips in
        log.info(
            "malhar: %s asks to repartition %r: %s",
            type(listener).__name__,
            operator,
            response.reason or "no reason given",
        )

        def run() -> None:
            try:
                self.repartition({operator: None})
            except Exception:
                if self._stopping:
                    log.info("malhar: not repartitioning %r: the application stopped", operator)
                else:
                    log.exception("malhar: repartitioning %r failed", operator)
                self._repartitioning.clear()

        threading.Thread(target=run, name="malhar-repartition", daemon=True).start()

    def abort(self) -> None:
        """Stop the query now, without the orderly last window (operators are not torn
        down; the next start replays the unfinished window). A repartitioning under way
        does not start the query again."""
        try:
            with self._control:  # a repartitioning's restart is either before this or never
                self._stopping = True
                self.query.stop()
        finally:
            self._finish()  # not under _control: it joins the stats thread, which takes it


def application_window_lcm(dag: DAG) -> int:
    """The shortest span of streaming windows that ends every operator's application
    window at once (their ``APPLICATION_WINDOW_COUNT``s' least common multiple)."""
    return math.lcm(
        *(int(meta.attr(A.APPLICATION_WINDOW_COUNT)) for meta in dag.operators.values())
    )
