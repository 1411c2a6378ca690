"""The file input (``malhar.io.fs``), driven window by window with the operator harness, on
the local filesystem and on the real HDFS fixture: blocks and partitions, exact replay, the
scanner, every format, bad input, post actions."""

from __future__ import annotations

import bz2
import datetime as dt
import gzip
import io
import json
import random
import re
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from malhar.io.fs import (
    CsvFileInput,
    FileConfigError,
    FileReadError,
    FileReplayError,
    JsonLinesFileInput,
    LinesFileInput,
    ParquetFileInput,
    ParquetFileOutput,
)
from malhar.io.fs.splits import split_owner
from malhar.testing import OperatorHarness
from tests.io.fs_support import Place, drain, harness, place_fixture, values  # noqa: F401

pytestmark = pytest.mark.integration


def _lines(seed: int, n: int) -> list[str]:
    """Lines with multi-byte characters (2, 3 and 4 bytes), empty lines and long ones."""
    rng = random.Random(seed)
    alphabet = ["a", "b", "é", "ß", "日", "本", "😀", " ", "x"]
    out = []
    for i in range(n):
        size = rng.choice([0, 1, 3, 8, 20, 90])
        out.append(f"{i}:" + "".join(rng.choice(alphabet) for _ in range(size)) if size else "")
    return out


def _read_all(place: Place, ckpt: str, partitions: int, **props: Any) -> list[list[str]]:
    """Every partition's lines, each drained to the end."""
    out = []
    for p in range(partitions):
        h = harness(
            LinesFileInput(place.url("in"), scan_interval_ms=0, **props),
            ckpt,
            partition=p,
            partitions=partitions,
        )
        drain(h)
        out.append(values(h))
    return out


# -- blocks ---------------------------------------------------------------------------------------
def test_blocks_read_every_line_once_across_boundaries_and_utf8(place: Place, tmp_path) -> None:
    # fewer lines on HDFS: every block is a few WebHDFS round trips
    lines = _lines(1, 60 if place.kind == "local" else 24)
    text = "\n".join(lines)  # the last line has no newline
    place.write("in/a.txt", text)
    place.write("in/b.txt", "".join(f"{x}\n" for x in lines[:20]))  # ends with a newline
    expected = sorted(lines + lines[:20])
    sizes = [1, 2, 3, 5, 16, 97, 100_000] if place.kind == "local" else [5, 64]
    for block_size in sizes:
        for partitions in (1, 3):
            ckpt = str(tmp_path / f"ck-{block_size}-{partitions}")
            got = _read_all(place, ckpt, partitions, block_size=block_size)
            assert sorted(x for part in got for x in part) == expected, (block_size, partitions)
    # with several partitions each reads a share (blocks are dealt by a stable hash)
    got = _read_all(place, str(tmp_path / "ck-share"), 3, block_size=64)
    assert sum(1 for part in got if part) >= 2


def test_a_block_starts_where_its_first_line_starts(place: Place, tmp_path) -> None:
    # 'aaaa\n' 'bbbbbbbbbb\n' 'cc\n': blocks of 4 bytes; block 1 [4, 8) starts on the newline
    # byte of line 1 ('\n' at 4): its first line starts at 5 ('bbbb...'), which block 1 reads
    # past its end; block 2 [8, 12) starts inside that line: it reads nothing; block 3 [12,
    # 16) starts inside it too and reads nothing; 'cc' starts at 16 (block 4)
    place.write("in/f.txt", "aaaa\nbbbbbbbbbb\ncc\n")
    ckpt = str(tmp_path / "ck")
    h = harness(LinesFileInput(place.url("in"), block_size=4, scan_interval_ms=0), ckpt)
    drain(h)
    assert values(h) == ["aaaa", "bbbbbbbbbb", "cc"]
    ranges = [
        r for w in range(h.window + 1) for r in h.operator.window_data_manager.retrieve(w)["ranges"]
    ]
    starts = {r["i"]: (r["s"], r["e"], r["n"]) for r in ranges}
    assert starts[0] == (0, 5, 1)
    assert starts[1] == (5, 16, 1)
    assert starts[2][2] == 0 and starts[3][2] == 0
    assert starts[4] == (16, 19, 1)


