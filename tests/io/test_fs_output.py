"""The file output (``malhar.io.fs``) on the local filesystem and the real HDFS fixture:
rolling, visibility only after commit, replays and crashes without duplicates, rejected
tuples, Hive partitions read back by Spark, every format, and the Spark sink."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from malhar import OperatorContext
from malhar.io.base.committer import WindowCommitter
from malhar.io.base.output import WindowContentMismatchError, WindowKey, WindowRegressionError
from malhar.io.fs import (
    CsvFileOutput,
    FileOutputConfigError,
    FileOutputOperator,
    JsonLinesFileOutput,
    LinesFileOutput,
    ParquetFileOutput,
)
from malhar.io.fs.store import FileStore
from malhar.testing.harness import OperatorHarness
from tests.io.fs_support import Place, place_fixture  # noqa: F401

pytestmark = pytest.mark.integration

DDL = "day date, word string, count bigint"


class Clock:
    """Milliseconds the tests move by hand (rolling by time without waiting)."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def out_harness(op: FileOutputOperator, clock: Clock | None = None, partition: int = 0, **kw: Any):
    """A harness over an output partition (of 2) of the application ``fs-tests``."""
    ctx = OperatorContext(
        name=kw.pop("name", "out"),
        partition=partition,
        partitions=kw.pop("partitions", 2),
        application="fs-tests",
    )
    if clock is not None:
        original = op.create_store

        def create_store(context: Any) -> FileStore:
            store = original(context)
            store.clock = clock
            return store

        op.create_store = create_store  # type: ignore[method-assign]
    return OperatorHarness(op, ctx)


def rows(n: int, first: int = 0, day: str = "2026-11-23") -> list[tuple[str, dict[str, Any]]]:
    d = dt.date.fromisoformat(day)
    return [("input", {"day": d, "word": f"w{i}", "count": i}) for i in range(first, first + n)]


def visible(place: Place) -> list[str]:
    return [f for f in place.files() if not any(p[0] in "._" for p in f.split("/"))]


# -- rolling and visibility ----------------------------------------------------------------------
def test_windows_roll_by_records_bytes_windows_and_time(place: Place) -> None:
    clock = Clock()
    h = out_harness(
        ParquetFileOutput(place.url("r"), schema=DDL, roll_records=5, roll_ms=10_000), clock
    )
    h.run_window(rows(3), window=0)
    h.run_window(rows(3, 3), window=1)  # 6 >= 5: rolls
    h.run_window(rows(1, 6), window=2)
    assert visible(place) == []  # nothing committed yet
    h.committed(1)
    assert visible(place) == ["r/part-fs-tests-out-00000-000000000000-000000000001.parquet"]
    assert sorted(r["count"] for r in place.parquet_rows("r")) == list(range(6))
    h.run_window([], window=3)
    clock.now += 10_000  # the open file (window 2) is 10 s old: an empty window closes it
    h.run_window([], window=4)
    h.committed(3)
    assert len(visible(place)) == 1  # window 4 closed it: not committed yet
    h.committed(4)
    assert visible(place)[-1].endswith("-000000000002-000000000004.parquet")
    assert sorted(r["count"] for r in place.parquet_rows("r")) == list(range(7))

    w = out_harness(ParquetFileOutput(place.url("w"), schema=DDL, roll_windows=3), clock)
    for window in range(7):
        w.run_window(rows(1, window) if window % 2 == 0 else [], window=window)
    w.committed(6)
    assert [f.rsplit("-", 2)[1:] for f in visible(place) if f.startswith("w/")] == [
        ["000000000000", "000000000002.parquet"],
        ["000000000004", "000000000006.parquet"],  # windows 3 and 5 had no rows
    ]

    b = out_harness(ParquetFileOutput(place.url("b"), schema=DDL, roll_bytes=2_000), clock)
    for window in range(6):
        b.run_window(rows(20, 20 * window), window=window)
    b.committed(5)
    files = [f for f in visible(place) if f.startswith("b/")]
    assert 2 <= len(files) < 6
    last = int(files[-1].rsplit("-", 1)[1].split(".")[0])  # the last window published
    assert sorted(r["count"] for r in place.parquet_rows("b")) == list(range(20 * (last + 1)))


