"""Issue 12 on the JDBC output, against real PostgreSQL (and Spark): a meta row names its
table, unnamed applications are refused, badly shaped tuples go to the error port,
rejected rows are kept with their window and re-emitted by a replay, a re-run Spark batch
with other rows is refused (and a partly committed one completed exactly), every wait
is bounded, and unknown sink options fail with "did you mean".

Each test failed on the code before these fixes (see the docstrings).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from malhar import DAG, OperatorContext, run
from malhar.io.jdbc import JdbcConfigError, JdbcOutputOperator, register
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import ListInput
from tests.io.jdbc_support import jdbc_url_reference, new_table, run_sql, unique_name
from tests.io.split_source import SplitSource, jdbc_committed

pytestmark = pytest.mark.integration


def _harness(op: JdbcOutputOperator, app: str) -> OperatorHarness:
    return OperatorHarness(op, OperatorContext(name="out", application=app))


def _window(h: OperatorHarness, window: int, rows: list[Any]) -> None:
    h.run_window([("input", r) for r in rows], window=window)


# -- 1. the meta row names its table; unnamed applications -------------------------------------
def test_a_meta_row_belongs_to_its_table(postgres_service) -> None:
    """Before: the re-pointed writer opened the other table's meta row, committed window 2
    into table b, and the first writer's window 2 was then skipped silently (lost)."""
    pg = postgres_service
    a = new_table(pg, "ta", "k text NOT NULL, n bigint NOT NULL")
    b = new_table(pg, "tb", "k text NOT NULL, n bigint NOT NULL")
    app = unique_name("shared")
    first = _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=a), app)
    _window(first, 0, [{"k": "a0", "n": 0}])
    _window(first, 1, [{"k": "a1", "n": 1}])

    # another application with the same name (or this one re-pointed) writing table b
    other = _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=b), app)
    with pytest.raises(JdbcConfigError, match=rf"belongs to 'public\.{a}'.* writes 'public\.{b}'"):
        _window(other, 2, [{"k": "b2", "n": 2}])
    assert run_sql(pg, f"SELECT count(*) FROM {b}") == [(0,)]

    _window(first, 2, [{"k": "a2", "n": 2}])  # the owner's windows still land
    assert sorted(run_sql(pg, f"SELECT k FROM {a}")) == [("a0",), ("a1",), ("a2",)]
    assert run_sql(
        pg, "SELECT window_id, target_id FROM malhar_meta WHERE app_id = %s", (app,)
    ) == [(2, f"public.{a}")]


def test_an_older_meta_table_is_migrated_and_its_rows_keep_working(postgres_service) -> None:
    """Before: the meta table had no target column (nothing to check a row's table against)."""
    pg = postgres_service
    table = new_table(pg, "mig", "k text NOT NULL, n bigint NOT NULL")
    meta = unique_name("old_meta")
    run_sql(  # the meta table as the previous version created it, with a committed window
        pg,
        f"CREATE TABLE {meta} (app_id VARCHAR(255) NOT NULL, operator_id VARCHAR(255) NOT NULL,"
        " partition_id INTEGER NOT NULL, window_id BIGINT NOT NULL, updated_at TIMESTAMP WITH "
        "TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP, "
        "PRIMARY KEY (app_id, operator_id, partition_id))",
    )
    app = unique_name("legacy")
    run_sql(pg, f"INSERT INTO {meta} (app_id, operator_id, partition_id, window_id) VALUES "
         "(%s, 'out', 0, 5)", (app,))  # fmt: skip

    h = _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=table, meta_table=meta), app)
    _window(h, 5, [{"k": "replayed", "n": 5}])  # already committed before the upgrade
    _window(h, 6, [{"k": "new", "n": 6}])
    assert run_sql(pg, f"SELECT k FROM {table}") == [("new",)]
    columns = {r[0] for r in run_sql(pg, "SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = %s", (meta,))}  # fmt: skip
    assert {"target_id", "run_id", "window_digest"} <= columns
    assert run_sql(pg, f"SELECT window_id, target_id FROM {meta}") == [(6, f"public.{table}")]


