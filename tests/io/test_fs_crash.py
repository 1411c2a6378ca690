"""Kill/replay of a whole application (the flagship's style): files -> lines (blocks, two
partitions) -> words -> UniqueCounter -> rolling Parquet, its driver process group
SIGKILLed five times at random windows while files keep arriving (input and output on HDFS
with ``local[2]`` and files of three windows; on the local filesystem with
``local-cluster[2,1,1024]`` and a file per window, each staged whole and published by a
rename), then restarted on the same checkpoint. The output read back with
``spark.read.parquet`` must equal the ground truth exactly, and every input file must have
been moved away once (``post_action="move"``)."""

from __future__ import annotations

import os
import random
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
from tests.io.fs_support import Place, word_truth

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT = 240.0
WORDS = ["alpha", "beta", "gamma", "délta", "日本", "😀", "x"]


class Run:
    """One deployment of the word count: its folders and its driver process."""

    def __init__(
        self, source: Place, out: Place, workdir: Path, master: str, roll_windows: int
    ) -> None:
        self.source, self.out, self.master = source, out, master
        self.roll_windows = roll_windows
        self.checkpoint = str(workdir / "ckpt")
        self.log = workdir / "driver.log"
        self.name = f"fs-crash-{uuid.uuid4().hex[:6]}"
        self.texts: list[str] = []
        self.files = 0
        self.proc: subprocess.Popen | None = None
        self.rng = random.Random(15)

    def add_files(self, n: int, lines: int = 30) -> None:
        """New input files (written under a hidden name, renamed into place)."""
        for _ in range(n):
            rows = [
                " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 6)))
                for _ in range(lines)
            ]
            text = "\n".join(rows) + "\n"
            self.source.write(f"in/f{self.files:04d}.txt", text)
            self.texts.append(text)
            self.files += 1

    def start(self) -> None:
        args = [self.checkpoint, self.source.url("in"), self.out.url("out"), self.master]
        args += [self.name, str(self.roll_windows), self.source.url("done")]
        self.proc = start_driver("tests.io.fs_support", *args, log=self.log)

    def last_window(self) -> int:
        return WindowLog(self.checkpoint).largest_completed()

    def alive(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        tail = self.log.read_text(errors="replace")[-4000:]
        return f"driver exited with {self.proc.returncode}:\n{tail}"

    def await_windows(self, n: int) -> None:
        target = self.last_window() + n
        wait_until(
            lambda: self.last_window() >= target,
            timeout=TIMEOUT,
            interval=0.2,
            what=f"window {target}",
            alive=self.alive,
        )

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def counts(self) -> Counter:
        out: Counter = Counter()
        for r in self.out.parquet_rows("out"):
            out[r["word"]] += r["count"]
        return out

    def finish(self) -> None:
        total = sum(word_truth(self.texts).values())
        wait_until(
            lambda: sum(self.counts().values()) >= total,
            timeout=TIMEOUT,
            interval=0.5,
            what=lambda: f"{total} words in the output, have {sum(self.counts().values())}",
            alive=self.alive,
        )
        self.await_windows(2)
        assert self.proc is not None
        assert stop_driver(self.proc, self.log) == 0, self.alive()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


def crash_and_recover(run: Run, kills: int, spark: Any) -> None:
    run.add_files(4)
    try:
        for _ in range(kills):
            run.start()
            run.await_windows(run.rng.randint(1, 4))
            run.kill()
            run.add_files(2)  # files arrive while the application is down
        run.start()
        run.await_windows(1)
        run.add_files(2)  # ... and while it runs
        run.finish()
    finally:
        run.stop()
    truth = word_truth(run.texts)
    rows = spark.read.parquet(run.out.url("out")).collect()
    got: Counter = Counter()
    for row in rows:
        got[row["word"]] += row["count"]
    assert got == truth
    # every file was read and moved away once; none is left, none is read twice
    left = [f for f in run.source.files("in") if not f.rsplit("/", 1)[-1].startswith(".")]
    assert left == []
    moved = sorted(f.rsplit("/", 1)[-1] for f in run.source.files("done"))
    assert moved == [f"f{i:04d}.txt" for i in range(run.files)]


@pytest.mark.long
def test_sigkill_five_times_hdfs_files_to_parquet_exactly_once(
    hdfs_service, spark, tmp_path: Path
) -> None:
    os.environ.setdefault("MALHAR_WEBHDFS_URL", hdfs_service.webhdfs_url)
    place = Place(f"{hdfs_service.url}/fs-crash/{uuid.uuid4().hex[:8]}", "hdfs")
    try:
        crash_and_recover(Run(place, place, tmp_path, "local[2]", 3), 5, spark)
    finally:
        place.fs.delete(place.root, recursive=True)


@pytest.mark.long
def test_sigkill_five_times_on_local_cluster_local_files_exactly_once(
    spark, tmp_path: Path
) -> None:
    place = Place(str(tmp_path / "data"), "local")
    crash_and_recover(Run(place, place, tmp_path, "local-cluster[2,1,1024]", 1), 5, spark)
