"""A bounded JDBC poll input (``bounded=True``): every partition reads its key range of the
rows present when the plan was made (the last one up to the plan's largest key, without
polling), then sends the end-of-input watermark (``Watermark(MAX_TIMESTAMP)``) every window
and reports the metric ``ended``; a replayed window sends the same, a restart after the end
reads nothing more, and an application over it stops by itself with every event-time window
fired."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from malhar import launch
from malhar.control import DeliveryType
from malhar.io.jdbc import JdbcConfigError, JdbcPollInputOperator, JdbcPollSettings
from malhar.io.jdbc.poll_source import JdbcPollSourceSettings
from malhar.testing import OperatorHarness
from malhar.testing.operators import collected
from malhar.testing.services.process import wait_until
from malhar.window import (
    MAX_TIMESTAMP,
    GlobalWindow,
    KeyedWindowedOperator,
    Watermark,
    WatermarkIdle,
)
from malhar.window.accumulation import Count
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.event_time_support import T0, fired_minutes, per_minute_counts
from tests.io.jdbc_support import run_sql, unique_name

END = Watermark(MAX_TIMESTAMP)
IDLE = WatermarkIdle()


def _clicks(pg: Any, minutes: list[float], usr: str = "ann") -> str:
    """A table of clicks, one per entry of ``minutes`` (in id order): its name."""
    table = unique_name("bclicks")
    run_sql(pg, f"CREATE TABLE {table} (id bigserial PRIMARY KEY, usr text, ts timestamptz)")
    _add(pg, table, minutes, usr)
    return table


def _add(pg: Any, table: str, minutes: list[float], usr: str = "ann") -> None:
    for m in minutes:
        run_sql(
            pg, f"INSERT INTO {table} (usr, ts) VALUES (%s, %s)", (usr, T0 + timedelta(minutes=m))
        )


def _op(pg: Any, table: str, **more: Any) -> JdbcPollInputOperator:
    return JdbcPollInputOperator(
        pg.sqlalchemy_url, table=table, key_column="id", bounded=True, **more
    )


def _harness(
    op: Any, ckpt: Path, partition: int = 0, partitions: int = 1, saved: bytes | None = None
) -> OperatorHarness:
    h = kafka_harness(op, str(ckpt), name="poll", partition=partition, partitions=partitions)
    return h if saved is None else OperatorHarness.restored(op, saved, h.context)


def _windows(h: OperatorHarness, windows: list[int]) -> dict[int, tuple[list[int], list[Any]]]:
    """Run ``windows``: per window, the ids read and the payloads of the control tuples."""
    out = {}
    for w in windows:
        before = len(h.sink("output").controls)
        rows = kafka_run_window(h, w)
        out[w] = ([r["id"] for r in rows], [c.payload for c in h.sink("output").controls[before:]])
    return out


# -- settings (no database) ---------------------------------------------------------------------
def test_bounded_with_settings_that_contradict_it_is_refused_with_the_fix() -> None:
    base = dict(url="postgresql://app@db/shop", table="orders", key_column="id", bounded=True)
    assert JdbcPollSettings().configure(**base).poll_problems() == []
    assert JdbcPollInputOperator(**base).is_bounded()
    assert not JdbcPollInputOperator(**{**base, "bounded": False}).is_bounded()
    # it never polls: a poll interval means the configuration expects new rows
    with pytest.raises(
        JdbcConfigError,
        match=r"bounded=True reads the rows present at launch and never polls, but "
        r"poll_interval_ms=100 is set: remove poll_interval_ms, or set bounded=False",
    ):
        JdbcPollSettings().configure(**base, poll_interval_ms=100).check_poll()
    # the Spark data source does not end: the option is refused, not ignored
    with pytest.raises(JdbcConfigError, match="bounded is a setting of JdbcPollInputOperator"):
        JdbcPollSourceSettings().from_options(
            {"url": "postgresql://app@db/shop", "table": "t", "key_column": "id", "bounded": "true"}
        )


# -- the input, window by window ------------------------------------------------------------------
@pytest.mark.integration
def test_three_partitions_read_the_rows_at_launch_once_then_end_and_a_replay_says_the_same(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _clicks(pg, [i / 10 for i in range(9)])  # ids 1..9: 3 per partition
    ckpt = tmp_path / "ck"
    hs = [_harness(_op(pg, table, max_records_per_window=2), ckpt, p, 3) for p in range(3)]
    for h in hs:
        h.setup()
    saved = [h.checkpoint() for h in hs]  # before window 0
    plan = json.loads((ckpt / "malhar" / "jdbc-poll" / "poll.json").read_text())
    assert plan["max"] == 9
    _add(pg, table, [5, 6, 7])  # ids 10..12, after the plan: no partition reads them
    got = [_windows(h, [0, 1, 2, 3]) for h in hs]
    ranges = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    for p in range(3):  # the last partition too: no polling after its range
        assert got[p] == {
            0: (ranges[p][:2], []),
            1: (ranges[p][2:], [END]),  # the window that read the last rows ends
            2: ([], [END]),
            3: ([], [END]),
        }, p
        controls = hs[p].sink("output").controls
        assert all(c.delivery is DeliveryType.END_WINDOW for c in controls)
        wdm = hs[p].operator.window_data_manager
        assert "end" not in wdm.retrieve(0) and wdm.retrieve(1)["end"] is True
        assert "idle" not in wdm.retrieve(2)
        assert hs[p].operator.metrics()["ended"] == 1.0
    every = sorted(i for g in got for ids, _ in g.values() for i in ids)
    assert every == list(range(1, 10))  # every row present at launch, exactly once
    after = [h.checkpoint() for h in hs]
    for h in hs:
        h.teardown()

    # replayed from before window 0 (another process, the later rows there now): the same
    # rows and the same ends, from the records; then new windows go on ending
    for p in range(3):
        again = _harness(_op(pg, table, max_records_per_window=2), ckpt, p, 3, saved=saved[p])
        assert _windows(again, [0, 1, 2, 3]) == got[p]
        assert _windows(again, [4]) == {4: ([], [END])}
        assert again.operator.metrics()["ended"] == 1.0
        again.teardown()

    # restarted after the end: nothing more is read, and it ends again
    for p in range(3):
        later = _harness(_op(pg, table, max_records_per_window=2), ckpt, p, 3, saved=after[p])
        assert _windows(later, [5, 6]) == {5: ([], [END]), 6: ([], [END])}
        later.teardown()


@pytest.mark.integration
def test_one_partition_reads_to_the_plans_largest_key_with_the_commit_lag_then_ends(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _clicks(pg, [0, 1, 2, 3])
    h = _harness(_op(pg, table, commit_lag_ms=300, fetch_size=2), tmp_path / "one")
    h.setup()
    assert h.operator.metrics() == {"ended": 0.0}
    _add(pg, table, [4, 5])  # ids 5, 6: after the plan
    got: dict[int, tuple[list[int], list[Any]]] = {}
    window = 0

    def ended() -> bool:  # no read before the plan is commit_lag_ms old
        nonlocal window
        got.update(_windows(h, [window]))
        window += 1
        return h.operator.metrics()["ended"] == 1.0

    wait_until(ended, timeout=30, interval=0.05, what="the single partition's end")
    ids = [i for w in sorted(got) for i in got[w][0]]
    assert ids == [1, 2, 3, 4]
    last = max(got)
    assert got[last] == ([1, 2, 3, 4], [END])  # the lag passed: read at once, ended
    assert all(got[w] == ([], []) for w in range(last))  # waiting: neither idle nor ended
    assert _windows(h, [last + 1]) == {last + 1: ([], [END])}
    h.teardown()

    # an empty table (a row added after the plan), and a start_after past every key:
    # ended from window 0
    empty = _clicks(pg, [])
    for name, op, source in (
        ("empty", _op(pg, empty), empty),
        ("after", _op(pg, table, start_after=100), table),
    ):
        h = _harness(op, tmp_path / name)
        h.setup()
        _add(pg, source, [1])
        assert _windows(h, [0, 1]) == {0: ([], [END]), 1: ([], [END])}, name
        h.teardown()


@pytest.mark.integration
def test_an_old_plan_or_an_ended_checkpoint_under_other_settings_is_refused(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _clicks(pg, [0, 1])
    # a plan of an unbounded run (or written before the largest key was recorded): bounded
    # cannot know its end
    ckpt = tmp_path / "old"
    h = _harness(JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="id"), ckpt)
    h.setup()
    h.teardown()
    path = ckpt / "malhar" / "jdbc-poll" / "poll.json"
    assert "max" not in json.loads(path.read_text())
    with pytest.raises(
        JdbcConfigError,
        match=r"the checkpoint's plan \(.*poll\.json\) was made by an unbounded run",
    ):
        _harness(_op(pg, table), ckpt).setup()
    # without bounded the old plan polls as before
    h = _harness(JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="id"), ckpt)
    assert [i for ids, _ in _windows(h, [0, 1]).values() for i in ids] == [1, 2]
    h.teardown()

    # an input that ended, restarted without bounded: its end closed the windows downstream
    ckpt = tmp_path / "ended"
    h = _harness(_op(pg, table), ckpt)
    assert _windows(h, [0]) == {0: ([1, 2], [END])}
    saved = h.checkpoint()
    h.teardown()
    endless = JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="id")
    with pytest.raises(JdbcConfigError, match=r"the input ended .* but bounded is now False"):
        _harness(endless, ckpt, saved=saved).setup()
    # the same from a replayed window's record (a crash before the state was saved)
    endless = JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="id")
    h = _harness(endless, ckpt)
    with pytest.raises(JdbcConfigError, match=r"record of window 0 says the input ended"):
        _windows(h, [0])
    h.teardown()


def _text_keys(pg: Any, keys: list[str]) -> str:
    """A table keyed by text under a linguistic collation (not Python's string order)."""
    found = run_sql(
        pg,
        "SELECT collname FROM pg_collation WHERE collname IN "
        "('en-x-icu', 'und-x-icu', 'en_US.utf8', 'en_US') ORDER BY 1",
    )
    assert found, "the test server has no linguistic collation"
    table = unique_name("tkeys")
    run_sql(pg, f'CREATE TABLE {table} (k text COLLATE "{found[0][0]}" PRIMARY KEY, v int)')
    for i, k in enumerate(keys):
        run_sql(pg, f"INSERT INTO {table} VALUES (%s, %s)", (k, i))
    return table


def _read_keys(op: Any, ckpt: Path, partition: int = 0, partitions: int = 1) -> list[str]:
    h = kafka_harness(op, str(ckpt), name="poll", partition=partition, partitions=partitions)
    h.setup()
    got = [r["k"] for w in range(3) for r in kafka_run_window(h, w)]
    h.teardown()
    return got


def test_text_keys_are_ordered_by_the_database_not_by_python(
    postgres_service: Any, tmp_path: Path
) -> None:
    # the last range was judged empty by Python's string order: rows the collation puts
    # in it were never read, and the input ended all the same (review finding)
    pg = postgres_service
    keys = ["apple", "banana", "Cherry", "Date"]
    table = _text_keys(pg, keys)
    got: list[str] = []
    for p in range(2):
        op = JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="k", bounded=True)
        got += _read_keys(op, tmp_path / "two", p, 2)
    assert sorted(got) == sorted(keys)
    table = _text_keys(pg, ["apple", "Banana", "cherry", "Date"])
    op = JdbcPollInputOperator(
        pg.sqlalchemy_url, table=table, key_column="k", bounded=True, start_after="a"
    )
    assert sorted(_read_keys(op, tmp_path / "after")) == ["Banana", "Date", "apple", "cherry"]


