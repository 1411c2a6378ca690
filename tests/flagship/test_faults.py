"""Issue #5, tests 9-10: server restarts mid-run, and bad input, on the flagship DAG."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, ApplicationFailed, launch
from malhar.testing.services.process import wait_until
from samples.wordcount_exactly_once.app import WordCountSettings, populate
from samples.wordcount_exactly_once.data import (
    chunks,
    corpus,
    create_table,
    exactness,
    produce,
    table_counts,
    word_counts,
)
from tests.flagship.runner import Flagship

# the outage as the operator sees it: librdkafka's own log line (served from consume()),
# or malhar's retry warning of a metadata request (a consumer made during the outage)
KAFKA_DOWN = re.compile(
    r"Connection refused|operator 'lines' partition \d+: .* failed \(.*\), retry 1/"
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_postgres_and_kafka_restarted_mid_run(kafka_service, postgres_service, tmp_path) -> None:
    # the readers wait up to ~5 minutes for the broker (5 attempts, ~30 s, is the default):
    # under CI load a broker restart took more than 30 s, then more than the 162 s of 15
    # attempts; 25 attempts outlast the fixture's own worst case (a 30 s stop, a 120 s start)
    f = Flagship(
        kafka_service, postgres_service, tmp_path, str(tmp_path / "ckpt"), kafka_retry_attempts=25
    )
    parts = list(chunks(corpus(9_000, seed=9), 3))
    try:
        f.produce(parts[0])
        f.start()
        f.await_windows(2)
        postgres_service.stop_server()
        try:  # lines arrive while the database is down: their windows must retry
            f.produce(parts[1])
            f.await_log("database unavailable")
        finally:
            postgres_service.start_server()
        f.mark()
        f.await_windows(2)
        began = time.monotonic()
        kafka_service.stop_broker()
        stopped = time.monotonic()
        try:
            f.await_log(KAFKA_DOWN)
        finally:
            seen = time.monotonic()
            kafka_service.start_broker()
            up = time.monotonic()
        f.produce(parts[2])
        try:
            f.assert_exact()
        except BaseException as exc:
            # the outage's timeline tells a slow broker from a reader that never reconnects
            exc.add_note(
                f"broker stop took {stopped - began:.1f}s, the outage was seen "
                f"{seen - stopped:.1f}s later, the restart took {up - seen:.1f}s; "
                "the readers' retries:\n"
                + "\n".join(re.findall(r".*retry \d+/.*", f.log_tail(200_000)))
            )
            raise
        assert f.runs == 1  # one driver run survived both outages
    finally:
        f.stop()


# -- bad input ---------------------------------------------------------------------------
def _settings(kafka: Any, pg: Any, **extra: Any) -> WordCountSettings:
    topic = f"lines-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    table = f"words_{uuid.uuid4().hex[:8]}"
    create_table(pg.sqlalchemy_url, table)
    return WordCountSettings(
        bootstrap_servers=kafka.bootstrap_servers,
        topic=topic,
        url=pg.sqlalchemy_url,
        table=table,
        counters=2,
        **extra,
    )


def _run_until(
    spark: Any, tmp: Path, settings: WordCountSettings, truth: Counter, errors: dict[str, int]
) -> None:
    """Launch the flagship; run until the table holds ``truth`` and the error ports counted
    ``errors`` (and two windows more); check both."""
    dag = populate(DAG(f"bad-{uuid.uuid4().hex[:6]}"), settings)
    app = launch(dag, spark=spark, checkpoint=str(tmp / "ckpt"), window_ms=200)

    def counted() -> dict[str, int]:
        total: Counter = Counter()
        for w in range(app.last_window + 1):
            total.update(app.error_counts(w))
        return {k: v for k, v in total.items() if v}

    def failed() -> str | None:
        failed = app.failure()
        return None if failed is None else str(failed)

    try:
        wait_until(
            lambda: (
                sum(table_counts(settings.url, settings.table).values()) >= sum(truth.values())
                and counted() == errors
            ),
            timeout=240,
            interval=0.3,
            what=f"every word and the error tuples {errors}",
            alive=failed,
        )
        app.await_window(app.last_window + 2)
        assert counted() == errors
    finally:
        app.stop()
    exact, account = exactness(table_counts(settings.url, settings.table), truth)
    assert exact, account


def test_bad_records_go_to_error_ports_and_good_counts_stay_exact(
    spark, kafka_service, postgres_service, tmp_path: Path
) -> None:
    settings = _settings(kafka_service, postgres_service, max_message_bytes=64 * 1024)
    good = corpus(3_000, seed=10)
    oversized = "apex " * 30_000  # 150 KB: above max_message_bytes, below the broker's limit
    bad = [b"\xff\xfe not utf-8 \xc3\x28", oversized, b"\x80"]
    produce(settings.bootstrap_servers, settings.topic, good[:1500] + bad + good[1500:])
    _run_until(spark, tmp_path, settings, word_counts(good), {"lines.error": 3})


def test_invalid_json_goes_to_error_ports(spark, kafka_service, postgres_service, tmp_path):
    settings = _settings(kafka_service, postgres_service, value_format="json")
    good = corpus(2_000, seed=11)
    docs = [json.dumps({"line": line}) for line in good]
    bad = ['{"line": "unterminated', "not json at all", b"\xff\xfe", '{"text": "no line"}', "[1]"]
    produce(settings.bootstrap_servers, settings.topic, docs[:1000] + bad + docs[1000:])
    # undecodable documents at the reader, documents without a line at the splitter
    errors = {"lines.error": 3, "split.error": 2}
    _run_until(spark, tmp_path, settings, word_counts(good), errors)


def _failure(app: Any) -> str:
    """The failed application's message: the operator's error first, no Spark plan dump."""
    with pytest.raises(ApplicationFailed) as info:
        app.await_window(5, timeout=180)
    app.abort()
    message = str(info.value)
    assert "failed in setup of window" in message.splitlines()[0], message
    assert "Logical Plan" not in message and len(message) < 1000, message
    return message


def test_missing_table_is_a_clear_error(spark, kafka_service, postgres_service, tmp_path):
    settings = _settings(kafka_service, postgres_service)
    settings.table = "no_such_words"
    produce(settings.bootstrap_servers, settings.topic, corpus(10))
    app = launch(populate(DAG("missing-table"), settings), spark=spark, checkpoint=str(tmp_path))
    message = _failure(app)
    assert "no_such_words" in message and "does not exist" in message, message


def test_wrong_credentials_are_a_clear_error_without_the_password(
    spark, kafka_service, postgres_service, tmp_path
) -> None:
    settings = _settings(kafka_service, postgres_service)
    wrong = "Wr0ng-S3cret-Pw"
    settings.url = settings.url.replace(f":{postgres_service.password}@", f":{wrong}@", 1)
    assert wrong in settings.url
    produce(settings.bootstrap_servers, settings.topic, corpus(10))
    app = launch(populate(DAG("bad-login"), settings), spark=spark, checkpoint=str(tmp_path))
    message = _failure(app)
    assert "password authentication failed" in message, message
    assert wrong not in message


def test_missing_topic_is_a_clear_error(spark, kafka_service, postgres_service, tmp_path):
    settings = _settings(kafka_service, postgres_service)
    settings.topic = f"no-such-topic-{uuid.uuid4().hex[:6]}"
    app = launch(populate(DAG("missing-topic"), settings), spark=spark, checkpoint=str(tmp_path))
    message = _failure(app)
    assert settings.topic in message and "does not exist" in message, message
