"""The file input's housekeeping, in process on the local filesystem (no Spark, no HDFS):
post actions of files that could not be read, moves onto taken names, move_to inside the
scanned path, max_file_age_ms over partitions, files that change after they are listed,
glob characters in a path, and repeated CSV header names."""

from __future__ import annotations

import fnmatch
import gzip
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from malhar.io.fs import CsvFileInput, FileConfigError, LinesFileInput
from malhar.io.fs.post_actions import _earlier_targets
from malhar.io.fs.splits import CHANGED, complete_seen, split_owner
from malhar.util.fs import StoragePermissionError
from tests.io.fs_support import drain, harness, values

LOG = "malhar.io.fs"


def _refuse(path: str, offset: int = 0, length: int | None = None) -> bytes:
    raise StoragePermissionError("permission denied", backend="local", path=path)


# -- A: a file that could not be read keeps its place --------------------------------------------
@pytest.mark.parametrize("action", ["delete", "move"])
def test_a_file_that_could_not_be_read_is_not_deleted_or_moved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, action: str
) -> None:
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("precious1\nprecious2\n")
    props = {"scan_interval_ms": 0, "post_action": action}
    if action == "move":
        props["move_to"] = str(tmp_path / "done")
    h = harness(LinesFileInput(str(tmp_path / "in"), **props), str(tmp_path / "ck"))
    h.setup()
    real = h.operator._fs.read
    h.operator._fs.read = _refuse  # not readable (yet) for this user
    h.run_window()
    with caplog.at_level(logging.WARNING, logger=LOG):
        h.committed(0)
    h.operator._fs.read = real
    h.run_window()
    h.committed(1)
    (error,) = h.sink("error").tuples
    assert "cannot read the file" in error["error"]
    assert f.read_text() == "precious1\nprecious2\n"  # still there, not deleted nor moved
    assert not (tmp_path / "done").exists()
    assert values(h) == []  # and not read again: known, as with post_action none
    assert any("is not " in r.message and "could not be read" in r.message for r in caplog.records)


def _two_blocks_two_partitions(tmp_path: Path) -> tuple[Path, int, list[Any]]:
    """A 160-byte file (2 blocks of 100) and its two partitions' harnesses (post_action
    delete); ``first``: the coordinator, which reads block 0."""
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("".join(f"a{i:02d}\n" for i in range(40)))
    first = split_owner(str(f), 0, 2)
    props = {"block_size": 100, "scan_interval_ms": 0, "post_action": "delete"}
    hs = [
        harness(
            LinesFileInput(str(tmp_path / "in"), **props),
            str(tmp_path / "ck"),
            partition=p,
            partitions=2,
        )
        for p in range(2)
    ]
    return f, first, hs


def _deleted_by_both(tmp_path: Path, saving: str) -> tuple[Path, int, Any, Any, int, bytes]:
    """Both partitions read the 160-byte file to one window, ``saving`` ("coordinator" or
    "other") is checkpointed there, both release it, and the file is deleted: (file, the
    coordinator's partition, coordinator, other, window, the saved checkpoint)."""
    f, first, hs = _two_blocks_two_partitions(tmp_path)
    coord, other = hs[first], hs[1 - first]
    last = max(drain(h) for h in hs)
    for h in hs:
        while h.window < last:
            h.run_window()
    saved = (coord if saving == "coordinator" else other).checkpoint()
    other.committed(last)
    coord.committed(last)
    assert not f.exists()
    return f, first, coord, other, last, saved


def _restarted(tmp_path: Path, partition: int, saved: bytes) -> Any:
    """A partition (of 2) of the post_action delete input, restored from ``saved``."""
    op = LinesFileInput(
        str(tmp_path / "in"), block_size=100, scan_interval_ms=0, post_action="delete"
    )
    h = harness(op, str(tmp_path / "ck"), partition=partition, partitions=2, saved=saved)
    h.setup()
    return h