def test_a_file_larger_than_a_block_gives_every_partition_an_equal_share(
    place: Place, tmp_path
) -> None:
    # 2.6 MB in blocks of at most 1 MiB over 2 partitions: 4 blocks of 650 kB, 2 each (in
    # blocks of 1 MiB, 1 + 1 + 0.5: one partition read two thirds)
    lines = [f"{i:07d}:" + "x" * (i % 50) for i in range(80_000)]
    data = "".join(x + "\n" for x in lines).encode()
    place.write("in/big.txt", data)
    size = len(data)
    assert 2 << 20 < size < 3 << 20
    got, read = [], []
    for p in range(2):
        h = harness(
            LinesFileInput(place.url("in"), block_size=1 << 20, scan_interval_ms=0),
            str(tmp_path / "ck"),
            partition=p,
            partitions=2,
        )
        drain(h)
        got += values(h)
        ranges = [
            r
            for w in range(h.window + 1)
            for r in h.operator.window_data_manager.retrieve(w)["ranges"]
        ]
        read.append(sum(r["e"] - r["s"] for r in ranges))
        assert sorted({r["i"] for r in ranges}) == sorted(
            i for i in range(4) if split_owner(place.path("in/big.txt"), i, 2) == p
        )
    assert sorted(got) == lines
    assert sum(read) == size and abs(read[0] - read[1]) < 1000  # lines cross the cuts


