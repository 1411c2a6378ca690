"""The dispatcher through the operator harness: handlers, conversions, control tuples."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from malhar import ControlSender, DeliveryType, InputPort, Operator, OutputPort, State
from malhar.control import PerSenderMinimum
from malhar.testing.harness import OperatorHarness


class Recorder(Operator):
    """Logs data, control tuples (one-argument handler) and end_window, in order."""

    input = InputPort(control_aware=True)
    output = OutputPort()

    def begin_window(self, window_id: int) -> None:
        self.log: list[Any] = []

    def process(self, value: Any) -> None:
        self.log.append(("data", value))

    def process_control(self, payload: Any) -> bool:
        self.log.append(("control", payload))
        return payload == "stop-here"

    def end_window(self) -> None:
        self.log.append(("end_window",))


class BatchOnly(Operator):
    input = InputPort("word string")
    output = OutputPort("n bigint")

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit({"n": batch.num_rows})


class Plain(Operator):
    input = InputPort()
    output = OutputPort()
    error = OutputPort(error=True)

    def process(self, value: Any) -> None:
        self.output.emit(value)


class Watermarks(Operator):
    input = InputPort(control_aware=True)
    output = OutputPort()
    minimum = State(PerSenderMinimum)

    def process(self, value: Any) -> None:
        pass

    def process_control(self, payload: int, sender: ControlSender) -> bool:
        self.minimum.update(payload, sender)
        return True


def _sender(p: int, n: int = 2) -> ControlSender:
    return ControlSender("s", "up", p, n)


def test_end_window_control_waits_for_end_window_and_copies_are_delivered_once() -> None:
    h = OperatorHarness(Recorder())
    h.begin_window(0)
    h.put("input", "a")
    assert h.put_control("input", "later", DeliveryType.END_WINDOW) is None
    assert h.put_control("input", "now") is False
    assert h.put_control("input", "now") is None  # a copy from another partition
    h.put("input", "b")
    h.put_control("input", "later", DeliveryType.END_WINDOW)
    assert h.operator.log == [("data", "a"), ("control", "now"), ("data", "b")]
    h.end_window()
    assert h.operator.log[-2:] == [("control", "later"), ("end_window",)]
    # not handled (returned False): propagated to the output once each
    assert [c.payload for c in h.sink("output").controls] == ["now", "later"]


def test_a_handled_control_tuple_is_not_propagated() -> None:
    h = OperatorHarness(Recorder())
    h.begin_window(0)
    assert h.put_control("input", "stop-here") is True
    h.end_window()
    assert h.sink("output").controls == []


def test_ports_that_are_not_control_aware_forward_to_non_error_outputs() -> None:
    h = OperatorHarness(Plain())
    h.begin_window(0)
    h.put_control("input", "x")
    h.put_control("input", "x")  # equal copy: forwarded once
    h.end_window()
    assert [c.payload for c in h.sink("output").controls] == ["x"]
    assert h.sink("error").controls == []


def test_copies_are_passed_on_with_their_senders() -> None:
    """An operator that is not control aware, and a handler that declines a tuple, pass
    every copy on with its sender (so that a windowed operator downstream of a shuffle
    takes the minimum over the first senders, not one value per forwarding partition)."""
    plain = OperatorHarness(Plain())
    plain.begin_window(0)
    for p in (0, 0, 1):  # an equal copy from the same sender once
        plain.put_control("input", 100, sender=_sender(p))
    plain.end_window()
    assert plain.sink("output").senders == [_sender(0), _sender(1)]

    h = OperatorHarness(Recorder())  # a one-argument handler: each tuple once
    h.begin_window(0)
    h.put_control("input", "now", sender=_sender(0))
    h.put_control("input", "later", DeliveryType.END_WINDOW, sender=_sender(0))
    h.put_control("input", "now", sender=_sender(1))  # declined already: on at once
    h.put_control("input", "later", DeliveryType.END_WINDOW, sender=_sender(1))
    assert [(c.payload, s) for c, s in zip(*_sent(h), strict=True)] == [
        ("now", _sender(0)),
        ("now", _sender(1)),
    ]
    h.end_window()
    assert [c for c in h.operator.log if c[0] == "control"] == [
        ("control", "now"),
        ("control", "later"),
    ]
    assert [(c.payload, s) for c, s in zip(*_sent(h), strict=True)][2:] == [
        ("later", _sender(0)),
        ("later", _sender(1)),
    ]


def _sent(h: OperatorHarness) -> tuple[list, list]:
    return h.sink("output").controls, h.sink("output").senders


def test_a_sender_aware_handler_sees_every_copy_and_the_minimum_waits_for_all() -> None:
    h = OperatorHarness(Watermarks())
    h.begin_window(0)
    h.put_control("input", 100, sender=_sender(0))
    h.put_control("input", 100, sender=_sender(0))  # not de-duplicated: the sender asked
    assert h.operator.minimum.minimum() is None  # partition 1 has sent nothing
    h.put_control("input", 70, sender=_sender(1))
    assert h.operator.minimum.minimum() == 70
    h.put_control("input", 120, sender=_sender(1))
    assert h.operator.minimum.minimum() == 100
    h.end_window()
    restored = OperatorHarness.restored(Watermarks(), h.checkpoint())
    assert restored.operator.minimum.minimum() == 100  # kept as checkpointed state


def test_tuples_reach_a_batch_only_operator_as_batches_and_batches_a_tuple_operator_as_rows() -> (
    None
):
    h = OperatorHarness(BatchOnly())
    h.run_window(
        [("input", {"word": "a"}), ("input", pa.RecordBatch.from_pylist([{"word": "b"}] * 3))]
    )
    assert h.sink("output").tuples == [{"n": 1}, {"n": 3}]
    p = OperatorHarness(Plain())
    p.run_window([("input", pa.RecordBatch.from_pylist([{"v": 1}, {"v": 2}]))])
    assert p.sink("output").tuples == [{"v": 1}, {"v": 2}]


def test_unknown_port_names_the_ports() -> None:
    h = OperatorHarness(Plain())
    h.begin_window(0)
    with pytest.raises(KeyError, match=r"has no input port 'inptu'; its input ports: \['input'\]"):
        h.put("inptu", 1)


def test_harness_lets_the_operators_own_exception_through() -> None:
    class Boom(Plain):
        def process(self, value: Any) -> None:
            raise ZeroDivisionError("boom")

    h = OperatorHarness(Boom())
    h.begin_window(0)
    with pytest.raises(ZeroDivisionError):
        h.put("input", 1)
