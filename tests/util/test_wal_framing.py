"""Record framing: length prefix + CRC32; torn tails and flipped bits are always detected."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malhar.util.wal import framing

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
    assert result.tail is None and not result.gaps and result.end == len(data)
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


@settings(max_examples=300)
@given(payloads, st.data())
def test_any_flipped_bit_in_a_record_is_detected(items: list[bytes], data: st.DataObject) -> None:
    blob, offsets = _segment(items)
    header = len(framing.encode_header("pickle"))
    pos = data.draw(st.integers(min_value=header, max_value=len(blob) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=7))
    bad = bytearray(blob)
    bad[pos] ^= 1 << bit
    result = framing.scan(bytes(bad), header)
    victim = max(i for i, off in enumerate(offsets) if off <= pos)
    # every record the scan accepts is byte-identical to what was written
    good = dict(zip(range(10, 10 + len(items)), items, strict=True))
    for window, off, n in result.records:
        assert bad[off : off + n] == good[window]
    assert 10 + victim not in {w for w, _, _ in result.records}
    problems = [*result.gaps, *([result.tail] if result.tail else [])]
    assert problems, "a flipped bit went unnoticed"
    assert problems[0].offset == offsets[victim]
    # records before the damaged one are all intact
    assert [w for w, _, _ in result.records][:victim] == list(range(10, 10 + victim))


def test_isolated_corrupt_record_is_a_gap_with_its_window_range() -> None:
    blob, offsets = _segment([b"a" * 20, b"b" * 20, b"c" * 20])
    bad = bytearray(blob)
    bad[offsets[1] + 20] ^= 0xFF  # inside the payload of window 11
    result = framing.scan(bytes(bad), len(framing.encode_header("pickle")))
    assert [w for w, _, _ in result.records] == [10, 12]
    assert result.tail is None
    (gap,) = result.gaps
    assert (gap.offset, gap.kind, gap.after_window, gap.before_window) == (
        offsets[1],
        "checksum",
        10,
        12,
    )


def test_corrupt_last_record_is_a_tail_not_a_gap() -> None:
    blob, offsets = _segment([b"a" * 20, b"b" * 20])
    bad = bytearray(blob)
    bad[-1] ^= 0x10
    result = framing.scan(bytes(bad), len(framing.encode_header("pickle")))
    assert [w for w, _, _ in result.records] == [10]
    assert result.tail is not None and result.tail.kind == "checksum"
    assert result.tail.offset == offsets[1] == result.end


def test_windows_must_increase() -> None:
    header = framing.encode_header("pickle")
    blob = header + framing.encode_record(5, b"x") + framing.encode_record(5, b"y")
    result = framing.scan(blob, len(header))
    assert [w for w, _, _ in result.records] == [5]
    assert result.tail is not None and result.tail.kind == "order"