def test_the_cut_is_kept_with_the_checkpoint(tmp_path) -> None:
    (tmp_path / "in").mkdir()
    big = tmp_path / "in" / "big.txt"
    big.write_bytes(b"".join(b"%07d\n" % i for i in range(400_000)))  # 3.2 MB
    size = big.stat().st_size
    op = LinesFileInput(str(tmp_path / "in"), block_size=1 << 20)
    op._partitions = 2  # restored from a checkpoint written before the cut was recorded
    ends = [e for _, _, e in op._cutter(2)._splits_of(str(big), size, 2)]
    assert ends == [1 << 20, 2 << 20, 3 << 20, size]  # blocks of block_size: rule 1
    op = LinesFileInput(str(tmp_path / "in"), block_size=1 << 20)  # a new application
    ends = [e for _, _, e in op._cutter(2)._splits_of(str(big), size, 2)]
    assert ends == [size // 4, size // 2, 3 * size // 4, size]
    # a restart with another block_size would cut the files the other partitions hold
    # differently: refused
    h = harness(
        LinesFileInput(str(tmp_path / "in"), block_size=1 << 20), str(tmp_path / "ck"), partitions=2
    )
    h.run_window()
    saved = h.checkpoint()
    with pytest.raises(
        FileConfigError, match=r"blocks of at most 1048576 bytes.*block_size=1048576"
    ):
        harness(
            LinesFileInput(str(tmp_path / "in"), block_size=4 << 20),
            str(tmp_path / "ck"),
            partitions=2,
            saved=saved,
        ).run_window(window=1)


# -- replay -----------------------------------------------------------------------------------
def test_a_restored_partition_replays_windows_exactly_and_reads_on(place: Place, tmp_path) -> None:
    place.write("in/a.txt", "".join(f"a{i}\n" for i in range(30)), mtime=1_000)
    place.write("in/b.txt", b"b0\n\xffbad\nb2\n", mtime=2_000)
    ckpt = str(tmp_path / "ck")

    def op() -> LinesFileInput:
        return LinesFileInput(
            place.url("in"), block_size=40, scan_interval_ms=0, max_records_per_window=7
        )

    h = harness(op(), ckpt)
    h.run_window()
    h.run_window()
    saved = h.checkpoint()  # after window 1
    for _ in range(4):
        h.run_window()  # 2..5
    first = {w: list(v) for w, v in h.sink("output").per_window.items()}
    errors = {w: list(v) for w, v in h.sink("error").per_window.items()}
    place.write("in/c.txt", "c0\nc1\n", mtime=3_000)  # new while "down"

    again = harness(op(), ckpt, saved=saved)
    for w in range(2, 6):
        again.run_window(window=w)  # replays
        assert again.operator.replaying
    assert {w: v for w, v in again.sink("output").per_window.items()} == {
        w: v for w, v in first.items() if w >= 2
    }
    assert {w: v for w, v in again.sink("error").per_window.items()} == {
        w: v for w, v in errors.items() if w >= 2
    }
    drain(again)
    every = [t["line"] for w, v in first.items() if w < 2 for t in v] + values(again)
    assert sorted(every) == sorted([f"a{i}" for i in range(30)] + ["b0", "b2", "c0", "c1"])
    bad = [e for v in errors.values() for e in v]
    assert [(e["offset"], e["file"].endswith("b.txt")) for e in bad] == [(3, True)]
    # oldest file first: every a* line before any b* line
    order = [t["line"][0] for w in sorted(first) for t in first[w]]
    assert order.index("b") > max(i for i, c in enumerate(order) if c == "a")


def test_a_replay_of_a_rewritten_file_fails_instead_of_emitting_other_lines(
    place: Place, tmp_path
) -> None:
    place.write("in/a.txt", "one\ntwo\nthree\n")
    ckpt = str(tmp_path / "ck")
    h = harness(LinesFileInput(place.url("in"), scan_interval_ms=0), ckpt)
    saved = h.checkpoint()
    h.run_window()
    place.write("in/a.txt", "one\ntwo\n")  # shorter now
    again = harness(LinesFileInput(place.url("in"), scan_interval_ms=0), ckpt, saved=saved)
    with pytest.raises(FileReplayError, match=r"cannot be read again|cannot replay exactly"):
        again.run_window(window=0)


def test_a_replay_of_a_file_rewritten_with_as_many_lines_fails_too(place: Place, tmp_path) -> None:
    # the count of items matched, so the replay emitted the new lines as window 0's
    place.write("in/a.txt", "old1\nold2\n")
    ckpt = str(tmp_path / "ck")
    h = harness(LinesFileInput(place.url("in"), scan_interval_ms=0), ckpt)
    saved = h.checkpoint()
    h.run_window()
    assert [r["line"] for r in h.sink("output").tuples] == ["old1", "old2"]
    place.write("in/a.txt", "NEW1\nNEW2\n")  # same size, same number of lines
    again = harness(LinesFileInput(place.url("in"), scan_interval_ms=0), ckpt, saved=saved)
    with pytest.raises(FileReplayError, match="not those read then"):
        again.run_window(window=0)


# -- the scanner --------------------------------------------------------------------------------
def test_scanner_glob_recursive_pattern_hidden_and_order(place: Place, tmp_path) -> None:
    place.write("in/z.csv", "z\n", mtime=100)
    place.write("in/a.csv", "a\n", mtime=300)
    place.write("in/b.csv", "b\n", mtime=300)  # same time: by name
    place.write("in/m.txt", "m\n", mtime=200)
    place.write("in/.hidden.csv", "hidden\n", mtime=50)
    place.write("in/_SUCCESS", "success\n", mtime=50)
    place.write("in/sub/s.csv", "s\n", mtime=150)
    place.write("in/_tmp/t.csv", "t\n", mtime=10)
    place.write("in/x.csv._COPYING_", "copying\n", mtime=10)

    def read(path: str, **props: Any) -> list[str]:
        h = harness(
            LinesFileInput(place.url(path), scan_interval_ms=0, **props),
            str(tmp_path / f"ck-{len(list(tmp_path.iterdir()))}"),
        )
        drain(h)
        return values(h)

    assert read("in") == ["z", "m", "a", "b"]
    assert read("in", recursive=True) == ["z", "s", "m", "a", "b"]
    assert read("in", recursive=True, pattern=r"[a-s]\.csv") == ["s", "a", "b"]
    assert read("in/*.csv") == ["z", "a", "b"]
    assert read("in/*/*.csv") == ["s"]
    assert read("in/m.txt") == ["m"]
    assert read("nothing-here") == []


def test_new_files_are_picked_up_and_each_file_is_read_once_across_restarts(
    place: Place, tmp_path
) -> None:
    ckpt = str(tmp_path / "ck")
    place.write("in/1.txt", "one\n")

    def op() -> LinesFileInput:
        return LinesFileInput(place.url("in"), scan_interval_ms=0)

    h = harness(op(), ckpt)
    h.run_window()
    h.run_window()  # nothing new
    place.write("in/2.txt", "two\n")
    h.run_window()
    assert values(h) == ["one", "two"]
    saved = h.checkpoint()
    place.write("in/1.txt", "one\nagain\n")  # rewritten: still the same file, read once
    place.write("in/3.txt", "three\n")
    again = harness(op(), ckpt, saved=saved)
    drain(again)
    assert values(again) == ["three"]


def test_scan_interval_and_max_file_age(place: Place, tmp_path) -> None:
    place.write("in/old.txt", "old\n", mtime=1_000)
    place.write("in/new.txt", "new\n", mtime=5_000)
    h = harness(
        LinesFileInput(place.url("in"), scan_interval_ms=3_600_000, max_file_age_ms=60_000),
        str(tmp_path / "ck"),
    )
    h.run_window()
    assert values(h) == ["new"]  # old.txt is older than the newest file by more than a minute
    place.write("in/later.txt", "later\n", mtime=6_000)
    h.run_window()
    assert values(h) == ["new"]  # not listed again within the scan interval
    assert h.operator.backlog() == 0


# -- formats ------------------------------------------------------------------------------------
def test_csv_typed_untyped_header_and_malformed_rows(place: Place, tmp_path) -> None:
    text = (
        'id,name,day\n1,a,2026-11-23\n\n2,b,2026-11-24\nx,c,2026-11-25\n4,d\n5,"e,f",2026-11-26\n'
    )
    place.write("in/a.csv", text)
    ddl = "id bigint, name string, day date"
    h = harness(
        CsvFileInput(place.url("in"), schema=ddl, block_size=25, scan_interval_ms=0),
        str(tmp_path / "ck"),
    )
    assert type(h.operator).output.schema.simpleString() == "struct<id:bigint,name:string,day:date>"
    drain(h)
    rows = h.sink("output").tuples
    assert [(r["id"], r["name"], r["day"].isoformat()) for r in rows] == [
        (1, "a", "2026-11-23"),
        (2, "b", "2026-11-24"),
        (5, "e,f", "2026-11-26"),
    ]
    errors = h.sink("error").tuples
    assert [(e["offset"], e["text"]) for e in errors] == [
        (text.index("x,c"), "x,c,2026-11-25"),
        (text.index("4,d"), "4,d"),
    ]
    assert errors[0]["error"] == "column 'id' (bigint): cannot convert 'x'"
    assert errors[1]["error"] == "2 field(s) where 3 are expected"
    assert all(e["file"].endswith("/in/a.csv") for e in errors)

    u = harness(CsvFileInput(place.url("in"), scan_interval_ms=0), str(tmp_path / "ck2"))
    drain(u)
    assert u.sink("output").tuples[0] == {"id": "1", "name": "a", "day": "2026-11-23"}
    assert len(u.sink("output").tuples) == 4 and len(u.sink("error").tuples) == 1

    place.write("in2/b.tsv", "1\tq\n")
    n = harness(
        CsvFileInput(place.url("in2"), header=False, columns="k,v", delimiter="\t"),
        str(tmp_path / "ck3"),
    )
    drain(n)
    assert n.sink("output").tuples == [{"k": "1", "v": "q"}]


def test_json_lines_typed_and_untyped(place: Place, tmp_path) -> None:
    text = (
        '{"id": 1, "day": "2026-11-23", "extra": true}\n'
        "not json\n"
        "[1, 2]\n"
        '{"id": "one", "day": "2026-11-23"}\n'
        '{"id": 3}\n'
    )
    place.write("in/a.jsonl", text)
    h = harness(
        JsonLinesFileInput(place.url("in"), schema="id bigint, day date", scan_interval_ms=0),
        str(tmp_path / "ck"),
    )
    drain(h)
    assert [(r["id"], r["day"] and r["day"].isoformat()) for r in h.sink("output").tuples] == [
        (1, "2026-11-23"),
        (3, None),
    ]
    offsets = [e["offset"] for e in h.sink("error").tuples]
    assert offsets == [text.index("not json"), text.index("[1, 2]"), text.index('{"id": "one"')]

    u = harness(JsonLinesFileInput(place.url("in"), scan_interval_ms=0), str(tmp_path / "ck2"))
    drain(u)
    assert u.sink("output").tuples == [
        {"id": 1, "day": "2026-11-23", "extra": True},
        {"id": "one", "day": "2026-11-23"},
        {"id": 3},
    ]
    assert len(u.sink("error").tuples) == 2


def _parquet(rows: list[dict[str, Any]], row_group_size: int | None = None) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink, row_group_size=row_group_size)
    return sink.getvalue()


