"""A Kafka cluster that was never reached (a wrong port, a broker not started) fails once,
within the retry policy's budget, with an error naming the cluster and what to check; a
cluster that was reached and then goes away is still retried under the policy.

The unreachable cluster is a free port on 127.0.0.1 that nothing listens on. ``malhar
run`` is run in a subprocess: its master ``local[*,4]`` retries a failed task 4 times, the
multiplier that made a first contact wait 4 retry policies (and the output 4 x 8 attempts
of 30 s each)."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from malhar.io.kafka import KafkaOutputOperator, KafkaTextInputOperator, KafkaUnavailableError
from malhar.io.kafka.errors import (
    KafkaOutputUnavailableError,
    KafkaOutputUnreachableError,
    KafkaUnreachableError,
)
from malhar.operator import OperatorContext
from malhar.testing.harness import OperatorHarness
from tests.io.conftest import kafka_harness, kafka_op_args, kafka_run_window, kafka_unique

#: a short input retry policy: 3 attempts of at most 2 s, 0.2 s then 0.4 s between them
INPUT_RETRY = {"retry_attempts": 3, "retry_backoff_ms": 200, "request_timeout_ms": 2_000}


def closed_port() -> int:
    """A port nothing listens on (found free, then let go: not bound by the test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _input(bootstrap: str, **extra: Any) -> KafkaTextInputOperator:
    return KafkaTextInputOperator(
        bootstrap_servers=bootstrap,
        topics="t",
        initial_offset="EARLIEST",
        group_id=kafka_unique("g"),
        **{**INPUT_RETRY, **extra},
    )


def _retry_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if ", retry " in r.getMessage()]


# -- the input --------------------------------------------------------------------------------
def test_input_on_a_cluster_never_reached_fails_once_with_what_to_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    caplog.set_level(logging.WARNING, logger="malhar.io.kafka")
    began = time.monotonic()
    with pytest.raises(KafkaUnreachableError) as failed:
        kafka_harness(_input(address), str(tmp_path)).begin_window(0)
    took = time.monotonic() - began

    message = str(failed.value)
    assert f"Kafka cluster {address} was never reached" in message, message
    assert "listeners" in message and "bootstrap_servers" in message, message
    assert "retry_attempts=3" in message and "request_timeout_ms=2000" in message, message
    assert failed.value.attempts == 3
    assert len(_retry_warnings(caplog)) == 2  # the policy's retries, once
    assert took < 30, took  # the policy: ~6.6 s


def test_input_in_a_retried_task_attempt_asks_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spark's second attempt of the task: the first one waited out the policy already
    monkeypatch.setattr("malhar.io.kafka.client.task_attempt", lambda: 1)
    caplog.set_level(logging.WARNING, logger="malhar.io.kafka")
    with pytest.raises(KafkaUnreachableError) as failed:
        kafka_harness(_input(f"127.0.0.1:{closed_port()}"), str(tmp_path)).begin_window(0)
    assert failed.value.attempts == 1
    assert _retry_warnings(caplog) == []


