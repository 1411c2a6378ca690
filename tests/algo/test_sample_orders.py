"""The orders sample (Kafka -> JSON -> dedup -> enrich from PostgreSQL -> top products ->
PostgreSQL, and as JSON lines to rolling files) survives SIGKILLs of its driver process:
the result table and the archive end exact."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from malhar.testing.services.process import wait_until
from samples.orders_top_products import data
from samples.orders_top_products.driver import SETTINGS_ENV
from tests.drivers import start_driver, stop_driver

PRODUCTS = 8  # <= top_n: every application window's ranking holds every product


def _start(settings: dict, checkpoint: Path, log: Path) -> subprocess.Popen:
    return start_driver(
        "samples.orders_top_products.driver",
        str(checkpoint),
        "--window-ms",
        "150",
        log=log,
        env={SETTINGS_ENV: json.dumps(settings)},
    )


def _check_windows(rows: list[tuple]) -> None:
    by_window: dict[int, list[tuple]] = {}
    for r in rows:
        by_window.setdefault(r[0], []).append(r)
    for w, ranked in by_window.items():
        assert [r[1] for r in ranked] == list(range(1, len(ranked) + 1)), w
        assert len({r[2] for r in ranked}) == len(ranked), w  # a product once per window
        assert [r[3] for r in ranked] == sorted((r[3] for r in ranked), reverse=True), w


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_sigkill_the_driver_twice_and_the_top_products_are_exact(
    kafka_service, postgres_service, tmp_path: Path
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    kafka_service.create_topic(topic, partitions=2)
    settings = {
        "bootstrap_servers": kafka_service.bootstrap_servers,
        "topic": topic,
        "url": postgres_service.sqlalchemy_url,
        "products_table": f"products_{uuid.uuid4().hex[:8]}",
        "top_table": f"top_{uuid.uuid4().hex[:8]}",
        "max_records_per_window": 100,
        "app_windows": 2,
        "archive_path": str(tmp_path / "archive"),
        "archive_roll_windows": 8,
    }
    data.create_tables(settings["url"], settings["products_table"], settings["top_table"], PRODUCTS)
    batches = [data.orders(1500, PRODUCTS, start=i * 1500) for i in range(3)]
    data.produce_orders(settings["bootstrap_servers"], topic, batches[0])
    rng = random.Random(5)
    checkpoint, log = tmp_path / "ckpt", tmp_path / "driver.log"

    def rows() -> list[tuple]:
        return data.table_rows(settings["url"], settings["top_table"])

    for kill in range(2):
        before = len(rows())
        proc = _start(settings, checkpoint, log)
        wanted = before + rng.randint(1, 3) * PRODUCTS  # one to three more application windows
        wait_until(
            lambda w=wanted: len(rows()) >= w,
            timeout=300,
            what=f"{wanted} rows in the result table",
            alive=lambda p=proc: (
                None
                if p.poll() is None
                else f"driver exited {p.returncode}: {log.read_text()[-2000:]}"
            ),
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        data.produce_orders(settings["bootstrap_servers"], topic, batches[kill + 1])
    truth = data.truth(settings["bootstrap_servers"], topic, PRODUCTS)
    proc = _start(settings, checkpoint, log)

    def running() -> str | None:
        if proc.poll() is None:
            return None
        return f"driver exited {proc.returncode}: {log.read_text()[-2000:]}"

    def archived() -> list[tuple]:
        return data.archived_rows(settings["archive_path"])

    try:
        wait_until(
            lambda: sum(data.totals(rows()).values()) >= sum(truth.values()),
            timeout=400,
            what="every order in the result table",
            alive=running,
        )
        # the archive's files become visible once rolled and committed: a few windows later
        wait_until(
            lambda: len(archived()) >= len(rows()),
            timeout=180,
            what="every ranking in the JSON archive",
            alive=running,
        )
    finally:
        # SIGTERM to the driver alone (its group would take its JVM down mid-stop)
        stopped = stop_driver(proc, log)
    assert stopped == 0, log.read_text()[-3000:]
    final = rows()
    _check_windows(final)
    assert data.totals(final) == truth  # every distinct order once: none lost, none twice
    # the same rankings through JsonFormatter into rolling files: every line once (the
    # table is an upsert, the archive is not: a replayed window would show here twice)
    lines = data.archive_lines(settings["archive_path"])
    assert all(line.startswith('{"app_window":') for line in lines), lines[:3]
    assert sorted(archived()) == final and len(set(lines)) == len(lines)
    assert sum(truth.values()) > 0 and len({r[0] for r in final}) >= 3
    sent = sum(len(b) for b in batches)
    distinct = len({json.loads(x)["order_id"] for b in batches for x in b})
    assert sent > distinct  # the topic held re-sent orders: the dedup dropped them
