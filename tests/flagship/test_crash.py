"""Issue #5, tests 6-8: SIGKILL the flagship's driver at many points, restart it, and find
every word of the topic counted exactly once in PostgreSQL.

Lines are produced between the runs (and while the driver runs), so every run has
data in flight when it is killed. The ground truth is read back from the topic.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from samples.wordcount_exactly_once.data import chunks, corpus
from tests.flagship.runner import Flagship

pytestmark = [pytest.mark.integration, pytest.mark.slow]


RANDOM = None  # a kill at a random point inside a window


def crash_and_recover(
    f: Flagship,
    kills: list[str | None],
    *,
    seed: int,
    lines: int = 6_000,
    before_last_start: Callable[[], None] | None = None,
) -> None:
    """One driver run per entry of ``kills`` (a pause point of the writer, or RANDOM), each
    SIGKILLed; lines are produced before every run; a last run must end exact."""
    rng = random.Random(seed)
    parts = list(chunks(corpus(lines, seed=seed), len(kills) + 1))
    for part, pause in zip(parts, kills, strict=False):
        f.produce(part)
        f.start(pause)
        if pause:
            f.await_pause()
        else:
            f.await_windows(rng.randint(1, 3))
            time.sleep(rng.uniform(0.0, 0.4))  # not synchronization: moves the kill in a window
        f.kill()
    if before_last_start is not None:
        before_last_start()
    f.produce(parts[-1])
    f.start()
    f.assert_exact()
    assert f.runs == len(kills) + 1
    for (_, before), (first, _) in itertools.pairwise(f.windows_seen):
        assert first >= before, f.windows_seen  # window ids never go back


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


@pytest.mark.long
def test_sigkill_at_five_points_counts_every_word_once(flagship_factory) -> None:
    # Two deterministic points (inside the database transaction before COMMIT, and after
    # the COMMIT before the engine records the window) and three random ones.
    f = flagship_factory()
    kills = [RANDOM, "before_commit", RANDOM, "after_commit", RANDOM]
    crash_and_recover(f, kills, seed=6, lines=12_000)


@pytest.mark.long
def test_sigkill_combine_plan_counts_every_word_once(flagship_factory) -> None:
    # the earlier default: partial counts shuffled to a unifier and one writer (two stages)
    f = flagship_factory(plan="combine")
    crash_and_recover(f, ["before_commit", RANDOM], seed=10)


@pytest.mark.long
def test_lost_spark_checkpoint_continues_window_ids_without_double_counting(
    flagship_factory, tmp_path: Path
) -> None:
    f = flagship_factory(plan="shuffle")  # the KeyCodec plan: every word crosses a shuffle
    lose = lambda: shutil.rmtree(tmp_path / "ckpt" / "spark")  # noqa: E731
    crash_and_recover(f, [RANDOM, "after_commit"], seed=7, before_last_start=lose)
    assert f.windows_seen[-1][0] > 0  # continued from malhar's window log, not from 0


@pytest.mark.long
def test_checkpoint_and_storage_manager_on_hdfs(flagship_factory, hdfs_service) -> None:
    os.environ.setdefault("MALHAR_WEBHDFS_URL", hdfs_service.webhdfs_url)
    f = flagship_factory(checkpoint=f"{hdfs_service.url}/flagship-{uuid.uuid4().hex[:8]}")
    crash_and_recover(f, ["after_commit", RANDOM], seed=8)


@pytest.mark.long
def test_local_cluster_executors(flagship_factory) -> None:
    f = flagship_factory(master="local-cluster[2,1,1024]")
    crash_and_recover(f, [RANDOM, "after_commit"], seed=9)
