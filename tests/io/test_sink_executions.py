"""A Spark sink's writer learns whether its micro-batch runs for the first time
(malhar/io/base/executions.py): only a re-run can be partly committed."""

from __future__ import annotations

from pathlib import Path

from malhar.io.base.executions import EXECUTIONS, first_execution


def test_the_newest_planned_batch_is_a_first_execution_once(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    offsets = ckpt / "offsets"
    offsets.mkdir(parents=True)
    assert first_execution(str(ckpt), "q/sink") is None  # nothing planned yet
    for name in ("0", "1", ".1.crc"):
        (offsets / name).write_text("v1")
    assert first_execution(str(ckpt), "q/sink") == 1
    # the commit's writer of the same batch, or a restarted query re-running it
    assert first_execution(str(ckpt), "q/sink") is None
    assert first_execution(str(ckpt), "other/sink") == 1  # each sink keeps its own record
    (offsets / "2").write_text("v1")
    assert first_execution(str(ckpt), "q/sink") == 2
    assert (ckpt / EXECUTIONS).is_dir()


def test_unknown_where_the_checkpoint_is_not_read_as_spark_reads_it(tmp_path: Path) -> None:
    assert first_execution(None, "q/sink") is None
    assert first_execution("s3a://bucket/ckpt", "q/sink") is None
    assert first_execution("relative/ckpt", "q/sink") is None
    plain = tmp_path / "made-elsewhere"  # no offset log here: Spark's default filesystem
    plain.mkdir()
    assert first_execution(str(plain), "q/sink") is None
    assert not (plain / EXECUTIONS).exists()