def test_replays_are_skipped_and_a_crash_before_or_during_finalization_loses_nothing(
    place: Place,
) -> None:
    def op() -> ParquetFileOutput:
        return ParquetFileOutput(place.url("o"), schema=DDL, roll_windows=2)

    h = out_harness(op())
    h.run_window(rows(2), window=0)
    h.run_window(rows(2, 2), window=1)
    h.run_window(rows(2, 4), window=2)
    # the partition dies before committed(1) arrives; a new instance replays window 2
    again = out_harness(op())
    again.run_window(rows(2, 4), window=2)
    again.run_window(rows(2, 6), window=3)
    assert visible(place) == []

    # committed(3): the first finalization dies after publishing its file, before recording it
    # (the first durable write records the files it is about to publish)
    store: FileStore = again.operator._store
    real = store.fs.write_atomic
    store.fs.write_atomic = _raise_once(real, 2)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        again.committed(3)
    store.fs.write_atomic = real  # type: ignore[method-assign]
    assert len(visible(place)) == 1
    third = out_harness(op())
    third.run_window(rows(2, 6), window=3)  # a replay: skipped
    third.committed(3)
    assert sorted(r["count"] for r in place.parquet_rows("o")) == list(range(8))
    assert len(visible(place)) == 2
    # window ids going backwards (a new checkpoint under the same name) are refused
    fourth = out_harness(op())
    with pytest.raises(WindowRegressionError):
        fourth.run_window(rows(1), window=0)


def test_a_window_that_is_its_own_file_is_staged_whole_and_published_by_a_rename(
    place: Place,
) -> None:
    def op() -> ParquetFileOutput:
        return ParquetFileOutput(place.url("f"), schema=DDL, roll_windows=1, retry_backoff=0)

    def staged() -> list[str]:
        return sorted(f.rsplit("/", 1)[-1] for f in place.files("f/_malhar/fs-tests/out/0"))

    def magic(window: int) -> bytes:
        return place.fs.read(place.path(f"f/_malhar/fs-tests/out/0/w{window:020d}.arrow"), 0, 4)

    h = out_harness(op())
    h.run_window(rows(3), window=0)
    h.run_window([], window=1)  # no rows: nothing staged
    h.run_window(
        [*rows(1, 3), ("input", {"word": "x", "count": "many"})], window=2
    )  # a rejected row: the window is staged encoded (a replay re-emits it)
    assert staged() == ["w00000000000000000000.arrow", "w00000000000000000002.arrow"]
    assert (magic(0), magic(2)) == (b"PAR1", b"ARRO")  # one name per window, either kind
    staged_bytes = place.fs.read_all(place.path("f/_malhar/fs-tests/out/0/" + staged()[0]))
    h.committed(0)
    first = "f/part-fs-tests-out-00000-000000000000-000000000000.parquet"
    assert visible(place) == [first]
    assert place.fs.read_all(place.path(first)) == staged_bytes  # renamed, not rewritten
    assert pa.parquet.read_schema(pa.py_buffer(staged_bytes)).metadata is None

    h.committed(2)
    # committed(w) dies while recording w (the first rename: finalized.json's), then, in a
    # new instance, between recording w and its file's rename (the second)
    for window, at in ((3, 1), (4, 2)):
        h.run_window(rows(1, window + 1), window=window)
        store: FileStore = h.operator._store
        real = store.fs.rename
        store.fs.rename = _raise_once(real, at)  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="killed"):
            h.committed(window)
        store.fs.rename = real  # type: ignore[method-assign]
        assert len(visible(place)) == window - 1  # windows 0, 2, ...: not this one
        h = out_harness(op())
        h.run_window(rows(1, window + 1), window=window)  # a replay: skipped
        if at == 1:
            h.committed(window)  # the piece is still staged: published now
        # else: the load found the piece recorded and renamed it
        assert len(visible(place)) == window
        assert sorted(r["count"] for r in place.parquet_rows("f")) == list(range(window + 2))
        assert staged() == ["finalized.json", "publishing.json"]  # window 2's was a group


