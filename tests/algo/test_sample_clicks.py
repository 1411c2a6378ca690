"""The clicks sample (two Kafka topics -> CSV -> throttle -> dedup -> filter -> stream-stream
join on managed state -> transform/project -> PostgreSQL; rejected clicks merged, counted and
totalled) survives SIGKILLs of its driver process on ``local-cluster[2,1,1024]`` (two
executor processes): all three tables end exact."""

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
from samples.clicks_attribution import data
from samples.clicks_attribution.driver import SETTINGS_ENV
from tests.drivers import start_driver, stop_driver

MASTER = "local-cluster[2,1,1024]"


def _start(settings: dict, checkpoint: Path, log: Path) -> subprocess.Popen:
    return start_driver(
        "samples.clicks_attribution.driver",
        str(checkpoint),
        "--master",
        MASTER,
        "--window-ms",
        "150",
        log=log,
        env={SETTINGS_ENV: json.dumps(settings)},
    )


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_sigkill_the_driver_on_a_local_cluster_and_the_attribution_is_exact(
    kafka_service, postgres_service, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    settings = {
        "bootstrap_servers": kafka_service.bootstrap_servers,
        "impressions_topic": f"impressions-{tag}",
        "clicks_topic": f"clicks-{tag}",
        "url": postgres_service.sqlalchemy_url,
        "attributed_table": f"attributed_{tag}",
        "ad_clicks_table": f"ad_clicks_{tag}",
        "rejected_table": f"rejected_{tag}",
        "max_records_per_window": 150,
    }
    for topic in (settings["impressions_topic"], settings["clicks_topic"]):
        kafka_service.create_topic(topic, partitions=2)
    data.create_tables(
        settings["url"],
        settings["attributed_table"],
        settings["ad_clicks_table"],
        settings["rejected_table"],
    )
    batches = [data.events(600, start=i * 600) for i in range(3)]

    def send(imps: list[str], clicks: list[str]) -> None:
        data.produce_lines(settings["bootstrap_servers"], settings["impressions_topic"], imps)
        data.produce_lines(settings["bootstrap_servers"], settings["clicks_topic"], clicks)

    send(*batches[0])
    rng = random.Random(9)
    checkpoint, log = tmp_path / "ckpt", tmp_path / "driver.log"

    def attributed() -> set[tuple]:
        return data.attributed_rows(settings["url"], settings["attributed_table"])

    def alive(p: subprocess.Popen) -> str | None:
        if p.poll() is None:
            return None
        return f"driver exited {p.returncode}: {log.read_text()[-3000:]}"

    for kill in range(2):
        wanted = len(attributed()) + rng.randint(20, 120)
        proc = _start(settings, checkpoint, log)
        wait_until(
            lambda w=wanted: len(attributed()) >= w,
            timeout=400,
            what=f"{wanted} attributed clicks",
            alive=lambda p=proc: alive(p),
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        send(*batches[kill + 1])  # produced while the application is down
    truth = data.truth(
        settings["bootstrap_servers"],
        settings["impressions_topic"],
        settings["clicks_topic"],
        within_ms=60_000,
    )
    expected = dict(data.per_ad(truth))
    rejected = data.rejected_truth(settings["bootstrap_servers"], settings["clicks_topic"])

    def rejected_total() -> int:
        return data.rejected_total(settings["url"], settings["rejected_table"])

    proc = _start(settings, checkpoint, log)
    try:
        wait_until(
            lambda: (
                data.ad_clicks(settings["url"], settings["ad_clicks_table"]) == expected
                and rejected_total() >= rejected
            ),
            timeout=600,
            what="the clicks of every ad and every rejected click counted",
            alive=lambda: alive(proc),
        )
    finally:
        # SIGTERM to the driver alone (its group would take its JVM down mid-stop)
        stopped = stop_driver(proc, log)
    assert stopped == 0, log.read_text()[-3000:]
    # a click inserted twice would have failed its window (primary key): none twice, none lost
    assert attributed() == truth
    assert data.ad_clicks(settings["url"], settings["ad_clicks_table"]) == expected
    # bot clicks and re-sent clicks merged (StreamMerger), counted per window (Counter) and
    # added to the total window by window: a window counted twice or lost would show
    assert rejected_total() == rejected > 0
    imps = [x for b in batches for x in b[0]]
    clicks = [x for b in batches for x in b[1]]
    assert len(imps) > len(set(imps)) and len(clicks) > len(set(clicks))  # re-sent lines
    assert any(",bot," in c for c in clicks) and len(truth) > 500