def test_a_split_another_partition_could_not_read_keeps_the_file(tmp_path: Path) -> None:
    f, first, hs = _two_blocks_two_partitions(tmp_path)
    other = hs[1 - first]

    def refuse_block(split, size, budget):  # block 1 cannot be read (this partition only:
        _refuse(str(f))  # the local filesystem object is shared)

    other.operator._read_block = refuse_block
    last = max(drain(h) for h in hs)
    assert len(other.sink("error").tuples) == 1 and values(hs[first])
    for h in hs:
        h.committed(last)
    for h in hs:
        h.run_window()
        h.committed(last + 1)
    assert f.exists()  # block 1 is nowhere else: the coordinator left the file
    markers = tmp_path / "ck" / "malhar" / "files" / "in" / "done"
    assert not list(markers.iterdir())  # the markers were cleaned up all the same


def test_a_marker_replayed_for_a_deleted_file_does_not_count_for_a_new_one(
    tmp_path: Path,
) -> None:
    # the other partition dies after its release; its restart replays committed(last) and
    # writes its marker again, after the coordinator deleted the file and its markers. A
    # new file at the path then took that marker for its own other half: deleted unread.
    # The marker names the file it is about: the new file is kept instead (which partition
    # read what of it is not known then), and read whole
    f, first, coord, other, last, saved = _deleted_by_both(tmp_path, "other")
    other = _restarted(tmp_path, 1 - first, saved)
    other.committed(last)  # the replayed release
    other.run_window()
    coord.run_window()  # both list: the file is gone
    f.write_text("".join(f"b{i:02d}\n" for i in range(40)))  # a new file, the same name
    coord.committed(drain(coord))  # its half read and committed first
    assert f.exists()  # the other half is not read yet
    assert coord.operator._awaiting == {}  # done with: kept
    while other.window < coord.window:
        other.run_window()
    last = drain(other)
    other.committed(last)
    coord.run_window()
    coord.committed(max(last, coord.window))
    new = [v for h in (coord, other) for v in values(h) if v.startswith("b")]
    assert sorted(new) == [f"b{i:02d}" for i in range(40)]
    assert f.exists()
    assert other.sink("error").tuples == [] and coord.sink("error").tuples == []


def test_a_coordinator_restarted_after_its_post_action_forgets_the_file(tmp_path: Path) -> None:
    # it deleted the file and the markers, then stopped before its checkpoint: the replayed
    # release awaited the markers for ever, the path stayed known, and a new file under the
    # name was taken for a change of the old one (its block unread)
    f, first, coord, other, last, saved = _deleted_by_both(tmp_path, "coordinator")
    coord = _restarted(tmp_path, first, saved)
    coord.committed(last)  # the replayed release
    assert coord.operator._awaiting == {} and coord.operator._seen == {}
    for h in (coord, other):
        h.run_window()
    f.write_text("".join(f"b{i:02d}\n" for i in range(40)))
    for w in range(coord.window + 1, coord.window + 4):
        for h in (coord, other):
            h.run_window(window=w)
            h.committed(w)
    new = [v for h in (coord, other) for v in values(h) if v.startswith("b")]
    assert sorted(new) == [f"b{i:02d}" for i in range(40)]
    assert coord.sink("error").tuples == [] and other.sink("error").tuples == []
    assert not f.exists()  # deleted in its turn


@pytest.mark.parametrize("coordinator_first", [True, False])
def test_a_file_touched_between_the_partitions_listings_is_kept_not_awaited_for_ever(
    tmp_path: Path, coordinator_first: bool
) -> None:
    f, first, hs = _two_blocks_two_partitions(tmp_path)
    os.utime(f, (1000, 1000))
    a, b = (hs[first], hs[1 - first]) if coordinator_first else (hs[1 - first], hs[first])
    a.run_window()  # lists it at mtime 1000
    os.utime(f, (2000, 2000))  # the same bytes, touched
    b.run_window()  # lists it at mtime 2000
    last = max(drain(h) for h in hs)
    for w in range(last + 1, last + 4):
        for h in hs:
            while h.window < w:
                h.run_window()
            h.committed(w)
    assert f.exists() and hs[first].operator._awaiting == {}
    assert not list((tmp_path / "ck" / "malhar" / "files" / "in" / "done").iterdir())
    assert sorted(values(hs[0]) + values(hs[1])) == [f"a{i:02d}" for i in range(40)]


