"""A JDBC poll checkpoint restored under other source settings: its key positions belong to
the source they were read from (table, query, key column, where), which the checkpoint
records; a restart re-pointed at another one is refused, naming both, instead of silently
continuing from the old position (rows skipped or misread). Checkpoints written before the
record existed still restore. The same for the Spark data source's offsets."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, ApplicationFailed, run
from malhar.engine import generations
from malhar.errors import ConfigError
from malhar.io.jdbc import JdbcConfigError, JdbcPollInputOperator
from malhar.operator import OperatorContext
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import Collector, collected
from tests.io.conftest import kafka_harness, kafka_run_window
from tests.io.jdbc_support import jdbc_url_reference, run_sql, unique_name

pytestmark = pytest.mark.integration


def _table(pg: Any, n: int, prefix: str = "moved") -> str:
    """A table of ``n`` rows, ``id`` 1..n and ``seq`` 101..100+n (both grow)."""
    table = unique_name(prefix)
    run_sql(pg, f"CREATE TABLE {table} (id bigint PRIMARY KEY, seq bigint, item text)")
    run_sql(
        pg,
        f"INSERT INTO {table} SELECT g, 100 + g, 'i' || g FROM generate_series(1, %s) g",
        (n,),
    )
    return table


def _op(pg: Any, **source: Any) -> JdbcPollInputOperator:
    settings = {"key_column": "id", **source}
    return JdbcPollInputOperator(pg.sqlalchemy_url, poll_interval_ms=0, **settings)


def _context(checkpoint: Path) -> OperatorContext:
    return OperatorContext(name="poll", checkpoint=str(checkpoint), partition=0, partitions=1)


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return sorted(r["id"] for r in rows)


def _first_window(op: JdbcPollInputOperator, checkpoint: Path) -> tuple[list[int], bytes]:
    """Window 0 of a fresh partition: its ids and the checkpoint after it."""
    h = kafka_harness(op, str(checkpoint), name="poll", partition=0, partitions=1)
    h.setup()
    ids = _ids(kafka_run_window(h, 0))
    saved = h.checkpoint()
    h.teardown()
    return ids, saved


# -- through the public API: a DAG run, then a restart of its checkpoint ------------------------
def test_a_restart_re_pointed_at_another_table_is_refused_naming_both(
    spark: Any, postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    first, other = _table(pg, 5, "first"), _table(pg, 8, "other")
    checkpoint = str(tmp_path / "ck")

    name = unique_name("repointed")

    def dag(table: str) -> DAG:
        d = DAG(name)
        rows = d.add_operator("rows", _op(pg, table=table))
        out = d.add_operator("out", Collector())
        d.add_stream("rows", rows.output, out.input)
        return d

    run(dag(first), windows=2, spark=spark, checkpoint=checkpoint, window_ms=100)
    read = [r for rows in collected(checkpoint, "out").values() for r in rows]
    assert _ids(read) == [1, 2, 3, 4, 5]

    # before: the restart read `other` after id 5 (rows 6..8), and rows 1..5 of it never
    with pytest.raises(ApplicationFailed) as info:
        run(dag(other), windows=2, spark=spark, checkpoint=checkpoint, window_ms=100)
    text = str(info.value)
    assert "JdbcConfigError" in text, text
    assert f"its checkpoint was written for table '{first}' by key 'id'" in text, text
    assert f"now reads table '{other}' by key 'id'" in text, text
    assert "changed: table" in text and "new checkpoint directory" in text, text
    assert "read id up to 5" in text, text
    assert pg.password not in text
    after = [r for rows in collected(checkpoint, "out").values() for r in rows]
    assert _ids(after) == [1, 2, 3, 4, 5]  # nothing of `other` was read


def test_a_launch_with_another_partitions_is_refused_before_it_writes_anything(
    spark: Any, postgres_service: Any, tmp_path: Path
) -> None:
    # the launch recorded the new count, then each partition refused its checkpoint on the
    # executors, and the old count was refused in turn: the checkpoint could not run again
    pg = postgres_service
    table = _table(pg, 6)
    checkpoint = str(tmp_path / "ck")
    name = unique_name("recount")

    def dag(partitions: int) -> DAG:
        d = DAG(name)
        rows = d.add_operator("rows", _op(pg, table=table), PARTITIONS=partitions)
        d.add_stream("rows", rows.output, d.add_operator("out", Collector()).input)
        return d

    run(dag(2), windows=2, spark=spark, checkpoint=checkpoint, window_ms=100)
    before = generations.load(checkpoint)
    with pytest.raises(ConfigError, match=r"operator 'rows': PARTITIONS is now 3.*keeps its"):
        run(dag(3), windows=2, spark=spark, checkpoint=checkpoint, window_ms=100)
    assert generations.load(checkpoint) == before  # nothing written
    run_sql(pg, f"INSERT INTO {table} VALUES (7, 107, 'i7')")
    run(dag(2), windows=2, spark=spark, checkpoint=checkpoint, window_ms=100)
    read = [r for rows in collected(checkpoint, "out").values() for r in rows]
    assert _ids(read) == [1, 2, 3, 4, 5, 6, 7]


# -- every setting that decides what a position means ------------------------------------------
@pytest.mark.parametrize("changed", ["query", "key_column", "where"])
def test_a_restore_with_another_query_key_or_where_is_refused(
    postgres_service: Any, tmp_path: Path, changed: str
) -> None:
    pg = postgres_service
    table = _table(pg, 6)
    before = {
        "query": {"query": f"SELECT * FROM {table} WHERE id <= 3"},
        "key_column": {"table": table},
        "where": {"table": table, "where": "id <= 3"},
    }[changed]
    after = {
        "query": {"query": f"SELECT * FROM {table} WHERE id > 3"},
        "key_column": {"table": table, "key_column": "seq"},
        "where": {"table": table, "where": "id > 3"},
    }[changed]
    ids, saved = _first_window(_op(pg, **before), tmp_path)
    assert ids == ([1, 2, 3] if changed != "key_column" else [1, 2, 3, 4, 5, 6])

    # restored under the same settings: accepted (outer whitespace of SQL text is no change)
    same = {k: f"  {v}\n" if k in ("query", "where") else v for k, v in before.items()}
    h = OperatorHarness.restored(_op(pg, **same), saved, _context(tmp_path))
    h.setup()
    h.teardown()

    h = OperatorHarness.restored(_op(pg, **after), saved, _context(tmp_path))
    with pytest.raises(JdbcConfigError) as info:
        h.setup()
    text = str(info.value)
    assert f"(changed: {changed})" in text and "its checkpoint was written for" in text
    assert "new checkpoint directory" in text and pg.password not in text
    for settings in (before, after):
        for value in settings.values():
            assert repr(value) in text, (value, text)


def test_the_plan_knows_the_source_when_the_partition_has_no_state_yet(
    postgres_service: Any, tmp_path: Path
) -> None:
    # a crash before the partition's first snapshot: its recorded windows are replayed with
    # fresh state, so only the key-range plan can tell that the source changed
    pg = postgres_service
    first, other = _table(pg, 3), _table(pg, 3)
    _first_window(_op(pg, table=first), tmp_path)
    plan = json.loads((tmp_path / "malhar" / "jdbc-poll" / "poll.json").read_text())
    assert plan["source"] == {"table": first, "query": None, "key_column": "id", "where": None}
    h = kafka_harness(_op(pg, table=other), str(tmp_path), name="poll", partitions=1)
    with pytest.raises(JdbcConfigError, match=r"key-range plan .* was written for table '"):
        h.setup()


# -- checkpoints written before the record existed ---------------------------------------------
def test_a_checkpoint_without_the_record_restores_and_records_from_then_on(
    postgres_service: Any, tmp_path: Path
) -> None:
    pg = postgres_service
    table = _table(pg, 4)
    ids, saved = _first_window(_op(pg, table=table, max_records_per_window=2), tmp_path)
    assert ids == [1, 2]
    old = pickle.loads(saved)  # as an older version wrote them: no source anywhere
    assert old["operator"]["fields"].pop("_source") is not None
    plan_file = tmp_path / "malhar" / "jdbc-poll" / "poll.json"
    plan = json.loads(plan_file.read_text())
    del plan["source"]
    plan_file.write_text(json.dumps(plan))

    op = _op(pg, table=table, max_records_per_window=2)
    h = OperatorHarness.restored(op, pickle.dumps(old), _context(tmp_path))
    h.setup()
    assert _ids(kafka_run_window(h, 1)) == [3, 4]  # continues where it was
    saved = h.checkpoint()
    h.teardown()
    assert pickle.loads(saved)["operator"]["fields"]["_source"]["table"] == table
    # from then on the record is there: another table is refused
    h = OperatorHarness.restored(_op(pg, table=_table(pg, 4)), saved, _context(tmp_path))
    with pytest.raises(JdbcConfigError, match=f"written for table '{table}'"):
        h.setup()


# -- the Spark data source's offsets -----------------------------------------------------------
def test_spark_source_offsets_of_another_source_are_refused_old_ones_accepted(
    spark: Any, postgres_service: Any, monkeypatch: Any
) -> None:
    from malhar.io.jdbc.poll_source import JdbcPollSourceSettings, JdbcPollStreamReader

    pg = postgres_service
    url = jdbc_url_reference(spark, pg, monkeypatch)
    first, other = _table(pg, 5), _table(pg, 8)

    def reader(table: str, **more: str) -> JdbcPollStreamReader:
        settings = JdbcPollSourceSettings()
        settings.from_options({"url": url, "table": table, "key_column": "id", **more})
        return JdbcPollStreamReader(settings)

    a = reader(first)
    start = a.initialOffset()
    end = a.latestOffset(start, None)
    assert end["key"] == 5 and end["source"]["table"] == first
    assert json.loads(json.dumps(end)) == end  # what Spark's offset log keeps
    a.stop()

    b = reader(other)
    try:
        with pytest.raises(JdbcConfigError) as info:
            b.latestOffset(end, None)  # the next batch after a restart
        text = str(info.value)
        assert f"offset 5 of table '{first}'" in text and f"name table '{other}'" in text, text
        assert "new checkpointLocation" in text and pg.password not in text
        with pytest.raises(JdbcConfigError, match="changed: table"):
            b.partitions(start, end)  # the unfinished batch Spark runs again
        # an offset without the record (an older checkpoint): accepted, recorded from then on
        later = b.latestOffset({"key": 5}, None)
        assert later["key"] == 8 and later["source"]["table"] == other
        parts = b.partitions({"key": 5}, later)
        ids = [i for p in parts for batch in b.read(p) for i in batch.column("id").to_pylist()]
        assert ids == [6, 7, 8]
    finally:
        b.stop()
    w = reader(first, where="id > 2")
    try:
        with pytest.raises(JdbcConfigError, match=r"changed: where"):
            w.latestOffset(end, None)
    finally:
        w.stop()


@pytest.mark.parametrize(
    ("recorded", "now", "changed"),
    [
        ({"table": "t"}, {"table": "t", "where": ""}, []),  # the SQL leaves both out
        ({"table": "t", "where": "  "}, {"table": "t"}, []),
        ({"query": "SELECT 1 AS id"}, {"query": " SELECT 1 AS id\n", "table": ""}, []),
        ({"table": "t"}, {"table": "t "}, ["table"]),  # quoted as given: another name
        ({"table": "t"}, {"table": "t", "key_column": " id"}, ["key_column"]),
    ],
)
def test_the_source_identity_is_what_the_sql_uses(
    recorded: dict[str, str], now: dict[str, str], changed: list[str]
) -> None:
    from malhar.io.jdbc.poll_settings import JdbcPollSettings, source_changes

    def identity(settings: dict[str, str]) -> dict[str, str | None]:
        found = JdbcPollSettings()
        found.configure(**{"key_column": "id", **settings})
        return found.source_identity()

    assert source_changes(identity(recorded), identity(now)) == changed
