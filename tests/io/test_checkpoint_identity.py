"""A new checkpoint under an application name that already has committed windows: its
window ids start again at 0, so its window 0 can equal the last committed window of the old
checkpoint. Outputs record the checkpoint's identity with each window: that window is
refused with ``WindowRegressionError`` (as the older ones are), not skipped as a replay
(its rows were lost without a word). A replay from the same checkpoint is still skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, OperatorContext, run
from malhar.engine.checkpoint_identity import checkpoint_identity
from malhar.errors import StateError
from malhar.io.base.output import CommitMark, checkpoint_run
from malhar.io.jdbc import JdbcOutputOperator, WindowRegressionError
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import ListInput
from tests.io.jdbc_support import new_table, run_sql, unique_name


# -- without a database ---------------------------------------------------------------------------
def test_identity_is_created_once_and_kept(tmp_path: Path) -> None:
    first = checkpoint_identity(str(tmp_path / "ck"))
    assert checkpoint_identity(str(tmp_path / "ck")) == first
    assert checkpoint_identity(str(tmp_path / "other")) != first
    assert (tmp_path / "ck" / "malhar" / "identity").read_text() == first


def test_a_damaged_identity_is_named_with_the_fix(tmp_path: Path) -> None:
    checkpoint_identity(str(tmp_path))
    (tmp_path / "malhar" / "identity").write_bytes(b"\xff\xfe not a token")
    with pytest.raises(StateError, match=r"identity .* is damaged \(expected 32 hex digits"):
        checkpoint_identity(str(tmp_path))


def test_marks_compare_only_checkpoint_runs() -> None:
    a, b = checkpoint_run("a"), checkpoint_run("b")
    assert CommitMark(0, run=a).by_other_checkpoint(b)
    assert not CommitMark(0, run=a).by_other_checkpoint(a)
    assert not CommitMark(0, run=None).by_other_checkpoint(b)  # recorded before identities
    assert not CommitMark(0, run="3f2a9c").by_other_checkpoint(b)  # a Spark sink's run
    assert not CommitMark(0, run=a).by_other_checkpoint(None)
    assert checkpoint_run(None) is None


# -- PostgreSQL ---------------------------------------------------------------------------------
def _window(op: JdbcOutputOperator, app: str, checkpoint: Path, rows: list[Any]) -> None:
    ctx = OperatorContext(name="out", application=app, checkpoint=str(checkpoint))
    OperatorHarness(op, ctx).run_window([("input", r) for r in rows], window=0)


@pytest.mark.integration
def test_window_0_of_a_new_checkpoint_is_refused_not_skipped(postgres_service, tmp_path) -> None:
    pg = postgres_service
    table = new_table(pg, "ident", "k text NOT NULL, n bigint NOT NULL")
    app = unique_name("ident")

    def op(**props: Any) -> JdbcOutputOperator:
        return JdbcOutputOperator(pg.sqlalchemy_url, table=table, **props)

    _window(op(), app, tmp_path / "a", [{"k": "a", "n": 1}])
    _window(op(), app, tmp_path / "a", [{"k": "a", "n": 1}])  # a replay: skipped
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("a", 1)]

    with pytest.raises(WindowRegressionError, match="already committed by another checkpoint"):
        _window(op(), app, tmp_path / "b", [{"k": "b", "n": 2}])
    _window(op(skip_older_windows=True), app, tmp_path / "b", [{"k": "b", "n": 2}])
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("a", 1)]


@pytest.mark.integration
def test_a_new_checkpoint_under_an_old_name_fails_through_the_engine(
    spark, postgres_service, tmp_path
) -> None:
    pg = postgres_service
    table = new_table(pg, "identrun", "k text NOT NULL, n bigint NOT NULL")
    app = unique_name("identrun")

    def dag() -> DAG:
        d = DAG(app)
        src = d.add_operator("src", ListInput([[{"k": "x", "n": 1}]]))
        out = d.add_operator("out", JdbcOutputOperator(pg.sqlalchemy_url, table=table))
        d.add_stream("rows", src.output, out.input)
        return d

    run(dag(), windows=1, spark=spark, checkpoint=str(tmp_path / "a"), window_ms=100)
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("x", 1)]
    with pytest.raises(Exception, match="already committed by another checkpoint"):
        run(dag(), windows=1, spark=spark, checkpoint=str(tmp_path / "b"), window_ms=100)
    assert run_sql(pg, f"SELECT k, n FROM {table}") == [("x", 1)]


# -- Kafka, scan mode (no transactions: the writer header names the checkpoint) ---------------
@pytest.mark.integration
def test_kafka_scan_mode_refuses_a_new_checkpoints_window_over_the_old_ones(
    kafka_client: Any, tmp_path: Path
) -> None:
    from malhar.io.kafka import KafkaOutputOperator
    from tests.io.conftest import kafka_unique
    from tests.io.test_kafka_output import quick, read_topic

    bs = kafka_client.bootstrap
    topic = kafka_client.topic("identscan", partitions=1)
    app = kafka_unique("identscan")

    def window(checkpoint: Path, rows: list[dict[str, Any]], **props: Any) -> None:
        op = KafkaOutputOperator(bs, topic, delivery="scan", key_column="k", **quick(**props))
        ctx = OperatorContext(name="out", application=app, checkpoint=str(checkpoint))
        h = OperatorHarness(op, ctx)
        try:
            h.run_window([("input", r) for r in rows], window=0)
        finally:
            h.teardown()

    window(tmp_path / "a", [{"k": "a1"}, {"k": "a2"}])
    window(tmp_path / "a", [{"k": "a1"}, {"k": "a2"}])  # a replay: found in the topic
    with pytest.raises(WindowRegressionError, match="already committed by another checkpoint"):
        window(tmp_path / "b", [{"k": "a1"}, {"k": "b2"}])
    window(tmp_path / "b", [{"k": "a1"}, {"k": "b2"}], skip_older_windows=True)
    got = read_topic(bs, topic, committed=False)
    assert sorted(r.key for r in got) == [b"a1", b"a2"]
    tag = checkpoint_identity(str(tmp_path / "a"))[:12]
    assert {dict(r.headers)["malhar.writer"] for r in got} == {f"{app}/out/0#{tag}".encode()}
