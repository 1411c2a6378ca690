"""The JDBC poll input against a real PostgreSQL: key-range partitions, exact replay of a
window from its key range, the commit-lag rule for rows committed late, database types to
Arrow, rows that cannot be converted on the error port with their key, a missing table or
column at launch, settings and secrets."""

from __future__ import annotations

import pickle
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from malhar.io.base.input import ReplayError
from malhar.io.jdbc import JdbcConfigError, JdbcPollInputOperator, JdbcPollSettings
from malhar.ports import OutputPort
from tests.io.conftest import kafka_harness, kafka_run_window, kafka_unique
from tests.io.jdbc_support import jdbc_url_reference, run_sql, unique_name

SECRET = "p0ll-s3cret"


def _orders(pg: Any, n: int) -> str:
    table = unique_name("orders")
    run_sql(pg, f"CREATE TABLE {table} (id bigserial PRIMARY KEY, item text, qty int)")
    _insert(pg, table, n)
    return table


def _insert(pg: Any, table: str, n: int, start: int = 0) -> None:
    if n:
        run_sql(
            pg,
            f"INSERT INTO {table} (item, qty) SELECT 'i' || g, g FROM generate_series(%s, %s) g",
            (start, start + n - 1),
        )


def _harness(op: Any, checkpoint: Path, partition: int = 0, partitions: int = 1) -> Any:
    return kafka_harness(
        op, str(checkpoint), name="poll", partition=partition, partitions=partitions
    )


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in rows]


# -- settings (no database) ---------------------------------------------------------------------
def test_settings_problems_and_redaction() -> None:
    s = JdbcPollSettings().configure(
        url=f"postgresql://app:{SECRET}@db/shop", table="orders", key_column="id"
    )
    assert SECRET not in repr(s) and SECRET not in s.source
    assert JdbcPollSettings().configure(url="sqlite://", key_column="id").poll_problems() == [
        "either table or query is required"
    ]
    both = JdbcPollSettings().configure(url="sqlite://", key_column="id", table="t", query="q")
    assert "set table or query, not both" in both.poll_problems()
    cols = JdbcPollSettings().configure(url="sqlite://", table="t", key_column="id", columns="a")
    with pytest.raises(JdbcConfigError, match="key_column 'id' must be among columns"):
        cols.check_poll()
    with pytest.raises(JdbcConfigError, match=r"fetch_sise.*fetch_size"):
        JdbcPollSettings().from_options({"url": "sqlite://", "table": "t", "fetch_sise": "5"})
    op = JdbcPollInputOperator(
        f"postgresql://app:{SECRET}@db/shop", table="orders", key_column="id"
    )
    assert SECRET not in repr(op)


def test_registered_for_malhar_list_and_info() -> None:
    from malhar.io.kafka import KafkaOutputOperator
    from malhar.registry import load

    assert load("JdbcPollInput") is JdbcPollInputOperator
    assert load("KafkaOutputOperator") is KafkaOutputOperator


