"""The file Spark sink when a partly committed micro-batch runs again split otherwise.

A driver that dies while the tasks of batch ``N`` commit leaves some partitions of ``N``
committed and ``N`` missing from Spark's commit log; the restarted query runs ``N`` again,
and its source may split it into other partitions (its options, the cluster's cores). A
partition that committed ``N`` and does not run again then holds rows another partition
of the re-run holds too: the sink must refuse the batch rather than publish them twice, and
the batch must run again, exactly, once it gets its earlier partitions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from malhar.io.fs.staged_pieces import staged_name
from tests.io.fs_support import Place
from tests.io.split_source import EXACT, file_matches, path_exists, split_query

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _runner(spark: Any, out: Path, ckpt: Path) -> Any:
    """Runs of the split source into the file sink on ``out`` (split_source.split_query)."""
    from malhar.io.fs import register

    register(spark)

    def sink(writer: Any) -> Any:
        return (
            writer.format("malhar_files")
            .option("path", str(out))
            .option("name", "rerun")
            .option("roll_windows", 3)  # batches 0-2 in one file, published with batch 2
        )

    return split_query(spark, sink, ckpt)


def _part_committed_batch_1(run: Any, out: Path, committed: int) -> None:
    """Batch 1 dies after partition ``committed`` committed it and before the other did;
    batch 0 is committed."""
    piece = out / "_malhar" / "rerun" / "sink" / str(committed) / staged_name(1)
    failed = run(parts=2, batches=2, fail=f"1:{1 - committed}:{path_exists(piece)}")
    assert failed is not None and "injected" in str(failed), failed
    assert piece.exists()
    assert not (piece.parent.parent / str(1 - committed) / staged_name(1)).exists()


def _ids(out: Path) -> list[int]:
    return sorted(r["id"] for r in Place(str(out), "local").parquet_rows())


def test_a_partly_committed_batch_split_otherwise_is_refused_then_runs_exactly(
    spark, tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    run = _runner(spark, out, ckpt)
    _part_committed_batch_1(run, out, committed=1)

    # the restarted source splits batch 1 into one partition: ids 101, 103, 105 would be
    # published twice (partition 1 holds them, and partition 0 now has all six)
    failed = run(parts=1, batches=3)
    assert failed is not None and "did not re-run with the same rows" in str(failed), failed
    assert "WindowContentMismatchError" in str(failed)
    assert Place(str(out), "local").parquet_rows() == []  # nothing published
    assert not (out / "_malhar" / "rerun" / "sink" / "0" / staged_name(1)).exists()

    # with its earlier partitions the batch runs again: partition 1 verified, 0 written
    assert run(parts=2, batches=3) is None
    assert _ids(out) == EXACT


def test_a_partly_committed_batch_whose_rows_moved_is_refused_then_runs_exactly(
    spark, tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    run = _runner(spark, out, ckpt)
    _part_committed_batch_1(run, out, committed=0)

    # the re-run swaps the rows of the two partitions: partition 0 committed other rows;
    # it reads (and fails) once partition 1 has written what it writes of batch 1
    written = file_matches(out / "_malhar" / "rerun" / "sink" / "1", f"*{1:020d}*")
    failed = run(parts=2, batches=3, shift=1, wait=f"1:0:{written}")
    assert failed is not None and "WindowContentMismatchError" in str(failed), failed
    assert Place(str(out), "local").parquet_rows() == []
    # partition 1 staged its rows (a partly committed batch): it committed nothing
    assert not (out / "_malhar" / "rerun" / "sink" / "1" / staged_name(1)).exists()

    assert run(parts=2, batches=3) is None
    assert _ids(out) == EXACT


def test_committed_partitions_reads_only_what_decides(tmp_path: Path) -> None:
    """A partition's committed window is its last piece past ``finalized.json``, else
    ``finalized.json`` (a leftover piece at or below it does not count); a piece's footer
    is read only when it decides (every task of every batch asks)."""
    import json

    import pyarrow as pa

    from malhar.io.base.output import WindowKey
    from malhar.io.fs.settings import FileSinkSettings
    from malhar.io.fs.store import STAGING, FileStore

    settings = FileSinkSettings()
    settings.configure(path=str(tmp_path), name="app", format="parquet")
    store = FileStore(settings, WindowKey("app", "sink", 0), schema=pa.schema([("id", "int64")]))
    root = tmp_path / STAGING / "app" / "sink"
    (root / "0").mkdir(parents=True)
    (root / "0" / "finalized.json").write_text(json.dumps({"window": 5, "run": "r5"}))
    (root / "0" / staged_name(3)).write_bytes(b"a leftover: not read")
    (root / "1").mkdir()
    (root / "1" / staged_name(2)).write_bytes(b"below the window asked: not read")
    assert store.committed_partitions(4) == {0: "r5"}
    assert store.committed_partitions(6) == {}
