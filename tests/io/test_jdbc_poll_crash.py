"""JDBC poll input -> Kafka output, exactly once, on ``local-cluster[2,1,1024]`` (executors in
their own JVMs and Python workers): a PostgreSQL table with rows inserted while the
application runs is polled by 2 key-range partitions and each row published to Kafka by 2
transactional output partitions; the driver is SIGKILLed mid-run and restarted; a
``read_committed`` consumer then finds every row of the table in the topic exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar.engine.window_log import WindowLog
from malhar.testing.services.process import wait_until
from tests.drivers import start_driver, stop_driver
from tests.io.jdbc_poll_app import SETTINGS_ENV
from tests.io.test_jdbc_poll import _insert, _orders
from tests.io.test_kafka_output import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TIMEOUT = 300.0


@pytest.mark.long
def test_sigkill_poll_to_kafka_on_local_cluster_every_row_once(
    kafka_service: Any, postgres_service: Any, tmp_path: Path
) -> None:
    pg, bs = postgres_service, kafka_service.bootstrap_servers
    table = _orders(pg, 400)
    topic = f"rows-{uuid.uuid4().hex[:8]}"
    kafka_service.create_topic(topic, partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    name = f"poll-{uuid.uuid4().hex[:8]}"
    settings = {"url": pg.sqlalchemy_url, "table": table, "bootstrap_servers": bs, "topic": topic}
    env = {SETTINGS_ENV: json.dumps(settings)}
    log_path = tmp_path / "driver.log"
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        args = [checkpoint, "--master", "local-cluster[2,1,1024]", "--name", name]
        proc = start_driver("tests.io.jdbc_poll_app", *args, log=log_path, env=env)
        procs.append(proc)
        return proc

    def alive(proc: subprocess.Popen) -> Any:
        return lambda: (
            None
            if proc.poll() is None
            else f"driver exited {proc.returncode}: {log_path.read_text()[-3000:]}"
        )

    def await_window(proc: subprocess.Popen, target: int) -> None:
        wait_until(
            lambda: WindowLog(checkpoint).largest_completed() >= target,
            timeout=TIMEOUT,
            interval=0.2,
            what=f"window {target}",
            alive=alive(proc),
        )

    try:
        proc = start()
        await_window(proc, 2)
        _insert(pg, table, 200, start=1000)  # rows inserted while it runs
        await_window(proc, WindowLog(checkpoint).largest_completed() + 2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        _insert(pg, table, 200, start=2000)
        proc = start()
        wait_until(
            lambda: len(read_topic(bs, topic)) >= 800,
            timeout=TIMEOUT,
            interval=1.0,
            what="800 rows in the topic",
            alive=alive(proc),
        )
        await_window(proc, WindowLog(checkpoint).largest_completed() + 2)
        assert stop_driver(proc, log_path) == 0, log_path.read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=60)
    got = read_topic(bs, topic)
    ids = Counter(r.json()["id"] for r in got)
    assert sorted(ids) == list(range(1, 801)) and set(ids.values()) == {1}, [
        (i, n) for i, n in ids.items() if n != 1
    ][:5]
    assert {r.key for r in got} == {str(i).encode() for i in range(1, 801)}
