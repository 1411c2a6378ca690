"""The ``malhar_jdbc`` Spark sink under real SIGKILLs of its driver (the flagship's style):
a deterministic stream of numbered batches is written by a driver process that is killed
at random points, between a task's rows and its COMMIT, and between a COMMIT and Spark
learning of it (so that batches are left partly committed), restarted on the same
checkpoint each time; the table must end with every row exactly once. Once on
``local[2]`` and once on ``local-cluster[2,1,1024]``.

This module is also the driver::

    JDBC_SINK_CRASH='{"url": ..., "table": ..., "name": ..., "batches": N, "rows": R}' \\
        python -m tests.io.test_jdbc_sink_crash CHECKPOINT MASTER
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from malhar.io.jdbc.config import JdbcSinkSettings
from malhar.io.jdbc.spark_sink import JdbcSink, JdbcStreamWriter
from malhar.testing.services.process import wait_until
from tests.drivers import start_driver
from tests.io.split_source import SplitSource

SETTINGS_ENV = "JDBC_SINK_CRASH"
PAUSE_ENV = "JDBC_SINK_PAUSE"  # before_commit | after_commit
MARKER_ENV = "JDBC_SINK_MARKER"
URL_ENV = "JDBC_SINK_URL"  # the database URL, by reference (${env:JDBC_SINK_URL})
JOURNAL_ENV = "JDBC_SINK_JOURNAL"  # batches the driver completed from staged partitions
RUN_TIMEOUT = 300.0


# -- the driver ----------------------------------------------------------------------------------
def _stop_here(window: int) -> None:
    Path(os.environ[MARKER_ENV]).write_text(str(window))
    threading.Event().wait()  # until SIGKILL


class PausingWriter(JdbcStreamWriter):
    """Stops dead in partition 0 of the first batch with rows: just before its COMMIT, or
    just after it (before Spark hears of it)."""

    def before_commit(self, txn: Any, window: int) -> None:
        if os.environ.get(PAUSE_ENV) == "before_commit" and _task_partition() == 0:
            _stop_here(window)

    def commit(self, messages: list[Any], batchId: int) -> None:
        super().commit(messages, batchId)
        staged = sorted(m.partition for m in messages if getattr(m, "staged", None))
        if staged:  # the driver applied a partly committed batch's other partitions
            with open(os.environ[JOURNAL_ENV], "a") as f:
                f.write(json.dumps({"batch": batchId, "applied": staged}) + "\n")

    def write(self, iterator: Any) -> Any:
        done = super().write(iterator)
        if os.environ.get(PAUSE_ENV) == "after_commit" and done.partition == 0 and done.written:
            _stop_here(done.batch)
        return done


def _task_partition() -> int | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.partitionId()


class PausingSink(JdbcSink):
    @classmethod
    def name(cls) -> str:
        return "malhar_test_pausing_jdbc"

    def streamWriter(self, schema: Any, overwrite: bool) -> PausingWriter:
        return PausingWriter(JdbcSinkSettings().from_options(dict(self.options)).check())


def main() -> None:
    from malhar import build_session

    checkpoint, master = sys.argv[1], sys.argv[2]
    s = json.loads(os.environ[SETTINGS_ENV])
    spark = build_session(master, app_name="jdbc-sink-crash", shuffle_partitions=2)
    spark.dataSource.register(SplitSource)
    spark.dataSource.register(PausingSink)
    df = (
        # batch b: ids b*rows .. (b+1)*rows-1, even ones in partition 0, odd ones in 1
        spark.readStream.format("malhar_test_split")
        .option("parts", 2)
        .option("batches", s["batches"])
        .option("rows", s["rows"])
        .option("stride", s["rows"])
        .load()
    )
    query = (
        df.writeStream.format("malhar_test_pausing_jdbc")
        .option("url", s["url"])
        .option("name", s["name"])
        .option("table", s["table"])
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.processAllAvailable()
    query.stop()
    print("DONE", flush=True)


# -- the test ------------------------------------------------------------------------------------
RANDOM = None


@dataclass
class SinkDriver:
    pg: Any
    workdir: Path
    master: str
    batches: int = 24
    rows: int = 400

    def __post_init__(self) -> None:
        self.name = f"sinkcrash-{uuid.uuid4().hex[:8]}"
        self.table = f"sinkcrash_{uuid.uuid4().hex[:8]}"
        self.checkpoint = str(self.workdir / "ckpt")
        self.log_path = self.workdir / "driver.log"
        self.journal = self.workdir / "applied.jsonl"
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        conn = self.pg.connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {self.table} (id bigint NOT NULL, batch bigint NOT NULL)")
        conn.commit()
        conn.close()

    def _sql(self, sql: str, params: tuple = ()) -> list[tuple]:
        conn = self.pg.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()

    def committed(self) -> int:
        """The highest batch any partition committed (-1: none)."""
        if self._sql("SELECT to_regclass('malhar_meta')") == [(None,)]:
            return -1  # the sink has not created its meta table yet
        found = self._sql("SELECT max(window_id) FROM malhar_meta WHERE app_id = %s", (self.name,))
        return -1 if not found or found[0][0] is None else int(found[0][0])

    def start(self, pause: str | None = None) -> None:
        self.runs += 1
        self.marker = self.workdir / f"paused-{self.runs}"
        settings = {
            "url": "${env:" + URL_ENV + "}",  # the sink refuses a literal password
            "table": self.table,
            "name": self.name,
            "batches": self.batches,
            "rows": self.rows,
        }
        self.proc = start_driver(
            "tests.io.test_jdbc_sink_crash",
            *(self.checkpoint, self.master),
            log=self.log_path,
            env={
                SETTINGS_ENV: json.dumps(settings),
                URL_ENV: self.pg.sqlalchemy_url,
                MARKER_ENV: str(self.marker),
                JOURNAL_ENV: str(self.journal),
                PAUSE_ENV: pause or None,
            },
            header=f"run {self.runs} pause={pause}",
        )

    def _alive(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        tail = self.log_path.read_text(errors="replace")[-4000:]
        return f"driver exited with {self.proc.returncode}; log tail:\n{tail}"

    def await_batches(self, n: int) -> None:
        target = self.committed() + n
        wait_until(
            lambda: self.committed() >= target,
            timeout=RUN_TIMEOUT,
            interval=0.2,
            what=f"batch {target} of {self.name}",
            alive=self._alive,
        )

    def await_pause(self) -> None:
        wait_until(
            self.marker.exists,
            timeout=RUN_TIMEOUT,
            interval=0.2,
            what="the sink to pause",
            alive=self._alive,
        )

    def await_partition(self, partition: int, batch: int) -> None:
        """Until ``partition`` has committed ``batch`` (a partly committed batch on a kill)."""

        def done() -> bool:
            found = self._sql(
                "SELECT window_id FROM malhar_meta WHERE app_id = %s AND partition_id = %s",
                (self.name, partition),
            )
            return bool(found) and found[0][0] >= batch

        wait_until(
            done,
            timeout=RUN_TIMEOUT,
            interval=0.2,
            what=f"partition {partition} to commit batch {batch}",
            alive=self._alive,
        )

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def finish(self) -> None:
        assert self.proc is not None
        code = self.proc.wait(timeout=RUN_TIMEOUT * 2)
        assert code == 0, self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()

    def assert_exact(self) -> None:
        table = Counter(self._sql(f"SELECT id, batch FROM {self.table}"))
        expected = Counter(
            (b * self.rows + i, b) for b in range(self.batches) for i in range(self.rows)
        )
        duplicated = {k: n for k, n in table.items() if n > 1}
        missing = expected - table
        assert not duplicated and not missing and table == expected, (
            f"{len(duplicated)} duplicated, {len(missing)} missing rows, e.g. "
            f"{list(duplicated.items())[:5]} {list(missing.items())[:5]}"
        )
        staged = self._sql("SELECT count(*) FROM malhar_meta_stage WHERE app_id = %s", (self.name,))
        assert staged == [(0,)]


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("master", ["local[2]", "local-cluster[2,1,1024]"])
def test_spark_sink_exactly_once_under_driver_kills(postgres_service, tmp_path, master) -> None:
    rng = random.Random(7)
    d = SinkDriver(postgres_service, tmp_path, master)
    try:
        for pause in (RANDOM, "before_commit", RANDOM, "after_commit"):
            d.start(pause)
            if pause:
                d.await_pause()
                if pause == "before_commit":  # leave the batch partly committed
                    d.await_partition(1, int(d.marker.read_text()))
            else:
                d.await_batches(rng.randint(1, 3))
                time.sleep(rng.uniform(0.0, 0.5))  # not synchronization: moves the kill
            d.kill()
            assert d.committed() < d.batches - 1, "the stream ended before the last kill"
        d.start()
        d.finish()
    finally:
        d.stop()
    d.assert_exact()
    # the batch left partly committed by the before_commit kill was completed by the driver
    applied = [json.loads(line) for line in d.journal.read_text().splitlines()]
    assert {"applied": [0]} in [{"applied": a["applied"]} for a in applied], applied
    meta = d._sql(
        "SELECT partition_id, window_id FROM malhar_meta WHERE app_id = %s ORDER BY 1", (d.name,)
    )
    assert meta == [(0, d.batches - 1), (1, d.batches - 1)]


if __name__ == "__main__":
    main()
