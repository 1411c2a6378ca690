"""Operators used by the engine tests (importable by Spark workers as tests.engine.ops)."""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

from malhar import (
    ActivationListener,
    CheckpointListener,
    ControlSender,
    DeliveryType,
    InputOperator,
    InputPort,
    Operator,
    OperatorContext,
    OutputPort,
    Property,
    State,
    StreamCodec,
    Unifier,
)
from malhar.control import PerSenderMinimum


def window_items(window: int, per_window: int = 20, keys: int = 5) -> list[tuple[str, int]]:
    """The deterministic content of a window: (key, value) pairs."""
    return [(f"k{(window * 7 + i) % keys}", window * 100 + i) for i in range(per_window)]


class Numbers(InputOperator):
    """Emits ``window_items(w)`` in window w, spread over its partitions; stops after ``last``."""

    output = OutputPort()

    per_window = Property(int, default=20)
    keys = Property(int, default=5)
    last = Property(int, default=None)

    def __init__(self, per_window: int = 20, keys: int = 5, last: int | None = None) -> None:
        self.configure(per_window=per_window, keys=keys, last=last)

    def setup(self, context: OperatorContext) -> None:
        self._p, self._n = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if self._done or (self.last is not None and self._w > self.last):
            self._done = True
            return
        self._done = True
        for i, item in enumerate(window_items(self._w, self.per_window, self.keys)):
            if i % self._n == self._p:
                self.output.emit(item)


class _SumsPerWindow:
    """Adds (key, value) pairs per window and emits (key, sum) at its end."""

    def begin_window(self, window_id: int) -> None:
        self.acc: dict[str, int] = {}

    def process(self, kv: tuple[str, int]) -> None:
        self.acc[kv[0]] = self.acc.get(kv[0], 0) + kv[1]

    def end_window(self) -> None:
        for k in sorted(self.acc):
            self.output.emit((k, self.acc[k]))


class SumUnifier(_SumsPerWindow, Unifier):
    """Merges the partial sums of every SumPerKey partition."""


class SumPerKey(_SumsPerWindow, Operator):
    """Per-window sums per key (partial per partition, merged by SumUnifier)."""

    input = InputPort()
    output = OutputPort(unifier=SumUnifier)


class RunningTotal(Operator):
    """Cumulative sum of values: checkpointed state that a wrong restore would corrupt."""

    input = InputPort()
    output = OutputPort()

    total = State(default=0)

    def process(self, kv: tuple[str, int]) -> None:
        self.total += kv[1]

    def end_window(self) -> None:
        self.output.emit(self.total)


class PartialTotal(RunningTotal):
    """RunningTotal of one partition, emitted as ``("total", sum)`` to be added up downstream."""

    def end_window(self) -> None:
        self.output.emit(("total", self.total))


class EventLog(Operator, ActivationListener, CheckpointListener):
    """Appends every lifecycle call to ``<checkpoint>/events/<partition>.jsonl``."""

    input = InputPort()
    output = OutputPort()

    def _log(self, event: str, **extra: Any) -> None:
        line = {"e": event, "id": self._id, "pid": os.getpid(), **extra}
        with open(self._file, "a") as f:
            f.write(json.dumps(line) + "\n")

    def setup(self, context: OperatorContext) -> None:
        folder = Path(context.checkpoint) / "events"
        folder.mkdir(parents=True, exist_ok=True)
        self._file = folder / f"{context.partition}.jsonl"
        self._id = os.urandom(4).hex()
        self._log("setup")

    def activate(self, context: OperatorContext) -> None:
        self._log("activate")

    def begin_window(self, window_id: int) -> None:
        self._log("begin", w=window_id)

    def process(self, value: Any) -> None:
        self._log("process")
        self.output.emit(value)

    def end_window(self) -> None:
        self._log("end")

    def committed(self, window_id: int) -> None:
        self._log("committed", w=window_id)

    def deactivate(self) -> None:
        self._log("deactivate")

    def teardown(self) -> None:
        self._log("teardown")


