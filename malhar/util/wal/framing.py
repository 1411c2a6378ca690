"""Byte layout of write-ahead-log segments.

A segment file is a header followed by records::

    header  = b"MWAL" | version u8 (=1) | name_len u8 | serializer name (ASCII) | crc32 u32
    record  = payload_len u32 | crc32 u32 | window_id i64 | payload (payload_len bytes)

All integers are little-endian. A record's CRC32 (``zlib.crc32``) covers
``payload_len``, ``window_id`` and the payload, so a flipped bit anywhere in a
record is detected. One record holds one window (window id + serialized artifact),
so a window is either entirely in the log or not at all.

:func:`scan` walks a buffer and classifies what it finds:

- valid records, in strictly increasing window order;
- an *isolated* corrupt record (checksum mismatch, but the record after it is
  valid: its length field was intact) -> a "gap" that is reported and skipped;
- a *tail* problem: an incomplete record at the end (``torn``: the writer died
  mid-append) or a corrupt record that nothing valid follows (``checksum``,
  ``order``). Everything from that offset on is unusable.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

MAGIC = b"MWAL"
VERSION = 1
RECORD = struct.Struct("<IIq")
RECORD_HEADER_SIZE = RECORD.size  # 16
_LEN_WINDOW = struct.Struct("<Iq")
_U32 = struct.Struct("<I")
MAX_PAYLOAD = 0xFFFFFFFF
_crc32 = zlib.crc32


def encode_header(serializer: str) -> bytes:
    name = serializer.encode("ascii")
    if not 0 < len(name) < 256:
        raise ValueError(f"serializer name must be 1..255 ASCII bytes: {serializer!r}")
    body = MAGIC + bytes((VERSION, len(name))) + name
    return body + _U32.pack(_crc32(body))


@dataclass(frozen=True)
class Header:
    serializer: str
    size: int


class HeaderError(Exception):
    """The segment header is missing, torn or not ours."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind  # "torn" | "corrupt"
        self.detail = detail


def decode_header(buf: bytes | bytearray | memoryview) -> Header:
    head = bytes(buf[:4])
    if head != MAGIC[: len(head)]:
        raise HeaderError("corrupt", "not a malhar WAL segment (bad magic)")
    if len(buf) < 6:
        raise HeaderError("torn", f"segment header is incomplete ({len(buf)} bytes)")
    version, name_len = buf[4], buf[5]
    if version != VERSION:
        raise HeaderError("corrupt", f"unsupported WAL segment version {version}")
    size = 6 + name_len + 4
    if len(buf) < size:
        raise HeaderError("torn", f"segment header is incomplete ({len(buf)} of {size} bytes)")
    (crc,) = _U32.unpack_from(buf, 6 + name_len)
    if _crc32(bytes(buf[: 6 + name_len])) != crc:
        raise HeaderError("corrupt", "segment header checksum mismatch")
    return Header(bytes(buf[6 : 6 + name_len]).decode("ascii"), size)


def encode_record(window: int, payload: bytes) -> bytes:
    n = len(payload)
    if n > MAX_PAYLOAD:
        raise ValueError(f"artifact too large for one WAL record: {n} bytes")
    crc = _crc32(payload, _crc32(_LEN_WINDOW.pack(n, window)))
    return RECORD.pack(n, crc, window) + payload


@dataclass
class Problem:
    """Something wrong at ``offset`` of a segment."""

    offset: int
    kind: str  # "torn" | "checksum" | "order"
    detail: str
    #: for an isolated corrupt record: the windows strictly between these two may be in it
    after_window: int = -1
    before_window: int | None = None


@dataclass
class ScanResult:
    #: (window, payload_offset, payload_len) in file order
    records: list[tuple[int, int, int]] = field(default_factory=list)
    #: offset just past the last usable record (where a writer may append)
    end: int = 0
    #: isolated corrupt records that were skipped
    gaps: list[Problem] = field(default_factory=list)
    #: unusable bytes from this offset to the end of the buffer
    tail: Problem | None = None


def _valid_at(buf: memoryview, pos: int, n: int, after: int) -> bool:
    if n - pos < RECORD_HEADER_SIZE:
        return False
    plen, crc, window = RECORD.unpack_from(buf, pos)
    end = pos + RECORD_HEADER_SIZE + plen
    if end > n or window <= after:
        return False
    return (
        _crc32(buf[pos + RECORD_HEADER_SIZE : end], _crc32(_LEN_WINDOW.pack(plen, window))) == crc
    )


def scan(
    buf: bytes | bytearray | memoryview,
    start: int,
    *,
    last_window: int = -1,
    end: int | None = None,
) -> ScanResult:
    """Scan records in ``buf[start:end]``; windows must be > ``last_window`` and increase."""
    view = memoryview(buf)
    n = len(view) if end is None else end
    out = ScanResult(end=start)
    pos = start
    unpack = RECORD.unpack_from
    pack_lw = _LEN_WINDOW.pack
    records = out.records
    while pos < n:
        if n - pos < RECORD_HEADER_SIZE:
            out.tail = Problem(pos, "torn", f"incomplete record header ({n - pos} bytes)")
            break
        plen, crc, window = unpack(view, pos)
        rec_end = pos + RECORD_HEADER_SIZE + plen
        if rec_end > n:
            out.tail = Problem(
                pos, "torn", f"record of {plen} payload bytes extends past the end ({n - pos} left)"
            )
            break
        body_ok = (
            _crc32(view[pos + RECORD_HEADER_SIZE : rec_end], _crc32(pack_lw(plen, window))) == crc
        )
        if body_ok and window > last_window:
            records.append((window, pos + RECORD_HEADER_SIZE, plen))
            last_window = window
            pos = rec_end
            out.end = pos
            continue
        kind = "checksum" if not body_ok else "order"
        detail = (
            "checksum mismatch"
            if not body_ok
            else f"window {window} does not follow window {last_window}"
        )
        if rec_end < n and _valid_at(view, rec_end, n, last_window):
            # isolated bad record: its length was right, the next record is intact
            _, _, next_window = unpack(view, rec_end)
            out.gaps.append(Problem(pos, kind, detail, last_window, next_window))
            pos = rec_end
            out.end = pos
            continue
        out.tail = Problem(pos, kind, detail, last_window, None)
        break
    return out