def test_a_whole_window_keeps_one_name_per_window_and_follows_changed_settings(
    place: Place,
) -> None:
    def op(**settings: Any) -> FileOutputOperator:
        fmt = settings.pop("format", "parquet")
        return FileOutputOperator(
            place.url("c"), format=fmt, schema=DDL, retry_backoff=0, **settings
        )

    # a zombie writer of the partition with other settings (an upgrade changed roll_windows)
    # and another row count: it stages encoded, the new writer whole; one commits window 0
    new, zombie = out_harness(op(roll_windows=1)), out_harness(op(roll_windows=3))
    new.setup()
    zombie.setup()
    new.run_window(rows(3), window=0)
    zombie.run_window(rows(4), window=0)  # its rename finds the name taken: skipped
    again = out_harness(op(roll_windows=1))
    again.setup()
    again.committed(0)
    assert sorted(r["count"] for r in place.parquet_rows("c")) == [0, 1, 2]

    # windows 1 and 2 staged whole, committed in the partition, not yet in the application;
    # window 2 recorded in finalized.json, its rename interrupted
    again.run_window(rows(1, 3), window=1)
    again.run_window(rows(1, 4), window=2)
    again.committed(1)
    store: FileStore = again.operator._store
    real = store.fs.rename
    store.fs.rename = _raise_once(real, 2)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        again.committed(2)
    store.fs.rename = real  # type: ignore[method-assign]
    again.run_window(rows(1, 5), window=3)  # staged whole, not finalized
    # a restart as CSV, with a new compression: the staged Parquet is decoded, not renamed
    csv = out_harness(op(roll_windows=1, format="csv", compression="gzip"))
    csv.setup()
    csv.committed(3)
    names = [f.rsplit("/", 1)[-1] for f in visible(place)]
    assert names == [
        "part-fs-tests-out-00000-000000000000-000000000000.parquet",
        "part-fs-tests-out-00000-000000000001-000000000001.parquet",
        "part-fs-tests-out-00000-000000000002-000000000002.csv.gz",
        "part-fs-tests-out-00000-000000000003-000000000003.csv.gz",
    ]
    texts = [gzip.decompress(place.fs.read_all(place.path("c", n))).decode() for n in names[2:]]
    head = '"day","word","count"\n'
    assert texts == [head + '2026-11-23,"w4",4\n', head + '2026-11-23,"w5",5\n']

    # and a restart with zstd: a snappy piece is re-encoded, not published under a zstd name
    z = out_harness(op(roll_windows=1))
    z.run_window(rows(1, 6), window=4)
    zstd = out_harness(op(roll_windows=1, compression="zstd"))
    zstd.setup()
    zstd.committed(4)
    last = place.path("c", visible(place)[-1].rsplit("/", 1)[-1])
    meta = pa.parquet.ParquetFile(pa.py_buffer(place.fs.read_all(last))).metadata
    assert str(meta.row_group(0).column(0).compression) == "ZSTD"


def test_an_interrupted_publication_is_finished_as_it_began_after_a_settings_change(
    place: Place,
) -> None:
    # names come from the settings: a group published as Parquet, not yet recorded, then
    # finished as CSV after the restart would have published its rows twice
    def op(**settings: Any) -> FileOutputOperator:
        return FileOutputOperator(
            place.url("p"), schema=DDL, roll_windows=2, retry_backoff=0, **settings
        )

    h = out_harness(op())
    h.run_window(rows(2), window=0)
    h.run_window(rows(2, 2), window=1)
    store: FileStore = h.operator._store
    real = store.fs.write_atomic
    store.fs.write_atomic = _raise_once(real, 2)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        h.committed(1)  # dies after publishing the group's file, before recording it
    store.fs.write_atomic = real  # type: ignore[method-assign]
    assert [f.rsplit(".", 1)[-1] for f in visible(place)] == ["parquet"]

    csv = out_harness(op(format="csv", file_prefix="csv"))
    csv.run_window(rows(2, 4), window=2)
    csv.run_window(rows(2, 6), window=3)
    # the group of windows 2-3 dies before any of its files is visible
    store = csv.operator._store
    real = store.fs.rename
    store.fs.rename = _raise_once(real)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        csv.committed(3)
    store.fs.rename = real  # type: ignore[method-assign]

    gz = out_harness(op(format="csv", file_prefix="csv", compression="gzip"))
    gz.setup()
    gz.committed(3)
    names = [f.rsplit("/", 1)[-1] for f in visible(place)]
    assert names == [
        # nothing of it was visible: published under the settings in force now
        "csv-fs-tests-out-00000-000000000002-000000000003.csv.gz",
        # finished as it began, once (no .csv of windows 0-1)
        "part-fs-tests-out-00000-000000000000-000000000001.parquet",
    ]
    parquet = pq.read_table(pa.BufferReader(place.read(f"p/{names[1]}")))
    assert sorted(parquet.column("count").to_pylist()) == [0, 1, 2, 3]
    text = gzip.decompress(place.read(f"p/{names[0]}")).decode()
    assert text.splitlines()[1:] == [f'2026-11-23,"w{i}",{i}' for i in range(4, 8)]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"format": "csv", "file_prefix": "csv"}, {"format": "parquet"}),
        ({"partition_by": "day"}, {}),  # the leftover is in the day's folder
    ],
)
def test_leftovers_under_names_of_earlier_settings_are_swept_after_a_restart(
    place: Place, before: dict[str, Any], after: dict[str, Any]
) -> None:
    def op(**settings: Any) -> FileOutputOperator:
        return FileOutputOperator(
            place.url("e"), schema=DDL, roll_windows=2, retry_backoff=0, **settings
        )

    h = out_harness(op(**before))
    h.run_window(rows(2), window=0)
    h.run_window(rows(2, 2), window=1)
    store: FileStore = h.operator._store
    real = store.fs.rename

    def killed_before_placing(src: str, dst: str, overwrite: bool = False) -> None:
        if src.endswith(".inprogress"):
            raise RuntimeError("killed before the rename into place")
        real(src, dst, overwrite=overwrite)

    store.fs.rename = killed_before_placing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        h.committed(1)  # its in-progress file is written, not renamed into place
    store.fs.rename = real  # type: ignore[method-assign]
    assert [f for f in place.files("e") if f.endswith(".inprogress")]

    again = out_harness(op(**after))
    again.setup()
    again.committed(1)  # published under the new names: the old ones' leftover goes too
    assert not [f for f in place.files("e") if f.endswith(".inprogress")]
    assert len(visible(place)) == 1
    assert sorted(r["count"] for r in place.parquet_rows("e")) == [0, 1, 2, 3]