def test_parquet_batches_schema_mismatch_and_row_groups_over_partitions(
    place: Place, tmp_path
) -> None:
    rows = [{"id": i, "name": f"n{i}"} for i in range(1000)]
    place.write("in/a.parquet", _parquet(rows, row_group_size=100), mtime=1_000)
    place.write("in/b.parquet", _parquet([{"other": 1}]), mtime=2_000)
    place.write("in/c.parquet", b"PAR1 this is not parquet", mtime=3_000)
    got, errors = [], []
    for p in range(3):
        h = harness(
            ParquetFileInput(
                place.url("in"), schema="id bigint, name string", block_size=1, scan_interval_ms=0
            ),
            str(tmp_path / "ck"),
            partition=p,
            partitions=3,
        )
        drain(h)
        got.append([r["id"] for r in h.sink("output").tuples])
        errors += h.sink("error").tuples
    assert sorted(i for part in got for i in part) == list(range(1000))
    assert sum(1 for part in got if part) >= 2  # row groups spread over the partitions
    reasons = sorted((e["file"].rsplit("/", 1)[1], e["error"].split(":")[0]) for e in errors)
    assert reasons == [
        ("b.parquet", "schema mismatch"),
        ("c.parquet", "not a readable Parquet file"),
    ]

    u = harness(ParquetFileInput(place.url("in/b.parquet")), str(tmp_path / "ck2"))
    drain(u)
    assert u.sink("output").tuples == [{"other": 1}]