class AppWindowSum(Operator):
    """Sums values over an application window and emits (first window, sum) at its end."""

    input = InputPort()
    output = OutputPort()

    first = State(default=None)
    acc = State(default=0)

    def begin_window(self, window_id: int) -> None:
        self.first, self.acc = window_id, 0

    def process(self, kv: tuple[str, int]) -> None:
        self.acc += kv[1]

    def end_window(self) -> None:
        self.output.emit((self.first, self.acc))


class FailOnce(Operator):
    """Forwards tuples; raises once in window ``fail_window`` (marker file under the checkpoint)."""

    input = InputPort()
    output = OutputPort()

    fail_window = Property(int, not_null=True)

    def __init__(self, fail_window: int) -> None:
        self.fail_window = fail_window

    def setup(self, context: OperatorContext) -> None:
        self._marker = Path(context.checkpoint) / f"failed-{context.name}-{context.partition}"

    def begin_window(self, window_id: int) -> None:
        self._w = window_id

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def end_window(self) -> None:
        if self._w == self.fail_window and not self._marker.exists():
            self._marker.write_text("x")
            raise RuntimeError(f"injected failure in window {self._w}")


def executor_jvm() -> int:
    """The pid of the executor JVM this Python worker serves (its nearest ancestor running
    ``CoarseGrainedExecutorBackend``); 0 when there is none (local mode)."""
    pid = os.getppid()
    while pid > 1:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"CoarseGrainedExecutorBackend" in cmdline:
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return 0


class ExecutorTrace(Operator):
    """Forwards tuples; each window it runs, records the executor JVM that ran it in
    ``<checkpoint>/trace/<window>-<partition>-<random>``: a window run twice leaves two."""

    input = InputPort()
    output = OutputPort()

    def setup(self, context: OperatorContext) -> None:
        self._folder = Path(context.checkpoint) / "trace"
        self._folder.mkdir(parents=True, exist_ok=True)
        self._p = context.partition

    def begin_window(self, window_id: int) -> None:
        self._w = window_id

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def end_window(self) -> None:
        name = f"{self._w}-{self._p}-{os.urandom(4).hex()}"
        (self._folder / name).write_text(str(executor_jvm()))


class KillsItsExecutor(Operator):
    """Forwards tuples; once, in the first window from ``from_window`` whose level-0 output
    (traced by ExecutorTrace) partly lives on its own executor, SIGKILLs that executor's JVM:
    Spark loses that shuffle output and must run those level-0 tasks again."""

    input = InputPort()
    output = OutputPort()

    from_window = Property(int, not_null=True)

    def __init__(self, from_window: int) -> None:
        self.from_window = from_window

    def setup(self, context: OperatorContext) -> None:
        self._root = Path(context.checkpoint)

    def begin_window(self, window_id: int) -> None:
        self._w = window_id

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def end_window(self) -> None:
        marker = self._root / "killed-executor"
        jvm = executor_jvm()
        if self._w < self.from_window or marker.exists() or not jvm:
            return
        ran_here = [
            p.name for p in (self._root / "trace").glob(f"{self._w}-*") if p.read_text() == str(jvm)
        ]
        if not ran_here:
            return
        marker.write_text(json.dumps({"window": self._w, "jvm": jvm, "level0": ran_here}))
        os.kill(jvm, 9)
        os._exit(1)  # with its JVM: whatever this task reports, the executor is lost


# -- control tuples ---------------------------------------------------------------------------
class ControlSource(InputOperator):
    """Emits one data tuple and two control tuples per window (IMMEDIATE, then END_WINDOW)."""

    output = OutputPort(control_aware=True)

    def setup(self, context: OperatorContext) -> None:
        self._p = context.partition

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if self._done:
            return
        self._done = True
        self.output.emit(("data-before", self._w, self._p))
        self.output.emit_control(("now", self._w), DeliveryType.IMMEDIATE)
        self.output.emit_control(("at-end", self._w), DeliveryType.END_WINDOW)
        self.output.emit(("data-after", self._w, self._p))


class Forwarder(Operator):
    """Not control aware: control tuples pass through it automatically."""

    input = InputPort()
    output = OutputPort()

    def process(self, value: Any) -> None:
        self.output.emit(value)


