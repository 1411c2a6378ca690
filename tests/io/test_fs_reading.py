"""Unit tests of the file input's reading helpers (no filesystem fixture): how files are cut
and dealt to partitions, where a chunk of lines is cut, and the CSV decoder's fast path for
timestamps written without an offset; records that are not one per line and bytes that are
not UTF-8."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from malhar.io.fs.decoders import CsvDecoder, JsonLinesDecoder, LinesDecoder, zone_naive
from malhar.io.fs.encoders import json_encoder
from malhar.io.fs.errors import FileReadError
from malhar.io.fs.settings import parse_schema
from malhar.io.fs.splits import SPREAD_MIN_BLOCK, block_size_for, split_owner
from malhar.io.fs.text_blocks import _cut_unbounded, _probe_cut


def test_a_file_smaller_than_a_block_is_spread_over_the_partitions_evenly() -> None:
    big = 64 << 20
    assert block_size_for(4_000_000, big, 1) == big  # one partition: one block
    assert block_size_for(SPREAD_MIN_BLOCK, big, 2) == big  # blocks would be < 1 MiB
    assert block_size_for(2 * SPREAD_MIN_BLOCK, big, 2) == SPREAD_MIN_BLOCK
    assert block_size_for(4_000_000, 100, 2) == 100  # an explicit small block_size rules
    assert block_size_for(200 << 20, big, 2) == 50 << 20  # 4 equal blocks, 2 per partition
    # six files of 4 MB on two partitions: each reads half of every file (a hash per file
    # dealt them 4:2 on the bench's data)
    share: Counter[int] = Counter()
    for f in range(6):
        path = f"/data/in/part-{f:04d}.csv"
        size = 4_000_000
        bs = block_size_for(size, big, 2)
        for i in range(-(-size // bs)):
            share[split_owner(path, i, 2)] += min(bs, size - i * bs)
    assert share[0] == share[1] == 12_000_000


def _shares(path: str, size: int, block: int, partitions: int, rule: int) -> list[int]:
    bs = block_size_for(size, block, partitions, rule)
    share = [0] * partitions
    for i in range(-(-size // bs)):
        share[split_owner(path, i, partitions)] += min(bs, size - i * bs)
    return share


def test_a_file_larger_than_a_block_is_cut_into_equal_shares_per_partition() -> None:
    mb = 1 << 20
    # the bench's 194 MB files in blocks of 64 MiB: 4 blocks of 48.5 MB, not 67+67+60 MB,
    # of which one partition read two
    size = 193_911_000
    assert sorted(_shares("/in/a.csv", size, 64 * mb, 2, rule=1)) == [64 * mb, size - 64 * mb]
    assert _shares("/in/a.csv", size, 64 * mb, 2, rule=2) == [size // 2, size // 2]
    rng = random.Random(5)
    for _ in range(3000):
        partitions = rng.randrange(2, 7)
        block = rng.randrange(SPREAD_MIN_BLOCK, 64 * mb)
        low = max(block + 1, partitions * SPREAD_MIN_BLOCK)  # smaller: too small to spread
        size = rng.randrange(low, low + 12 * block)
        bs = block_size_for(size, block, partitions)
        blocks = -(-size // bs)
        assert bs <= block and blocks % partitions == 0, (size, block, partitions)
        share = _shares(f"/in/{size}.csv", size, block, partitions, rule=2)
        assert sum(share) == size and max(share) - min(share) <= blocks, (size, block, share)


def test_split_owners_are_stable_and_round_robin_from_the_files_hash() -> None:
    for n in (1, 2, 3, 5):
        for path in ("/a.csv", "hdfs://nn/x/b.csv", "/日本.txt"):
            owners = [split_owner(path, i, n) for i in range(2 * n)]
            assert owners == [split_owner(path, i, n) for i in range(2 * n)]
            assert sorted(owners[:n]) == list(range(n))  # n blocks: one per partition
            assert split_owner(path, -1, n) == owners[0]  # a whole Parquet file


def _cut_by_counting(data: bytes, last_rel: int, eof: bool) -> int | None:
    """What _take_lines computes by indexing every newline, with an unbounded budget."""
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    if not len(nl):
        return None
    k = min(len(nl), int(np.searchsorted(nl, last_rel, "left")) + 1)
    cut = int(nl[k - 1]) + 1
    if eof and k == len(nl) and cut < len(data) and cut <= last_rel:
        cut = len(data)
    return cut


def test_the_memchr_cut_equals_the_newline_index_cut() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(0, 40)))
        last_rel = rng.randrange(-3, 50)
        eof = rng.random() < 0.5
        assert _cut_unbounded(data, last_rel, eof) == _cut_by_counting(data, last_rel, eof), (
            data,
            last_rel,
            eof,
        )


def test_the_probed_cut_equals_the_cut_of_the_whole_chunk() -> None:
    rng = random.Random(11)
    probed = 0
    for _ in range(5000):
        data = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(1, 40)))
        last_rel = rng.randrange(-3, 50)
        eof = rng.random() < 0.5
        probe = rng.randrange(1, 12)
        reads: list[tuple[int, int]] = []

        def read(at: int, n: int, data: bytes = data, reads: list = reads) -> bytes:
            reads.append((at, n))
            return data[at : at + n]

        cut = _probe_cut(read, len(data), last_rel, eof, probe)
        assert len(reads) == 1 and reads[0][1] <= probe and sum(reads[0]) <= len(data)
        window = data[reads[0][0] : sum(reads[0])]
        if cut is None:
            assert b"\n" not in window, (data, last_rel, eof, probe)
        else:
            probed += 1
            assert cut == _cut_unbounded(data, last_rel, eof), (data, last_rel, eof, probe)
    assert probed > 3000  # most chunks are cut from the probe alone


def test_csv_timestamps_without_an_offset_take_the_fast_path_with_the_same_values() -> None:
    schema = parse_schema("ts timestamp, n bigint")
    decoder = CsvDecoder(schema)
    naive = b"2026-11-21 10:00:00,1\n2026-11-21T11:30:00.5,2\n,3\n"
    got = decoder.decode(naive, 0, "f")
    assert got.batch.schema == schema and got.items == 3 and not got.errors
    assert [v.isoformat() if v else None for v in got.batch.column(0).to_pylist()] == [
        "2026-11-21T10:00:00+00:00",
        "2026-11-21T11:30:00.500000+00:00",
        None,
    ]
    # the text path (what a chunk with an offset takes) gives the same values
    slow = decoder.decode(naive + b"2026-11-21T10:00:00Z,4\n", 0, "f")
    assert slow.batch.slice(0, 3).equals(got.batch)
    assert slow.batch.column(0)[3].as_py().isoformat() == "2026-11-21T10:00:00+00:00"
    # a bad value in another column: the fast read fails, the line goes to the error port
    bad = decoder.decode(b"2026-11-21 10:00:00,1\n2026-11-21 10:00:00,x\n", 0, "f")
    assert bad.batch.num_rows == 1 and [e["offset"] for e in bad.errors] == [22]
    # a short row is reported once, also when the fast read is attempted first
    short = decoder.decode(b"2026-11-21 10:00:00,1\n2026-11-21 10:00:00\n", 0, "f")
    assert short.batch.num_rows == 1 and len(short.errors) == 1
    assert pa.types.is_timestamp(short.batch.schema.field("ts").type)


def test_naive_timestamps_are_read_as_wall_clock_times_of_the_target_zone() -> None:
    naive = pa.array([0, None], pa.timestamp("us"))
    assert zone_naive(naive, pa.timestamp("us", "UTC")).to_pylist()[0].isoformat() == (
        "1970-01-01T00:00:00+00:00"
    )
    paris = zone_naive(naive, pa.timestamp("us", "Europe/Paris"))
    assert paris.type == pa.timestamp("us", "Europe/Paris")
    assert paris.cast(pa.int64()).to_pylist() == [-3_600_000_000, None]  # 00:00 in Paris


def _decoded(decoder: Any, data: bytes, start: int = 100, names: Any = None) -> tuple:
    got = decoder.decode(data, start, "f", names) if names else decoder.decode(data, start, "f")
    rows = got.batch.to_pylist() if got.batch is not None else got.rows
    return rows, [(e["offset"], e["error"][:30]) for e in got.errors], got.items


def _line_by_line(decoder: Any, data: bytes, start: int = 100, names: Any = None) -> tuple:
    """What a window that read ``data`` a line at a time would emit (chunks cut anywhere)."""
    rows, errors, items, pos = [], [], 0, 0
    for line in (x + b"\n" for x in data.split(b"\n")[:-1]):  # data ends with a newline
        r, e, n = _decoded(decoder, line, start + pos, names)
        rows, errors, items, pos = rows + r, errors + e, items + n, pos + len(line)
    return rows, errors, items


def test_a_csv_record_is_one_line_whatever_the_chunk_holds() -> None:
    # pyarrow ends a record at a lone \r and lets a quoted value run over lines; the rows
    # are numbered by record, so the error rows named other lines (or an index past the
    # end: IndexError), and a replay that read other chunks emitted other items
    data = b'1,"x\ny"\n2,ok\n3,p\rq\n4,"a\rb"\n\n5,"open\n'
    for decoder, names in ((CsvDecoder(parse_schema("a bigint, b string")), None),
                           (CsvDecoder(None), ["a", "b"])):  # fmt: skip
        rows, errors, items = _decoded(decoder, data, names=names)
        assert [r["b"] for r in rows] == ["ok", "a\rb"]  # a quoted \r within its line is data
        assert [o for o, _ in errors] == [100, 105, 113, 128]  # 1,"x  y"  3,p\rq  5,"open
        assert items == 6 and (rows, errors, items) == _line_by_line(decoder, data, names=names)
    clean = b'1,"a,b"\r\n2,c\r\n'  # quotes and CRLF without a misaligned record: one parse
    assert _decoded(CsvDecoder(None), clean, names=["a", "b"])[1:] == ([], 2)


def test_a_line_that_is_not_utf8_is_said_so_at_its_byte_or_fails_the_read() -> None:
    data = b'{"a":1,"b":"x"}\n{"a":2,"b":"\xff"}\n'
    json_typed = JsonLinesDecoder(parse_schema("a bigint, b string"))
    rows, errors, items = _decoded(json_typed, data)  # pyarrow's JSON reader took the byte
    assert rows == [{"a": 1, "b": "x"}] and items == 2
    assert errors == [(116, "not valid utf-8 at byte 128: i")]
    csv = b"1,x\n2,\xff\n"
    rows, errors, _ = _decoded(CsvDecoder(parse_schema("a bigint, b string")), csv)
    assert errors == [(104, "not valid utf-8 at byte 106: i")]  # not "CSV conversion error"
    for decoder in (JsonLinesDecoder(parse_schema("a bigint, b string"), decode_errors="fail"),
                    CsvDecoder(parse_schema("a bigint, b string"), decode_errors="fail"),
                    CsvDecoder(None, decode_errors="fail")):  # fmt: skip
        with pytest.raises(FileReadError, match="not valid utf-8 at byte"):
            decoder.decode(
                data if isinstance(decoder, JsonLinesDecoder) else csv, 0, "f", ["a", "b"]
            )
    assert _decoded(LinesDecoder(), b"ok\nb\xffd\n", 13)[1] == [
        (16, "not valid utf-8 at byte 17: in")
    ]


def test_typed_json_lines_hold_one_object_per_line_whatever_the_chunks(tmp_path) -> None:
    # pyarrow's reader took an object spread over two lines as one record when both lines
    # were in one chunk, two error rows when a chunk ended between them, and a replay (one
    # chunk for the window) then did not match the window: FileReplayError, for good
    from malhar.io.fs import JsonLinesFileInput
    from tests.io.fs_support import drain, harness

    (tmp_path / "in").mkdir()
    data = '{"a": 1,\n "b": 2}\n{"a": 3, "b": 4}\n  \n{"a": 5} {"a": 6}\n{"a": 7, "b": 8}\n'
    (tmp_path / "in" / "f.jsonl").write_text(data)
    outcomes = []
    for i, props in enumerate(({}, {"chunk_bytes": 4}, {"max_records_per_window": 1})):
        op = JsonLinesFileInput(
            str(tmp_path / "in"), scan_interval_ms=0, schema="a bigint, b bigint", **props
        )
        h = harness(op, str(tmp_path / f"ck{i}"))
        saved = h.checkpoint()
        last = drain(h)
        rows = h.sink("output").tuples
        errors = [(e["offset"], e["error"]) for e in h.sink("error").tuples]
        outcomes.append((rows, errors))
        replayed = harness(
            JsonLinesFileInput(
                str(tmp_path / "in"), scan_interval_ms=0, schema="a bigint, b bigint", **props
            ),
            str(tmp_path / f"ck{i}"),
            saved=saved,
        )
        for w in range(last + 1):
            replayed.run_window(window=w)
        assert replayed.sink("output").tuples == rows and len(replayed.sink("error").tuples) == 3
    assert all(o == outcomes[0] for o in outcomes)  # the same for every chunking
    rows, errors = outcomes[0]
    assert rows == [{"a": 3, "b": 4}, {"a": 7, "b": 8}]
    assert [o for o, _ in errors] == [0, 9, 38]  # the spread object's lines, the double one
    assert "several on one line" in errors[2][1]


def test_a_byte_order_mark_is_no_text_of_the_first_line(tmp_path) -> None:
    # lines kept it ('\ufeffone'), an untyped CSV named its first column '\ufeffa', and a
    # typed JSON line after it was refused: Spark's readers drop it, as pyarrow's do
    from malhar.io.fs import CsvFileInput, JsonLinesFileInput, LinesFileInput
    from tests.io.fs_support import drain, harness

    bom = "\ufeff".encode()
    cases = [
        (LinesFileInput, {}, b"one\n\xfftwo\n", [{"line": "one"}]),
        (JsonLinesFileInput, {"schema": "a bigint"}, b'{"a": 1}\n{"a": 2}\n', [{"a": 1}, {"a": 2}]),
        (CsvFileInput, {}, b"a,b\n1,x\n", [{"a": "1", "b": "x"}]),
        (CsvFileInput, {"schema": "a bigint", "header": False}, b"1\n2\n", [{"a": 1}, {"a": 2}]),
    ]
    for i, (cls, props, data, rows) in enumerate(cases):
        (tmp_path / f"in{i}").mkdir()
        (tmp_path / f"in{i}" / "f.txt").write_bytes(bom + data)
        h = harness(
            cls(str(tmp_path / f"in{i}"), scan_interval_ms=0, **props), str(tmp_path / f"c{i}")
        )
        drain(h)
        assert h.sink("output").tuples == rows, cls.__name__
    errors = [e["offset"] for e in h.sink("error").tuples]
    assert errors == []
    first = harness(LinesFileInput(str(tmp_path / "in0"), scan_interval_ms=0), str(tmp_path / "d"))
    drain(first)
    assert [e["offset"] for e in first.sink("error").tuples] == [7]  # in the file, BOM included


def test_typed_json_lines_that_are_no_object_are_error_rows_never_a_crash() -> None:
    # a chunk starting with a null line crashed the worker process in pyarrow's reader
    # (exit 139), on every restart; a null line elsewhere became an all-null row
    decoder = JsonLinesDecoder(parse_schema("id bigint, name string"))
    for data, rows, errors in [
        (b"null\n", [], [(0, "not a JSON object but a null")]),
        (b'{"id": 1}\nnull\n', [1], [(10, "not a JSON object but a null")]),
        (b'5\n{"id": 2}\n', [2], [(0, "not a JSON object but a number")]),
        (b'  \n[1]\n{"id": 3}\n"x"\n', [3], [(3, "not a JSON object but an array"), (17, "")]),
    ]:
        out = decoder.decode(data, 0, "f")
        assert (out.batch.column("id").to_pylist() if out.batch else []) == rows
        got = [(e["offset"], e["error"]) for e in out.errors]
        assert [o for o, _ in got] == [o for o, _ in errors]
        assert all(why in g for (_, g), (_, why) in zip(got, errors, strict=True))


def test_typed_json_lines_read_back_what_spark_and_the_json_output_write() -> None:
    # "NaN", "Infinity" and "-Infinity" as strings (Spark's writer, JsonLinesFileOutput)
    # and decimals as numbers (Spark's writer) were error rows
    schema = "f double, s string, st struct<f: float, s: string>, l array<double>, d decimal(5,2)"
    dumps = json_encoder(compact=True)
    inf = float("inf")
    written = [
        {"f": float("nan"), "s": "NaN", "st": {"f": -inf, "s": "Infinity"}, "l": [1.0, -inf]},
        {"f": inf, "s": "x", "l": [float("nan")]},
    ]
    lines = [dumps(r).encode() for r in written]
    lines += [b'{"f" : "-Infinity", "d": 1.25, "l": ["NaN", 2]}', b'{"d": 3}', b'{"d": "4.5"}']
    lines += [b'{"f": "nan"}', b'{"d": 1.255}']  # refused as by Spark
    out = JsonLinesDecoder(parse_schema(schema)).decode(b"\n".join(lines) + b"\n", 0, "f")
    rows = out.batch.to_pylist()
    assert [repr(r["f"]) for r in rows] == ["nan", "inf", "-inf", "None", "None"]
    assert [r["s"] for r in rows] == ["NaN", "x", None, None, None]  # text stays text
    assert rows[0]["st"] == {"f": -inf, "s": "Infinity"}
    assert repr(rows[0]["l"]) == "[1.0, -inf]" and repr(rows[1]["l"]) == "[nan]"
    assert repr(rows[2]["l"]) == "[nan, 2.0]"
    assert [str(r["d"]) for r in rows] == ["None", "None", "1.25", "3.00", "4.50"]
    assert [e["text"] for e in out.errors] == ['{"f": "nan"}', '{"d": 1.255}']
    assert "expected a number" in out.errors[0]["error"]


def test_an_error_row_shows_its_line_in_the_files_encoding() -> None:
    # the text was decoded as UTF-8 whatever the encoding: 'Jos\ufffd,one'
    decoder = CsvDecoder(parse_schema("name string, n int"), encoding="latin-1")
    out = decoder.decode("José,one\nAnn,2\n".encode("latin-1"), 0, "f")
    assert out.batch.to_pylist() == [{"name": "Ann", "n": 2}]
    assert [e["text"] for e in out.errors] == ["José,one"]


def test_untyped_json_lines_that_are_no_object_are_said_so_in_json_terms() -> None:
    out = JsonLinesDecoder(None).decode(b'null\n[1]\n{"a": 1}\n', 0, "f")
    assert out.rows == [{"a": 1}]
    assert [e["error"] for e in out.errors] == [
        "not a JSON object but a null",
        "not a JSON object but an array",
    ]


def test_special_float_strings_are_read_only_where_a_float_is_and_reasons_keep_the_digits() -> None:
    def decode(schema: str, *lines: bytes) -> tuple[list[Any], list[str]]:
        out = JsonLinesDecoder(parse_schema(schema)).decode(b"\n".join(lines) + b"\n", 0, "f")
        rows = out.batch.to_pylist() if out.batch is not None else []
        return [repr(r) for r in rows], [e["error"] for e in out.errors]

    # a key ending like a float field's name is another key; "element" names no list item
    assert decode('f double, `a"f` string', rb'{"a\"f": "NaN", "f": 1}') == (
        ["{'f': 1.0, 'a\"f': 'NaN'}"],
        [],
    )
    assert decode("element double, l array<string>", b'{"element": "NaN", "l": ["NaN"]}') == (
        ["{'element': nan, 'l': ['NaN']}"],
        [],
    )
    # non-ASCII names, written or escaped; the explained field is the one that is wrong
    rows, errors = decode(
        "`café` double, d date", '{"café": "NaN", "d": "nope"}'.encode(), rb'{"caf\u00e9": "NaN"}'
    )
    assert rows == ["{'café': nan, 'd': None}"]
    assert errors == ["field 'd' (date): cannot convert \"nope\""]
    # lists of lists, and every form Spark's reader takes
    forms = b'{"f": "+Infinity", "ll": [["NaN", 1], ["+INF", "-INF"]]}'
    assert decode("f double, ll array<array<double>>", forms) == (
        ["{'f': inf, 'll': [[nan, 1.0], [inf, -inf]]}"],
        [],
    )
    # a decimal's reason shows the digits in the file and names the field
    assert decode("d decimal(38,18)", b'{"d": 1.0000000000000000001}', b'{"d": true}')[1] == [
        "field 'd' (decimal(38,18)): cannot convert 1.0000000000000000001",
        "field 'd' (decimal(38,18)): expected a number or string, found a boolean (true)",
    ]


def test_the_special_value_rewrite_changes_only_float_fields() -> None:
    # a rewrite of one line cut the text before it (caught by the row count, then read
    # line by line: 75 times slower)
    decoder = JsonLinesDecoder(parse_schema("tags array<string>, v array<double>, x double"))
    same = b'{"tags":["a"],"v":[1.0]}\n{"tags":["b"]}\r\n{"tags":["NaN"],"v":[3.0]}\n'
    assert decoder._bare_specials(same) == same
    mixed = b'{"tags":["NaN"], "x": "NaN"}\r\n{"v": [\t"-INF", 2]}\n{"s": ", NaN\\""}'
    assert decoder._bare_specials(mixed) == (
        b'{"tags":["NaN"], "x": NaN}\r\n{"v": [\t-Infinity, 2]}\n{"s": ", NaN\\""}'
    )