@pytest.mark.integration
def test_input_whose_cluster_was_reached_retries_under_the_policy(
    kafka_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka_client.topic("reached", partitions=1)
    kafka_client.produce(topic, [{"value": b"a"}, {"value": b"b"}])
    args = {**kafka_op_args(kafka_client, topic), **INPUT_RETRY}
    h = kafka_harness(KafkaTextInputOperator(**args), str(tmp_path))
    assert [r["value"] for r in kafka_run_window(h, 0)] == ["a", "b"]
    saved = h.checkpoint()
    h.teardown()

    # restored from its checkpoint, the operator has positions: the cluster was reached,
    # and now does not answer (the address stands in for a broker that went down)
    args["bootstrap_servers"] = f"127.0.0.1:{closed_port()}"
    caplog.set_level(logging.WARNING, logger="malhar.io.kafka")
    restored = OperatorHarness.restored(
        KafkaTextInputOperator(**args), saved, OperatorContext(name="kin", checkpoint=str(tmp_path))
    )
    with pytest.raises(KafkaUnavailableError) as failed:
        restored.begin_window(1)
    assert not isinstance(failed.value, KafkaUnreachableError), failed.value
    assert failed.value.attempts == 3
    assert len(_retry_warnings(caplog)) == 2


# -- the output -------------------------------------------------------------------------------
def _output(bootstrap: str, **extra: Any) -> KafkaOutputOperator:
    settings = {
        "topic": "t",
        "request_timeout_ms": 2_000,
        "retry_attempts": 3,
        "retry_backoff": 0.2,
    }
    return KafkaOutputOperator(bootstrap_servers=bootstrap, **{**settings, **extra})


def _setup(op: KafkaOutputOperator, checkpoint: Path) -> None:
    context = OperatorContext(name="out", application="unreachable", checkpoint=str(checkpoint))
    OperatorHarness(op, context).setup()


def test_output_on_a_cluster_never_reached_fails_once_with_what_to_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    caplog.set_level(logging.WARNING, logger="malhar.io")
    began = time.monotonic()
    with pytest.raises(KafkaOutputUnreachableError) as failed:
        _setup(_output(address), tmp_path)
    took = time.monotonic() - began

    message = str(failed.value)
    assert f"Kafka cluster {address} (topic 't') was never reached" in message, message
    assert "listeners" in message and "request_timeout_ms=2000" in message, message
    # no window retries: each would wait request_timeout_ms again (8 x 30 s by default)
    assert not [r for r in caplog.records if "unavailable (attempt" in r.getMessage()]
    assert took < 20, took  # one request: ~2 s


def test_output_in_a_retried_task_attempt_asks_once_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("malhar.io.kafka.producer.task_attempt", lambda: 1)
    monkeypatch.setattr("malhar.io.kafka.producer.RECHECK_TIMEOUT_S", 0.5)
    began = time.monotonic()
    with pytest.raises(KafkaOutputUnreachableError):
        _setup(_output(f"127.0.0.1:{closed_port()}", request_timeout_ms=60_000), tmp_path)
    assert time.monotonic() - began < 20


def test_output_whose_cluster_was_reached_retries_windows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a partition rebuilt from a checkpoint of an earlier open: the cluster went away
    op = _output(f"127.0.0.1:{closed_port()}", request_timeout_ms=500)
    op._reached = True
    caplog.set_level(logging.WARNING, logger="malhar.io")
    with pytest.raises(KafkaOutputUnavailableError) as failed:
        _setup(op, tmp_path)
    assert not isinstance(failed.value, KafkaOutputUnreachableError), failed.value
    retries = [r for r in caplog.records if "unavailable (attempt" in r.getMessage()]
    assert len(retries) == 2, [r.getMessage() for r in retries]


@pytest.mark.integration
def test_output_reaches_a_running_cluster(kafka_client: Any, tmp_path: Path) -> None:
    topic = kafka_client.topic("out-reached", partitions=1)
    op = _output(kafka_client.bootstrap, topic=topic)
    context = OperatorContext(name="out", application="reached", checkpoint=str(tmp_path))
    h = OperatorHarness(op, context).setup()
    assert op._reached and op._store.reached
    h.teardown()


# -- malhar run: Spark's task retries do not multiply the wait --------------------------------
INPUT_APP = """
from malhar import DAG
from malhar.io.kafka import KafkaTextInputOperator
from malhar.testing.operators import Collector

dag = DAG("unreachable-in")
src = dag.add_operator("kin", KafkaTextInputOperator(
    bootstrap_servers="{address}", topics="t", initial_offset="EARLIEST",
    retry_attempts=3, retry_backoff_ms=1000, request_timeout_ms=4000))
dag.add_stream("s", src.output, dag.add_operator("sink", Collector()).input)
"""

OUTPUT_APP = """
from malhar import DAG
from malhar.io.kafka import KafkaOutputOperator
from malhar.testing.operators import ListInput

dag = DAG("unreachable-out")
src = dag.add_operator("src", ListInput([[{{"word": "a"}}]]))
out = dag.add_operator("out", KafkaOutputOperator(
    bootstrap_servers="{address}", topic="t", request_timeout_ms=4000))
dag.add_stream("s", src.output, out.input)
"""


def _malhar_run(tmp_path: Path, source: str, name: str) -> tuple[str, float]:
    app = tmp_path / f"{name}.py"
    app.write_text(source)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "malhar", "run", f"{app}:dag", "--name", name, "--windows", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    took = time.monotonic() - began
    assert done.returncode != 0, done.stdout + done.stderr
    return done.stdout + done.stderr, took


@pytest.mark.slow
def test_malhar_run_of_an_input_on_a_cluster_never_reached(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    out, took = _malhar_run(tmp_path, INPUT_APP.format(address=address), "unreachable-in")
    assert f"KafkaUnreachableError: operator 'kin' partition 0: Kafka cluster {address}" in out
    # the policy (3 attempts, ~15 s) once, then one request per retried task attempt; the
    # old code waited it out in each of the 4 task attempts
    assert len([line for line in out.splitlines() if ", retry 1/2 " in line]) == 1, out[-5000:]
    assert took < 120, took


@pytest.mark.slow
def test_malhar_run_of_an_output_on_a_cluster_never_reached(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    out, took = _malhar_run(tmp_path, OUTPUT_APP.format(address=address), "unreachable-out")
    assert f"KafkaOutputUnreachableError: unreachable-out/out/0: Kafka cluster {address}" in out
    assert "unavailable (attempt" not in out, out[-5000:]  # no window retries
    assert took < 120, took