# -- partitions, replay, polling -----------------------------------------------------------------
@pytest.mark.integration
def test_key_range_partitions_poll_new_rows_and_replay_exactly(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _orders(pg, 90)
    args = dict(table=table, key_column="id", poll_interval_ms=0, fetch_size=7)
    ops = [
        JdbcPollInputOperator(pg.sqlalchemy_url, max_records_per_window=20, **args)
        for _ in range(3)
    ]
    hs = [_harness(op, tmp_path, p, 3) for p, op in enumerate(ops)]
    for h in hs:
        h.setup()
    first = {p: kafka_run_window(h, 0) for p, h in enumerate(hs)}
    # three ranges of about 30 rows; each window ends at 20 rows (the cap)
    assert [len(first[p]) for p in range(3)] == [20, 20, 20]
    snapshots = [pickle.dumps(op) for op in ops]
    _insert(pg, table, 15, start=1000)  # only the last partition (the poller) reads these
    later = {p: [kafka_run_window(h, w) for w in (1, 2, 3)] for p, h in enumerate(hs)}
    for h in hs:
        h.teardown()
    every = [r for p in range(3) for r in first[p] + [x for w in later[p] for x in w]]
    assert sorted(_ids(every)) == list(range(1, 106))  # every row exactly once
    rest = {p: [x for w in later[p] for x in w] for p in range(3)}
    ranges = [(min(_ids(first[p])), max(_ids(first[p] + rest[p]))) for p in range(3)]
    assert ranges[0][1] < ranges[1][0] and ranges[1][1] < ranges[2][0], ranges
    assert max(_ids(rest[2])) == 105 and max(_ids(rest[1])) <= 60
    row = next(r for r in every if r["id"] == 1)
    assert row == {"id": 1, "item": "i0", "qty": 0}

    # partition 2 restored from window 0's state (another process): the same rows per window
    again = pickle.loads(snapshots[2])
    h = _harness(again, tmp_path, 2, 3)
    replayed = [kafka_run_window(h, w) for w in (1, 2, 3)]
    assert replayed == later[2]
    _insert(pg, table, 3, start=2000)
    assert _ids(kafka_run_window(h, 4)) == [106, 107, 108]
    h.teardown()

    # a deleted row in a window's range: the replay cannot be exact and says so
    run_sql(pg, f"DELETE FROM {table} WHERE id = %s", (later[2][0][0]["id"],))
    h = _harness(pickle.loads(snapshots[2]), tmp_path, 2, 3)
    with pytest.raises(ReplayError, match="rows were deleted, or committed into the range"):
        kafka_run_window(h, 1)
    h.teardown()
    # the partition count is kept for the life of the checkpoint
    with pytest.raises(JdbcConfigError, match=r"key-range plan.*3 partitions"):
        _harness(JdbcPollInputOperator(pg.sqlalchemy_url, **args), tmp_path, 0, 2).setup()


@pytest.mark.parametrize("partitions", [1, 2])
def test_rows_with_a_null_key_are_reported_not_read_again_or_lost_silently(
    postgres_service: Any, tmp_path: Path, partitions: int, caplog: Any
) -> None:
    # with one partition the first read had no lower bound and ended on the NULL key
    # (NULLs sort last): every later window read the whole table again; with more, the
    # ranges left the NULL rows out without a word
    pg = postgres_service
    table = unique_name("nullable")
    run_sql(pg, f"CREATE TABLE {table} (id bigint, item text)")
    run_sql(pg, f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (NULL, 'n'), (3, 'c')")
    ops = [
        JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="id", poll_interval_ms=0)
        for _ in range(partitions)
    ]
    hs = [_harness(op, tmp_path / "ck", p, partitions) for p, op in enumerate(ops)]
    with caplog.at_level("WARNING", logger="malhar.io.jdbc.poll"):
        for h in hs:
            h.setup()
    read = [r for h in hs for w in (0, 1, 2) for r in kafka_run_window(h, w)]
    for h in hs:
        h.teardown()
    assert sorted(_ids(read)) == [1, 2, 3]
    warned = [r.getMessage() for r in caplog.records if "NULL" in r.getMessage()]
    assert len(warned) == 1 and f"1 row(s) of table '{table}' at " in warned[0]
    assert "have a NULL id and are not read" in warned[0]
    assert ops[-1].metrics() == {"null_key_rows": 1.0}


def test_start_after_as_text_takes_the_key_columns_type(
    postgres_service: Any, tmp_path: Path
) -> None:
    # a Spark option is text: "2" against integer keys failed every poll ("'>' not supported
    # between 'int' and 'str'"), and a naive ISO time against a timestamptz key failed
    # ("can't compare offset-naive and offset-aware datetimes")
    pg = postgres_service
    table = unique_name("stamped")
    run_sql(pg, f"CREATE TABLE {table} (id bigint, ts timestamptz)")
    run_sql(
        pg,
        f"INSERT INTO {table} SELECT g, timestamptz '2024-03-01 00:00:00+00' + g * interval "
        "'1 hour' FROM generate_series(1, 4) g",
    )
    for n, (key, start) in enumerate([("id", "2"), ("ts", "2024-03-01T02:00:00")]):
        op = JdbcPollInputOperator(
            pg.sqlalchemy_url,
            table=table,
            key_column=key,
            start_after=start,
            poll_interval_ms=0,
            commit_lag_ms=1,  # the poll compares the start with the largest key
        )
        h = _harness(op, tmp_path / f"ck{n}")
        h.setup()
        got: list[dict[str, Any]] = []
        window, deadline = 0, time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:  # the lag passes, then it reads
            got += kafka_run_window(h, window)
            window += 1
        h.teardown()
        assert _ids(got) == [3, 4], key
    with pytest.raises(JdbcConfigError, match=r"start_after 'x2' is not a value of .* int64"):
        _harness(
            JdbcPollInputOperator(
                pg.sqlalchemy_url, table=table, key_column="id", start_after="x2"
            ),
            tmp_path / "bad",
        ).setup()


def test_statements_bind_by_name_through_sqlalchemy_whatever_the_drivers_style() -> None:
    # pyformat placeholders went through sqlalchemy.text() for psycopg 3 and PyMySQL, which
    # escaped them to %%(low)s and bound nothing
    import sqlalchemy as sa
    from sqlalchemy.dialects import mysql, postgresql

    from malhar.io.jdbc.poll_reader import PollQuery

    settings = JdbcPollSettings().configure(url="sqlite://", table="t", key_column="id")
    for dialect in (postgresql.psycopg.dialect(), mysql.pymysql.dialect()):
        query = PollQuery(settings, dialect, raw=False)
        compiled = sa.text(query.range_sql(True, True)).compile(dialect=dialect)
        assert sorted(compiled.params) == ["high", "low"], compiled.string
    raw = PollQuery(settings, postgresql.psycopg2.dialect(), raw=True)
    assert "%(low)s" in raw.range_sql(True, False)


@pytest.mark.integration
@pytest.mark.slow
def test_rows_committed_late_are_read_with_the_commit_lag_and_counted_without(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service

    def scenario(lag_ms: int, checkpoint: Path, expected: int) -> tuple[list[int], float]:
        table = _orders(pg, 0)
        op = JdbcPollInputOperator(
            pg.sqlalchemy_url, table=table, key_column="id", poll_interval_ms=0,
            commit_lag_ms=lag_ms,
        )  # fmt: skip
        h = _harness(op, checkpoint)
        h.setup()
        slow = pg.connect()  # a long inserting transaction takes the smaller key ...
        with slow.cursor() as cur:
            cur.execute(f"INSERT INTO {table} (item, qty) VALUES ('slow', 1)")
        _insert(pg, table, 1, start=7)  # ... a quick one commits a larger key first
        got = _ids(kafka_run_window(h, 0))
        slow.commit()
        slow.close()
        got += _ids(kafka_run_window(h, 1))
        deadline = time.monotonic() + 10
        w = 2
        while len(got) < expected and time.monotonic() < deadline:  # the lag is time itself
            got += _ids(kafka_run_window(h, w))
            w += 1
        for window in range(w):
            h.committed(window)
        late = op.metrics().get("late_rows", 0.0)
        h.teardown()
        return got, late

    # no lag: the quick row is read, the slow one is missed and reported when committed
    got, late = scenario(0, tmp_path / "nolag", 1)
    assert got == [2] and late == 1.0
    # a lag longer than the slow transaction: both rows, in key order, none late
    got, late = scenario(1500, tmp_path / "lag", 2)
    assert got == [1, 2] and late == 0.0


@pytest.mark.integration
def test_a_transaction_still_open_when_its_range_is_committed_is_reported_later(
    postgres_service: Any, tmp_path: Path, caplog: Any
) -> None:
    # the range was counted again a moment after the read, while the slow transaction was
    # still open: its row was lost without a word (walkthrough, 5 s transactions)
    pg = postgres_service
    table = _orders(pg, 0)
    op = JdbcPollInputOperator(
        pg.sqlalchemy_url, table=table, key_column="id", poll_interval_ms=0,
        late_rows_recheck_ms=300,
    )  # fmt: skip
    h = _harness(op, tmp_path / "ck")
    h.setup()
    slow = pg.connect()
    with slow.cursor() as cur:
        cur.execute(f"INSERT INTO {table} (item, qty) VALUES ('slow', 1)")
    _insert(pg, table, 1, start=7)
    assert _ids(kafka_run_window(h, 0)) == [2]
    h.committed(0)
    assert op.metrics().get("late_rows", 0.0) == 0.0  # still open: nothing to count yet
    slow.commit()
    slow.close()
    late, window, deadline = 0.0, 1, time.monotonic() + 20
    with caplog.at_level("WARNING", logger="malhar.io.jdbc.poll"):
        while late == 0.0 and time.monotonic() < deadline:  # due 300 ms after the commit
            kafka_run_window(h, window)
            h.committed(window)
            late = op.metrics().get("late_rows", 0.0)
            window += 1
    h.teardown()
    assert late == 1.0
    said = [r.getMessage() for r in caplog.records if "were committed" in r.getMessage()]
    assert (
        said and "1 row(s) were committed with id in (-∞, 2] more than 300 ms after" in (said[0])
    ), said


# -- types, errors ---------------------------------------------------------------------------------
class TypedPoll(JdbcPollInputOperator):
    output = OutputPort("id bigint, amount decimal(6,2), note string")


@pytest.mark.integration
def test_types_to_arrow_error_rows_and_a_typed_port(postgres_service: Any, tmp_path: Path) -> None:
    pg = postgres_service
    table = unique_name("types")
    run_sql(
        pg,
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, amount numeric(12,4), at timestamptz, "
        "doc jsonb, tags text[], note text)",
    )
    run_sql(
        pg,
        f"INSERT INTO {table} VALUES (1, 12.5, '2026-01-02 03:04:05+02', '{{\"a\": [1]}}', "
        "ARRAY['x','y'], 'one'), (2, NULL, NULL, NULL, NULL, NULL), "
        "(3, 123456.789, '2026-01-01 00:00:00Z', '1', '{}', 'big')",
    )
    op = JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="id")
    h = _harness(op, tmp_path / "dicts")
    h.setup()
    rows = kafka_run_window(h, 0)
    h.teardown()
    first = rows[0]
    assert first["amount"] == Decimal("12.5000") and first["tags"] == ["x", "y"]
    assert first["at"].utcoffset() is not None and first["at"].isoformat().startswith(
        "2026-01-02T01:04:05"
    )
    assert first["doc"] in ({"a": [1]}, '{"a": [1]}')
    assert rows[1] == {"id": 2, "amount": None, "at": None, "doc": None, "tags": None, "note": None}
    assert len(rows) == 3

    # a typed port: Arrow batches of its schema; 123456.789 does not fit decimal(6,2): error port
    typed = TypedPoll(
        pg.sqlalchemy_url, table=table, key_column="id", columns=["id", "amount", "note"],
        column_types={"amount": "decimal(6,2)"},
    )  # fmt: skip
    h = _harness(typed, tmp_path / "typed")
    h.setup()
    kafka_run_window(h, 0)
    h.teardown()
    got = h.sink("output").tuples
    assert [r["id"] for r in got] == [1, 2]
    assert got[0]["amount"] == Decimal("12.50") and got[1]["amount"] is None
    (err,) = h.sink("error").tuples
    assert err["key"] == "3" and "amount" in err["error"], err


@pytest.mark.integration
def test_missing_table_or_column_fails_at_launch_with_the_name(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    missing = unique_name("nope")
    h = _harness(JdbcPollInputOperator(pg.sqlalchemy_url, table=missing, key_column="id"), tmp_path)
    with pytest.raises(JdbcConfigError, match=missing):
        h.setup()
    table = _orders(pg, 1)
    h = _harness(
        JdbcPollInputOperator(pg.sqlalchemy_url, table=table, key_column="serial_no"), tmp_path
    )
    with pytest.raises(JdbcConfigError, match="serial_no"):
        h.setup()
    wrong = pg.sqlalchemy_url.replace(":" + pg.password + "@", ":wrong-pw@", 1)
    h = _harness(
        JdbcPollInputOperator(wrong, table=table, key_column="id", retry_attempts=1), tmp_path
    )
    with pytest.raises(Exception) as info:
        h.setup()
    assert "wrong-pw" not in str(info.value)


# -- the Spark data source -----------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.slow
def test_spark_source_key_range_batches_replayed_exactly_into_kafka(
    spark: Any, postgres_service: Any, kafka_client: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from malhar.io.jdbc import JdbcPollSource
    from malhar.io.kafka import KafkaSource
    from tests.io.test_kafka_output import read_topic

    pg, bs = postgres_service, kafka_client.bootstrap
    url = jdbc_url_reference(spark, pg, monkeypatch)
    table = _orders(pg, 50)
    topic = kafka_client.topic("poll-src", partitions=2)
    spark.dataSource.register(JdbcPollSource)
    spark.dataSource.register(KafkaSource)
    ckpt = tmp_path / "ckpt"
    name = kafka_unique("pollsrc")

    def start() -> Any:
        df = (
            spark.readStream.format("malhar_jdbc_poll")
            .option("url", url)
            .option("table", table)
            .option("key_column", "id")
            .option("max_rows_per_batch", 20)
            .option("num_partitions", 2)
            .load()
        )
        return (
            df.selectExpr("CAST(id AS STRING) AS k", "id", "item", "qty")
            .writeStream.format("malhar_kafka")
            .option("bootstrap_servers", bs)
            .option("topic", topic)
            .option("name", name)
            .option("key_column", "k")
            .option("checkpointLocation", str(ckpt))
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()
        _insert(pg, table, 25, start=500)  # rows added while it runs
        query.processAllAvailable()
    finally:
        query.stop()
    # Spark runs the last batch again (its commit was not recorded): the same key range
    # gives the same rows (the sink compares the re-run's fingerprint and skips it)
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert last >= 3  # 75 rows in batches of at most 20
    for f in (ckpt / "commits").glob(f"*{last}*"):
        f.unlink()
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    got = read_topic(bs, topic)
    ids = sorted(r.json()["id"] for r in got)
    assert ids == list(range(1, 76))
    assert {r.json()["item"] for r in got if r.json()["id"] == 51} == {"i500"}
