"""Record framing: length prefix + CRC32; torn tails and flipped bits are always detected."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar.util import CorruptRecordError, filesystem_for
from malhar.util.wal import LogWriter, framing

payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=12)


def _segment(items: list[bytes], serializer: str = "pickle") -> tuple[bytes, list[int]]:
    header = framing.encode_header(serializer)
    out = bytearray(header)
    offsets = []
    for window, payload in enumerate(items, start=10):
        offsets.append(len(out))
        out += framing.encode_record(window, payload)
    return bytes(out), offsets


def test_header_round_trip_and_rejections() -> None:
    header = framing.encode_header("json")
    assert framing.decode_header(header + b"rest") == framing.Header("json", len(header))
    with pytest.raises(framing.HeaderError) as err:
        framing.decode_header(header[:5])
    assert err.value.kind == "torn"
    with pytest.raises(framing.HeaderError) as err:
        framing.decode_header(b"PK\x03\x04 not a wal")
    assert err.value.kind == "corrupt"
    flipped = bytearray(header)
    flipped[7] ^= 0x01
    with pytest.raises(framing.HeaderError, match="checksum"):
        framing.decode_header(bytes(flipped))


@given(payloads)
def test_records_round_trip(items: list[bytes]) -> None:
    data, _ = _segment(items)
    header = framing.decode_header(data)
    result = framing.scan(data, header.size)
    assert result.tail is None and not result.corrupt and result.end == len(data)
    assert [w for w, _, _ in result.records] == list(range(10, 10 + len(items)))
    assert [data[off : off + n] for _, off, n in result.records] == items


@given(payloads, st.data())
def test_any_truncation_is_a_torn_tail_after_whole_records(
    items: list[bytes], data: st.DataObject
) -> None:
    blob, offsets = _segment(items)
    header = len(framing.encode_header("pickle"))
    cut = data.draw(st.integers(min_value=header, max_value=len(blob) - 1))
    result = framing.scan(blob[:cut], header)
    complete = sum(1 for i, off in enumerate(offsets) if ([*offsets, len(blob)])[i + 1] <= cut)
    assert len(result.records) == complete
    assert [blob[o : o + n] for _, o, n in result.records] == items[:complete]
    boundary = ([*offsets, len(blob)])[complete]
    if cut == boundary:
        assert result.tail is None
    else:
        assert result.tail is not None and result.tail.kind == "torn"
        assert result.tail.offset == offsets[complete]
    assert result.end == boundary if cut == boundary else offsets[complete]


def _damage(blob: bytes, offsets: list[int], items: list[bytes], data: st.DataObject):
    """Damage one record: flip 1-3 bits in it, or overwrite its length field."""
    bounds = [*offsets, len(blob)]
    victim = data.draw(st.integers(0, len(items) - 1), label="victim")
    start, end = bounds[victim], bounds[victim + 1]
    bad = bytearray(blob)
    if data.draw(st.booleans(), label="length"):
        length = data.draw(
            st.integers(0, 2**32 - 1).filter(lambda n: n != len(items[victim])), label="new length"
        )
        bad[start : start + 4] = length.to_bytes(4, "little")
    else:
        spots = st.lists(st.integers(start, end - 1), min_size=1, max_size=3, unique=True)
        for pos in data.draw(spots, label="positions"):
            bad[pos] ^= 1 << data.draw(st.integers(0, 7))
    return bytes(bad), victim


@settings(max_examples=300)
@given(payloads, st.data())
def test_damaged_record_is_a_torn_tail_only_if_it_is_the_last(
    items: list[bytes], data: st.DataObject
) -> None:
    """Flipped bits or a wrong length in record k: if k is the last record, a torn tail
    after the intact prefix; otherwise corruption at k's offset, and every later record
    is still found (nothing valid is ever classified as a torn tail)."""
    blob, offsets = _segment(items)
    bad, victim = _damage(blob, offsets, items, data)
    result = framing.scan(bad, len(framing.encode_header("pickle")))
    good = dict(zip(range(10, 10 + len(items)), items, strict=True))
    for window, off, n in result.records:  # nothing accepted differs from what was written
        assert bad[off : off + n] == good[window]
    accepted = [w for w, _, _ in result.records]
    if victim == len(items) - 1:
        assert accepted == list(range(10, 10 + victim)) and not result.corrupt
        assert result.tail is not None and result.tail.kind == "torn"
        assert result.tail.offset == offsets[victim] == result.end
    else:
        assert result.tail is None
        first = result.corrupt[0]
        assert (first.offset, first.after_window) == (offsets[victim], 9 + victim if victim else -1)
        assert accepted == [w for w in good if w != 10 + victim]
        assert result.end == len(bad)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payloads, st.data())
def test_reading_a_damaged_segment_gives_the_prefix_or_a_corruption_error(
    tmp_path_factory: pytest.TempPathFactory, items: list[bytes], data: st.DataObject
) -> None:
    """Read back by the partition's writer after a restart, windows in order: either the
    stream is the original prefix and only the last record was damaged (a torn tail: the
    window was unfinished), or a CorruptRecordError names the file and the damaged
    record's offset; then the windows after it are intact and no window id is reused."""
    blob, offsets = _segment(items)
    bad, victim = _damage(blob, offsets, items, data)
    log_dir = tmp_path_factory.mktemp("flip")
    (log_dir / "wal-00000000.tmp").write_bytes(bad)
    fs, path = filesystem_for(str(log_dir))
    segment = fs.describe(fs.join(path, "wal-00000000.tmp"))
    reader = LogWriter(fs, path, "pickle", segment_bytes=1 << 20)
    stream: list[bytes] = []
    try:
        for window in range(10, 10 + len(items)):
            payload = reader.read(window)
            if payload is None:
                break
            stream.append(payload)
    except CorruptRecordError as err:
        assert victim < len(items) - 1, "damage in the last record is a torn tail"
        assert (err.path, err.offset) == (segment, offsets[victim])
        assert f"offset={offsets[victim]}" in str(err) and segment in str(err)
        assert stream == items[:victim]
        # the records after the damaged one are intact and readable
        assert [reader.read(w) for w in range(11 + victim, 10 + len(items))] == items[victim + 1 :]
        assert reader.largest_window() == 9 + len(items)  # no window id is accepted again
        assert [(i.path, i.offset) for i in reader.issues] == [(segment, offsets[victim])]
    else:
        assert victim == len(items) - 1, f"record {victim} of {len(items)} damaged, no error"
        assert stream == items[:-1]
        assert reader.largest_window() == (8 + len(items) if len(items) > 1 else -1)
        (issue,) = reader.issues
        assert (issue.path, issue.offset, issue.kind) == (segment, offsets[-1], "torn")