def test_an_unnamed_application_gets_a_name_of_its_own(
    spark, postgres_service, tmp_path, caplog
) -> None:
    """Before: every application launched without a name wrote meta rows as "app"."""
    pg = postgres_service
    table = new_table(pg, "unnamed", "k text NOT NULL")
    meta = f"{table}_meta"
    with pytest.raises(ValueError, match="no name of its own"):
        _harness(JdbcOutputOperator(pg.sqlalchemy_url, table=table), "app").setup()

    def launch(checkpoint: str) -> None:
        dag = DAG()  # no name: the engine derives one from the checkpoint, with a warning
        src = dag.add_operator("src", ListInput([[{"k": "x"}]]))
        out = dag.add_operator(
            "out", JdbcOutputOperator(pg.sqlalchemy_url, table=table, meta_table=meta)
        )
        dag.add_stream("rows", src.output, out.input)
        run(dag, windows=1, spark=spark, checkpoint=checkpoint, window_ms=100)

    with caplog.at_level("WARNING", logger="malhar"):
        launch(str(tmp_path / "one"))
        launch(str(tmp_path / "two"))
    assert sum("the application has no name" in r.getMessage() for r in caplog.records) == 2
    apps = [r[0] for r in run_sql(pg, f"SELECT app_id FROM {meta} ORDER BY app_id")]
    # two checkpoints, two names: neither skips the other's windows as "app" did
    assert len(set(apps)) == 2 and all(a.startswith("app-") for a in apps), apps
    assert run_sql(pg, f"SELECT count(*) FROM {table}") == [(2,)]


# -- 4. poison pills -------------------------------------------------------------------------
class NoText:
    def __str__(self) -> str:
        raise RuntimeError("no text form")


def test_badly_shaped_tuples_go_to_the_error_port(postgres_service) -> None:
    """Before: a tuple of the wrong width (or a window mixing dicts and tuples, or an unknown
    column) raised JdbcConfigError for the whole window, at every replay: stuck forever."""
    pg = postgres_service
    table = new_table(pg, "shape", "k text PRIMARY KEY, n bigint NOT NULL, doc jsonb")
    app = unique_name("shape")
    op = JdbcOutputOperator(pg.sqlalchemy_url, table=table, mode="upsert", key_columns=["k"])
    h = _harness(op, app)
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    window = [
        {"k": "a", "n": 1, "doc": {"x": 1}},
        ("b", 2, None),  # positional, in the table's column order
        ("c", 3),  # too few values
        {"k": "d", "n": 4, "colour": "red"},  # not a column
        {"n": 5},  # no key
        {"k": "e", "n": NoText()},  # no text form
        {"k": "f", "n": 6, "doc": deep},  # nested too deep for JSON
        "g",  # not a row
        {"k": "h", "n": None},  # the database refuses it (NOT NULL)
        {"k": "s\ud800", "n": 9},  # a lone surrogate: no UTF-8 (failed the window)
        pa.RecordBatch.from_pylist([{"k": "i", "n": 7, "size": 1}]),  # a batch, unknown column
        pa.RecordBatch.from_pylist([{"k": "j", "n": 8}]),
    ]
    _window(h, 0, window)
    assert sorted(run_sql(pg, f"SELECT k, n FROM {table}")) == [("a", 1), ("b", 2), ("j", 8)]
    errors = h.sink("error").per_window[0]
    reasons = {(e.get("k") or str(e.get("value"))): e["error"] for e in errors}
    assert len(errors) == 9
    assert "surrogates not allowed" in reasons["s\ud800"]
    assert reasons["['c', 3]"] == "2 value(s) for the 3 columns ['k', 'n', 'doc']"
    assert reasons["d"].startswith("unknown column(s) ['colour']")
    assert reasons["None"] == "missing field(s) ['k']"
    assert "RuntimeError: no text form" in reasons["e"]
    assert "RecursionError" in reasons["f"]
    assert reasons["g"] == "expected a dict, a tuple or a record, got str"
    assert 'null value in column "n"' in reasons["h"]
    assert reasons["i"].startswith("unknown column(s) ['size']")
    assert run_sql(pg, "SELECT window_id FROM malhar_meta WHERE app_id = %s", (app,)) == [(0,)]


