"""Test-wide setup: Spark's Python workers must import test modules (tests.engine.ops);
the longest tests are collected first."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parent.parent)
_path = os.environ.get("PYTHONPATH", "")
if ROOT not in _path.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, _path) if p)

# The tests' Spark JVMs (drivers, crash-test drivers through the inherited environment, and
# local-cluster executors) live seconds to minutes, and CI is CPU-bound on two cores. For them
# C2 compilation and G1's helper threads cost more CPU than they save: a 30-window run's driver
# JVM took 27-32 s of CPU by default, 16-19 s with C1 alone, 14-15 s with C1 and the serial
# collector; the recovery tests ran in 148 s instead of 218 s. Semantics are unchanged; the
# benches (bench/) keep Spark's defaults. Set PYSPARK_SUBMIT_ARGS to override.
# Their scratch (blockmgr-*, spark-*, artifacts-*, liblz4-java*) goes to one folder per test
# run, removed when the run ends: SIGKILLed crash-test drivers never run the shutdown hooks
# that delete theirs, and left ~36 MB in /tmp per CI run. (pytest-xdist's workers inherit the
# controller's variable, so the controller's folder is the one used, and removed last.)
_SCRATCH = tempfile.mkdtemp(prefix="malhar-tests-spark-")
atexit.register(shutil.rmtree, _SCRATCH, True)
_JVM_OPTS = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.io.tmpdir={_SCRATCH}"
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS",
    f"--driver-java-options '{_JVM_OPTS}' "
    f"--conf 'spark.executor.extraJavaOptions={_JVM_OPTS}' "
    f"--conf 'spark.local.dir={_SCRATCH}' pyspark-shell",
)


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Managed state's default local stores go to this run's temporary folder (pytest keeps
    the last three runs' folders), not to ``/tmp/malhar-state-<uid>``, which nothing empties.
    Set before any test starts a Spark JVM or a driver subprocess: autouse session fixtures
    come first, and both inherit ``os.environ`` (xdist workers: one folder each)."""
    path = tmp_path_factory.mktemp("malhar-state", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MALHAR_STATE_DIR", str(path))
        yield path


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("long"):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Minutes-long tests first, then slow ones. ``make test`` hands tests to its xdist
    workers two at a time (``--maxschedchunk 2``), so this is longest-first scheduling: the
    long tests spread over the workers from the start and the short ones fill the end,
    instead of one crash test running alone at the end."""
    items.sort(key=_rank)  # stable: the file order stays within a rank
