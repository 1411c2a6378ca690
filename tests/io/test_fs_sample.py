"""The files_to_parquet sample as an application on the shared Spark session: CSV files ->
parse/filter -> Parquet by date equals the ground truth, and every malformed line reached
the input's error port and was counted by the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from samples.files_to_parquet.app import run_sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_csv_to_parquet_by_date_exactly_with_counted_errors(spark, tmp_path: Path) -> None:
    r = run_sample(spark, tmp_path, timeout=300)
    assert r.exact, (sum(r.got.values()), sum(r.truth.values()))
    assert sorted(r.by_date) == ["2026-11-21", "2026-11-22", "2026-11-23"]
    # one malformed line per file (6 files): on the error port, with file and offset
    assert len(r.rejected) == 6
    assert all(e["file"].endswith(".csv") and e["offset"] > 0 for e in r.rejected)
    assert all(e["text"] == "not a timestamp,lima" for e in r.rejected)
    assert r.error_counts["csv.error"] == 6