def test_a_checkpoint_without_the_unread_field_still_restores(tmp_path: Path) -> None:
    assert complete_seen([70, 1.0, 1, 0], 2) == [70, 1.0, 1, 0, 2, None, None, False, False]
    assert len(complete_seen([70, 1.0, 1, 0, 2, 1, None], 2)) == 9
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("a\nb\n")

    def make() -> LinesFileInput:
        return LinesFileInput(
            str(tmp_path / "in"), scan_interval_ms=0, post_action="delete", max_records_per_window=1
        )

    h = harness(make(), str(tmp_path / "ck"))
    h.run_window()
    for seen in h.operator._seen.values():
        del seen[7:]  # as an older version checkpointed it
    saved = h.checkpoint()
    r = harness(make(), str(tmp_path / "ck"), saved=saved)
    last = drain(r)
    r.committed(last)
    assert values(h) + values(r) == ["a", "b"]
    assert not f.exists()


# -- B: a move never overwrites ------------------------------------------------------------------
def test_move_never_overwrites_a_file_of_the_same_name_and_retries_are_idempotent(
    tmp_path: Path,
) -> None:
    for sub in ("a", "b", "c"):
        (tmp_path / "in" / sub).mkdir(parents=True)
        p = tmp_path / "in" / sub / "x.csv"
        p.write_text(f"from {sub}\n")
        os.utime(p, (1000, 1000))
    done = tmp_path / "done"
    h = harness(
        LinesFileInput(
            str(tmp_path / "in"),
            recursive=True,
            scan_interval_ms=0,
            post_action="move",
            move_to=str(done),
        ),
        str(tmp_path / "ck"),
    )
    h.run_window()
    h.committed(0)
    moved = {n: (done / n).read_text() for n in os.listdir(done)}
    assert sorted(moved.values()) == ["from a\n", "from b\n", "from c\n"]
    assert "x.csv" in moved and all(n.startswith("x.") and n.endswith(".csv") for n in moved)
    assert not [f for _, _, fs in os.walk(tmp_path / "in") for f in fs]

    # a move retried after a crash: the source gone, or linked and not yet unlinked
    (tmp_path / "in" / "a" / "y.csv").write_text("y\n")
    h.run_window()
    src = str(tmp_path / "in" / "a" / "y.csv")
    op = h.operator
    os.link(src, done / "y.csv")  # the first attempt stopped between link and unlink
    op._apply_post_action(src)
    op._apply_post_action(src)  # and once more: the source is gone, nothing happens
    assert not os.path.exists(src)
    assert sorted(os.listdir(done)) == sorted([*moved, "y.csv"])


def test_a_renamed_move_keeps_the_whole_suffix_and_finishes_an_older_release_s_move(
    tmp_path: Path,
) -> None:
    # x.csv.gz became x.csv.<hash>.gz, which *.csv.gz no longer matches
    for sub in ("a", "b"):
        (tmp_path / "in" / sub).mkdir(parents=True)
        (tmp_path / "in" / sub / "x.csv.gz").write_bytes(gzip.compress(f"{sub}\n".encode()))
    done = tmp_path / "done"
    op = LinesFileInput(
        str(tmp_path / "in"),
        recursive=True,
        scan_interval_ms=0,
        post_action="move",
        move_to=str(done),
    )
    h = harness(op, str(tmp_path / "ck"))
    h.run_window()
    h.committed(0)
    names = sorted(os.listdir(done))
    assert len(names) == 2 and all(fnmatch.fnmatch(n, "x.*csv.gz") for n in names)
    # a move an older release began under its name (split at the last dot), linked there
    (tmp_path / "in" / "a" / "y.csv.gz").write_bytes(gzip.compress(b"y\n"))
    h.run_window()
    src = str(tmp_path / "in" / "a" / "y.csv.gz")
    (done / "y.csv.gz").write_bytes(b"another y")  # the plain name taken
    older = _earlier_targets(str(done), "y.csv.gz", src, h.operator._seen[src])[1]
    assert older.endswith(".gz") and ".csv." in older  # y.csv.<hash>.gz
    os.link(src, older)
    h.operator._apply_post_action(src)
    assert not os.path.exists(src)
    assert sorted(os.listdir(done)) == sorted([*names, "y.csv.gz", os.path.basename(older)])