def test_parquet_values_or_pages_that_cannot_be_read_go_to_the_error_port(
    place: Place, tmp_path
) -> None:
    # both failed the operator (a TypeError while sorting the exception), on every restart
    place.write("in/a.parquet", _parquet([{"id": "1"}, {"id": "oops"}]), mtime=1_000)
    data = bytearray(_parquet([{"id": i} for i in range(1000)]))
    for i in range(20, 400):  # the footer is whole, a page is not
        data[i] ^= 0x5A
    place.write("in/b.parquet", bytes(data), mtime=2_000)
    place.write("in/c.parquet", _parquet([{"id": 7}]), mtime=3_000)
    h = harness(
        ParquetFileInput(place.url("in"), schema="id bigint", scan_interval_ms=0),
        str(tmp_path / "ck"),
    )
    drain(h)
    assert h.sink("output").tuples == [{"id": 7}]
    errors = [(e["file"].rsplit("/", 1)[1], e["error"]) for e in h.sink("error").tuples]
    assert [name for name, _ in errors] == ["a.parquet", "b.parquet"]
    assert errors[0][1].startswith("cannot read the file: its values do not fit the schema: ")
    assert errors[1][1].startswith("cannot read the file: ")


def test_a_parquet_file_gone_before_its_footer_is_read_goes_to_the_error_port(
    place: Place, tmp_path
) -> None:
    # a file larger than block_size is cut by its row groups, read from its footer at
    # discovery: off the local filesystem, a file gone since the listing failed the operator
    place.write("in/a.parquet", _parquet([{"id": i} for i in range(100)], 10), mtime=1_000)
    h = harness(
        ParquetFileInput(place.url("in"), scan_interval_ms=0, block_size=100),
        str(tmp_path / "ck"),
    )
    h.setup()
    scan = h.operator._scanner.scan

    def listed_then_gone() -> Any:
        found = scan()
        if place.exists("in/a.parquet"):
            place.fs.delete(place.path("in/a.parquet"))
        return found

    h.operator._scanner.scan = listed_then_gone
    drain(h)
    assert h.sink("output").tuples == []
    ((error,),) = [h.sink("error").tuples]
    assert error["file"].endswith("/a.parquet") and error["offset"] == 0
    assert "no such file" in error["error"].lower()  # as the filesystem says it


