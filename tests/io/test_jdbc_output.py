"""Transactional JDBC output: exactly-once rows in real PostgreSQL (and SQLite), through the
operator harness, the malhar engine on Spark, and the ``malhar_jdbc`` Spark sink."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from malhar import DAG, KeyCodec, OperatorContext, Property, launch, run
from malhar.io.base.output import WindowKey
from malhar.io.jdbc import (
    JdbcConfigError,
    JdbcConnectionError,
    JdbcOutputOperator,
    WindowRegressionError,
    register,
)
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import ListInput
from tests.engine.ops import Numbers, window_items
from tests.io.jdbc_support import jdbc_url_reference, new_table, run_sql, unique_name
from tests.io.split_source import SplitSource

ROOT = Path(__file__).resolve().parents[2]


# -- helpers ------------------------------------------------------------------------------------
def _meta(pg: Any, app: str) -> dict[tuple[str, int], int]:
    rows = run_sql(
        pg,
        "SELECT operator_id, partition_id, window_id FROM malhar_meta WHERE app_id = %s",
        (app,),
    )
    return {(op, part): window for op, part, window in rows}


def _harness(op: JdbcOutputOperator, app: str, name: str = "out", partition: int = 0):
    ctx = OperatorContext(name=name, partition=partition, partitions=1, application=app)
    return OperatorHarness(op, ctx)


def _window(h: OperatorHarness, window: int, rows: list[Any]) -> None:
    h.run_window([("input", r) for r in rows], window=window)


# -- SQLite: the generic (SQLAlchemy Core) path -------------------------------------------------
def test_generic_path_modes_and_rejected_rows_on_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    with sqlite3.connect(db) as conn:
        for t in ("ins", "ups", "mrg"):
            conn.execute(f"CREATE TABLE {t} (k TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    url = f"sqlite:///{db}"
    w0 = [{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "c", "n": None}]
    w1 = [("a", 5), ("d", 3), ("a", 7)]  # positional, in `columns` order
    expected = {
        "ins": [("a", 1), ("b", 2), ("d", 3)],
        "ups": [("a", 7), ("b", 2), ("d", 3)],
        "mrg": [("a", 13), ("b", 2), ("d", 3)],
    }
    for table, mode in (("ins", "insert"), ("ups", "upsert"), ("mrg", "merge_add")):
        keys = None if mode == "insert" else ["k"]
        op = JdbcOutputOperator(
            url, table=table, mode=mode, key_columns=keys, columns=["k", "n"], batch_size=2
        )
        h = _harness(op, "sqlite-app", name=table)
        _window(h, 0, w0)
        _window(h, 1, w1)
        with sqlite3.connect(db) as conn:
            assert sorted(conn.execute(f"SELECT k, n FROM {table}")) == expected[table]
            meta = conn.execute(
                "SELECT window_id FROM malhar_meta WHERE operator_id = ?", (table,)
            ).fetchall()
        assert meta == [(1,)]
        errors = h.sink("error").per_window
        assert [(e["k"], e["error"]) for e in errors[0]] == [
            ("c", f"NOT NULL constraint failed: {table}.n")
        ]
        if mode == "insert":
            assert [(e["k"], e["n"]) for e in errors[1]] == [("a", 5), ("a", 7)]
            assert all("UNIQUE constraint failed" in e["error"] for e in errors[1])
        else:
            assert 1 not in errors


# -- PostgreSQL through the malhar engine -------------------------------------------------------
@pytest.mark.integration
def test_modes_through_the_engine_with_two_partitions(spark, postgres_service, tmp_path) -> None:
    pg = postgres_service
    ins = new_table(pg, "ins", "k varchar(5) NOT NULL, n bigint NOT NULL")
    ups = new_table(pg, "ups", "k varchar(5) PRIMARY KEY, n bigint NOT NULL")
    mrg = new_table(pg, "mrg", "k varchar(5) PRIMARY KEY, n bigint NOT NULL")
    windows = [
        [{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}, {"k": "bad", "n": None}],
        [{"k": "b", "n": 10}, {"k": "c", "n": 20}, {"k": "toolong", "n": 1}, {"k": "a", "n": 4}],
        [{"k": "c", "n": 100}, {"k": "a", "n": 5}, {"k": "d", "n": 7}, {"k": "b", "n": 6}],
    ]
    app = unique_name("modes")
    dag = DAG(app)
    src = dag.add_operator("src", ListInput(windows))
    url = pg.sqlalchemy_url
    o_ins = dag.add_operator("ins", JdbcOutputOperator(url, table=ins), PARTITIONS=2)
    o_ups = dag.add_operator(
        "ups", JdbcOutputOperator(url, table=ups, mode="upsert", key_columns=["k"]), PARTITIONS=2
    )
    o_mrg = dag.add_operator(
        "mrg", JdbcOutputOperator(url, table=mrg, mode="merge_add", key_columns="k"), PARTITIONS=2
    )
    dag.add_stream("rows", src.output, o_ins.input, o_ups.input, o_mrg.input)
    o_ups.input.set_attribute("STREAM_CODEC", KeyCodec("k"))  # last write per key is ordered

    result = run(dag, windows=3, spark=spark, checkpoint=str(tmp_path), window_ms=100)

    good = [r for w in windows for r in w if r["n"] is not None and len(r["k"]) <= 5]
    assert Counter(run_sql(pg, f"SELECT k, n FROM {ins}")) == Counter(
        (r["k"], r["n"]) for r in good
    )
    assert sorted(run_sql(pg, f"SELECT k, n FROM {ups}")) == [
        ("a", 5),
        ("b", 6),
        ("c", 100),
        ("d", 7),
    ]
    assert sorted(run_sql(pg, f"SELECT k, n FROM {mrg}")) == [
        ("a", 13),
        ("b", 18),
        ("c", 120),
        ("d", 7),
    ]
    meta = _meta(pg, app)
    # round robin: both partitions of ins and mrg had rows in the last window
    assert {k: v for k, v in meta.items() if k[0] in ("ins", "mrg")} == {
        ("ins", 0): 2,
        ("ins", 1): 2,
        ("mrg", 0): 2,
        ("mrg", 1): 2,
    }
    assert {p for op, p in meta if op == "ups"} == {0, 1}
    for w in (0, 1):
        assert result.error_counts(w) == {"ins.error": 1, "ups.error": 1, "mrg.error": 1}
    assert {k: n for k, n in result.error_counts(2).items() if n} == {}


# -- replay -----------------------------------------------------------------------------------
@pytest.mark.integration
def test_a_replayed_committed_window_is_skipped(postgres_service) -> None:
    pg = postgres_service
    table = new_table(pg, "replay", "k text NOT NULL, n bigint NOT NULL")
    app = unique_name("replay")
    rows = {w: [{"k": f"w{w}r{i}", "n": w * 10 + i} for i in range(3)] for w in range(4)}

    def op() -> JdbcOutputOperator:
        return JdbcOutputOperator(pg.sqlalchemy_url, table=table)

    first = _harness(op(), app)
    for w in range(3):
        _window(first, w, rows[w])
    # a second instance opened now (it will believe window 3 is still to come)
    stale = _harness(op(), app).setup()
    before = sorted(run_sql(pg, f"SELECT k, n FROM {table}"))
    assert len(before) == 9

    # the restored instance replays window 2 (already committed): skipped entirely
    restored = _harness(op(), app)
    _window(restored, 2, rows[2])
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == before
    assert _meta(pg, app) == {("out", 0): 2}

    # window 3 applies
    _window(restored, 3, rows[3])
    after = sorted(run_sql(pg, f"SELECT k, n FROM {table}"))
    assert after == sorted([*before, *((r["k"], r["n"]) for r in rows[3])])
    assert _meta(pg, app) == {("out", 0): 3}

    # the stale instance replays window 3: its cache says "not yet", the locked meta row
    # inside the transaction says "committed": nothing is written twice
    _window(stale, 3, rows[3])
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == after
    assert _meta(pg, app) == {("out", 0): 3}

    # window ids going backwards (a new checkpoint under the same name) fail loudly ...
    with pytest.raises(WindowRegressionError, match="window 1 is older than window 3"):
        _window(_harness(op(), app), 1, rows[1])
    # ... unless older windows are to be skipped, as Apex did
    lenient = op()
    lenient.skip_older_windows = True
    _window(_harness(lenient, app), 1, rows[1])
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == after


# -- rows the database rejects ----------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("mode", ["insert", "merge_add"])
def test_rejected_rows_go_to_the_error_port(postgres_service, mode: str) -> None:
    pg = postgres_service
    table = new_table(pg, "rej", "k varchar(4) PRIMARY KEY, n bigint NOT NULL CHECK (n >= 0)")
    app = unique_name("rejected")
    keys = None if mode == "insert" else ["k"]
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode=mode, key_columns=keys)
    op.batch_size = 4
    h = _harness(op, app)
    good = [{"k": f"g{i}", "n": i} for i in range(9)]
    bad = [{"k": "nul", "n": None}, {"k": "toolong", "n": 1}, {"k": "neg", "n": -5}]
    batch = pa.RecordBatch.from_pylist(good[6:])
    h.begin_window(0)
    for r in [*good[:3], bad[0], *good[3:6], bad[1], bad[2]]:
        h.put("input", r)
    h.put("input", batch)  # a typed stream's Arrow batch in the same window
    h.end_window()

    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == sorted(
        (r["k"], r["n"]) for r in good
    )
    assert _meta(pg, app) == {("out", 0): 0}
    errors = {e["k"]: e for e in h.sink("error").tuples}
    assert set(errors) == {"nul", "toolong", "neg"}
    assert 'null value in column "n"' in errors["nul"]["error"]
    assert "value too long for type character varying(4)" in errors["toolong"]["error"]
    assert "violates check constraint" in errors["neg"]["error"]
    assert errors["neg"]["n"] == -5


@pytest.mark.integration
def test_user_statement(postgres_service) -> None:
    pg = postgres_service
    table = new_table(pg, "stmt", "k text PRIMARY KEY, total bigint NOT NULL")
    statement = (
        f"INSERT INTO {table} (k, total) VALUES (:word, :n * 2) "
        f"ON CONFLICT (k) DO UPDATE SET total = {table}.total + EXCLUDED.total"
    )
    op = JdbcOutputOperator(pg.sqlalchemy_url, statement=statement, columns=["word", "n"])
    h = _harness(op, unique_name("stmt"))
    _window(h, 0, [("x", 1), ("y", 2), ("x", 3), ("z", None)])
    assert sorted(run_sql(pg, f"SELECT k, total FROM {table}")) == [("x", 8), ("y", 4)]
    assert [(e["word"], "not-null" in e["error"]) for e in h.sink("error").tuples] == [("z", True)]


@pytest.mark.integration
def test_password_reference_stays_out_of_state(postgres_service, monkeypatch) -> None:
    from pyspark import cloudpickle

    pg = postgres_service
    table = new_table(pg, "ref", "k text NOT NULL, n bigint NOT NULL")
    bare = pg.sqlalchemy_url.replace(f":{pg.password}@", "@", 1)
    assert pg.password not in bare
    monkeypatch.setenv("MALHAR_TEST_PG_PASSWORD", pg.password)
    op = JdbcOutputOperator(bare, table=table, password="${env:MALHAR_TEST_PG_PASSWORD}")
    h = _harness(op, unique_name("ref"))
    _window(h, 0, [{"k": "a", "n": 1}])
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("a", 1)]
    # what the engine pickles into the plan and the state snapshots holds no password
    assert pg.password.encode() not in cloudpickle.dumps(op)

    monkeypatch.delenv("MALHAR_TEST_PG_PASSWORD")
    with pytest.raises(JdbcConfigError, match=r"MALHAR_TEST_PG_PASSWORD.*is not set"):
        again = JdbcOutputOperator(bare, table=table, password="${env:MALHAR_TEST_PG_PASSWORD}")
        _window(_harness(again, unique_name("ref")), 0, [{"k": "b", "n": 2}])


@pytest.mark.integration
def test_partitions_racing_to_create_the_meta_table(postgres_service) -> None:
    from malhar.io.jdbc import JdbcSettings
    from malhar.io.jdbc.connection import create_engine
    from malhar.io.jdbc.meta_store import MetaTable

    pg = postgres_service
    meta = unique_name("meta")
    engine = create_engine(JdbcSettings().configure(url=pg.sqlalchemy_url, table="unused"))
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def create(partition: int) -> None:
        store = MetaTable(meta)
        try:
            start.wait(30)
            store.ensure(engine)
            store.ensure_row(engine, WindowKey("race", "out", partition % 2), "public.t")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=create, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    engine.dispose()
    assert failures == []
    assert sorted(run_sql(pg, f"SELECT partition_id, window_id FROM {meta}")) == [(0, -1), (1, -1)]


# -- clear errors ------------------------------------------------------------------------------
@pytest.mark.integration
def test_missing_table_and_wrong_credentials_are_clear(postgres_service) -> None:
    pg = postgres_service
    missing = unique_name("nope")
    with pytest.raises(JdbcConfigError, match=f"table '{missing}' does not exist") as err:
        _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=missing), "x").setup()
    assert pg.password not in str(err.value)

    table = new_table(pg, "creds", "k text")
    wrong = "Wr0ng-Secret-" + uuid.uuid4().hex[:6]
    url = pg.sqlalchemy_url.replace(f":{pg.password}@", f":{wrong}@")
    with pytest.raises(JdbcConnectionError, match="password authentication failed") as err:
        _harness(JdbcOutputOperator(url, table=table), "x").setup()
    shown = f"{err.value!r} {err.value} {err.value.__cause__!r}"
    assert wrong not in shown and pg.password not in shown
    assert "***" in str(err.value)

    with pytest.raises(JdbcConfigError, match="needs a primary key or unique constraint"):
        op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode="upsert", key_columns="k")
        _harness(op, "x").setup()

    clash = new_table(pg, "clash", "k text, __malhar_row bigint")  # the output's own name
    with pytest.raises(JdbcConfigError, match=r"has the column\(s\) \['__malhar_row'\]"):
        _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=clash), "x").setup()


# -- database outage ---------------------------------------------------------------------------
class RetryWatch(JdbcOutputOperator):
    """Signals its first retry: an event in this process, a file when run by Spark workers."""

    marker = Property(str, default=None)

    def __init__(self, *args: Any, marker: str | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.marker = marker

    def setup(self, context: OperatorContext) -> None:
        self.event = threading.Event()
        super().setup(context)

    def on_retry(self, attempt: int, delay: float, error: BaseException) -> None:
        super().on_retry(attempt, delay, error)
        if self.marker:
            Path(self.marker).write_text(f"{attempt}\n")
        self.event.set()


@pytest.mark.integration
def test_database_stopped_inside_a_window_is_retried(postgres_service) -> None:
    pg = postgres_service
    table = new_table(pg, "outage", "k text NOT NULL, n bigint NOT NULL")
    app = unique_name("outage")
    op = RetryWatch(pg.sqlalchemy_url, table=table, retry_backoff=0.2, max_backoff=1.0)
    h = _harness(op, app)
    w0 = [{"k": f"a{i}", "n": i} for i in range(5)]
    w1 = [{"k": f"b{i}", "n": i} for i in range(5)]
    _window(h, 0, w0)
    h.begin_window(1)
    for r in w1:
        h.put("input", r)
    pg.stop_server()
    failure: list[BaseException] = []

    def end() -> None:
        try:
            h.end_window()
        except BaseException as exc:  # reported below
            failure.append(exc)

    worker = threading.Thread(target=end)
    try:
        worker.start()
        assert op.event.wait(60), "the writer never retried"
    finally:
        pg.start_server()
    worker.join(120)
    assert not worker.is_alive() and not failure, failure
    assert Counter(run_sql(pg, f"SELECT k, n FROM {table}")) == Counter(
        (r["k"], r["n"]) for r in w0 + w1
    )
    assert _meta(pg, app) == {("out", 0): 1}


@pytest.mark.integration
def test_database_restarted_mid_run_through_the_engine(spark, postgres_service, tmp_path) -> None:
    pg = postgres_service
    table = new_table(pg, "restart", "k text NOT NULL, v bigint NOT NULL")
    marker = tmp_path / "retried"
    app = unique_name("restart")
    dag = DAG(app)
    src = dag.add_operator("src", Numbers(per_window=10))
    out = RetryWatch(
        pg.sqlalchemy_url,
        table=table,
        columns=["k", "v"],
        marker=str(marker),
        retry_backoff=0.2,
        max_backoff=1.0,
        retry_attempts=30,
    )
    o = dag.add_operator("out", out, PARTITIONS=2)
    dag.add_stream("items", src.output, o.input)
    running = launch(dag, spark=spark, checkpoint=str(tmp_path / "ck"), window_ms=100)
    try:
        running.await_window(1)
        pg.stop_server()
        try:  # Numbers emits rows in every window, so the next window must retry
            for _ in range(600):
                if marker.exists():
                    break
                running.query.awaitTermination(0.1)
            assert marker.exists(), "no retry while the database was down"
        finally:
            pg.start_server()
        running.await_window(running.last_window + 2)
    finally:
        running.stop()
    last = running.last_window
    expected = Counter(item for w in range(last + 1) for item in window_items(w, 10))
    assert Counter(run_sql(pg, f"SELECT k, v FROM {table}")) == expected
    assert _meta(pg, app) == {("out", 0): last, ("out", 1): last}


# -- no partial window is ever visible ---------------------------------------------------------
_STALLED_WRITER = """
import os, sys
from malhar import OperatorContext
from malhar.io.jdbc import JdbcOutputOperator
from malhar.testing.harness import OperatorHarness