# -- C: move_to inside the scanned path ----------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "move_to", "recursive"),
    [
        ("in/*", "in/done", False),  # the glob matches the folder
        ("in", "in", False),  # the same folder
        ("in/", "file://{root}/in", False),  # spelled differently
        ("in/*.csv", "in", False),
        ("in", "in/done", True),
    ],
)
def test_move_to_inside_the_scanned_path_is_refused(
    tmp_path: Path, path: str, move_to: str, recursive: bool
) -> None:
    root = str(tmp_path)
    target = move_to.format(root=root) if "{root}" in move_to else f"{root}/{move_to}"
    op = LinesFileInput(f"{root}/{path}", recursive=recursive, post_action="move", move_to=target)
    with pytest.raises(FileConfigError, match=r"move_to .*path.*read again.*'_'"):
        op.check_settings()


def test_move_to_linked_to_the_scanned_folder_is_refused_and_never_deletes(
    tmp_path: Path,
) -> None:
    # the link passed the check, and the move took the file at the link's name for an
    # earlier attempt's hard link: it deleted the file
    (tmp_path / "in").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "in")
    f = tmp_path / "in" / "a.txt"
    f.write_text("a1\na2\n")
    linked = LinesFileInput(
        str(tmp_path / "in"), scan_interval_ms=0, post_action="move", move_to=str(tmp_path / "link")
    )
    with pytest.raises(FileConfigError, match=r"move_to .*the scanned path itself"):
        linked.check_settings()
    # linked after the partition opened: the move refuses, the file stays
    (tmp_path / "link").unlink()
    op = LinesFileInput(
        str(tmp_path / "in"), scan_interval_ms=0, post_action="move", move_to=str(tmp_path / "link")
    )
    h = harness(op, str(tmp_path / "ck"))
    h.run_window()
    (tmp_path / "link").symlink_to(tmp_path / "in")
    with pytest.raises(FileConfigError, match=r"is .*a.txt itself \(through a symbolic link\)"):
        h.committed(0)
    assert f.read_text() == "a1\na2\n" and values(h) == ["a1", "a2"]


@pytest.mark.parametrize(
    ("path", "move_to", "recursive"),
    [("in/*.csv", "in/done", False), ("in", "in/done", False), ("in/*", "in/_done", True)],
)
def test_move_to_the_scanner_never_lists_is_accepted(
    tmp_path: Path, path: str, move_to: str, recursive: bool
) -> None:
    root = str(tmp_path)
    LinesFileInput(
        f"{root}/{path}", recursive=recursive, post_action="move", move_to=f"{root}/{move_to}"
    ).check_settings()


# -- D: max_file_age_ms decided per partition ----------------------------------------------------
def test_a_file_skipped_as_too_old_by_one_partition_only_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "in").mkdir()
    a = tmp_path / "in" / "a.txt"
    a.write_text("".join(f"a{i:02d}\n" for i in range(40)))  # 2 blocks of 100
    os.utime(a, (1000, 1000))

    def make() -> LinesFileInput:
        return LinesFileInput(
            str(tmp_path / "in"), block_size=100, scan_interval_ms=0, max_file_age_ms=10_000
        )

    h0 = harness(make(), str(tmp_path / "ck"), partition=0, partitions=2)
    h1 = harness(make(), str(tmp_path / "ck"), partition=1, partitions=2)
    drain(h0)  # partition 0 lists the path first and reads its block of a.txt
    b = tmp_path / "in" / "b.txt"
    b.write_text("b\n")
    os.utime(b, (1020, 1020))
    with caplog.at_level(logging.WARNING, logger=LOG):
        drain(h1)  # partition 1 lists it after b came: a.txt is too old for it
        drain(h1)
    named = [r.message for r in caplog.records if "max_file_age_ms" in r.message]
    assert len(named) == 1 and "1 file(s)" in named[0] and "a.txt" in named[0]


