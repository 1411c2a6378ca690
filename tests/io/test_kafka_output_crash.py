"""Kafka output exactly once under SIGKILL: the counts sample (Kafka -> count -> PostgreSQL and
a Kafka counts topic) runs as a real driver process, killed at random points and restarted
(the last time without its Spark checkpoint; the broker is SIGKILLed and restarted under the
second run); a ``read_committed`` consumer of the counts
topic then finds every (window, word) record once, and the counts summed per word equal the
ground truth read from the input topic (and the table)."""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from samples.counts_to_kafka.app import CountsToKafkaSettings, published_counts
from samples.counts_to_kafka.driver import SETTINGS_ENV
from samples.wordcount_exactly_once.data import chunks, corpus, exactness
from tests.drivers import start_driver
from tests.flagship.runner import Flagship

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class CountsApp(Flagship):
    """The flagship runner, driving ``samples.counts_to_kafka.driver`` instead."""

    counts_topic: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.counts_topic = f"counts-{self.name}"
        self.kafka.create_topic(self.counts_topic, partitions=2)

    @property
    def settings(self) -> CountsToKafkaSettings:
        return CountsToKafkaSettings(
            **vars(super().settings), counts_topic=self.counts_topic or "unset"
        )

    def start(self, pause: str | None = None) -> None:
        assert pause is None, "the counts sample has no pause points"
        assert self.proc is None or self.proc.poll() is not None, "a driver is still running"
        self.runs += 1
        settings = {k: v for k, v in vars(self.settings).items() if v is not None}
        self.proc = start_driver(
            "samples.counts_to_kafka.driver",
            *(self.checkpoint, "--master", self.master, "--name", self.name),
            log=self.log_path,
            env={SETTINGS_ENV: json.dumps(settings)},
            header=f"run {self.runs}",
        )
        self._first = self.last_window()
        self._log_offset = len(self.log_path.read_text(errors="replace"))


@pytest.mark.long
def test_sigkill_five_times_and_a_broker_crash_counts_topic_exactly_once(
    kafka_service: Any, postgres_service: Any, tmp_path: Path
) -> None:
    app = CountsApp(kafka_service, postgres_service, tmp_path, str(tmp_path / "ckpt"))
    try:
        rng = random.Random(16)
        parts = list(chunks(corpus(4_000, seed=16), 6))  # 5 killed runs and a last one
        for run, part in enumerate(parts[:-1]):
            app.produce(part)
            app.start()
            app.await_windows(rng.randint(1, 3))
            if run == 1:  # the broker crashes under the running application, comes back
                kafka_service.restart(graceful=False)
                app.mark()
                app.await_windows(2)
            time.sleep(rng.uniform(0.0, 0.4))  # not synchronization: moves the kill in a window
            app.kill()
        shutil.rmtree(tmp_path / "ckpt" / "spark")  # the last restart without it
        app.produce(parts[-1])
        app.start()
        table, truth = app.finish()
    finally:
        app.stop()
    exact, account = exactness(table, truth)
    assert exact, account
    published, records = published_counts(kafka_service.bootstrap_servers, app.counts_topic)
    exact, account = exactness(published, truth)
    assert exact, f"counts topic: {account}"
    twice = {k: n for k, n in records.items() if n != 1}
    assert not twice, f"(window, word) records not once: {list(twice.items())[:5]}"
    assert app.windows_seen[-1][0] > 0  # continued from malhar's window log, not from 0