def test_a_whole_window_placed_by_an_interrupted_rename_is_not_published_again(
    place: Place,
) -> None:
    # the local rename links the new name, then unlinks the old: a crash in between leaves
    # the file visible and its piece staged; a restart under another codec would re-encode
    # the piece under a new name
    def op(**settings: Any) -> ParquetFileOutput:
        return ParquetFileOutput(place.url("w"), schema=DDL, roll_windows=1, **settings)

    h = out_harness(op())
    h.run_window(rows(3), window=0)
    store: FileStore = h.operator._store
    real = store.fs.rename

    def placed_then_killed(src: str, dst: str, overwrite: bool = False) -> None:
        if not src.endswith("w00000000000000000000.arrow"):
            return real(src, dst, overwrite=overwrite)
        staged = place.fs.read_all(src)
        real(src, dst, overwrite=overwrite)
        place.fs.create(src, staged)
        raise RuntimeError("killed between link and unlink")

    store.fs.rename = placed_then_killed  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        h.committed(0)
    store.fs.rename = real  # type: ignore[method-assign]
    again = out_harness(op(compression="zstd", file_prefix="z"))
    again.setup()
    assert visible(place) == ["w/part-fs-tests-out-00000-000000000000-000000000000.parquet"]
    assert sorted(r["count"] for r in place.parquet_rows("w")) == [0, 1, 2]
    assert [f for f in place.files("w/_malhar") if f.endswith(".arrow")] == []


def test_a_whole_window_published_by_value_after_a_restart_is_finished_as_it_began(
    place: Place,
) -> None:
    # recorded as finalized, its rename killed; restarted with partition_by, killed after
    # one value's file; restarted as before: the rename would have published it again
    def op(**settings: Any) -> ParquetFileOutput:
        return ParquetFileOutput(place.url("h"), schema=DDL, roll_windows=1, **settings)

    h = out_harness(op())
    h.run_window(rows(2) + rows(1, 2, day="2026-11-24"), window=0)
    fs = h.operator._store.fs  # the process's filesystem object: patched, then restored
    try:
        fs.rename = _raise_once(fs.rename, 2)  # 1: finalized.json, 2: the piece into place
        with pytest.raises(RuntimeError, match="killed"):
            h.committed(0)
        fs.rename = _raise_once(type(fs).rename.__get__(fs), 3)  # intent, a day, the other
        with pytest.raises(Exception, match="killed"):
            out_harness(op(partition_by="day")).setup()
    finally:
        del fs.rename
    assert len(visible(place)) == 1
    out_harness(op()).setup()
    assert sorted(r["count"] for r in place.parquet_rows("h")) == [0, 1, 2]
    assert all("day=" in f for f in visible(place))