class Blocker(Operator):
    """Control aware; swallows ("now", w) control tuples (opt-out), lets others through."""

    input = InputPort(control_aware=True)
    output = OutputPort(control_aware=True)

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def process_control(self, payload: Any) -> bool:
        return payload[0] == "now"


class ControlRecorder(Operator):
    """Records data and control arrivals in order, emitting the log at end_window."""

    input = InputPort(control_aware=True)
    output = OutputPort()

    def begin_window(self, window_id: int) -> None:
        self._seen: list[Any] = []

    def process(self, value: Any) -> None:
        self._seen.append(("data", value[0]))

    def process_control(self, payload: Any) -> bool:
        self._seen.append(("control", payload))
        return True

    def end_window(self) -> None:
        self._seen.append(("end_window",))
        self.output.emit(self._seen)


class PartitionTicks(InputOperator):
    """Emits ``(window, partition)`` once per window; logs each setup and window begun
    (with the worker's pid) to ``<checkpoint>/ticks/<partition>.jsonl``."""

    output = OutputPort()

    def setup(self, context: OperatorContext) -> None:
        folder = Path(context.checkpoint) / "ticks"
        folder.mkdir(parents=True, exist_ok=True)
        self._p = context.partition
        self._file = folder / f"{self._p}.jsonl"
        self._log("setup")

    def _log(self, event: str, **extra: Any) -> None:
        with open(self._file, "a") as f:
            f.write(json.dumps({"e": event, "pid": os.getpid(), **extra}) + "\n")

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False
        self._log("begin", w=window_id)

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit((self._w, self._p))


# -- control senders ---------------------------------------------------------------------------
class WatermarkSource(InputOperator):
    """Partition p emits one tuple and the control tuple ("wm", 100 * window + p) per window."""

    output = OutputPort(control_aware=True)

    def setup(self, context: OperatorContext) -> None:
        self._p = context.partition

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit(("k", self._p))
            self.output.emit_control(("wm", 100 * self._w + self._p))


class SenderRecorder(Operator):
    """Records every copy of a control tuple with its sender, and the per-sender minimum."""

    input = InputPort(control_aware=True)
    output = OutputPort()
    minimum = State(PerSenderMinimum)

    def begin_window(self, window_id: int) -> None:
        self._copies: list[tuple] = []

    def process(self, value: Any) -> None:
        pass

    def process_control(self, payload: Any, sender: ControlSender) -> bool:
        self._copies.append((sender.operator, sender.partition, sender.partitions, payload[1]))
        self.minimum.update(payload[1], sender)
        return True

    def end_window(self) -> None:
        self.output.emit((sorted(self._copies), self.minimum.minimum()))


class FailingUnifier(Unifier):
    def process(self, value: Any) -> None:
        raise ValueError(f"cannot unify {value!r}")


class FailsInUnifier(Forwarder):
    output = OutputPort(unifier=FailingUnifier)


class SlowTeardown(Forwarder):
    """Takes ``seconds`` to tear down (the orderly stop's last window)."""

    seconds = Property(float, default=60.0)

    def teardown(self) -> None:
        time.sleep(self.seconds)


# -- managed state -----------------------------------------------------------------------------
def managed_items(window: int, new: int = 20_000, repeats: int = 2_000) -> list[tuple[str, int]]:
    """Window ``window``'s (key, 1) tuples: ``new`` keys never seen before, then ``repeats``
    keys of earlier windows (deterministic)."""
    out = [(f"k{window * new + i}", 1) for i in range(new)]
    seen = window * new
    out += [(f"k{(window * 37 + i * 7919) % seen}", 1) for i in range(repeats)] if seen else []
    return out


class ManyKeys(InputOperator):
    """Emits ``managed_items(w)`` in window w, spread over its partitions."""

    output = OutputPort()
    new = Property(int, default=20_000)
    repeats = Property(int, default=2_000)

    def setup(self, context: OperatorContext) -> None:
        self._p, self._n = context.partition, context.partitions

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            for i, item in enumerate(managed_items(self._w, self.new, self.repeats)):
                if i % self._n == self._p:
                    self.output.emit(item)