def test_parquet_folders_of_hive_partitions_give_their_columns(place: Place, tmp_path) -> None:
    # malhar's own partition_by output read back: "the file has no column(s) ['day']"
    from tests.io.test_fs_output import out_harness

    at = dt.datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=dt.UTC)
    rows = [
        {"user": "a/b", "day": dt.date(2026, 11, 23), "n": 1, "at": at},
        {"user": None, "day": dt.date(2026, 11, 24), "n": 2, "at": at},
        {"user": "c", "day": dt.date(2026, 11, 23), "n": 3, "at": at},
    ]
    out = out_harness(
        ParquetFileOutput(
            place.url("out"),
            schema="user string, day date, n bigint, at timestamp",
            partition_by=["user", "day", "at"],
            roll_windows=1,
        )
    )
    out.run_window([("input", r) for r in rows], window=0)
    out.committed(0)

    def read(name: str, schema: str | None) -> OperatorHarness:
        op = ParquetFileInput(place.url("out"), recursive=True, scan_interval_ms=0, schema=schema)
        h = harness(op, str(tmp_path / name))
        drain(h)
        return h

    typed = read("ck", "n bigint, day date, user string, at timestamp")
    got = sorted(typed.sink("output").tuples, key=lambda r: r["n"])
    assert got == [{"n": r["n"], "day": r["day"], "user": r["user"], "at": at} for r in rows]
    assert typed.sink("error").tuples == []
    texts = sorted(read("c2", None).sink("output").tuples, key=lambda r: r["n"])
    assert texts[0] == {"n": 1, "user": "a/b", "day": "2026-11-23", "at": "2026-01-01 12:00:00.5"}
    assert texts[1]["user"] is None
    lacking = read("c3", "n bigint, x int")
    assert {e["error"].split(":")[0] for e in lacking.sink("error").tuples} == {"schema mismatch"}
    # a NOT NULL column and Hive's default partition: an error row (it failed the worker)
    required = read("c4", "n bigint, user string not null")
    assert sorted(r["n"] for r in required.sink("output").tuples) == [1, 3]
    (error,) = required.sink("error").tuples
    assert "with null values to non-nullable" in error["error"]


def test_compressed_text(place: Place, tmp_path) -> None:
    lines = [f"line {i} é" for i in range(500)]
    data = "".join(f"{x}\n" for x in lines).encode()
    place.write("in/a.txt.gz", gzip.compress(data[:3000]) + gzip.compress(data[3000:]))  # 2 members
    place.write("in/b.txt.bz2", bz2.compress(b"bz\nlast"))
    place.write("csv/c.csv.gz", gzip.compress(b"k,v\n1,x\n2,y\n"))
    h = harness(
        LinesFileInput(place.url("in"), scan_interval_ms=0, max_records_per_window=123),
        str(tmp_path / "ck"),
    )
    saved = h.checkpoint()
    drain(h)
    assert values(h) == [*lines, "bz", "last"]
    replayed = harness(
        LinesFileInput(place.url("in"), scan_interval_ms=0, max_records_per_window=123),
        str(tmp_path / "ck"),
        saved=saved,
    )
    for w in range(3):
        replayed.run_window(window=w)
    assert replayed.sink("output").per_window == {
        w: v for w, v in h.sink("output").per_window.items() if w < 3
    }
    c = harness(CsvFileInput(place.url("csv"), schema="k bigint, v string"), str(tmp_path / "c"))
    drain(c)
    assert c.sink("output").tuples == [{"k": 1, "v": "x"}, {"k": 2, "v": "y"}]


def test_compressed_text_without_suffix(place: Place, tmp_path) -> None:
    # a compressed file named like text is recognised by its first bytes, not read as garbage
    lines = [f"{i},w{i}\n".encode() for i in range(300)]
    place.write("in/a.csv", gzip.compress(b"k,v\n" + b"".join(lines[:150])))
    place.write("in/b", bz2.compress(b"k,v\n" + b"".join(lines[150:])))
    place.write("in/c.csv", b"k,v\nBZh9,plain\n")  # starts like bzip2, is text
    h = harness(CsvFileInput(place.url("in"), schema="k string, v string"), str(tmp_path / "ck"))
    drain(h)
    assert h.sink("error").tuples == []
    rows = [(r["k"], r["v"]) for r in h.sink("output").tuples]
    assert sorted(rows) == sorted([(str(i), f"w{i}") for i in range(300)] + [("BZh9", "plain")])
    plain = harness(
        LinesFileInput(place.url("in/a.csv"), compression="none", decode_errors="replace"),
        str(tmp_path / "none"),
    )
    drain(plain)
    assert len(plain.sink("output").tuples) < 300  # "none" reads the bytes as they are


# -- bad input --------------------------------------------------------------------------------
def test_decode_error_policies(place: Place, tmp_path) -> None:
    place.write("in/a.txt", b"ok\nbad \xff\xfe\nfine\n")
    expect = {
        "error": (["ok", "fine"], 1),
        "replace": (["ok", "bad \ufffd\ufffd", "fine"], 0),
        "ignore": (["ok", "bad ", "fine"], 0),
    }
    for policy, (lines, errors) in expect.items():
        h = harness(
            LinesFileInput(place.url("in"), decode_errors=policy, scan_interval_ms=0),
            str(tmp_path / policy),
        )
        drain(h)
        assert (values(h), len(h.sink("error").tuples)) == (lines, errors), policy
    h = harness(LinesFileInput(place.url("in"), decode_errors="fail"), str(tmp_path / "fail"))
    with pytest.raises(FileReadError, match="not valid utf-8 at byte 7"):
        h.run_window()
    latin = harness(LinesFileInput(place.url("in"), encoding="latin-1"), str(tmp_path / "latin"))
    drain(latin)
    assert values(latin)[1] == "bad ÿþ"