# -- through the engine ---------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.slow
def test_the_application_ends_by_itself_with_every_event_time_window_fired(
    spark: Any, postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    # ids 1..6 (partition 0's range): minute 0; ids 7..12 (partition 1's): minutes 1..6
    table = _clicks(pg, [s / 60 for s in range(5, 35, 5)] + [m + 0.5 for m in range(1, 7)])
    ckpt = str(tmp_path / "ck")
    source = _op(pg, table, max_records_per_window=3)
    total = KeyedWindowedOperator(
        Count(), GlobalWindow(), key="usr", timestamp="ts", output_format="row"
    )
    dag = per_minute_counts("bounded-jdbc", source, "usr", ("total", total))
    app = launch(dag, spark=spark, checkpoint=ckpt, window_ms=100)
    assert app.bounded
    plan = Path(ckpt) / "malhar" / "jdbc-poll" / "in.json"
    wait_until(plan.exists, timeout=120, interval=0.1, what="the key-range plan")
    _add(pg, table, [8, 9], usr="bob")  # after the plan: never read
    app.await_end_of_input(timeout=300)  # stops by itself: no windows=N to guess
    assert not app.query.isActive
    # every minute, the last (6) included: no later event time would move the watermark past it
    assert fired_minutes(ckpt) == [(0, 6)] + [(m, 1) for m in range(1, 7)]
    panes = [p for rows in collected(ckpt, "out").values() for p in rows]
    assert {p["timing"] for p in panes} == {"ON_TIME"}
    totals = [p for rows in collected(ckpt, "total-out").values() for p in rows]
    assert [(p["usr"], p["value"]) for p in totals] == [("ann", 12)]
    ended_at = app.last_window

    # launched again on the same checkpoint: it reads nothing more and ends again
    app = launch(dag, spark=spark, checkpoint=ckpt, window_ms=100)
    app.await_end_of_input(timeout=300)
    assert app.last_window > ended_at
    totals = [p for rows in collected(ckpt, "total-out").values() for p in rows]
    assert [(p["usr"], p["value"]) for p in totals] == [("ann", 12)]
    assert fired_minutes(ckpt) == [(0, 6)] + [(m, 1) for m in range(1, 7)]


# -- killed and restarted -------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.slow
def test_sigkilled_at_random_windows_and_restarted_every_row_at_launch_once(
    kafka_service: Any, postgres_service: Any, tmp_path: Path
) -> None:
    import os
    import random
    import signal
    import subprocess
    import uuid
    from collections import Counter

    from malhar.engine.window_log import WindowLog
    from tests.drivers import start_driver
    from tests.io.jdbc_poll_app import SETTINGS_ENV
    from tests.io.test_jdbc_poll import _insert, _orders
    from tests.io.test_kafka_output import read_topic

    pg, bs = postgres_service, kafka_service.bootstrap_servers
    table = _orders(pg, 600)  # 2 partitions of 300 rows, 20 a window: 15 windows each
    topic = f"bounded-{uuid.uuid4().hex[:8]}"
    kafka_service.create_topic(topic, partitions=2)
    checkpoint = tmp_path / "ckpt"
    name = f"bpoll-{uuid.uuid4().hex[:8]}"
    settings = {"url": pg.sqlalchemy_url, "table": table, "bootstrap_servers": bs,
                "topic": topic, "bounded": True, "window_rows": 20}  # fmt: skip
    env = {SETTINGS_ENV: json.dumps(settings)}
    log_path = tmp_path / "driver.log"
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    procs: list[subprocess.Popen] = []

    def start(run: int) -> subprocess.Popen:
        args = [str(checkpoint), "--master", "local[2]", "--name", name]
        proc = start_driver(
            "tests.io.jdbc_poll_app", *args, log=log_path, env=env, header=f"run {run}"
        )
        procs.append(proc)
        return proc

    def alive(proc: subprocess.Popen) -> Any:
        return lambda: (
            None
            if proc.poll() is None
            else f"driver exited {proc.returncode} (seed {seed}): {log_path.read_text()[-3000:]}"
        )

    def completed() -> int:
        return WindowLog(str(checkpoint)).largest_completed()

    kills = []
    try:
        proc = start(0)
        plan = checkpoint / "malhar" / "jdbc-poll" / "rows.json"
        wait_until(plan.exists, timeout=120, interval=0.1, what="the plan", alive=alive(proc))
        _insert(pg, table, 100, start=5000)  # ids 601..700, after the plan: never read
        for run in (1, 2):  # killed at a random window, twice, then left to end by itself
            target = completed() + rnd.randint(1, 5)
            wait_until(lambda t=target: completed() >= t, timeout=120, interval=0.05,
                       what=f"window {target}", alive=alive(proc))  # fmt: skip
            kills.append(completed())
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            proc = start(run)
        assert proc.wait(timeout=180) == 0, log_path.read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=60)
    assert "every input ended at window" in log_path.read_text().split("==== run 2")[-1]
    ids = Counter(r.json()["id"] for r in read_topic(bs, topic))
    wrong = [(i, n) for i, n in ids.items() if n != 1][:5]
    assert sorted(ids) == list(range(1, 601)) and not wrong, (seed, kills, wrong)
