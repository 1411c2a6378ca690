"""A running file input changes its partition count (issue 18 §4): its files and unfinished
splits, with their positions, move to the new partitions at a window boundary; every line is
read exactly once and every file's post action happens once."""

from __future__ import annotations

import pickle
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from malhar import DAG, OperatorContext, launch
from malhar.engine import generations
from malhar.errors import ConfigError
from malhar.io.fs import LinesFileInput, ParquetFileInput
from malhar.io.fs.errors import FileConfigError
from malhar.io.fs.partitions import deal
from malhar.io.fs.splits import CUT_RULE, OWN, TOTAL
from malhar.partitioning import Partition, PartitioningContext
from malhar.state import state_fields, window_snapshot
from malhar.testing.harness import OperatorHarness
from tests.drivers import kill_when_paused, start_driver
from tests.io.fs_repartition_app import build as _app
from tests.io.fs_repartition_app import lines as _got
from tests.io.fs_support import Place, drain, harness, place_fixture, values  # noqa: F401
from tests.io.test_kafka_input import run_until

pytestmark = pytest.mark.integration


def _files(place: Place, names: str, lines: int) -> list[str]:
    """A file of ``lines`` numbered lines per name (oldest first); return every line."""
    every = []
    for k, name in enumerate(names):
        text = [f"{name}{i:03d}" for i in range(lines)]
        place.write(f"in/{name}.txt", "".join(f"{x}\n" for x in text), mtime=1_000 + k)
        every += text
    return every


def _op(place: Place, **props: Any) -> LinesFileInput:
    base = {"block_size": 100, "scan_interval_ms": 0, "max_records_per_window": 7}
    return LinesFileInput(place.url("in"), **{**base, **props})


def _moved(hs: list[OperatorHarness], count: int, ckpt: str, **props: Any) -> list[Any]:
    """The partitions after a repartitioning of ``hs`` (all after the same window) to
    ``count``, as the engine rebuilds them: from snapshots, restored into fresh copies."""
    window = hs[0].window
    old = []
    for h in hs:
        op = type(h.operator)(h.operator.path, **props)
        saved = pickle.loads(h.checkpoint())
        op.__dict__.update(saved["operator"]["fields"])
        old.append(Partition(op))
        h.teardown()
    new = old[0].operator.define_partitions(old, PartitioningContext("in", requested=count))
    out = []
    for p, part in enumerate(new):
        saved = {"operator": window_snapshot(part.operator), "window": window}
        ctx = OperatorContext(
            name="in", checkpoint=ckpt, partition=p, partitions=count, application="fs-tests"
        )
        out.append(OperatorHarness.restored(_op_like(hs[0], props), cloudpickle.dumps(saved), ctx))
    return out


def _op_like(h: OperatorHarness, props: dict[str, Any]) -> Any:
    return type(h.operator)(h.operator.path, **props)


def _drain_all(hs: list[OperatorHarness]) -> int:
    """Run the partitions window by window together (as the engine does) until every one
    of them ran dry; return the last window."""
    while True:
        for h in hs:
            h.run_window()
        if not any(h.sink("output").per_window.get(h.window) or h.operator._queue for h in hs):
            return hs[0].window


def _lines(hs: list[OperatorHarness]) -> list[str]:
    return [x for h in hs for x in values(h)]


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 4)])
def test_unfinished_splits_move_with_their_positions_and_every_line_is_read_once(
    place: Place, tmp_path: Path, before: int, after: int
) -> None:
    every = _files(place, "abcd", 40)  # ~280 bytes each: 3 blocks of 100 bytes
    ckpt = str(tmp_path / "ck")
    props = {"block_size": 100, "scan_interval_ms": 0, "max_records_per_window": 7}
    hs = [harness(_op(place), ckpt, partition=p, partitions=before) for p in range(before)]
    for window in range(4):
        for h in hs[1:]:
            h.run_window()
        if window == 3:
            # a file that only partition 0 lists before the query stops: the other owners
            # of its blocks have not discovered it
            every += _files(place, "e", 80)  # 4 blocks: every partition owns some
        hs[0].run_window()
    e = place.path("in/e.txt")
    own, total = hs[0].operator._seen[e][OWN], hs[0].operator._seen[e][TOTAL]
    assert total == 4 and (own < total) == (before > 1)
    read_before = _lines(hs)
    assert 0 < len(read_before) < len(every)
    new = _moved(hs, after, ckpt, **props)
    assert [h.operator._partitions for h in new] == [after] * after
    for h in new:  # every new partition knows every file: none is discovered again
        assert sorted(h.operator._seen) == sorted(place.path(f"in/{n}.txt") for n in "abcde")
    for h in new:
        drain(h)
    assert Counter(read_before + _lines(new)) == Counter(every)
    if after > 1:
        assert sum(1 for h in new if values(h)) >= 2  # the rest is shared out
    # a file added after the repartitioning is cut for the new count and read once
    place.write("in/f.txt", "".join(f"f{i}\n" for i in range(40)), mtime=2_000)
    for h in new:
        drain(h)
    assert Counter(read_before + _lines(new)) == Counter(every + [f"f{i}" for i in range(40)])