def test_a_vanished_file_is_reported_and_skipped_or_fails(place: Place, tmp_path) -> None:
    place.write("in/a.txt", "".join(f"a{i}\n" for i in range(50)), mtime=1_000)
    place.write("in/b.txt", "b0\n", mtime=2_000)
    h = harness(
        LinesFileInput(place.url("in"), scan_interval_ms=0, max_records_per_window=10),
        str(tmp_path / "ck"),
    )
    h.run_window()
    place.fs.delete(place.path("in/a.txt"))
    drain(h)
    assert values(h) == [f"a{i}" for i in range(10)] + ["b0"]
    (error,) = h.sink("error").tuples
    assert error["file"].endswith("/in/a.txt") and error["offset"] == 30
    assert "cannot read the file" in error["error"]

    # truncated below where the read goes on: the message said it ended at byte 9
    place.write("cut/a.txt", "".join(f"l{i}\n" for i in range(10)))
    c = harness(
        LinesFileInput(place.url("cut"), scan_interval_ms=0, max_records_per_window=3),
        str(tmp_path / "cut"),
    )
    c.run_window()
    place.write("cut/a.txt", "l0\nl1\n")
    drain(c)
    errors = [e["error"] for e in c.sink("error").tuples]
    assert any("it ends at or before byte 9, before byte 30" in e for e in errors), errors

    place.write("in2/a.txt", "".join(f"a{i}\n" for i in range(50)))
    f = harness(
        LinesFileInput(
            place.url("in2"), scan_interval_ms=0, max_records_per_window=10, on_unreadable="fail"
        ),
        str(tmp_path / "ck2"),
    )
    f.run_window()
    place.fs.delete(place.path("in2/a.txt"))
    with pytest.raises(FileReadError, match="cannot read"):
        f.run_window()


# -- post actions ------------------------------------------------------------------------------
@pytest.mark.parametrize("action", ["delete", "move"])
def test_post_action_after_commit_also_for_files_read_by_several_partitions(
    place: Place, tmp_path, action: str
) -> None:
    big = "".join(f"line {i}\n" for i in range(200))  # ~2 KB: 20 blocks of 100 bytes
    place.write("in/big.txt", big, mtime=1_000)
    place.write("in/small.txt", "s\n", mtime=2_000)
    ckpt = str(tmp_path / "ck")
    props = {"block_size": 100, "scan_interval_ms": 0, "post_action": action}
    if action == "move":
        props["move_to"] = place.url("done")
    hs = [
        harness(LinesFileInput(place.url("in"), **props), ckpt, partition=p, partitions=2)
        for p in range(2)
    ]
    last = max(drain(h) for h in hs)
    got = sorted(x for h in hs for x in values(h))
    assert got == sorted([f"line {i}" for i in range(200)] + ["s"])
    assert place.exists("in/big.txt") and place.exists("in/small.txt")  # nothing committed yet
    for h in reversed(hs):  # the owner of the file's first block may hear first: it waits
        h.committed(last)
    for h in hs:
        h.run_window()  # a window later, every partition has left its marker
        h.committed(last + 1)
        h.committed(last + 1)  # delivered again (a restart): nothing happens twice
    assert not place.exists("in/big.txt") and not place.exists("in/small.txt")
    if action == "move":
        assert place.read("done/big.txt").decode() == big
        assert place.read("done/small.txt") == b"s\n"
    markers = tmp_path / "ck" / "malhar" / "files" / "in" / "done"
    assert markers.is_dir() and not list(markers.iterdir())  # the markers were removed
    # gone files are forgotten; a new file is read as usual
    place.write("in/next.txt", "n\n")
    for h in hs:
        h.run_window()
    assert "n" in [x for h in hs for x in values(h)]
    assert all("big" not in "".join(h.operator._seen) for h in hs)