class ManagedCount(Operator):
    """Counts per key in managed state (far more keys than its memory budget holds);
    emits ``(key, running count)`` for the keys it saw in each window, sorted."""

    input = InputPort()
    output = OutputPort()
    budget_bytes = Property(int, default=8 << 20)  # the smallest budget managed state takes

    def setup(self, context: OperatorContext) -> None:
        state = context.managed_state(budget_bytes=self.budget_bytes)
        self._counts = state.map("counts")

    def begin_window(self, window_id: int) -> None:
        self._touched: set[str] = set()

    def process(self, kv: tuple[str, int]) -> None:
        self._counts[kv[0]] = self._counts.get(kv[0], 0) + kv[1]
        self._touched.add(kv[0])

    def end_window(self) -> None:
        for key in sorted(self._touched):
            self.output.emit((key, self._counts[key]))


class FirstOfPair(StreamCodec):
    """Partitions (key, value) tuples by key, stably across processes."""

    def partition(self, value: Any) -> int:
        return zlib.crc32(value[0].encode())


# -- dynamic partitioning ------------------------------------------------------------------------
def keyed_items(window: int, per_window: int, keys: int) -> list[dict[str, Any]]:
    """Window ``window``'s tuples: ``{"key": "k<i>"}`` over ``keys`` keys (deterministic)."""
    return [{"key": f"k{(window * 7 + i) % keys}"} for i in range(per_window)]


class RatedKeys(InputOperator):
    """Emits ``keyed_items`` each window; the count per window is ``per_window``, or the
    number in ``<checkpoint>/rate`` when that file exists (tests change the rate live)."""

    output = OutputPort()
    per_window = Property(int, default=100)
    keys = Property(int, default=50)

    def setup(self, context: OperatorContext) -> None:
        self._p, self._n = context.partition, context.partitions
        self._rate_file = Path(context.checkpoint or ".") / "rate"

    def begin_window(self, window_id: int) -> None:
        self._w, self._done = window_id, False

    def emit_tuples(self) -> None:
        if self._done:
            return
        self._done = True
        n = int(self._rate_file.read_text()) if self._rate_file.exists() else self.per_window
        for i, item in enumerate(keyed_items(self._w, n, self.keys)):
            if i % self._n == self._p:
                self.output.emit(item)


class KeyedRunningCount(Operator):
    """Running count per key in a keyed state field; emits ``(key, count)`` for the keys
    seen in each window."""

    input = InputPort()
    output = OutputPort()
    counts = State(dict, keyed=True)

    def begin_window(self, window_id: int) -> None:
        self._touched: set[str] = set()

    def process(self, row: dict[str, Any]) -> None:
        self.counts[row["key"]] = self.counts.get(row["key"], 0) + 1
        self._touched.add(row["key"])

    def end_window(self) -> None:
        for key in sorted(self._touched):
            self.output.emit((key, self.counts[key]))


class AppWindowKeyCount(KeyedRunningCount):
    """``KeyedRunningCount`` for application windows of several streaming windows: the keys
    touched so far are ``State`` (a partition may be rebuilt inside an application window,
    without a new ``begin_window``)."""

    touched = State(dict)  # key -> None: the keys of the open application window

    def begin_window(self, window_id: int) -> None:
        pass

    def process(self, row: dict[str, Any]) -> None:
        self.counts[row["key"]] = self.counts.get(row["key"], 0) + 1
        self.touched[row["key"]] = None

    def end_window(self) -> None:
        for key in sorted(self.touched):
            self.output.emit((key, self.counts[key]))
        self.touched.clear()


class ManagedKeyCount(KeyedRunningCount):
    """``KeyedRunningCount`` with its counts in managed state (a spillable map)."""

    counts = State(dict)  # unused: the counts live in managed state

    def setup(self, context: OperatorContext) -> None:
        self._map = context.managed_state(budget_bytes=8 << 20).map("counts")

    def process(self, row: dict[str, Any]) -> None:
        self._map[row["key"]] = self._map.get(row["key"], 0) + 1
        self._touched.add(row["key"])

    def end_window(self) -> None:
        for key in sorted(self._touched):
            self.output.emit((key, self._map[key]))
