"""Shared pieces of the file connector tests (``tests/io/test_fs_*.py``): a place on the local
filesystem or on the real HDFS fixture, harness helpers, and the word-count DAG of the
crash tests (its operators live here so that Spark's workers import them by reference)."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from malhar import DAG, InputPort, Operator, OperatorContext, OutputPort
from malhar.algo import UniqueCounter
from malhar.io.fs import LinesFileInput, ParquetFileOutput
from malhar.testing.harness import OperatorHarness
from malhar.util.fs import FileSystem, filesystem_for

WHERE = ["local", "hdfs"]


class Place:
    """A folder on one filesystem, with what the tests do there."""

    def __init__(self, url: str, kind: str) -> None:
        self.base = url.rstrip("/")
        self.kind = kind
        self.fs: FileSystem
        self.fs, self.root = filesystem_for(self.base)

    def url(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def write(self, rel: str, data: bytes | str, mtime: float | None = None) -> str:
        """Write a whole file under a hidden name and rename it into place (as producers
        should); optionally set its modification time (seconds)."""
        if isinstance(data, str):
            data = data.encode()
        path = self.path(rel)
        self.fs.mkdirs(self.fs.dirname(path))
        self.fs.write_atomic(path, data)
        if mtime is not None:
            self.set_mtime(rel, mtime)
        return path

    def set_mtime(self, rel: str, mtime: float) -> None:
        path = self.path(rel)
        if self.kind == "local":
            os.utime(path, (mtime, mtime))
        else:
            self.fs.client.set_times(path, modification_time=int(mtime * 1000))

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel))

    def files(self, rel: str = "") -> list[str]:
        """Relative paths of every file below ``rel`` (hidden ones included)."""
        out: list[str] = []
        start = self.path(rel) if rel else self.root

        def walk(folder: str) -> None:
            if not self.fs.exists(folder):
                return
            for e in self.fs.list(folder):
                if e.is_dir:
                    walk(e.path)
                else:
                    out.append(e.path[len(self.root) + 1 :])

        walk(start)
        return sorted(out)

    def read(self, rel: str) -> bytes:
        return self.fs.read_all(self.path(rel))

    def parquet_rows(self, rel: str = "") -> list[dict[str, Any]]:
        """The rows of the visible Parquet files below ``rel`` (hidden names skipped), with
        the Hive partition values of their directories."""
        rows = []
        for f in self.files(rel):
            parts = f.split("/")
            if any(p.startswith(("_", ".")) for p in parts):
                continue
            table = pq.read_table(pa.py_buffer(self.read(f)))
            extra = dict(p.split("=", 1) for p in parts[:-1] if "=" in p)
            for row in table.to_pylist():
                rows.append({**row, **extra})
        return rows


@pytest.fixture(params=WHERE, name="place")
def place_fixture(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Place]:
    """A fresh folder on the local filesystem, then on the real HDFS fixture."""
    if request.param == "local":
        yield Place(str(tmp_path / "data"), "local")
        return
    hdfs = request.getfixturevalue("hdfs_service")
    os.environ.setdefault("MALHAR_WEBHDFS_URL", hdfs.webhdfs_url)
    place = Place(f"{hdfs.url}/fs-tests/{uuid.uuid4().hex[:10]}", "hdfs")
    yield place
    place.fs.delete(place.root, recursive=True)


def harness(
    op: Any,
    checkpoint: str,
    *,
    partition: int = 0,
    partitions: int = 1,
    name: str = "in",
    saved: bytes | None = None,
    application: str = "fs-tests",
) -> OperatorHarness:
    ctx = OperatorContext(
        name=name,
        checkpoint=checkpoint,
        partition=partition,
        partitions=partitions,
        application=application,
    )
    if saved is not None:
        return OperatorHarness.restored(op, saved, ctx)
    return OperatorHarness(op, ctx)


def drain(h: OperatorHarness, most: int = 10_000) -> int:
    """Run windows until one reads nothing; return the last window run."""
    for _ in range(most):
        h.run_window()
        quiet = not h.sink("output").per_window.get(h.window)
        if quiet and not h.sink("error").per_window.get(h.window) and not h.operator._queue:
            return h.window
    raise AssertionError("the input never ran dry")


def values(h: OperatorHarness, column: str = "line") -> list[Any]:
    return [t[column] for t in h.sink("output").tuples]


# -- the word count of the crash tests --------------------------------------------------------------
class SplitWords(Operator):
    """Lines (``line string`` batches) -> words (``word string`` batches)."""

    input = InputPort("line string")
    output = OutputPort("word string")

    def process_batch(self, batch: pa.RecordBatch) -> None:
        words = pc.list_flatten(pc.utf8_split_whitespace(batch.column(0)))
        if len(words):
            self.output.emit_batch(pa.RecordBatch.from_arrays([words], names=["word"]))

    def process(self, row: dict[str, Any]) -> None:
        for word in row["line"].split():
            self.output.emit({"word": word})


WORDS_SCHEMA = "word string, count bigint"


def wordcount_dag(
    name: str,
    source: str,
    out: str,
    *,
    block_size: int = 300,
    post_action: str = "none",
    move_to: str | None = None,
    max_records: int = 40,
    roll_windows: int = 3,
) -> DAG:
    """files -> lines (2 partitions, blocks) -> words -> UniqueCounter (2) -> rolling Parquet
    (2 partitions; ``roll_windows=1``: a file per window, each staged whole)."""
    dag = DAG(name)
    src = dag.add_operator(
        "lines",
        LinesFileInput(
            source,
            block_size=block_size,
            scan_interval_ms=0,
            max_records_per_window=max_records,
            post_action=post_action,
            move_to=move_to,
        ),
        PARTITIONS=2,
    )
    split = dag.add_operator("split", SplitWords(), PARTITIONS=2)
    count = dag.add_operator("count", UniqueCounter(key_name="word"), PARTITIONS=2)
    sink = dag.add_operator(
        "out",
        ParquetFileOutput(out, schema=WORDS_SCHEMA, roll_windows=roll_windows, roll_ms=2_000),
        PARTITIONS=2,
    )
    dag.add_stream("lines", src.output, split.input)
    dag.add_stream("words", split.output, count.data)
    dag.add_stream("counts", count.count, sink.input)
    return dag


def word_truth(texts: list[str]) -> Counter:
    return Counter(w for t in texts for w in t.split())


def parquet_counts(rows: list[dict[str, Any]]) -> Counter:
    out: Counter = Counter()
    for r in rows:
        out[r["word"]] += r["count"]
    return out


# -- the crash tests' driver process ------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``python -m tests.io.fs_support CHECKPOINT SOURCE OUT MASTER NAME ROLL_WINDOWS
    [MOVE_TO]``: run the word count until SIGTERM (clean stop, exit 0) or SIGKILL."""
    import sys

    from malhar import build_session, launch
    from samples.driver import serve

    checkpoint, source, out, master, name, roll, *rest = argv if argv is not None else sys.argv[1:]
    move_to = rest[0] if rest else None
    dag = wordcount_dag(
        name,
        source,
        out,
        post_action="move" if move_to else "none",
        move_to=move_to,
        roll_windows=int(roll),
    )
    spark = build_session(master, app_name=name, shuffle_partitions=2)
    app = launch(dag, spark=spark, checkpoint=checkpoint, window_ms=100)
    return serve(app)


if __name__ == "__main__":
    raise SystemExit(main())
