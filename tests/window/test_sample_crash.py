"""The event_time_windows sample, SIGKILLed at random points and restarted: the final
tables equal the batch reference computed from the topic (issue 14's crash test).

Each run is ``python -m samples.event_time_windows.driver`` in its own process group
(driver, JVM, Python workers), killed all at once. Clicks are produced before and while
the driver runs, so every kill has data in flight. The hour-old (late) clicks are
produced once an ON_TIME row shows that the watermark passed the start of the stream, so
that they are late whatever the streaming windows were.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from malhar.engine.window_log import WindowLog
from malhar.testing.services.process import wait_until
from samples.event_time_windows.app import ClickSettings
from samples.event_time_windows.data import (
    clicks,
    compare,
    create_tables,
    late_clicks,
    produce,
    read_tables,
    reference,
    topic_events,
)
from samples.event_time_windows.driver import SETTINGS_ENV
from tests.drivers import start_driver, stop_driver

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT = 300.0


@dataclass
class Deployment:
    """One deployment of the sample: its topic, tables, checkpoint and driver runs."""

    kafka: Any
    pg: Any
    workdir: Path
    master: str = "local[2]"
    name: str = field(default_factory=lambda: f"clicks-{uuid.uuid4().hex[:8]}")
    proc: subprocess.Popen | None = None
    windows_seen: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.settings = ClickSettings(
            bootstrap_servers=self.kafka.bootstrap_servers,
            topic=f"clicks-{suffix}",
            url=self.pg.sqlalchemy_url,
            table=f"clicks_{suffix}",
            late_table=f"late_clicks_{suffix}",
        )
        self.kafka.create_topic(self.settings.topic, partitions=4)
        create_tables(self.settings.url, self.settings.table, self.settings.late_table)
        self.checkpoint = str(self.workdir / "ckpt")
        self.log_path = self.workdir / "driver.log"
        self._first = -1

    def produce(self, events: list[dict[str, Any]]) -> None:
        produce(self.settings.bootstrap_servers, self.settings.topic, events)

    def tables(self) -> tuple[dict, Any, Any]:
        return read_tables(self.settings.url, self.settings.table, self.settings.late_table)

    def last_window(self) -> int:
        return WindowLog(self.checkpoint).largest_completed()

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        self.proc = start_driver(
            "samples.event_time_windows.driver",
            *(self.checkpoint, "--master", self.master, "--name", self.name),
            log=self.log_path,
            env={SETTINGS_ENV: json.dumps(vars(self.settings))},
        )
        self._first = self.last_window()

    def _alive(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        tail = self.log_path.read_text(errors="replace")[-4000:]
        return f"driver exited with {self.proc.returncode}; log tail:\n{tail}"

    def await_windows(self, n: int) -> None:
        target = self._first + n
        wait_until(
            lambda: self.last_window() >= target,
            timeout=TIMEOUT,
            interval=0.2,
            what=f"window {target} of {self.name}",
            alive=self._alive,
        )

    def await_on_time(self) -> None:
        wait_until(
            lambda: self.tables()[2]["ON_TIME"] > 0,
            timeout=TIMEOUT,
            interval=0.3,
            what="a first ON_TIME row",
            alive=self._alive,
        )

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.windows_seen.append((self._first, self.last_window()))

    def finish(self) -> tuple[dict, Any, dict, Any]:
        """Run until the tables equal the reference from the topic (or time out), stop in
        order; return (table, late table, expected, expected late)."""
        expected, late = reference(
            topic_events(self.settings.bootstrap_servers, self.settings.topic)
        )
        try:
            wait_until(
                lambda: self.tables()[:2] == (expected, late),
                timeout=TIMEOUT,
                interval=0.5,
                what="the tables to equal the batch reference",
                alive=self._alive,
            )
        finally:
            got, got_late, _ = self.tables()
            assert self.proc is not None
            stop_driver(self.proc, self.log_path)
            self.windows_seen.append((self._first, self.last_window()))
        return got, got_late, expected, late

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


@pytest.fixture
def deployment(kafka_service, postgres_service, tmp_path):
    d = Deployment(kafka_service, postgres_service, tmp_path)
    yield d
    d.stop()


@pytest.mark.long
def test_sigkill_at_random_points_leaves_tables_equal_to_the_batch_reference(deployment) -> None:
    d, rng = deployment, random.Random(14)
    sizes = [1_500, 1_500, 1_500, 1_500]
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    d.produce(clicks(sizes[0], first=firsts[0]))
    d.start()
    d.await_on_time()  # the watermark passed the stream's start: hour-old clicks are late now
    d.produce(late_clicks(40) + clicks(sizes[1], first=firsts[1]))
    d.await_windows(rng.randint(1, 4))
    time.sleep(rng.uniform(0.0, 0.4))  # not synchronization: moves the kill inside a window
    d.kill()
    for i in (2, 3):
        d.start()
        d.produce(clicks(sizes[i], first=firsts[i]))  # while the driver starts and runs
        d.await_windows(rng.randint(2, 6))
        time.sleep(rng.uniform(0.0, 0.4))
        d.kill()
    d.start()
    got, got_late, expected, late = d.finish()
    assert got == expected, compare(got, expected)
    assert got_late == late and sum(late.values()) == 40
    assert len(d.windows_seen) == 4
    for (_, before), (first, _) in zip(d.windows_seen, d.windows_seen[1:], strict=False):
        assert first >= before  # window ids never go back
