"""The harness fails where the engine fails: state that cannot be checkpointed."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from malhar import InputPort, Operator, OutputPort, State
from malhar.errors import StateError
from malhar.testing.harness import OperatorHarness


class LockInState(Operator):
    """Puts a lock into a ``State`` field in ``process``: the engine cannot checkpoint it."""

    input = InputPort()
    output = OutputPort()
    s = State(dict)

    def process(self, value):
        self.s[value] = threading.Lock() if value == "lock" else value

    def end_window(self) -> None:
        self.output.emit(len(self.s))


class LockInSnapshot(Operator):
    """The same through a custom ``snapshot()``."""

    input = InputPort()

    def setup(self, context) -> None:
        self._lock = threading.Lock()  # runtime: fine

    def process(self, value):
        pass

    def snapshot(self):
        return {"lock": self._lock}


def test_unpicklable_state_field_fails_at_the_end_of_its_window() -> None:
    h = OperatorHarness(LockInState())
    h.run_window([("input", 1)])  # picklable so far
    with pytest.raises(StateError) as err:
        h.run_window([("input", "lock")])
    message = str(err.value)
    # the engine's message (malhar.state.explain_snapshot_failure), naming the field
    assert "operator 'LockInState' (LockInState): its state cannot be checkpointed" in message
    assert "s: TypeError: cannot pickle '_thread.lock' object" in message
    assert isinstance(err.value, TypeError)  # StateError is a TypeError, as in the engine


def test_unpicklable_custom_snapshot_fails() -> None:
    h = OperatorHarness(LockInSnapshot())
    with pytest.raises(StateError, match=r"snapshot\(\): TypeError: cannot pickle"):
        h.run_window([("input", 1)])


def test_the_check_can_be_turned_off() -> None:
    h = OperatorHarness(LockInState(), check_state=False)
    h.run_window([("input", "lock")])
    assert h.sink("output").tuples == [1]


def test_picklable_state_and_restore_still_work() -> None:
    class Count(Operator):
        input = InputPort()
        output = OutputPort()
        counts = State(Counter)

        def process(self, value):
            self.counts[value] += 1

        def end_window(self) -> None:
            self.output.emit(dict(self.counts))

    h = OperatorHarness(Count())
    h.run_window([("input", "a"), ("input", "a")])
    h.run_window([("input", "b")])
    assert h.sink("output").tuples == [{"a": 2}, {"a": 2, "b": 1}]
    replay = OperatorHarness.restored(Count(), h.checkpoint())
    replay.run_window([("input", "b")], window=2)
    assert replay.sink("output").tuples == [{"a": 2, "b": 2}]
