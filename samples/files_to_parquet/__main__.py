"""``python -m samples.files_to_parquet [--master local[2]]``: generate CSV files, run the
application until every valid sale is in the Parquet output, read it back with
``spark.read.parquet`` and check it against the ground truth."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from malhar import build_session, launch
from malhar.testing.operators import collected
from samples.files_to_parquet.app import build, write_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samples.files_to_parquet")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", default=None, help="default: a new temporary directory")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="malhar-files-"))
    source, out, checkpoint = work / "in", work / "out", str(work / "checkpoint")
    truth = write_files(source)
    total = sum(truth.values())
    print(f"input: {len(list(source.glob('*.csv')))} CSV files in {source}, {total} valid sales")

    spark = build_session(args.master, app_name="files-to-parquet", shuffle_partitions=2)
    started = time.monotonic()
    app = launch(build(str(source), str(out)), spark=spark, checkpoint=checkpoint, window_ms=200)

    def rows() -> int:
        try:
            return spark.read.parquet(str(out)).count()
        except Exception:  # no file yet
            return 0

    while rows() < total and app.failure() is None:
        time.sleep(0.5)  # polling the output directory: the files appear as windows commit
    failure = app.failure()
    app.stop()
    if failure is not None:
        print(failure, file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    back = spark.read.parquet(str(out))
    got = Counter((str(r["date"]), r["store"]) for r in back.select("date", "store").collect())
    bad = [e for rows_ in collected(checkpoint, "rejected").values() for e in rows_]
    print(f"output: {back.count()} rows in {out} ({elapsed:.1f}s), by date:")
    for row in back.groupBy("date").count().orderBy("date").collect():
        print(f"  date={row['date']}  {row['count']} sales")
    print(f"rejected lines (error port): {len(bad)}, e.g. {bad[0] if bad else None}")
    exact = got == truth
    print(f"exactness check against the ground truth: {'EXACT' if exact else 'MISMATCH'}")
    spark.stop()
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
