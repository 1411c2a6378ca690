"""A bounded file input (``end_marker``): once the marker is there, each partition lists the
path once more, reads what it holds, then sends the end-of-input watermark
(``Watermark(MAX_TIMESTAMP)``), so that an event-time pipeline over a finished set of files
fires its last windows; a replay and a restart do the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from malhar import DAG, OperatorContext, launch
from malhar.control import ControlSender, DeliveryType
from malhar.io.fs import JsonLinesFileInput, LinesFileInput, ParquetFileOutput
from malhar.io.fs.errors import FileConfigError
from malhar.io.fs.partitions import deal
from malhar.testing import OperatorHarness
from malhar.testing.operators import Collector, collected
from malhar.window import (
    MAX_TIMESTAMP,
    GlobalWindow,
    KeyedWindowedOperator,
    Watermark,
    WatermarkGenerator,
    WatermarkIdle,
)
from malhar.window.accumulation import Count
from tests.io.event_time_support import fired_minutes, per_minute_counts
from tests.io.fs_support import Place, harness, place_fixture  # noqa: F401
from tests.io.test_fs_input_idle import _write, window_controls

END = Watermark(MAX_TIMESTAMP)
IDLE = WatermarkIdle()


def _input(folder: Path, **props: Any) -> LinesFileInput:
    return LinesFileInput(str(folder), end_marker="_SUCCESS", scan_interval_ms=0, **props)


def _lines(h: OperatorHarness, window: int) -> list[str]:
    return [t["line"] for t in h.sink("output").per_window.get(window, [])]


def test_the_marker_ends_the_input_after_one_more_listing_and_later_files_are_not_read(
    tmp_path: Path,
) -> None:
    folder, ckpt = tmp_path / "in", str(tmp_path / "ck")
    folder.mkdir()
    h = harness(_input(folder), ckpt)
    saved = h.checkpoint()  # before window 0
    # nothing to read, no marker: not idle (another partition could end first), not ended
    got = window_controls(h, [0])
    (folder / "a.txt").write_text("a0\na1\n")
    (folder / "_SUCCESS").write_text("")
    got |= window_controls(h, [1])  # the last listing: a.txt is in it, read, ended
    (folder / "b.txt").write_text("late\n")  # after the marker: not part of the input
    got |= window_controls(h, [2, 3])
    assert got == {0: [], 1: [END], 2: [END], 3: [END]}
    assert _lines(h, 1) == ["a0", "a1"] and _lines(h, 2) == _lines(h, 3) == []
    assert h.operator.metrics()["ended"] == 1.0
    record = h.operator.window_data_manager.retrieve(1)
    assert record["sealed"] is True and record["end"] is True
    assert "idle" not in h.operator.window_data_manager.retrieve(0)
    after = h.checkpoint()
    h.teardown()

    # replayed from the records (b.txt is there now): the same lines and the same ends
    again = harness(_input(folder), ckpt, saved=saved)
    assert window_controls(again, [0, 1, 2, 3]) == got
    assert _lines(again, 1) == ["a0", "a1"] and _lines(again, 2) == []
    again.teardown()

    # restarted from a checkpoint taken after the end: it lists nothing more
    later = harness(_input(folder), ckpt, saved=after)
    assert window_controls(later, [4, 5]) == {4: [END], 5: [END]}
    assert _lines(later, 4) == _lines(later, 5) == []


def test_a_partition_ends_only_once_it_has_read_what_its_last_listing_gave_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("".join(f"line {i}\n" for i in range(10)))
    (folder / "_SUCCESS").write_text("")
    h = harness(_input(folder, max_records_per_window=4), str(tmp_path / "ck"))
    got = window_controls(h, [0, 1, 2, 3])
    assert got == {0: [], 1: [], 2: [END], 3: [END]}
    assert [len(_lines(h, w)) for w in range(4)] == [4, 4, 2, 0]


def test_the_marker_is_looked_for_in_the_directory_of_a_glob_or_where_a_path_says(
    tmp_path: Path,
) -> None:
    folder, elsewhere = tmp_path / "in", tmp_path / "flags"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "a.csv").write_text("x\n")
    glob = LinesFileInput(str(folder / "*.csv"), end_marker="_DONE", scan_interval_ms=0)
    h = harness(glob, str(tmp_path / "ck1"))
    (folder / "_DONE").write_text("")
    assert window_controls(h, [0]) == {0: [END]}

    marker = str(elsewhere / "ready")
    named = LinesFileInput(str(folder), end_marker=marker, scan_interval_ms=0)
    h = harness(named, str(tmp_path / "ck2"))
    assert window_controls(h, [0]) == {0: []}
    (elsewhere / "ready").write_text("")
    assert window_controls(h, [1]) == {1: [END]}

    # a directory whose name has glob characters is read literally: the marker is in it
    odd = tmp_path / "in[1]"
    odd.mkdir()
    (tmp_path / "_SUCCESS").write_text("")  # beside it: not its marker
    h = harness(_input(odd), str(tmp_path / "ck3"))
    assert window_controls(h, [0]) == {0: []}
    (odd / "_SUCCESS").write_text("")
    assert window_controls(h, [1]) == {1: [END]}


def test_a_marker_the_scanner_would_read_as_data_is_refused_with_the_fix(tmp_path: Path) -> None:
    h = harness(LinesFileInput(str(tmp_path), end_marker="DONE"), str(tmp_path / "ck"))
    with pytest.raises(FileConfigError, match=r"end_marker 'DONE' would be read as an input file"):
        h.run_window()
    inside = str(tmp_path / "DONE")
    assert (
        "would be read" in LinesFileInput(str(tmp_path), end_marker=inside).settings_problems()[0]
    )
    # a name the scanner skips, one the pattern or the glob does not match, or one elsewhere
    fine = [
        (str(tmp_path), {"end_marker": "_SUCCESS"}),
        (str(tmp_path), {"end_marker": "DONE", "pattern": r".*\.txt"}),
        (str(tmp_path / "*.csv"), {"end_marker": "DONE"}),
        (str(tmp_path), {"end_marker": str(tmp_path.parent / "DONE")}),
    ]
    for path, props in fine:
        assert LinesFileInput(path, **props).settings_problems() == [], (path, props)


def test_files_modified_after_the_marker_are_left_out_by_every_partition(
    place: Place, caplog: Any
) -> None:
    """Partitions make their last listing at different times: a file that came in between
    is read by none (not in part by the later one), on the local filesystem and HDFS."""
    place.write("in/a.txt", "a\n", mtime=1_000)
    place.write("in/_SUCCESS", "", mtime=2_000)

    def op() -> LinesFileInput:
        return LinesFileInput(
            place.url("in"), end_marker="_SUCCESS", scan_interval_ms=0, block_size=8
        )

    ckpt = place.url("ck")
    first = harness(op(), ckpt, partition=1, partitions=2)
    first.run_window()  # partition 1 makes its last listing
    place.write("in/b.txt", "".join(f"b{i}\n" for i in range(20)), mtime=3_000)
    second = harness(op(), ckpt, partition=0, partitions=2)
    with caplog.at_level("WARNING", logger="malhar.io.fs"):
        second.run_window()  # partition 0 lists b.txt: newer than the marker, left out
    assert "1 file(s) modified after the end marker are not read" in caplog.text
    assert "b.txt" in caplog.text
    for h in (first, second):
        h.run_window()
        h.run_window()
    lines = [t["line"] for h in (first, second) for t in h.sink("output").tuples]
    assert lines == ["a"]
    assert [h.sink("output").controls[-1].payload for h in (first, second)] == [END, END]


# -- the generator after it -----------------------------------------------------------------------
def test_the_generator_ends_once_every_upstream_partition_did_in_a_window_without_tuples() -> None:
    h = OperatorHarness(WatermarkGenerator(timestamp="t"))
    end_window = DeliveryType.END_WINDOW
    p0, p1 = ControlSender("files", "in", 0, 2), ControlSender("files", "in", 1, 2)
    h.put_control("input", END, end_window, sender=p0)
    h.put_control("input", IDLE, end_window, sender=p1)
    h.run_window()  # partition 1 idle, not ended: the generator is idle
    h.put_control("input", END, end_window, sender=p0)
    h.run_window([("input", {"t": 50})])  # partition 1 may still read: a watermark
    for tuples in ([("input", {"t": 70})], []):
        # both ended: with the last tuples a watermark (they might come from a stream that
        # never ends), then, in a window without tuples, the end
        h.put_control("input", END, end_window, sender=p0)
        h.put_control("input", END, end_window, sender=p1)
        h.run_window(tuples)
    out = h.sink("output")
    assert [c.payload for c in out.controls] == [IDLE, Watermark(50), Watermark(70), END]
    assert out.senders == [None] * 4  # its own: the file input's ends are not passed on


# -- through the engine ---------------------------------------------------------------------------
@pytest.mark.slow
def test_every_event_time_window_of_a_finished_set_of_files_fires(
    spark: Any, tmp_path: Path
) -> None:
    folder, ckpt = tmp_path / "in", str(tmp_path / "ck")
    folder.mkdir()
    for k in range(4):  # minutes 0..3, spread over both partitions
        _write(folder, k % 2, f"p{k}", k, mtime=1_000 + k)
    (folder / "_SUCCESS").write_text("")
    source = JsonLinesFileInput(
        str(folder),
        schema="user string, ts timestamp",
        scan_interval_ms=0,
        end_marker="_SUCCESS",
        max_records_per_window=2,
    )
    total = KeyedWindowedOperator(
        Count(), GlobalWindow(), key="user", timestamp="ts", output_format="row"
    )
    dag = per_minute_counts("bounded-files", source, "user", ("total", total))
    app = launch(dag, spark=spark, checkpoint=ckpt, window_ms=100)
    assert app.bounded
    app.await_end_of_input(timeout=300)  # stops by itself: no windows=N to guess
    assert not app.query.isActive
    fired = fired_minutes(ckpt)
    # the last minute too: without the marker no later event time moves the watermark past it
    assert fired == [(m, 2) for m in range(4)]
    panes = [p for rows in collected(ckpt, "out").values() for p in rows]
    assert {p["timing"] for p in panes} == {"ON_TIME"}
    totals = [p for rows in collected(ckpt, "total-out").values() for p in rows]
    assert [(p["user"], p["value"]) for p in totals] == [("ann", 8)]
    # reading takes 2 windows per partition; the end, the fired panes and the orderly stop
    # a few more, not the dozens a busy loop of empty windows would run
    assert app.last_window < 20


def test_the_end_of_the_input_closes_the_output_s_file(tmp_path: Path) -> None:
    # a bounded run stopped at the end of its input, its rows staged in an open file that
    # only roll_ms (60 s by default) would close: "done", and nothing visible
    out = OperatorHarness(
        ParquetFileOutput(str(tmp_path / "out"), schema="line string"),
        OperatorContext("out", application="end", partition=0, partitions=1),
    )

    def ended_by(partitions: list[int]) -> None:
        for p in partitions:
            sender = ControlSender("lines", "in", p, 2)
            out.put_control("input", Watermark(MAX_TIMESTAMP), DeliveryType.END_WINDOW, sender)

    out.run_window([("input", {"line": "a"})], window=0)
    out.begin_window(1)
    out.put("input", {"line": "b"})
    ended_by([0])  # one of the two reading partitions: the input goes on
    out.end_window()
    out.committed(1)
    assert not list((tmp_path / "out").glob("*.parquet"))
    out.begin_window(2)
    ended_by([0, 1])
    out.end_window()  # no row in this window: the file closes all the same
    out.committed(2)
    (written,) = (tmp_path / "out").glob("*.parquet")
    assert pq.read_table(written).column("line").to_pylist() == ["a", "b"]
    out.begin_window(3)
    ended_by([0, 1])  # said again in every later window: no file without rows
    out.end_window()
    out.committed(3)
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 1
    # rows of another input merged with the ended one go on into files rolled as set
    out.begin_window(4)
    out.put("input", {"line": "c"})
    ended_by([0, 1])
    out.end_window()
    out.committed(4)
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 1


@pytest.mark.slow
def test_a_run_that_stops_at_the_end_of_its_input_publishes_every_row(
    spark: Any, tmp_path: Path
) -> None:
    folder, ckpt = tmp_path / "in", str(tmp_path / "ck")
    folder.mkdir()
    lines = [f"line {i}" for i in range(300)]
    for k in range(3):
        (folder / f"f{k}.txt").write_text("".join(f"{x}\n" for x in lines[k * 100 : k * 100 + 100]))
    (folder / "_SUCCESS").write_text("")
    dag = DAG("bounded-to-parquet")
    src = dag.add_operator("in", LinesFileInput(str(folder), end_marker="_SUCCESS"), PARTITIONS=2)
    out = dag.add_operator("out", ParquetFileOutput(str(tmp_path / "out"), schema="line string"))
    dag.add_stream("lines", src.output, out.input)
    app = launch(dag, spark=spark, checkpoint=ckpt, window_ms=100)
    app.await_end_of_input(timeout=300)
    assert not app.query.isActive
    visible = pq.read_table(str(tmp_path / "out")).column("line").to_pylist()  # skips _malhar
    assert sorted(visible) == sorted(lines)


@pytest.mark.slow
def test_an_application_with_an_input_that_never_ends_is_not_awaited(
    spark: Any, tmp_path: Path
) -> None:
    dag = DAG("endless-files")
    src = dag.add_operator("in", LinesFileInput(str(tmp_path)))
    dag.add_stream("lines", src.output, dag.add_operator("out", Collector()).input)
    app = launch(dag, spark=spark, checkpoint=str(tmp_path / "ck"), window_ms=100)
    try:
        assert not app.bounded and not app.input_ended()
        with pytest.raises(ValueError, match=r"the input\(s\) \['in'\] never end"):
            app.await_end_of_input(timeout=5)
    finally:
        app.stop()


def test_repartitioned_ended_partitions_stay_ended_and_unsealed_ones_list_again(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    (folder / "_SUCCESS").write_text("")
    old = [harness(_input(folder), str(tmp_path / "ck"), partition=p, partitions=2) for p in (0, 1)]
    for h in old:
        h.run_window()
    ended = deal([h.operator for h in old], 3)
    assert [op._sealed for op in ended] == [True, True, True]
    old[1].operator._sealed = False  # as if partition 1 had not listed with the marker yet
    assert [op._sealed for op in deal([h.operator for h in old], 3)] == [False, False, False]