# -- E: a file that changes after it was listed --------------------------------------------------
def test_a_file_that_grows_after_it_was_listed_is_reported_once(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("".join(f"line{i:02d}\n" for i in range(10)))  # 70 bytes: one block

    def make() -> LinesFileInput:
        return LinesFileInput(str(tmp_path / "in"), block_size=100, scan_interval_ms=0)

    hs = [harness(make(), str(tmp_path / "ck"), partition=p, partitions=2) for p in range(2)]
    for h in hs:
        h.run_window()  # both list the 70-byte file
    with f.open("a") as out:
        out.write("".join(f"line{i:02d}\n" for i in range(10, 30)))  # the producer appends
    for h in hs:
        drain(h)
        drain(h)
    errors = [e for h in hs for e in h.sink("error").tuples]
    assert len(errors) == 2  # one per partition, not at every scan
    for e in errors:
        assert e["file"].endswith("/in/a.txt") and e["offset"] == 70
        assert "70 bytes" in e["error"] and "210 bytes" in e["error"]
        assert "rename them into place" in e["error"]


def test_a_change_report_is_replayed_with_its_window(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("a\n")

    def make() -> LinesFileInput:
        return LinesFileInput(str(tmp_path / "in"), scan_interval_ms=0, post_action="delete")

    h = harness(make(), str(tmp_path / "ck"))
    h.run_window()
    saved = h.checkpoint()
    f.write_text("a\nb\n")  # rewritten in place
    h.run_window()
    (error,) = h.sink("error").per_window[1]
    r = harness(make(), str(tmp_path / "ck"), saved=saved)
    r.run_window(window=1)  # replayed: the same error row
    assert r.sink("error").per_window[1] == [error]
    # and the replay left the file known as changed: not reported again by the next
    # scans, nor deleted with b unread when its window is committed before a scan
    r.committed(1)
    r.run_window(window=2)
    r.run_window(window=3)
    assert {w: len(e) for w, e in r.sink("error").per_window.items() if e} == {1: 1}
    assert f.read_text() == "a\nb\n"


def test_a_change_report_of_a_file_another_partition_reads_is_replayed_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("a\n")
    other = 1 - split_owner(str(f), 0, 2)  # a partition that reads nothing of the file

    def make(saved: bytes | None = None) -> Any:
        op = LinesFileInput(str(tmp_path / "in"), scan_interval_ms=0)
        return harness(op, str(tmp_path / "ck"), partition=other, partitions=2, saved=saved)

    h = make()
    h.run_window()
    saved = h.checkpoint()
    f.write_text("a\nb\n")
    h.run_window()
    assert len(h.sink("error").per_window[1]) == 1
    r = make(saved)
    for w in (1, 2, 3):
        r.run_window(window=w)
    assert {w: len(e) for w, e in r.sink("error").per_window.items() if e} == {1: 1}


def test_a_file_cut_anew_at_the_listing_that_reported_its_change_replays_unchanged(
    tmp_path: Path,
) -> None:
    # another partition's 2-byte file grows into blocks of this one: the scan reports the
    # change and cuts the file anew; the replay marked that new cut changed (kept from its
    # post action, later changes unreported), unlike the window it replayed
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("a\n")
    other = 1 - split_owner(str(f), 0, 2)

    def make(saved: bytes | None = None) -> Any:
        op = LinesFileInput(str(tmp_path / "in"), scan_interval_ms=0, block_size=100)
        return harness(op, str(tmp_path / "ck"), partition=other, partitions=2, saved=saved)

    h = make()
    h.run_window()
    saved = h.checkpoint()
    f.write_text("".join(f"x{i:03d}\n" for i in range(100)))
    h.run_window()
    assert len(h.sink("error").per_window[1]) == 1 and h.operator._seen[str(f)][CHANGED] is False
    r = make(saved)
    r.run_window(window=1)
    assert r.operator._seen[str(f)] == h.operator._seen[str(f)]


# -- F: glob characters in a path ----------------------------------------------------------------
def test_a_path_with_glob_characters_that_exists_is_read_literally(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "in[1]").mkdir()
    (tmp_path / "in[1]" / "a.txt").write_text("x\n")
    h = harness(LinesFileInput(str(tmp_path / "in[1]"), scan_interval_ms=0), str(tmp_path / "ck"))
    h.run_window()
    assert values(h) == ["x"]
    # escaped as a glob, it matches the name too
    g = harness(
        LinesFileInput(str(tmp_path / "in[[]1]" / "*.txt"), scan_interval_ms=0),
        str(tmp_path / "ck2"),
    )
    g.run_window()
    assert values(g) == ["x"]
    # a glob that matches nothing is logged, once
    n = harness(
        LinesFileInput(str(tmp_path / "out[0-9]" / "*.txt"), scan_interval_ms=0),
        str(tmp_path / "ck3"),
    )
    with caplog.at_level(logging.WARNING, logger=LOG):
        n.run_window()
        n.run_window()
    assert len([r for r in caplog.records if "no file matches the glob" in r.message]) == 1


def test_a_path_that_does_not_exist_is_logged_once_and_read_once_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a mistyped input path read nothing and said nothing: the application looked healthy
    missing = tmp_path / "no-such-dir"
    h = harness(LinesFileInput(str(missing), scan_interval_ms=0), str(tmp_path / "ck"))
    with caplog.at_level(logging.WARNING, logger=LOG):
        h.run_window()
        h.run_window()
    said = [r.message for r in caplog.records if "does not exist" in r.message]
    assert len(said) == 1 and str(missing) in said[0]
    missing.mkdir()
    (missing / "a.txt").write_text("x\n")
    h.run_window()
    assert values(h) == ["x"]


# -- G: repeated CSV header names ---------------------------------------------------------------
def test_repeated_csv_header_names_are_made_unique_as_spark_does(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("id,val,VAL,\n1,x,y,z\n")
    h = harness(CsvFileInput(str(tmp_path / "in"), scan_interval_ms=0), str(tmp_path / "ck"))
    h.run_window()
    assert h.sink("output").tuples == [{"id": "1", "val1": "x", "VAL2": "y", "_c3": "z"}]
    with pytest.raises(FileConfigError, match="more than once"):
        CsvFileInput(str(tmp_path / "in"), header=False, columns="a,b,a").check_settings()


def test_a_header_in_another_order_than_the_schema_is_said_once_per_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # columns are read by position (as Spark's enforceSchema): the header was skipped unread,
    # and a file whose header had the schema's columns swapped swapped the values silently
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("city,store\nberlin,acme\nlima,bodega\n")
    (tmp_path / "in" / "b.csv").write_text("Store,City\nshop,pune\n")  # case as Spark: same
    op = CsvFileInput(str(tmp_path / "in"), schema="store string, city string", scan_interval_ms=0)
    h = harness(op, str(tmp_path / "ck"))
    with caplog.at_level(logging.WARNING, logger=LOG):
        drain(h)
    said = [r.getMessage() for r in caplog.records if "the header of" in r.getMessage()]
    assert (
        len(said) == 1
        and "a.csv names the columns (city, store), the schema (store, city)" in said[0]
    )
    assert len(h.sink("output").tuples) == 3  # read as documented: by position


def test_a_file_that_changed_after_it_was_cut_is_not_deleted(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "a.txt"
    f.write_text("a\n")
    h = harness(
        LinesFileInput(str(tmp_path / "in"), scan_interval_ms=0, post_action="delete"),
        str(tmp_path / "ck"),
    )
    h.run_window()
    f.write_text("a\nb\n")  # appended to after it was read: b was never read
    h.run_window()
    h.committed(1)
    assert f.read_text() == "a\nb\n" and len(h.sink("error").tuples) == 1


def test_a_repartitioning_keeps_a_file_from_its_post_action(tmp_path: Path) -> None:
    f, first, hs = _two_blocks_two_partitions(tmp_path)

    def refuse_block(split, size, budget):
        _refuse(str(f))

    hs[1 - first].operator._read_block = refuse_block
    last = max(drain(h) for h in hs)
    for h in hs:
        h.committed(last)  # the unread split is released: the file is to be kept
    out = hs[0].operator.deal([h.operator for h in hs], 3)
    assert any(op._awaiting for op in out)  # read to its end: a coordinator is named
    for op in out:
        assert op._seen[str(f)][7] is True  # splits.UNREAD: the post action is skipped
