"""``python -m samples.files_to_parquet [--master local[2]]``: generate CSV files, run the
application until every valid sale is in the Parquet output, read it back with
``spark.read.parquet`` and check it against the ground truth."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from malhar import build_session
from samples.files_to_parquet.app import run_sample


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.files_to_parquet")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", default=None, help="default: a new temporary directory")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="malhar-files-"))
    spark = build_session(args.master, app_name="files-to-parquet", shuffle_partitions=2)
    try:
        r = run_sample(spark, work)
    finally:
        spark.stop()
    print(f"input: CSV files in {work / 'in'}, {sum(r.truth.values())} valid sales")
    print(f"output: {sum(r.got.values())} rows in {work / 'out'} ({r.seconds:.1f}s), by date:")
    for date, n in r.by_date.items():
        print(f"  date={date}  {n} sales")
    print(f"rejected lines (error port): {len(r.rejected)}, counted: {dict(r.error_counts)}")
    if r.rejected:
        e = r.rejected[0]
        print(f"  e.g. {e['file']} at byte {e['offset']}: {e['error']}")
    print(f"exactness check against the ground truth: {'EXACT' if r.exact else 'MISMATCH'}")
    return 0 if r.exact else 1


if __name__ == "__main__":
    sys.exit(main())