@pytest.mark.parametrize("twice", [False, True])
def test_post_actions_happen_once_after_a_repartitioning(tmp_path: Path, twice: bool) -> None:
    place = Place(str(tmp_path / "data"), "local")
    every = _files(place, "abc", 40)
    every += _files(place, "z", 2)  # tiny: read to its end in the first window
    ckpt = str(tmp_path / "ck")
    props = {
        "block_size": 100,
        "scan_interval_ms": 0,
        "max_records_per_window": 7,
        "post_action": "delete",
    }
    hs = [
        harness(_op(place, post_action="delete"), ckpt, partition=p, partitions=2) for p in (0, 1)
    ]
    for _ in range(3):
        for h in hs:
            h.run_window()
    for h in hs:
        h.committed(1)  # some windows released, the rest not: W is never released before
    read = _lines(hs)
    hs = _moved(hs, 3, ckpt, **props)
    # a file read to its end in an unreleased window: its new coordinator will act
    assert any(h.operator._awaiting for h in hs)
    if twice:
        for h in hs:
            h.run_window()
        read += _lines(hs)
        hs = _moved(hs, 2, ckpt, **props)
    last = _drain_all(hs)
    read += _lines(hs)
    assert Counter(read) == Counter(every)
    assert len(place.files("in")) == 4  # nothing is deleted before its windows are committed
    for h in hs:
        h.committed(last)
    for h in hs:
        h.run_window()  # every partition leaves its marker; the coordinator acts a window later
        h.committed(last + 1)
        h.committed(last + 1)
    assert place.files("in") == []
    markers = tmp_path / "ck" / "malhar" / "files" / "in" / "done"
    assert not markers.exists() or not list(markers.iterdir())  # stale markers removed too


def test_the_input_repartitions_only_to_a_count_and_every_state_field_is_dealt(
    tmp_path: Path,
) -> None:
    op = LinesFileInput(str(tmp_path))
    with pytest.raises(ConfigError, match="ask for a partition count"):
        op.define_partitions([Partition(op)], PartitioningContext("in"))
    same = [Partition(op)]
    assert op.define_partitions(same, PartitioningContext("in", requested=1)) is same
    # deal sets every State field: a new one must be dealt too
    dealt = deal([LinesFileInput(str(tmp_path))], 2)[1]
    assert set(state_fields(LinesFileInput)) == {
        "_seen", "_queue", "_awaiting", "_newest", "_partitions", "_cut", "_unreleased",
        "_released", "_sealed"
    }  # fmt: skip
    assert dealt._partitions == 2 and dealt._released == -1 and dealt._sealed is False
    assert dealt._cut == [CUT_RULE, 64 << 20]  # the default block_size


def test_a_changed_partitions_attribute_between_runs_is_refused_with_the_way_to_do_it(
    tmp_path: Path,
) -> None:
    place = Place(str(tmp_path / "data"), "local")
    _files(place, "a", 5)
    ckpt = str(tmp_path / "ck")
    h = harness(_op(place), ckpt)
    h.run_window()
    again = harness(_op(place), ckpt, partitions=2, saved=h.checkpoint())
    with pytest.raises(FileConfigError, match="repartition"):
        again.setup()


# -- on Spark -----------------------------------------------------------------------------------
def _read_to_the_end(app: Any, place: Place, checkpoint: str, sent: list[str]) -> None:
    """Run ``app`` until every line is collected and every file deleted, stop it, and
    check that each line was collected once."""
    try:
        run_until(
            app,
            lambda: len(_got(checkpoint)) >= len(sent) and not place.files("in"),
            "every line read and every file deleted",
        )
    finally:
        app.stop()
    assert Counter(_got(checkpoint)) == Counter(sent)  # each line once


@pytest.mark.slow
def test_a_running_file_input_goes_from_one_to_three_to_two_partitions_exactly(
    spark: Any, tmp_path: Path
) -> None:
    place = Place(str(tmp_path / "data"), "local")
    sent = _files(place, "abc", 60)
    checkpoint = str(tmp_path / "ck")
    app = launch(_app(place.url("in"), 1), spark=spark, checkpoint=checkpoint, window_ms=100)
    try:
        run_until(app, lambda: len(_got(checkpoint)) >= 30, "the first lines")
        assert app.repartition({"src": 3}).operators["src"].partitions == 3
        sent += _files(place, "de", 60)
        run_until(app, lambda: len(_got(checkpoint)) >= 200, "lines read by 3 partitions")
        assert app.repartition({"src": 2}).operators["src"].partitions == 2
        sent += _files(place, "fg", 60)
    except BaseException:
        app.stop()
        raise
    _read_to_the_end(app, place, checkpoint, sent)


