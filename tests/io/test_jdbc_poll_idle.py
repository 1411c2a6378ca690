"""A JDBC poll backfill partition that has read its key range declares itself idle
(``WatermarkIdle``), as a file input out of files does, so that an event-time pipeline
(JDBC poll -> ``WatermarkGenerator`` -> windowed operator) keeps firing its windows after
the backfill is done, without ``idle_timeout_windows``; the polling partition never does,
and a replayed window sends what its first run sent."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from malhar import run
from malhar.control import DeliveryType
from malhar.io.jdbc import JdbcPollInputOperator
from malhar.ports import OutputPort
from malhar.testing import OperatorHarness
from malhar.window import WatermarkIdle
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.event_time_support import T0, fired_minutes, per_minute_counts
from tests.io.jdbc_support import run_sql, unique_name

IDLE = WatermarkIdle()


def _events(pg: Any, minutes: list[float]) -> str:
    """A table of clicks by ann, one per entry of ``minutes`` (in id order): its name."""
    table = unique_name("clicks")
    run_sql(pg, f"CREATE TABLE {table} (id bigserial PRIMARY KEY, usr text, ts timestamptz)")
    for m in minutes:
        run_sql(
            pg,
            f"INSERT INTO {table} (usr, ts) VALUES ('ann', %s)",
            (T0 + timedelta(minutes=m),),
        )
    return table


def _harness(op: Any, ckpt: Path, partition: int, saved: bytes | None = None) -> OperatorHarness:
    if saved is None:
        return kafka_harness(op, str(ckpt), name="poll", partition=partition, partitions=2)
    h = kafka_harness(op, str(ckpt), name="poll", partition=partition, partitions=2)
    return OperatorHarness.restored(op, saved, h.context)


def _windows(h: OperatorHarness, windows: list[int]) -> dict[int, tuple[list[int], list[Any]]]:
    """Run ``windows``: per window, the ids read and the payloads of the control tuples."""
    out = {}
    for w in windows:
        before = len(h.sink("output").controls)
        rows = kafka_run_window(h, w)
        out[w] = ([r["id"] for r in rows], [c.payload for c in h.sink("output").controls[before:]])
    return out


class TypedClicks(JdbcPollInputOperator):
    output = OutputPort("id bigint, usr string, ts timestamp", control_aware=True)


class TypedQuiet(JdbcPollInputOperator):
    output = OutputPort("id bigint, usr string, ts timestamp")  # no control tuples


@pytest.mark.integration
def test_a_backfill_partition_done_reading_is_idle_every_window_and_a_replay_says_the_same(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _events(pg, [i / 10 for i in range(8)])  # ids 1..8: partition 0 gets 1..4

    def op(cls: type = JdbcPollInputOperator) -> Any:
        return cls(
            pg.sqlalchemy_url,
            table=table,
            key_column="id",
            poll_interval_ms=0,
            max_records_per_window=3,
        )

    ckpt = tmp_path / "ck"
    backfill, poller = _harness(op(), ckpt, 0), _harness(op(), ckpt, 1)
    backfill.setup()
    poller.setup()
    saved = backfill.checkpoint()  # before window 0
    first = _windows(backfill, [0, 1, 2, 3])
    polled = _windows(poller, [0, 1, 2])
    run_sql(pg, f"INSERT INTO {table} (usr, ts) VALUES ('ann', %s)", (T0,))  # id 9: the poller's
    first |= _windows(backfill, [4])
    polled |= _windows(poller, [3, 4])
    # reads 3 rows, then the last one (not idle in a window that reads), then nothing ever
    assert first == {
        0: ([1, 2, 3], []),
        1: ([4], []),
        2: ([], [IDLE]),
        3: ([], [IDLE]),
        4: ([], [IDLE]),
    }
    assert all(c.delivery is DeliveryType.END_WINDOW for c in backfill.sink("output").controls)
    assert backfill.operator.window_data_manager.retrieve(2)["idle"] is True
    assert "idle" not in backfill.operator.window_data_manager.retrieve(1)
    # the poller: rows may come at any time (id 9 did), it never says idle
    assert [ids for ids, _ in polled.values()] == [[5, 6, 7], [8], [], [9], []]
    assert poller.sink("output").controls == []
    backfill.teardown()
    poller.teardown()

    # replayed from the saved checkpoint (another process): the same rows and controls,
    # from the records; then new windows go on being idle
    again = _harness(op(), ckpt, 0, saved=saved)
    assert _windows(again, [0, 1, 2, 3, 4]) == first
    assert _windows(again, [5, 6]) == {5: ([], [IDLE]), 6: ([], [IDLE])}
    again.teardown()

    # a typed port declared control aware says it too; one without control tuples cannot,
    # and reads as before
    for cls, said in ((TypedClicks, [IDLE]), (TypedQuiet, [])):
        h = _harness(op(cls), tmp_path / cls.__name__, 0)
        got = _windows(h, [0, 1, 2])
        h.teardown()
        assert got == {0: ([1, 2, 3], []), 1: ([4], []), 2: ([], said)}


@pytest.mark.integration
def test_a_single_partition_and_an_empty_backfill_range(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _events(pg, [0, 1])
    args = dict(table=table, key_column="id", poll_interval_ms=0)
    # one partition is the poller: never idle
    h = kafka_harness(
        JdbcPollInputOperator(pg.sqlalchemy_url, **args), str(tmp_path / "one"), name="poll"
    )
    got = _windows(h, [0, 1, 2])
    h.teardown()
    assert got == {0: ([1, 2], []), 1: ([], []), 2: ([], [])}
    # an empty table at launch: the backfill partition's range is empty, idle from window 0
    empty = _events(pg, [])
    args["table"] = empty
    ckpt = tmp_path / "empty"
    b = _harness(JdbcPollInputOperator(pg.sqlalchemy_url, **args), ckpt, 0)
    p = _harness(JdbcPollInputOperator(pg.sqlalchemy_url, **args), ckpt, 1)
    b.setup()
    p.setup()
    run_sql(pg, f"INSERT INTO {empty} (usr, ts) VALUES ('ann', %s)", (T0,))
    assert _windows(b, [0, 1]) == {0: ([], [IDLE]), 1: ([], [IDLE])}
    assert _windows(p, [0, 1]) == {0: ([1], []), 1: ([], [])}
    b.teardown()
    p.teardown()


# -- through the engine ---------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.slow
def test_windows_fire_after_the_backfill_partition_is_done(
    spark: Any, postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    # ids 1..6 (partition 0's range): minute 0; ids 7..12 (the poller's): minutes 1..6
    table = _events(pg, [s / 60 for s in range(5, 35, 5)] + [m + 0.5 for m in range(1, 7)])
    ckpt = str(tmp_path / "ck")
    source = JdbcPollInputOperator(
        pg.sqlalchemy_url,
        table=table,
        key_column="id",
        poll_interval_ms=0,
        max_records_per_window=3,
    )
    dag = per_minute_counts("idle-jdbc", source, "usr")
    run(dag, windows=8, spark=spark, checkpoint=ckpt, window_ms=100)
    fired = fired_minutes(ckpt)
    # every minute but the last (no later event time moves the watermark past it); without
    # the idleness partition 0's watermark (10:00:25) held every one back
    assert fired == [(0, 6)] + [(m, 1) for m in range(1, 6)]