class Stall(JdbcOutputOperator):
    def before_commit(self, connection, window_id):
        print("READY", flush=True)  # rows and meta row written, COMMIT not sent
        sys.stdin.readline()        # wait to be killed

op = Stall(os.environ["JDBC_URL"], table=os.environ["JDBC_TABLE"])
h = OperatorHarness(op, OperatorContext(name="out", application=os.environ["JDBC_APP"]))
h.begin_window(0)
for i in range(int(os.environ["JDBC_ROWS"])):
    h.put("input", {"k": f"r{i}", "n": i})
h.end_window()
print("COMMITTED", flush=True)
"""


@pytest.mark.integration
def test_writer_killed_before_commit_leaves_nothing(postgres_service) -> None:
    pg = postgres_service
    table = new_table(pg, "killed", "k text NOT NULL, n bigint NOT NULL")
    app = unique_name("killed")
    env = {
        **os.environ,
        "JDBC_URL": pg.sqlalchemy_url,
        "JDBC_TABLE": table,
        "JDBC_APP": app,
        "JDBC_ROWS": "5000",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLED_WRITER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "READY", line or proc.stderr.read()
        # the writer's transaction holds the rows (a row-exclusive lock on the table) ...
        locks = run_sql(
            pg,
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname = %s AND l.mode = 'RowExclusiveLock' AND l.granted",
            (table,),
        )
        assert locks == [(1,)]
        # ... but a concurrent reader sees none of them, and the window is not committed
        assert run_sql(pg, f"SELECT count(*) FROM {table}") == [(0,)]
        assert _meta(pg, app) == {("out", 0): -1}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
        proc.stdin.close()
    assert run_sql(pg, f"SELECT count(*) FROM {table}") == [(0,)]
    assert _meta(pg, app) == {("out", 0): -1}

    # the window is replayed by a new instance: all of it, once
    h = _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=table), app)
    _window(h, 0, [{"k": f"r{i}", "n": i} for i in range(5000)])
    assert run_sql(pg, f"SELECT count(*), count(DISTINCT k), sum(n) FROM {table}") == [
        (5000, 5000, sum(range(5000)))
    ]
    assert _meta(pg, app) == {("out", 0): 0}


# -- the Spark sink ------------------------------------------------------------------------------
@pytest.mark.integration
def test_spark_sink_is_exactly_once_across_a_rerun_batch(
    spark, postgres_service, tmp_path, monkeypatch
):
    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)
    table = new_table(pg, "sink", "id bigint NOT NULL CHECK (id >= 0), batch bigint NOT NULL")
    errors = unique_name("sink_errors")
    name = unique_name("query")
    checkpoint = tmp_path / "checkpoint"
    spark.dataSource.register(SplitSource)
    register(spark)

    def run_query(batches: int) -> list[int]:
        df = (
            spark.readStream.format("malhar_test_split")  # ids b*100 + i, in partition i % 2
            .option("parts", 2)
            .option("batches", batches)
            .option("rows", 6)
            .option("extra", "1:0:-1")  # breaks the table's CHECK constraint
            .load()
        )
        query = (
            df.writeStream.format("malhar_jdbc")
            .option("url", url)
            .option("name", name)
            .option("table", table)
            .option("error_table", errors)
            .option("batch_size", 4)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            query.processAllAvailable()
            # batches that ran (idle progress events carry the next id and no rows)
            return [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
        finally:
            query.stop()

    def expected(batches: int) -> Counter:
        return Counter((b * 100 + i, b) for b in range(batches) for i in range(6))

    assert run_query(3) == [0, 1, 2]
    assert Counter(run_sql(pg, f"SELECT id, batch FROM {table}")) == expected(3)

    # forget that batch 2 committed: Spark re-runs it, with the same batchId and rows
    for f in (checkpoint / "commits").glob("*2*"):
        f.unlink()
    assert run_query(5) == [2, 3, 4]
    assert Counter(run_sql(pg, f"SELECT id, batch FROM {table}")) == expected(5)
    assert _meta(pg, name) == {("sink", 0): 4, ("sink", 1): 4}
    rejected = run_sql(pg, f"SELECT window_id, partition_id, row_json, error FROM {errors}")
    assert len(rejected) == 1
    window, partition, row, message = rejected[0]
    assert (window, partition) == (1, 0)
    assert '"id": -1' in row and "violates check constraint" in message


@pytest.mark.integration
def test_a_literal_password_reaches_the_executors_but_not_the_plan(
    spark, postgres_service, tmp_path
) -> None:
    from malhar.engine.spark_io import encode_plan

    pg = postgres_service
    table = new_table(pg, "shipped", "k text NOT NULL, v bigint NOT NULL")
    dag = DAG(unique_name("shipped"))
    src = dag.add_operator("src", Numbers(per_window=10))
    out = dag.add_operator(
        "out", JdbcOutputOperator(pg.sqlalchemy_url, table=table, columns=["k", "v"])
    )
    dag.add_stream("items", src.output, out.input)
    app = run(dag, windows=2, spark=spark, checkpoint=str(tmp_path / "ck"), window_ms=100)
    # the rows arrived: the executors read the password from their environment ...
    assert len(run_sql(pg, f"SELECT k, v FROM {table}")) == 20
    # ... and the plan Spark shipped holds a reference, never the password
    assert pg.password.encode() not in __import__("base64").b64decode(encode_plan(app.plan))
    assert app.plan.dag.operators["out"].operator.url.startswith("${env:MALHAR_SECRET_")
