"""The staged rows of a partly committed micro-batch (malhar/io/base/staged_batches.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from malhar.io.base.staged_batches import StagedBatches, staged_batch_window
from malhar.util.fs import LocalFileSystem


def test_staged_rows_round_trip_per_run_and_drop_only_staged_names_up_to_a_batch(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "p0"
    staging = StagedBatches(LocalFileSystem(), str(folder))
    assert staging.staged(1, "r1") is None  # nothing staged, no folder yet
    staging.drop(5)  # no folder: nothing to do

    rows = pa.table({"id": [1, 2], "s": ["a", "é"]})
    staging.stage(1, "r1", rows)
    staging.stage(1, "r2", rows.slice(1))
    staging.stage(2, "r2", rows.slice(0, 0))
    (folder / "staged-notabatch-r.arrow").write_bytes(b"")  # another file: kept
    (folder / "piece-00000000000000000001.arrow").write_bytes(b"")

    assert staging.staged(1, "r1") == rows
    assert staging.staged(1, "r2") == rows.slice(1)
    assert staging.staged(2, "r2").num_rows == 0
    staging.drop(1)
    assert staging.staged(1, "r1") is None and staging.staged(1, "r2") is None
    assert staging.staged(2, "r2") is not None
    assert sorted(p.name for p in folder.iterdir()) == [
        "piece-00000000000000000001.arrow",
        f"staged-{2:020d}-r2.arrow",
        "staged-notabatch-r.arrow",
    ]
    assert staged_batch_window(f"staged-{7:020d}-run.arrow") == 7
    assert staged_batch_window("staged-x-run.arrow") is None
    assert staged_batch_window(f"staged-{7:020d}-run.parquet") is None