@pytest.mark.slow
def test_a_file_input_restarted_with_another_partitions_moves_its_positions(
    spark: Any, tmp_path: Path
) -> None:
    # the launch wrote the new count into the manifest, then the input refused its
    # checkpoint on the executors (exit 1), and the old count was refused in turn (the run
    # "did not stop cleanly"): the checkpoint could not run again (walkthrough)
    place = Place(str(tmp_path / "data"), "local")
    sent = _files(place, "abc", 60)
    checkpoint = str(tmp_path / "ck")
    for count, more in ((2, "de"), (3, "fg"), (1, "")):
        app = launch(
            _app(place.url("in"), count), spark=spark, checkpoint=checkpoint, window_ms=100
        )
        try:
            start = len(_got(checkpoint))
            run_until(app, lambda s=start: len(_got(checkpoint)) >= s + 40, "more lines")
            assert app.plan.groups[app.plan.group_of["src"]].partitions == count
        finally:
            app.stop()
        if more:
            sent += _files(place, more, 60)
    app = launch(_app(place.url("in"), 2), spark=spark, checkpoint=checkpoint, window_ms=100)
    _read_to_the_end(app, place, checkpoint, sent)
    assert generations.load(checkpoint).counts["src"] == 2


def test_an_input_that_is_not_a_partitioner_is_still_refused(tmp_path: Path) -> None:
    from malhar.engine.repartition import partitioner_of

    dag = DAG("files")
    dag.add_operator("src", LinesFileInput(str(tmp_path)))
    assert partitioner_of(dag, "src", 3) is dag.operators["src"].operator
    with pytest.raises(ConfigError, match="cannot move its read positions"):
        from malhar.partitioning import StatelessPartitioner

        partitioner_of(dag, "src", StatelessPartitioner(2))


@pytest.mark.long
@pytest.mark.slow
def test_a_sigkill_during_a_file_input_repartitioning_reads_every_line_once(
    tmp_path: Path,
) -> None:
    """Killed before and after the commit point of a 2 -> 3 repartitioning, files arriving
    meanwhile: the next start finds one partitioning, and every line arrives once."""
    place = Place(str(tmp_path / "data"), "local")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    sent = _files(place, "ab", 80)

    def start(total: int, *pause: str) -> subprocess.Popen:
        args = [str(checkpoint), place.url("in"), str(total), *pause]
        return start_driver("tests.io.fs_repartition_app", *args, log=tmp_path / "driver.log")

    for k, pause in enumerate(("snapshots", "committed")):
        kill_when_paused(start(0, pause), checkpoint, pause)
        parts = {op: g.partitions for op, g in generations.load(str(checkpoint)).operators.items()}
        assert parts == ({} if pause == "snapshots" else {"src": 3})  # never a mix
        sent += _files(place, "cd"[k], 80)
    proc = start(len(sent))
    assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    assert Counter(_got(str(checkpoint))) == Counter(sent)


def test_parquet_row_groups_and_compressed_streams_move_too(tmp_path: Path) -> None:
    import gzip
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    place = Place(str(tmp_path / "data"), "local")
    rows = [{"id": i} for i in range(600)]
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink, row_group_size=50)
    place.write("in/a.parquet", sink.getvalue(), mtime=1_000)
    ckpt = str(tmp_path / "ck")
    props = {"block_size": 1, "scan_interval_ms": 0, "max_records_per_window": 30}
    hs = [
        harness(ParquetFileInput(place.url("in"), **props), ckpt, partition=p, partitions=2)
        for p in (0, 1)
    ]
    for window in range(3):
        hs[1].run_window()
        if window == 2:  # a file only partition 0 lists: 12 row groups, 6 of them its own
            place.write("in/b.parquet", sink.getvalue(), mtime=2_000)
        hs[0].run_window()
    got = [r["id"] for h in hs for r in h.sink("output").tuples]
    new = _moved(hs, 3, ckpt, **props)
    _drain_all(new)
    got += [r["id"] for h in new for r in h.sink("output").tuples]
    assert Counter(got) == Counter(list(range(600)) * 2)

    # a gzip stream is one split: its decompressed position moves to the new owner
    text = "".join(f"g{i}\n" for i in range(300))
    place.write("gz/g.txt.gz", gzip.compress(text.encode()))
    ckpt = str(tmp_path / "ck-gz")
    hs = [
        harness(LinesFileInput(place.url("gz"), **props), ckpt, partition=p, partitions=2)
        for p in (0, 1)
    ]
    for _ in range(2):
        for h in hs:
            h.run_window()
    lines = _lines(hs)
    assert 0 < len(lines) < 300
    new = _moved(hs, 3, ckpt, **props)
    _drain_all(new)
    assert Counter(lines + _lines(new)) == Counter(text.split())