def test_partitions_removed_by_a_repartitioning_are_published_by_partition_0(
    place: Place,
) -> None:
    # the old partitions stop after their last window and never hear committed(w) for it:
    # partition 1's open file was left staged for good
    def op() -> ParquetFileOutput:
        return ParquetFileOutput(place.url("r"), schema=DDL)  # rolls by time: files stay open

    old = [out_harness(op(), partition=p) for p in (0, 1)]
    for w in range(3):
        for p, h in enumerate(old):
            if w:
                h.committed(w - 1)
            h.run_window(rows(1, 10 * w + p), window=w)
    for h in old:
        h.teardown()
    one = out_harness(op(), partitions=1)
    one.run_window(rows(1, 30), window=3)
    one.committed(2)  # windows up to 2 (all of the former partitions') are complete
    # partition 1's file under its own name; partition 0's stays open (window 3 joined it)
    assert sorted(r["count"] for r in place.parquet_rows("r")) == [1, 11, 21]
    assert [f.rsplit("/", 1)[-1] for f in visible(place)] == [
        "part-fs-tests-out-00001-000000000000-000000000002.parquet"
    ]
    assert place.files("r/_malhar/fs-tests/out/1") == []


def _raise_once(fn: Any, at: int = 1) -> Any:
    """``fn``, but its call number ``at`` raises (a process killed there)."""
    calls = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == at:
            raise RuntimeError("killed between publishing and recording")
        return fn(*args, **kwargs)

    return wrapped


