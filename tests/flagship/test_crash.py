"""Issue #5, tests 6-8: SIGKILL the flagship's driver at many points, restart it, and find
every word of the topic counted exactly once in PostgreSQL.

Lines are produced between the runs (and while the driver runs), so every run has
data in flight when it is killed. The ground truth is read back from the topic.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import uuid
from pathlib import Path

import pytest

from samples.wordcount_exactly_once.data import chunks, corpus
from tests.flagship.runner import Flagship

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _kill_at_random_point(f: Flagship, rng: random.Random) -> None:
    f.await_windows(rng.randint(1, 3))
    time.sleep(rng.uniform(0.0, 0.4))  # not synchronization: moves the kill inside a window
    f.kill()


def _assert_window_ids_never_go_back(f: Flagship) -> None:
    for (_, before), (first, _) in zip(f.windows_seen, f.windows_seen[1:], strict=False):
        assert first >= before, f.windows_seen


@pytest.fixture
def flagship_factory(kafka_service, postgres_service, tmp_path: Path):
    made: list[Flagship] = []

    def make(checkpoint: str | None = None, **kwargs) -> Flagship:
        f = Flagship(
            kafka_service,
            postgres_service,
            tmp_path,
            checkpoint or str(tmp_path / "ckpt"),
            **kwargs,
        )
        made.append(f)
        return f

    yield make
    for f in made:
        f.stop()


def test_sigkill_at_five_points_counts_every_word_once(flagship_factory) -> None:
    f = flagship_factory()
    rng = random.Random(6)
    parts = list(chunks(corpus(12_000, seed=6), 6))
    # Two deterministic points (inside the database transaction before COMMIT, and after
    # the COMMIT before the engine records the window) and three random ones.
    for i, pause in enumerate([None, "before_commit", None, "after_commit", None]):
        f.produce(parts[i])
        f.start(pause)
        if pause:
            f.await_pause()
            f.kill()
        else:
            _kill_at_random_point(f, rng)
    f.produce(parts[5])
    f.start()
    f.assert_exact()
    assert f.runs == 6
    _assert_window_ids_never_go_back(f)


def test_lost_spark_checkpoint_continues_window_ids_without_double_counting(
    flagship_factory, tmp_path: Path
) -> None:
    f = flagship_factory()
    rng = random.Random(7)
    parts = list(chunks(corpus(6_000, seed=7), 3))
    f.produce(parts[0])
    f.start()
    _kill_at_random_point(f, rng)
    f.produce(parts[1])
    f.start("after_commit")
    f.await_pause()
    f.kill()
    shutil.rmtree(tmp_path / "ckpt" / "spark")
    f.produce(parts[2])
    f.start()
    f.assert_exact()
    _assert_window_ids_never_go_back(f)
    assert f.windows_seen[-1][0] > 0  # continued from malhar's window log, not from 0


def test_checkpoint_and_storage_manager_on_hdfs(flagship_factory, hdfs_service) -> None:
    os.environ.setdefault("MALHAR_WEBHDFS_URL", hdfs_service.webhdfs_url)
    f = flagship_factory(checkpoint=f"{hdfs_service.url}/flagship-{uuid.uuid4().hex[:8]}")
    rng = random.Random(8)
    parts = list(chunks(corpus(6_000, seed=8), 3))
    f.produce(parts[0])
    f.start("after_commit")
    f.await_pause()
    f.kill()
    f.produce(parts[1])
    f.start()
    _kill_at_random_point(f, rng)
    f.produce(parts[2])
    f.start()
    f.assert_exact()
    _assert_window_ids_never_go_back(f)


def test_local_cluster_executors(flagship_factory) -> None:
    f = flagship_factory(master="local-cluster[2,1,1024]")
    rng = random.Random(9)
    parts = list(chunks(corpus(6_000, seed=9), 3))
    f.produce(parts[0])
    f.start()
    _kill_at_random_point(f, rng)
    f.produce(parts[1])
    f.start("after_commit")
    f.await_pause()
    f.kill()
    f.produce(parts[2])
    f.start()
    f.assert_exact()
    _assert_window_ids_never_go_back(f)