# -- 5. rejected rows kept with their window ----------------------------------------------------
def test_a_replayed_window_reemits_its_rejected_rows(postgres_service) -> None:
    """Before: a replayed (skipped) window emitted no error tuples (and there was no
    error_table on the operator)."""
    pg = postgres_service
    table = new_table(pg, "rerr", "k varchar(3) NOT NULL, n bigint NOT NULL")
    errors = unique_name("rerr_errors")
    app = unique_name("rerr")

    def op() -> JdbcOutputOperator:
        return JdbcOutputOperator(pg.sqlalchemy_url, table=table, error_table=errors)

    rows = [{"k": "ok", "n": 1}, {"k": "toolong", "n": 2}, ("x",), {"k": "ok2", "n": 3}]
    first = _harness(op(), app)
    _window(first, 0, [{"k": "w0", "n": 0}])
    _window(first, 1, rows)
    emitted = first.sink("error").per_window[1]
    assert [e["error"][:30] for e in emitted] == [
        "1 value(s) for the 2 columns [",
        "value too long for type charac",
    ]
    assert run_sql(pg, f"SELECT window_id, row_json FROM {errors} ORDER BY row_index") == [
        (1, '{"value": ["x"]}'),
        (1, '{"k": "toolong", "n": 2}'),
    ]

    # the driver restarts: a new instance replays window 1, which is already committed
    replay = _harness(op(), app)
    _window(replay, 1, rows)
    assert replay.sink("error").per_window[1] == emitted
    assert sorted(run_sql(pg, f"SELECT k FROM {table}")) == [("ok",), ("ok2",), ("w0",)]


# -- 7. bounded waits ------------------------------------------------------------------------
class Watch(JdbcOutputOperator):
    def setup(self, context: OperatorContext) -> None:
        self.retried = threading.Event()
        self.errors: list[BaseException] = []
        super().setup(context)

    def on_retry(self, attempt: int, delay: float, error: BaseException) -> None:
        super().on_retry(attempt, delay, error)
        self.errors.append(error)
        self.retried.set()


def test_a_writer_behind_a_held_meta_row_lock_times_out_and_retries(
    postgres_service, caplog
) -> None:
    """Before: the window's SELECT ... FOR UPDATE waited for as long as the lock was held
    (there was no lock_timeout), and nothing was reported."""
    pg = postgres_service
    table = new_table(pg, "lock", "k text NOT NULL")
    app = unique_name("lock")
    op = Watch(pg.sqlalchemy_url, table=table, lock_timeout=0.5, retry_backoff=0.1)
    h = _harness(op, app)
    _window(h, 0, [{"k": "w0"}])

    zombie = pg.connect()  # another writer of the partition, stuck inside its transaction
    failure: list[BaseException] = []
    try:
        with zombie.cursor() as cur:
            cur.execute("SELECT 1 FROM malhar_meta WHERE app_id = %s FOR UPDATE", (app,))
        h.begin_window(1)
        h.put("input", {"k": "w1"})

        def end() -> None:
            try:
                h.end_window()
            except BaseException as exc:  # reported below
                failure.append(exc)

        worker = threading.Thread(target=end)
        with caplog.at_level(logging.WARNING, logger="malhar.io.jdbc"):
            worker.start()
            assert op.retried.wait(30), "the writer never gave up waiting for the lock"
    finally:
        zombie.rollback()  # the zombie goes away
        zombie.close()
    worker.join(60)
    assert not worker.is_alive() and not failure, failure
    assert "lock timeout" in str(op.errors[0])
    assert "timed out waiting (lock_timeout=0.5s" in caplog.text
    assert sorted(run_sql(pg, f"SELECT k FROM {table}")) == [("w0",), ("w1",)]


