"""Drive the flagship sample as a separate driver process: start, SIGKILL, restart, verify.

Each run is ``python -m tests.flagship.pausing_driver`` in its own process group
(driver, its JVM and the Python workers), so a kill takes all of them at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malhar.engine.window_log import WindowLog
from malhar.testing.services.process import wait_until
from samples.wordcount_exactly_once.app import WordCountSettings
from samples.wordcount_exactly_once.data import (
    create_table,
    exactness,
    produce,
    table_counts,
    topic_truth,
)
from samples.wordcount_exactly_once.driver import SETTINGS_ENV
from tests.drivers import start_driver, stop_driver
from tests.flagship.pausing_driver import MARKER_ENV, PAUSE_ENV

RUN_TIMEOUT = 240.0


@dataclass
class Flagship:
    """One flagship deployment: its topic, table, checkpoint and driver runs."""

    kafka: Any
    pg: Any
    workdir: Path
    checkpoint: str
    master: str = "local[2]"
    partitions: int = 4
    plan: str = "direct"
    max_records_per_window: int = 2_000
    kafka_retry_attempts: int = 5
    name: str = field(default_factory=lambda: f"flagship-{uuid.uuid4().hex[:8]}")
    proc: subprocess.Popen | None = None
    runs: int = 0
    windows_seen: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.topic = f"lines-{uuid.uuid4().hex[:8]}"
        self.table = f"words_{uuid.uuid4().hex[:8]}"
        self.kafka.create_topic(self.topic, partitions=self.partitions)
        create_table(self.pg.sqlalchemy_url, self.table)
        self.log_path = self.workdir / "driver.log"

    @property
    def settings(self) -> WordCountSettings:
        return WordCountSettings(
            bootstrap_servers=self.kafka.bootstrap_servers,
            topic=self.topic,
            url=self.pg.sqlalchemy_url,
            table=self.table,
            plan=self.plan,
            max_records_per_window=self.max_records_per_window,
            kafka_retry_attempts=self.kafka_retry_attempts,
        )

    # -- data --------------------------------------------------------------------------------
    def produce(self, values: list[str] | list[bytes]) -> None:
        produce(self.kafka.bootstrap_servers, self.topic, values)

    def counts(self) -> Counter:
        return table_counts(self.pg.sqlalchemy_url, self.table)

    def truth(self) -> Counter:
        return topic_truth(self.kafka.bootstrap_servers, self.topic)

    def last_window(self) -> int:
        return WindowLog(self.checkpoint).largest_completed()

    # -- the driver process --------------------------------------------------------------------
    def start(self, pause: str | None = None) -> None:
        assert self.proc is None or self.proc.poll() is not None, "a driver is still running"
        self.runs += 1
        self.marker = self.workdir / f"paused-{self.runs}"
        settings = {k: v for k, v in vars(self.settings).items() if v is not None}
        self.proc = start_driver(
            "tests.flagship.pausing_driver",
            *(self.checkpoint, "--master", self.master, "--name", self.name),
            log=self.log_path,
            env={
                SETTINGS_ENV: json.dumps(settings),
                MARKER_ENV: str(self.marker),
                PAUSE_ENV: pause or None,
            },
            header=f"run {self.runs} pause={pause}",
        )
        self._first = self.last_window()
        self._log_offset = len(self.log_path.read_text(errors="replace"))

    def _alive(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"driver exited with {self.proc.returncode}; log tail:\n{self.log_tail()}"

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def mark(self) -> None:
        """Count the windows of :meth:`await_windows` from now."""
        self._first = self.last_window()

    def await_windows(self, n: int) -> int:
        """Wait until this run has completed ``n`` more windows; return the last one."""
        target = self._first + n
        wait_until(
            lambda: self.last_window() >= target,
            timeout=RUN_TIMEOUT,
            interval=0.2,
            what=f"window {target} of {self.name}",
            alive=self._alive,
        )
        return self.last_window()

    def await_pause(self) -> int:
        """Wait until the writer stopped at its pause point; return that window."""
        wait_until(
            self.marker.exists,
            timeout=RUN_TIMEOUT,
            interval=0.2,
            what=f"the writer of {self.name} to pause",
            alive=self._alive,
        )
        return int(self.marker.read_text())

    def await_log(self, text: str | re.Pattern[str]) -> None:
        """Wait until the driver's log (driver, JVM and Python workers) shows ``text`` (a
        substring or a compiled pattern)."""
        offset = self._log_offset
        pattern = text if isinstance(text, re.Pattern) else re.compile(re.escape(text))
        wait_until(
            lambda: pattern.search(self.log_path.read_text(errors="replace")[offset:]),
            timeout=RUN_TIMEOUT,
            interval=0.2,
            what=f"{pattern.pattern!r} in the driver log",
            alive=self._alive,
        )
        self._log_offset = len(self.log_path.read_text(errors="replace"))

    def kill(self) -> None:
        """SIGKILL the driver's whole process group (driver, JVM, Python workers)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.windows_seen.append((self._first, self.last_window()))

    def finish(self) -> tuple[Counter, Counter]:
        """Run until the table holds every word in the topic plus two more windows, stop the
        driver in order, and return (table, ground truth)."""
        truth = self.truth()
        total = sum(truth.values())
        wait_until(
            lambda: sum(self.counts().values()) >= total,
            timeout=RUN_TIMEOUT * 2,
            interval=0.5,
            what=f"{total} words in {self.table}",
            alive=self._alive,
        )
        self.mark()
        self.await_windows(2)
        assert self.proc is not None
        assert stop_driver(self.proc, self.log_path) == 0, self.log_tail()
        self.windows_seen.append((self._first, self.last_window()))
        return self.counts(), truth

    def assert_exact(self) -> None:
        got, truth = self.finish()
        exact, account = exactness(got, truth)
        assert exact, f"{account}\n{self.log_tail()}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
