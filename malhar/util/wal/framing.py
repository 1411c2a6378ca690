"""Byte layout of write-ahead-log segments.

A segment file is a header followed by records::

    header v1 = b"MWAL" | 1 | name_len u8 | serializer name (ASCII) | crc32 u32
    header v2 = b"MWAL" | 2 | name_len u8 | serializer name (ASCII) | auth u8 | crc32 u32
    record    = payload_len u32 | crc32 u32 | window_id i64 | payload (payload_len bytes)

All integers are little-endian. A record's CRC32 (``zlib.crc32``) covers
``payload_len``, ``window_id`` and the payload, so a flipped bit anywhere in a
record is detected. One record holds one window (window id + serialized artifact),
so a window is either entirely in the log or not at all. Version 2 headers are
written only for authenticated logs (``auth`` = 1: every payload starts with an
HMAC-SHA256 tag, see :mod:`malhar.util.integrity`); unauthenticated logs keep the
version 1 header.

:func:`scan` walks a buffer and classifies what it finds:

- valid records, in strictly increasing window order;
- *corruption*: bytes that are not a valid record but are followed by at least one
  valid record (a checksum mismatch, a wrong length field, a valid record out of
  window order). Whatever follows is found again by looking for the next valid
  record at every byte offset, so a damaged length field never hides the records
  after it. Corruption is never a torn tail: it is reported with its offset and the
  window range it may have held, and never cut off;
- a *torn tail*: damaged or incomplete bytes at the end that no valid record
  follows (the writer died mid-append; or the last record itself was damaged). Only
  this may be cut off by the log's writer.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from malhar.errors import MalharError

MAGIC = b"MWAL"
VERSION = 1
VERSION_AUTH = 2
AUTH_NONE, AUTH_HMAC_SHA256 = 0, 1
AUTH_NAMES = {AUTH_HMAC_SHA256: "hmac-sha256"}
RECORD = struct.Struct("<IIq")
RECORD_HEADER_SIZE = RECORD.size  # 16
_LEN_WINDOW = struct.Struct("<Iq")
_U32 = struct.Struct("<I")
MAX_PAYLOAD = 0xFFFFFFFF
_crc32 = zlib.crc32


def encode_header(serializer: str, auth: str | None = None) -> bytes:
    """A segment header; ``auth="hmac-sha256"`` for a log whose payloads are signed."""
    name = serializer.encode("ascii")
    if not 0 < len(name) < 256:
        raise ValueError(f"serializer name must be 1..255 ASCII bytes: {serializer!r}")
    if auth is None:
        body = MAGIC + bytes((VERSION, len(name))) + name
    elif auth == AUTH_NAMES[AUTH_HMAC_SHA256]:
        body = MAGIC + bytes((VERSION_AUTH, len(name))) + name + bytes((AUTH_HMAC_SHA256,))
    else:
        raise ValueError(f"unknown record authentication {auth!r}")
    return body + _U32.pack(_crc32(body))


@dataclass(frozen=True)
class Header:
    serializer: str
    size: int
    auth: str | None = None  # "hmac-sha256": every payload starts with its tag


class HeaderError(MalharError):
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
    if version not in (VERSION, VERSION_AUTH):
        raise HeaderError("corrupt", f"unsupported WAL segment version {version}")
    body = 6 + name_len + (1 if version == VERSION_AUTH else 0)
    size = body + 4
    if len(buf) < size:
        raise HeaderError("torn", f"segment header is incomplete ({len(buf)} of {size} bytes)")
    (crc,) = _U32.unpack_from(buf, body)
    if _crc32(bytes(buf[:body])) != crc:
        raise HeaderError("corrupt", "segment header checksum mismatch")
    auth = None
    if version == VERSION_AUTH:
        auth = AUTH_NAMES.get(buf[6 + name_len])
        if auth is None:
            raise HeaderError("corrupt", f"unknown record authentication {buf[6 + name_len]}")
    return Header(bytes(buf[6 : 6 + name_len]).decode("ascii"), size, auth)


def encode_record(window: int, payload: bytes) -> bytes:
    n = len(payload)
    if n > MAX_PAYLOAD:
        raise ValueError(f"artifact too large for one WAL record: {n} bytes")
    crc = _crc32(payload, _crc32(_LEN_WINDOW.pack(n, window)))
    return RECORD.pack(n, crc, window) + payload


@dataclass
class Problem:
    """Something wrong at ``offset`` of a segment (up to ``end``, if known)."""

    offset: int
    kind: str  # tail: "torn"; corruption: "checksum" | "length" | "order" | "header"
    detail: str
    #: the windows strictly between these two may have been in the damaged bytes
    #: (``before_window`` None: any window after ``after_window``)
    after_window: int = -1
    before_window: int | None = None
    end: int | None = None


@dataclass
class ScanResult:
    #: (window, payload_offset, payload_len) in file order
    records: list[tuple[int, int, int]] = field(default_factory=list)
    #: offset just past the last valid record (where a writer may append)
    end: int = 0
    #: damaged regions followed by valid records: reported, kept, never cut off
    corrupt: list[Problem] = field(default_factory=list)
    #: a torn tail: unusable bytes from this offset to the end that no valid record follows
    tail: Problem | None = None


def next_valid(buf: bytes | bytearray | memoryview, pos: int, end: int | None = None) -> int | None:
    """The first offset ``>= pos`` where a valid record starts, or None.

    Tries every byte offset: a false match needs a 32-bit checksum to agree by chance
    (about one in four billion per candidate offset whose length field fits)."""
    view = memoryview(buf)
    n = len(view) if end is None else end
    unpack = RECORD.unpack_from
    pack_lw = _LEN_WINDOW.pack
    last = n - RECORD_HEADER_SIZE
    while pos <= last:
        plen, crc, window = unpack(view, pos)
        rec_end = pos + RECORD_HEADER_SIZE + plen
        if (
            rec_end <= n
            and window >= 0
            and _crc32(view[pos + RECORD_HEADER_SIZE : rec_end], _crc32(pack_lw(plen, window)))
            == crc
        ):
            return pos
        pos += 1
    return None


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
    pending: list[Problem] = []  # corrupt regions waiting for the next accepted window
    while pos < n:
        if n - pos < RECORD_HEADER_SIZE:
            kind, detail = "length", f"incomplete record header ({n - pos} bytes)"
        else:
            plen, crc, window = unpack(view, pos)
            rec_end = pos + RECORD_HEADER_SIZE + plen
            if rec_end > n:
                kind = "length"
                detail = f"record of {plen} payload bytes extends past the end ({n - pos} left)"
            elif (
                _crc32(view[pos + RECORD_HEADER_SIZE : rec_end], _crc32(pack_lw(plen, window)))
                == crc
            ):
                if window > last_window:
                    records.append((window, pos + RECORD_HEADER_SIZE, plen))
                    for problem in pending:
                        problem.before_window = window
                    pending.clear()
                    last_window = window
                    pos = out.end = rec_end
                    continue
                # a valid record out of order: a second writer or tampering, never a torn
                # write; skipped by its (checksummed) length
                problem = Problem(
                    pos,
                    "order",
                    f"window {window} does not follow window {last_window}",
                    last_window,
                    None,
                    rec_end,
                )
                out.corrupt.append(problem)
                pending.append(problem)
                pos = out.end = rec_end
                continue
            else:
                kind, detail = "checksum", "checksum mismatch"
        resume = next_valid(view, pos + 1, n)
        if resume is None:  # nothing valid follows: a torn tail
            out.tail = Problem(pos, "torn", f"{detail}; no valid record follows", last_window)
            out.tail.end = n
            break
        problem = Problem(pos, kind, f"{detail}; next valid record at offset {resume}", last_window)
        problem.end = resume
        out.corrupt.append(problem)
        pending.append(problem)
        pos = resume
    return out