def test_isolated_corrupt_record_is_corruption_with_its_window_range() -> None:
    blob, offsets = _segment([b"a" * 20, b"b" * 20, b"c" * 20])
    bad = bytearray(blob)
    bad[offsets[1] + 20] ^= 0xFF  # inside the payload of window 11
    result = framing.scan(bytes(bad), len(framing.encode_header("pickle")))
    assert [w for w, _, _ in result.records] == [10, 12]
    assert result.tail is None
    (bad_region,) = result.corrupt
    assert (
        bad_region.offset,
        bad_region.kind,
        bad_region.after_window,
        bad_region.before_window,
    ) == (offsets[1], "checksum", 10, 12)


def test_corrupt_length_in_the_middle_is_corruption_not_a_torn_tail() -> None:
    """Issue 12 point 2: a wrong length field followed by valid records is corruption."""
    blob, offsets = _segment([b"a" * 20, b"b" * 20, b"c" * 20, b"d" * 20])
    for length in (0, 7, 1 << 30):  # too short, inside the record, past the end
        bad = bytearray(blob)
        bad[offsets[1] : offsets[1] + 4] = length.to_bytes(4, "little")
        result = framing.scan(bytes(bad), len(framing.encode_header("pickle")))
        assert [w for w, _, _ in result.records] == [10, 12, 13], length
        assert result.tail is None and result.end == len(bad)
        (bad_region,) = result.corrupt
        assert (bad_region.offset, bad_region.after_window, bad_region.before_window) == (
            offsets[1],
            10,
            12,
        )


def test_corrupt_last_record_is_a_torn_tail() -> None:
    blob, offsets = _segment([b"a" * 20, b"b" * 20])
    bad = bytearray(blob)
    bad[-1] ^= 0x10
    result = framing.scan(bytes(bad), len(framing.encode_header("pickle")))
    assert [w for w, _, _ in result.records] == [10]
    assert not result.corrupt
    assert result.tail is not None and result.tail.kind == "torn"
    assert "checksum" in result.tail.detail
    assert result.tail.offset == offsets[1] == result.end


def test_windows_must_increase() -> None:
    """A valid record out of order is never a torn tail: it is corruption (a second
    writer, tampering), and the windows after the last good one are not known."""
    header = framing.encode_header("pickle")
    first = framing.encode_record(5, b"x")
    blob = header + first + framing.encode_record(5, b"y")
    result = framing.scan(blob, len(header))
    assert [w for w, _, _ in result.records] == [5]
    assert result.tail is None and result.end == len(blob)
    (bad_region,) = result.corrupt
    assert (bad_region.offset, bad_region.kind) == (len(header) + len(first), "order")
    assert (bad_region.after_window, bad_region.before_window) == (5, None)
