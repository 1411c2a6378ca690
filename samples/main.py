"""The README's main command: run the sample application and check it is exact."""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter

from malhar import build_session, run
from malhar.engine.plan import build_plan, describe
from malhar.testing.operators import collected
from samples.wordcount.app import build, corpus


def main() -> int:
    windows, lines = 6, 200
    dag = build(windows, lines)
    print("malhar sample: word count, physical plan:")
    print(describe(build_plan(dag)))
    spark = build_session("local[2]", app_name="malhar-sample", shuffle_partitions=2)
    checkpoint = tempfile.mkdtemp(prefix="malhar-sample-")
    started = time.monotonic()
    app = run(
        build(windows, lines), windows=windows, spark=spark, checkpoint=checkpoint, window_ms=200
    )
    elapsed = time.monotonic() - started
    got: Counter = Counter()
    for pairs in collected(checkpoint, "out").values():
        for word, n in pairs:
            got[word] += n
    truth = Counter(w for window in corpus(windows, lines) for line in window for w in line.split())
    print(f"\n{app.last_window + 1} windows in {elapsed:.1f}s; top words:")
    for word, n in got.most_common(5):
        print(f"  {word:<10} {n}")
    exact = got == truth
    print(
        f"\nexactness check against the ground truth: {'EXACT' if exact else 'MISMATCH'}"
        f" ({sum(got.values())} words counted, {sum(truth.values())} in the input)"
    )
    spark.stop()
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