def test_leftovers_of_an_interrupted_finalization_are_swept_once_after_a_restart(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    def op() -> ParquetFileOutput:
        # a file per window, written at finalization (roll_windows=1 would stage it whole)
        return ParquetFileOutput(place.url("s"), schema=DDL, roll_records=1)

    h = out_harness(op())
    h.run_window(rows(1), window=0)
    h.run_window(rows(1, 1), window=1)
    # a crashed attempt at window 0's file left its in-progress file behind
    leftover = ".part-fs-tests-out-00000-000000000000-000000000000.parquet.dead.inprogress"
    place.write(f"s/{leftover}", b"partial")
    again = out_harness(op())
    again.setup()
    store: FileStore = again.operator._store
    listed: list[str] = []
    real = store.fs.list

    def counting(path: str) -> Any:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(store.fs, "list", counting)  # a shared instance: restored after
    again.committed(0)  # the first group finalized after the restart: its folder is swept
    assert not place.exists(f"s/{leftover}")
    assert listed.count(place.path("s")) == 1
    again.committed(1)  # later files do not list the output folder (O(files) each)
    assert listed.count(place.path("s")) == 1
    assert sorted(r["count"] for r in place.parquet_rows("s")) == [0, 1]


def test_a_restart_reads_the_staged_pieces_metadata_not_their_rows(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the Spark sink's driver re-loads the store per batch: on HDFS whole pieces were read
    def op() -> ParquetFileOutput:  # a group of windows (Arrow pieces) and a whole piece
        return ParquetFileOutput(place.url("m"), schema=DDL, roll_windows=2)

    h = out_harness(op())
    h.run_window(rows(20_000), window=0)
    h.run_window(rows(20_000, 20_000), window=1)  # rolls: two Arrow pieces
    h.run_window(rows(20_000, 40_000), window=2)  # the open group's first piece
    staged = sum(place.fs.status(place.path(f)).size for f in place.files() if "/_malhar/" in f)
    assert staged > 1_000_000
    again = out_harness(op())
    read: list[int] = []
    real = place.fs.read

    def counting(path: str, offset: int = 0, length: int | None = None) -> bytes:
        data = real(path, offset, length)
        read.append(len(data))
        return data

    monkeypatch.setattr(place.fs, "read", counting)  # the store's instance: restored after
    again.setup()
    store: FileStore = again.operator._store
    assert [[p.window for p in g.pieces] for g in store.groups] == [[0, 1], [2]]
    assert [p.rows for g in store.groups for p in g.pieces] == [20_000] * 3
    assert sum(read) < staged // 10, (sum(read), staged)
    again.committed(2)
    assert len(place.parquet_rows("m")) == 40_000


def test_two_writers_of_one_window_commit_it_once(place: Place) -> None:
    a = out_harness(ParquetFileOutput(place.url("z"), schema=DDL, roll_windows=1, retry_backoff=0))
    b = out_harness(ParquetFileOutput(place.url("z"), schema=DDL, roll_windows=1, retry_backoff=0))
    a.setup()
    b.setup()  # both read "nothing committed"
    a.run_window(rows(2), window=0)
    b.run_window(rows(2), window=0)  # its rename finds the name taken: it re-reads and skips
    a.committed(0)
    assert sorted(r["count"] for r in place.parquet_rows("z")) == [0, 1]


def test_writers_whose_file_names_would_collide_are_refused(place: Place) -> None:
    # names join prefix, application and operator with "-": app "fs" + op "tests-out" and
    # app "fs-tests" + op "out" both wrote part-fs-tests-out-...; the second's file was
    # taken for its own, already published, and its rows were dropped
    def run(app: str, name: str, first: int) -> None:
        ctx = OperatorContext(name=name, partition=0, partitions=1, application=app)
        h = OperatorHarness(ParquetFileOutput(place.url("c"), schema=DDL, roll_windows=1), ctx)
        h.run_window(rows(1, first), window=0)
        h.committed(0)

    run("fs", "tests-out", 0)
    with pytest.raises(FileOutputConfigError, match=r"'part-fs-tests-out'.*file_prefix"):
        run("fs-tests", "out", 1)
    run("fs-tests", "out2", 2)  # names of its own: fine
    assert sorted(r["count"] for r in place.parquet_rows("c")) == [0, 2]


def test_an_output_path_that_is_a_file_is_named(place: Place) -> None:
    # it failed, after the retries, with "StorageExistsError: already exists: File exists"
    place.write("taken", b"a file")
    ctx = OperatorContext(name="out", partition=0, partitions=1, application="fs-tests")
    h = OperatorHarness(ParquetFileOutput(place.url("taken"), schema=DDL, roll_windows=1), ctx)
    with pytest.raises(FileOutputConfigError, match=r"taken is a file: give a directory"):
        h.run_window(rows(1), window=0)
    assert place.read("taken") == b"a file"


@pytest.mark.parametrize("roll_windows", [1, 2])
def test_a_published_window_still_verifies_a_rerun_of_it(place: Place, roll_windows) -> None:
    # the Spark sink publishes a batch in the driver's commit; a driver killed before
    # Spark's commit log re-runs the batch: once the pieces were gone (published), the
    # partitions that had it skipped without comparing the re-run's fingerprint
    settings = FileOutputOperator(
        place.url("v"), format="parquet", schema=DDL, roll_windows=roll_windows
    ).output_settings()
    key = WindowKey("fs-tests", "sink", 0)
    first = WindowCommitter(FileStore(settings, key))
    first.open()
    table = pa.Table.from_pylist([r for _, r in rows(2)])
    first.commit_window(0, table.slice(0, 1), digest="a")
    first.commit_window(1, table, digest="b")
    first.store.committed(1)
    assert sorted(r["count"] for r in place.parquet_rows("v")) == [0, 0, 1]
    again = WindowCommitter(FileStore(settings, key))
    again.open()
    assert again.commit_window(1, table, digest="b").skipped
    with pytest.raises(WindowContentMismatchError, match="window 1 re-ran with other input"):
        again.commit_window(1, table.slice(1), digest="c")
    assert sorted(r["count"] for r in place.parquet_rows("v")) == [0, 0, 1]


def test_partitions_and_operators_write_their_own_files(place: Place) -> None:
    for partition in (0, 1):
        for name in ("a", "b"):
            h = out_harness(
                ParquetFileOutput(place.url("p"), schema=DDL, roll_windows=1),
                partition=partition,
                name=name,
            )
            h.run_window(rows(1, partition), window=5)
            h.committed(5)
    names = visible(place)
    assert len(names) == 4 and len(set(names)) == 4
    assert sorted(r["count"] for r in place.parquet_rows("p")) == [0, 0, 1, 1]


def test_rejected_tuples_go_to_the_error_port_and_replay(place: Place) -> None:
    def op() -> ParquetFileOutput:
        return ParquetFileOutput(place.url("e"), schema="word string not null, count bigint")

    h = out_harness(op())
    h.run_window(
        [
            ("input", {"word": "a", "count": 1}),
            ("input", {"word": "b", "count": "many"}),
            ("input", {"word": "c", "count": 2, "extra": 1}),
            ("input", {"count": 3}),
            ("input", "not a row"),
            ("input", pa.RecordBatch.from_pylist([{"word": "d", "count": 4}])),
        ],
        window=0,
    )
    reasons = [e["error"] for e in h.sink("error").tuples]
    assert len(reasons) == 4
    assert "does not fit the schema" in reasons[0]
    assert "unknown field(s) ['extra']" in reasons[1]
    assert "required field(s) ['word']" in reasons[2]
    assert "expected a mapping" in reasons[3]
    again = out_harness(op())
    again.run_window([("input", {"word": "a", "count": 1})], window=0)  # a replay
    assert [e["error"] for e in again.sink("error").tuples] == reasons


# -- layouts and formats --------------------------------------------------------------------------
def test_hive_partitions_read_back_by_spark(place: Place, spark) -> None:
    h = out_harness(
        ParquetFileOutput(place.url("hive"), schema=DDL, partition_by="day", roll_windows=2)
    )
    h.run_window(rows(3, 0, "2026-11-23") + rows(2, 3, "2026-11-24"), window=0)
    h.run_window(
        [*rows(1, 5, "2026-11-24"), ("input", {"day": None, "word": "n", "count": 9})], window=1
    )
    h.committed(1)
    dirs = sorted({f.split("/")[1] for f in visible(place)})
    assert dirs == ["day=2026-11-23", "day=2026-11-24", "day=__HIVE_DEFAULT_PARTITION__"]
    back = spark.read.parquet(place.url("hive"))
    got = sorted((str(r.day), r.word, r["count"]) for r in back.collect())
    assert dict(back.dtypes)["day"] == "date"
    assert got == sorted(
        [("2026-11-23", f"w{i}", i) for i in range(3)]
        + [("2026-11-24", f"w{i}", i) for i in range(3, 6)]
        + [("None", "n", 9)]
    )


def test_hive_partitions_of_a_float_column_keep_nan_rows(place: Place) -> None:
    # NaN equals nothing, itself included: its rows were selected by none of the folders
    h = out_harness(
        ParquetFileOutput(
            place.url("f"), schema="k double, word string", partition_by="k", roll_windows=1
        )
    )
    values = [1.0, float("nan"), None, float("nan")]
    h.run_window([("input", {"k": k, "word": f"w{i}"}) for i, k in enumerate(values)], window=0)
    h.committed(0)
    files = visible(place)
    assert sorted({f.split("/")[1] for f in files}) == [
        "k=1.0",
        "k=NaN",  # as Spark writes it (and reads it back as a double)
        "k=__HIVE_DEFAULT_PARTITION__",
    ]
    words = {
        f.split("/")[1]: sorted(
            pq.read_table(pa.BufferReader(place.read(f))).column("word").to_pylist()
        )
        for f in files
    }
    assert words == {"k=1.0": ["w0"], "k=NaN": ["w1", "w3"], "k=__HIVE_DEFAULT_PARTITION__": ["w2"]}


def test_csv_json_lines_and_text_files(place: Place) -> None:
    c = out_harness(
        CsvFileOutput(
            place.url("csv"), schema="word string, count bigint", roll_windows=1, compression="gzip"
        )
    )
    c.run_window(
        [("input", {"word": "a,b", "count": 1}), ("input", {"word": "c", "count": None})], window=0
    )
    c.committed(0)
    (name,) = [f for f in visible(place) if f.startswith("csv/")]
    assert name.endswith(".csv.gz")
    assert gzip.decompress(place.read(name)).decode() == '"word","count"\n"a,b",1\n"c",\n'

    j = out_harness(JsonLinesFileOutput(place.url("json"), roll_windows=1))
    j.run_window(
        [("input", {"a": 1, "d": dt.date(2026, 11, 23)}), ("input", {"b": [1, 2]})], window=0
    )
    j.committed(0)
    (name,) = [f for f in visible(place) if f.startswith("json/")]
    assert [json.loads(x) for x in place.read(name).decode().splitlines()] == [
        {"a": 1, "d": "2026-11-23"},
        {"b": [1, 2]},
    ]

    t = out_harness(LinesFileOutput(place.url("txt"), roll_windows=1))
    t.run_window([("input", "one"), ("input", "two\nthree"), ("input", {"line": "four"})], window=0)
    t.committed(0)
    (name,) = [f for f in visible(place) if f.startswith("txt/")]
    assert place.read(name) == b"one\nfour\n"
    assert len(t.sink("error").tuples) == 1


def test_text_files_with_a_schema_refuse_what_is_no_line(place: Place) -> None:
    # as without a schema: a newline would make two records of one, a null an empty line
    t = out_harness(LinesFileOutput(place.url("txt"), schema="text string", roll_windows=1))
    batch = pa.RecordBatch.from_pylist(
        [{"text": "five"}, {"text": "six\r\n"}, {"text": None}],
        schema=pa.schema([("text", pa.string())]),
    )
    t.run_window(
        [
            ("input", "one"),
            ("input", {"text": "two\nthree"}),
            ("input", {"text": None}),
            ("input", {"text": "four"}),
            ("input", batch),
        ],
        window=0,
    )
    t.committed(0)
    (name,) = [f for f in visible(place) if f.startswith("txt/")]
    assert place.read(name) == b"one\nfour\nfive\n"
    errors = sorted(e["error"] for e in t.sink("error").tuples)
    assert errors == ["a line cannot be null"] * 2 + ["a line cannot hold a newline"] * 2


@pytest.mark.parametrize(
    ("make", "good", "bad"),
    [
        (lambda url: LinesFileOutput(url, roll_windows=1), "ok", "bad\ud800"),
        (lambda url: JsonLinesFileOutput(url, roll_windows=1), {"v": "ok"}, {"v": "bad\ud800"}),
        (
            lambda url: CsvFileOutput(url, schema="v string", roll_windows=1),
            {"v": "ok"},
            {"v": "bad\ud800"},
        ),
    ],
)
def test_a_lone_surrogate_goes_to_the_error_port(tmp_path: Path, make, good, bad) -> None:
    # a str with no UTF-8 (json.loads('"\\ud800"'), surrogateescape) failed the window on
    # every replay with a UnicodeEncodeError (lines and JSON lines without a schema)
    t = out_harness(make(str(tmp_path / "out")))
    t.run_window([("input", good), ("input", bad)], window=0)
    t.committed(0)
    (error,) = t.sink("error").tuples
    assert "surrogates not allowed" in error["error"]
    assert {k: v for k, v in error.items() if k != "error"} in ({"value": bad}, bad)
    (written,) = [p for p in (tmp_path / "out").iterdir() if p.is_file()]
    assert b"ok" in written.read_bytes() and b"bad" not in written.read_bytes()


def test_settings_are_checked(tmp_path: Path) -> None:
    for props, why in [
        ({"format": "parquet"}, "needs a schema"),
        ({"format": "csv", "schema": "a bigint", "delimiter": ";;"}, "one character, got ';;'"),
        ({"schema": DDL, "partition_by": "month"}, "not a column"),
        ({"schema": DDL, "compression": "lzma"}, "compression"),
        ({"format": "csv", "schema": DDL, "compression": "zstd"}, "codecs of format 'csv'"),
        ({"schema": DDL, "file_prefix": "9x"}, "'9x' must start with a letter"),
        ({"schema": DDL, "roll_bytes": None, "roll_ms": None}, "no file would ever close"),
    ]:
        h = out_harness(FileOutputOperator(str(tmp_path), **props))
        with pytest.raises(FileOutputConfigError, match=why):
            h.setup()


def test_roll_bytes_none_means_no_byte_limit(tmp_path: Path) -> None:
    # it failed the window: '>=' not supported between instances of 'int' and 'NoneType'
    h = out_harness(FileOutputOperator(str(tmp_path), schema=DDL, roll_bytes=None, roll_windows=2))
    for w in range(3):
        h.run_window([("input", {"day": dt.date(2026, 1, 1), "word": "x", "count": w})], window=w)
    h.committed(2)
    [file] = tmp_path.glob("*.parquet")  # windows 0 and 1: rolled by roll_windows alone
    assert pq.read_table(file).column("count").to_pylist() == [0, 1]


# -- the Spark sink --------------------------------------------------------------------------------
def test_spark_sink_rolls_publishes_and_skips_rerun_batches(spark, tmp_path: Path) -> None:
    from malhar.io.fs import register

    register(spark)
    src, out, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()

    def add(i: int) -> None:
        (src / f"{i:03d}.csv").write_text("".join(f"{i},w{i}-{j}\n" for j in range(5)))

    def run() -> None:
        q = (
            spark.readStream.schema("n bigint, word string")
            .option("maxFilesPerTrigger", 1)
            .csv(str(src))
            .writeStream.format("malhar_files")
            .option("path", str(out))
            .option("name", "sink-test")
            .option("roll_windows", 2)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(300)
        assert q.exception() is None

    for i in range(5):
        add(i)
    run()
    written = Place(str(out), "local")
    got = written.parquet_rows()
    # 5 batches of one file each; batches 0-1 and 2-3 rolled and published, 4 still open
    assert len(got) == 20 and len({r["n"] for r in got}) == 4
    # Spark forgets that batch 4 committed: it re-runs it, the sink skips it
    (ckpt / "commits" / "4").unlink()
    (ckpt / "commits" / ".4.crc").unlink(missing_ok=True)  # else Spark sees a concurrent writer
    add(5)
    run()
    got = written.parquet_rows()
    assert sorted(r["n"] for r in got) == [i for i in range(6) for _ in range(5)]
    assert len({(r["n"], r["word"]) for r in got}) == 30