# -- 12. unknown sink options ----------------------------------------------------------------
def test_unknown_sink_options_fail_with_did_you_mean(
    spark, postgres_service, tmp_path, monkeypatch
) -> None:
    """Before: unknown options were ignored ("tabel" failed later as a missing table)."""
    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)
    register(spark)
    df = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    with pytest.raises(Exception, match=r"no option 'tabel'; did you mean 'table'\?") as err:
        query = (
            df.writeStream.format("malhar_jdbc")
            .option("url", url)
            .option("name", unique_name("typo"))
            .option("tabel", "events")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    assert pg.password not in str(err.value)


# -- 6. a re-run Spark batch with rows in other partitions ------------------------------------
def test_spark_sink_rerun_with_rows_in_other_partitions(
    spark, postgres_service, tmp_path, monkeypatch
):
    """Before: the sink keyed by partitionId() skipped the re-run's rows in partition 0 (never
    written: lost) and wrote partition 1's (some already written: duplicated)."""
    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)
    table = new_table(pg, "shift", "id bigint NOT NULL, batch bigint NOT NULL")
    name = unique_name("shift")
    checkpoint = tmp_path / "checkpoint"
    spark.dataSource.register(SplitSource)
    register(spark)

    def run_query(batches: int, layout: str, fail_batch: int = -1) -> BaseException | None:
        # batch b: ids b*100 + i; layout "mod": even i in partition 0, odd in 1; "blocks":
        # the first half in partition 0, the second in 1. Partition 1 of fail_batch fails
        # once partition 0 committed it.
        fail = f"{fail_batch}:1:{jdbc_committed(pg.dsn, name, 0, fail_batch)}"
        df = (
            spark.readStream.format("malhar_test_split")
            .option("parts", 2)
            .option("batches", batches)
            .option("rows", 6)
            .option("layout", layout)
            .option("fail", fail if fail_batch >= 0 else "")
            .option("timeout", 120)
            .load()
        )
        query = (
            df.writeStream.format("malhar_jdbc")
            .option("url", url)
            .option("name", name)
            .option("table", table)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            if fail_batch >= 0:
                query.awaitTermination(240)  # until the injected failure stops it
            else:
                query.processAllAvailable()
            return None
        except Exception as exc:
            return exc
        finally:
            query.stop()

    def ids(batch: int) -> Counter:
        return Counter(
            i for (i,) in run_sql(pg, f"SELECT id FROM {table} WHERE batch = %s", (batch,))
        )

    # batches 0 and 1 commit; batch 2 commits in partition 0 only, then the query fails
    failed = run_query(3, "mod", fail_batch=2)
    assert failed is not None and "injected" in str(failed)
    assert ids(2) == Counter([200, 202, 204])

    # the re-run distributes batch 2's rows differently: refused, nothing written twice
    refused = run_query(3, "blocks")
    assert refused is not None and "re-ran with other input" in str(refused)
    assert ids(2) == Counter([200, 202, 204])

    # the same distribution again: partition 0 matches, partition 1's rows are staged and
    # applied by the driver's commit; later batches run as usual
    assert run_query(5, "mod") is None
    expected = Counter((b * 100 + i, b) for b in range(5) for i in range(6))
    assert Counter(run_sql(pg, f"SELECT id, batch FROM {table}")) == expected
    assert run_sql(pg, "SELECT count(*) FROM malhar_meta_stage WHERE app_id = %s", (name,)) == [
        (0,)
    ]


def test_spark_sink_exactly_once_needs_no_fingerprint_when_disabled(
    spark, postgres_service, tmp_path: Path, monkeypatch
) -> None:
    """verify_reruns=false: no fingerprints, the behaviour of a plain partition-keyed sink."""
    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)
    table = new_table(pg, "nover", "id bigint NOT NULL, batch bigint NOT NULL")
    name = unique_name("nover")
    spark.dataSource.register(SplitSource)
    register(spark)
    df = (
        spark.readStream.format("malhar_test_split")  # ids b*100 + i, in partition i % 2
        .option("parts", 2)
        .option("batches", 2)
        .option("rows", 4)
        .load()
    )
    query = (
        df.writeStream.format("malhar_jdbc")
        .option("url", url)
        .option("name", name)
        .option("table", table)
        .option("verify_reruns", "false")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert Counter(i for (i,) in run_sql(pg, f"SELECT id FROM {table}")) == Counter(
        b * 100 + i for b in range(2) for i in range(4)
    )
    assert set(run_sql(pg, "SELECT window_digest FROM malhar_meta WHERE app_id = %s", (name,))) == {
        (None,)
    }


def test_spark_sink_without_error_table_fails_a_batch_with_a_rejected_row(
    spark, postgres_service, tmp_path: Path, monkeypatch
) -> None:
    """A sink has no error port: without error_table, a row the database refuses fails the
    batch (and the batch writes nothing), naming the reason."""
    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)
    table = new_table(pg, "norej", "id bigint NOT NULL CHECK (id < 103), batch bigint NOT NULL")
    name = unique_name("norej")
    spark.dataSource.register(SplitSource)
    register(spark)
    df = (
        spark.readStream.format("malhar_test_split")  # ids b*100 + i, in partition i % 2
        .option("parts", 2)
        .option("batches", 2)
        .option("rows", 4)
        .load()
    )
    query = (
        df.writeStream.format("malhar_jdbc")
        .option("url", url)
        .option("name", name)
        .option("table", table)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        with pytest.raises(Exception, match="set option error_table") as err:
            query.processAllAvailable()
    finally:
        query.stop()
    assert "violates check constraint" in str(err.value)
    # batch 0 committed; of batch 1, partition 0 (100, 102) may have committed, never 103
    ids = {i for (i,) in run_sql(pg, f"SELECT id FROM {table}")}
    assert {0, 1, 2, 3} <= ids and 103 not in ids and 101 not in ids