# -- settings -----------------------------------------------------------------------------------
def test_settings_are_checked(tmp_path) -> None:
    ckpt = str(tmp_path / "ck")
    with pytest.raises(FileConfigError, match="needs move_to"):
        harness(LinesFileInput(str(tmp_path), post_action="move"), ckpt).run_window()
    with pytest.raises(FileConfigError, match="inside the recursively scanned"):
        harness(
            LinesFileInput(
                str(tmp_path), recursive=True, post_action="move", move_to=str(tmp_path / "done")
            ),
            ckpt,
        ).run_window()
    with pytest.raises(Exception, match="not a regular expression"):
        LinesFileInput(str(tmp_path), pattern="(")
    with pytest.raises(Exception, match="ASCII-compatible"):
        LinesFileInput(str(tmp_path), encoding="utf-16")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a\n")
    owner = split_owner(str(tmp_path / "in" / "a.txt"), 0, 2)  # the partition that reads it
    h = harness(LinesFileInput(str(tmp_path / "in")), ckpt, partition=owner, partitions=2)
    h.run_window()
    assert h.operator._seen
    saved = h.checkpoint()
    with pytest.raises(FileConfigError, match=r"partition count.*repartition\("):
        harness(LinesFileInput(str(tmp_path / "in")), ckpt, partitions=3, saved=saved).run_window(
            window=1
        )


@pytest.mark.parametrize(
    ("cls", "props", "message"),
    [
        (CsvFileInput, {"quote_char": "''"}, "quote_char must be one character"),
        (CsvFileInput, {"delimiter": "\n"}, "delimiter cannot be a line break"),
        (CsvFileInput, {"quote_char": "\r"}, "quote_char cannot be a line break"),
        (CsvFileInput, {"delimiter": '"'}, "delimiter and quote_char are both"),
        (JsonLinesFileInput, {"schema": "id int, m map<string,int>"}, "'m' is a map"),
        (JsonLinesFileInput, {"schema": "s struct<a: array<map<string,int>>>"}, "'s.a\\[\\]'"),
    ],
)
def test_settings_no_line_can_be_read_with_are_refused_at_setup(
    tmp_path, cls: Any, props: dict[str, Any], message: str
) -> None:
    # before: a crash in the first window (quote_char), every row an error row (delimiter,
    # maps), or a misread file (delimiter = quote)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a,b\n1,2\n")
    op = cls(str(tmp_path / "in"), **props)
    assert any(re.search(message, p) for p in op.settings_problems()), op.settings_problems()
    with pytest.raises(FileConfigError, match=message):
        harness(op, str(tmp_path / "ck")).run_window()


def test_the_record_is_small_and_json(place: Place, tmp_path) -> None:
    place.write("in/a.txt", "".join(f"{i}\n" for i in range(1000)))
    h = harness(LinesFileInput(place.url("in"), scan_interval_ms=0, block_size=1000), str(tmp_path))
    h.run_window()
    record = h.operator.window_data_manager.retrieve(0)
    assert len(json.dumps(record)) < 1000
    assert sum(r["n"] for r in record["ranges"]) == 1000
    assert h.operator.metrics()["bytes"] == len("".join(f"{i}\n" for i in range(1000)))
    _ = time  # keep the import for debugging timing


def test_timestamps_without_an_offset_are_utc_as_in_spark(tmp_path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text(
        "ts,n\n2026-11-21 10:00:00,1\n2026-11-21T10:00:00+01:00,2\n,3\nnot a time,4\n"
    )
    (tmp_path / "in" / "b.jsonl").write_text(
        '{"ts": "2026-11-21 10:00:00", "n": 5}\n{"ts": "2026-11-21T10:00:00Z", "n": 6}\n'
    )
    got = {}
    for cls, pattern in ((CsvFileInput, r".*\.csv"), (JsonLinesFileInput, r".*\.jsonl")):
        h = harness(
            cls(str(tmp_path / "in"), schema="ts timestamp, n bigint", pattern=pattern),
            str(tmp_path / f"ck-{cls.__name__}"),
        )
        drain(h)
        for t in h.sink("output").tuples:
            got[t["n"]] = t["ts"].isoformat() if t["ts"] else None
        if cls is CsvFileInput:
            assert [e["text"] for e in h.sink("error").tuples] == ["not a time,4"]
    assert got == {
        1: "2026-11-21T10:00:00+00:00",
        2: "2026-11-21T09:00:00+00:00",
        3: None,
        5: "2026-11-21T10:00:00+00:00",
        6: "2026-11-21T10:00:00+00:00",
    }
