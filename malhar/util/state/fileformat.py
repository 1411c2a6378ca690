"""Checkpoint files: one immutable, checksummed file per change set (a delta or a merged run).

A file holds the changes that take the state from window ``lo`` to window ``hi``
(``lo = -1``: from empty). Its name says everything the restore needs to chain files
without opening them::

    <hi:020d>-<lo+1:020d>-<uid>-<prev>.ckpt

``uid`` (16 hex digits) identifies the state *after* ``hi``; ``prev`` the state at
``lo`` the file starts from (``0000000000000000`` = empty). Layout (little-endian)::

    header = "MSTK" | version u8 | flags u8 | 0 u16 | lo i64 | hi i64 | uid 8B | prev 8B | crc32 u32
             flags: 1 signed, 2 bodies of R and E blocks zlib-compressed
    block  = length u32 | crc32 u32 | type u8 | body      (crc32 covers length, type and stored body)
      type R: range deletes   body = (lo_len u32 | hi_len u32 | lo | hi)*
      type E: entries         body = (op u8 | key_len u32 | value_len u32 | key | value)*  op 1 put, 2 delete
      type Z: end             body = entry count u64 | range count u64 | [HMAC-SHA256, if signed]

Range blocks come first; entries are sorted by key, each key once. Semantics: the
range deletes apply first, then the entries. A file without its end block, with
bytes after it, with a bad checksum, a bad signature, or a header that does not
match its name is :class:`~malhar.util.state.errors.CorruptCheckpointError`,
naming the file and the offset: never read as empty.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from malhar.util.fs.base import FileSystem
from malhar.util.state.errors import CorruptCheckpointError

MAGIC = b"MSTK"
VERSION = 1
FLAG_SIGNED = 1
FLAG_ZLIB = 2  # range and entry block bodies are zlib-compressed (level 1: ~8x on keys)
ROOT = "0" * 16
SUFFIX = ".ckpt"
_HEADER = struct.Struct("<4sBBHqq8s8s")
HEADER_SIZE = _HEADER.size + 4
_BLOCK = struct.Struct("<II")
_ENTRY = struct.Struct("<BII")
_RANGE = struct.Struct("<II")
_END = struct.Struct("<QQ")
_U32 = struct.Struct("<I")
_HEAD_DTYPE = [("op", "u1"), ("kl", "<u4"), ("vl", "<u4")]  # an entry's header (_ENTRY)
PUT, DELETE = 1, 2
BLOCK_BYTES = 1 << 20
_READ_CHUNK = 8 << 20
_crc32 = zlib.crc32


@dataclass(frozen=True)
class Node:
    """One checkpoint file as its name describes it: the states ``(lo, prev) -> (hi, uid)``."""

    hi: int
    lo: int
    uid: str
    prev: str
    name: str
    size: int = -1


def node_name(lo: int, hi: int, uid: str, prev: str) -> str:
    return f"{hi:020d}-{lo + 1:020d}-{uid}-{prev}{SUFFIX}"


def parse_name(name: str, size: int = -1) -> Node | None:
    """The :class:`Node` a file name describes, or None for anything else (temporary files...)."""
    if not name.endswith(SUFFIX) or name.startswith("."):
        return None
    parts = name[: -len(SUFFIX)].split("-")
    if len(parts) != 4 or len(parts[2]) != 16 or len(parts[3]) != 16:
        return None
    try:
        hi, lo1 = int(parts[0]), int(parts[1])
        int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    return Node(hi, lo1 - 1, parts[2], parts[3], name, size)


def new_uid() -> str:
    uid = uuid.uuid4().hex[:16]
    return uid if uid != ROOT else new_uid()


class _Signer:
    def __init__(self, key: bytes | None) -> None:
        self._h = hmac.new(key, digestmod=hashlib.sha256) if key else None

    def update(self, data: bytes | memoryview) -> None:
        if self._h is not None:
            self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest() if self._h is not None else b""


def _block(kind: bytes, body: bytes) -> bytes:
    payload = kind + body
    n = len(payload)
    return _BLOCK.pack(n, _crc32(payload, _crc32(_U32.pack(n)))) + payload


class FileWriter:
    """Builds one checkpoint file; ``finish()`` writes it atomically (temporary name + rename).

    Small files are written with one ``create`` (one WebHDFS round trip); bigger ones
    stream through an appender in ``flush_bytes`` chunks.
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        lo: int,
        hi: int,
        uid: str,
        prev: str,
        *,
        signer: bytes | None = None,
        flush_bytes: int = 32 << 20,
        compress: bool = True,
    ) -> None:
        self.fs, self.directory = fs, directory
        self._compress = compress
        self.name = node_name(lo, hi, uid, prev)
        self.lo, self.hi, self.uid, self.prev = lo, hi, uid, prev
        self._tmp = fs.join(directory, f".{self.name}.{os.getpid()}-{new_uid()[:8]}.tmp")
        self._sign = _Signer(signer)
        self._flush_bytes = flush_bytes
        self._chunks: list[bytes] = []
        self._pending = 0
        self._appender = None
        self._entries: list[bytes] = []
        self._entry_bytes = 0
        self._ranges: list[tuple[bytes, bytes]] = []
        self._count = 0
        self._started_entries = False
        self._last_key: bytes | None = None
        head = _HEADER.pack(
            MAGIC,
            VERSION,
            (FLAG_SIGNED if signer else 0) | (FLAG_ZLIB if compress else 0),
            0,
            lo,
            hi,
            bytes.fromhex(uid),
            bytes.fromhex(prev),
        )
        self._emit(head + _U32.pack(_crc32(head)))
        self.size = 0

    def _emit(self, data: bytes) -> None:
        self._sign.update(data)
        self._chunks.append(data)
        self._pending += len(data)
        if self._pending >= self._flush_bytes:
            if self._appender is None:
                self._appender = self.fs.open_appender(self._tmp, create=True)
            for c in self._chunks:
                self._appender.write(c)
            self._appender.flush()
            self._chunks.clear()
            self._pending = 0

    def add_ranges(self, ranges: Iterable[tuple[bytes, bytes]]) -> None:
        if self._started_entries:
            raise ValueError("range deletes must precede the entries")
        self._ranges.extend(ranges)

    def _flush_ranges(self) -> None:
        if self._ranges:
            body = b"".join(_RANGE.pack(len(lo), len(hi)) + lo + hi for lo, hi in self._ranges)
            self._emit(_block(b"R", zlib.compress(body, 1) if self._compress else body))

    def add(self, key: bytes, value: bytes | None) -> None:
        """One entry (``value`` None = delete); keys strictly increasing."""
        if not self._started_entries:
            self._started_entries = True
            self._flush_ranges()
        if self._last_key is not None and key <= self._last_key:
            raise ValueError(f"checkpoint entries out of order: {key!r} after {self._last_key!r}")
        self._last_key = key
        if value is None:
            rec = _ENTRY.pack(DELETE, len(key), 0) + key
        else:
            rec = _ENTRY.pack(PUT, len(key), len(value)) + key + value
        self._entries.append(rec)
        self._entry_bytes += len(rec)
        self._count += 1
        if self._entry_bytes >= BLOCK_BYTES:
            self._flush_entries()

    def add_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """``add(key, value)`` for each entry (the same records, without a call per entry)."""
        if not self._started_entries:
            self._started_entries = True
            self._flush_ranges()
        last, recs, pack = self._last_key, self._entries, _ENTRY.pack
        nbytes, count = self._entry_bytes, self._count
        try:
            for key, value in entries:
                if last is not None and key <= last:
                    raise ValueError(f"checkpoint entries out of order: {key!r} after {last!r}")
                last = key
                if value is None:
                    rec = pack(DELETE, len(key), 0) + key
                else:
                    rec = pack(PUT, len(key), len(value)) + key + value
                recs.append(rec)
                nbytes += len(rec)
                count += 1
                if nbytes >= BLOCK_BYTES:
                    self._entry_bytes = nbytes
                    self._flush_entries()  # clears recs in place
                    nbytes = 0
        finally:
            self._last_key, self._entry_bytes, self._count = last, nbytes, count

    def add_many(self, keys: list[bytes], values: list[bytes | None]) -> None:
        """``add_all(zip(keys, values))`` with the records built by Arrow instead of one
        ``pack`` and two concatenations per entry: the same bytes, blocks cut at the same
        records (tested)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(keys)
        if len(values) != n:
            raise ValueError(f"{n} keys but {len(values)} values")
        if not self._started_entries:
            self._started_entries = True
            self._flush_ranges()
        if not n:
            return
        karr = pa.array(keys, pa.binary())
        last = self._last_key
        if (last is not None and keys[0] <= last) or (
            n > 1 and not pc.all(pc.less(karr.slice(0, n - 1), karr.slice(1))).as_py()
        ):
            prev = last
            for key in keys:  # name the first pair out of order
                if prev is not None and key <= prev:
                    raise ValueError(f"checkpoint entries out of order: {key!r} after {prev!r}")
                prev = key
        deletes = None in values
        varr = pa.array(
            [b"" if v is None else v for v in values] if deletes else values, pa.binary()
        )
        head = np.empty(n, _HEAD_DTYPE)
        head["op"] = PUT
        if deletes:
            head["op"][np.fromiter((v is None for v in values), bool, n)] = DELETE
        kl = pc.binary_length(karr).to_numpy()
        vl = pc.binary_length(varr).to_numpy()
        head["kl"] = kl
        head["vl"] = vl
        heads = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(_ENTRY.size), n, [None, pa.py_buffer(head)]
        ).cast(pa.binary())
        recs = pc.binary_join_element_wise(heads, karr, varr, pa.scalar(b"", pa.binary()))
        offsets = np.frombuffer(recs.buffers()[1], np.int32, n + 1, recs.offset * 4)
        data = recs.buffers()[2]
        ends = offsets[1:].astype(np.int64) - int(offsets[0])
        start, base, first = 0, 0, int(offsets[0])
        while start < n:
            # add_all flushes right after the record that takes the block to BLOCK_BYTES
            cut = int(np.searchsorted(ends, BLOCK_BYTES - self._entry_bytes + base, side="left"))
            stop = max(min(cut + 1, n), start + 1)
            end = int(ends[stop - 1])
            self._entries.append(data[first + base : first + end].to_pybytes())
            self._entry_bytes += end - base
            base, start = end, stop
            if self._entry_bytes >= BLOCK_BYTES:
                self._flush_entries()
        self._count += n
        self._last_key = keys[-1]

    def _flush_entries(self) -> None:
        if self._entries:
            body = b"".join(self._entries)
            self._emit(_block(b"E", zlib.compress(body, 1) if self._compress else body))
            self._entries.clear()
            self._entry_bytes = 0

    def finish(self) -> Node:
        if not self._started_entries:
            self._started_entries = True
            self._flush_ranges()
        self._flush_entries()
        end_body = _END.pack(self._count, len(self._ranges))
        end = b"Z" + end_body
        n = len(end) + (32 if self._sign._h is not None else 0)
        # the signature covers everything before it, including this block's length and type
        prefix = _U32.pack(n)
        self._sign.update(prefix + end)
        sig = self._sign.digest()
        payload = end + sig
        block = _BLOCK.pack(n, _crc32(payload, _crc32(prefix))) + payload
        self._chunks.append(block)
        self._pending += len(block)
        total = sum(len(c) for c in self._chunks)
        try:
            if self._appender is None:
                self.fs.create(self._tmp, b"".join(self._chunks), overwrite=True)
                self.size = total
            else:
                for c in self._chunks:
                    self._appender.write(c)
                self._appender.sync()
                self.size = self._appender.size
                self._appender.close()
            self.fs.rename(self._tmp, self.fs.join(self.directory, self.name), overwrite=True)
        except BaseException:
            self.abort()
            raise
        return Node(self.hi, self.lo, self.uid, self.prev, self.name, self.size)

    def abort(self) -> None:
        if self._appender is not None:
            try:
                self._appender.close()
            except Exception:
                pass
        try:
            self.fs.delete(self._tmp)
        except Exception:
            pass


class FileReader:
    """Reads and verifies one checkpoint file, streaming it in chunks.

    ``ranges()`` then ``entries()``; the end block is verified when ``entries()`` is
    exhausted (a truncated file raises there, naming the file and the offset).
    """

    def __init__(
        self, fs: FileSystem, path: str, node: Node | None = None, *, signer: bytes | None = None
    ) -> None:
        self.fs, self.path = fs, path
        self.where = fs.describe(path)
        self._sign = _Signer(signer)
        self._signed_expected = bool(signer)
        self._buf = b""
        self._buf_at = 0  # file offset of _buf[0]
        self._eof = False
        self._pos = 0  # file offset of the next unread byte
        self._ranges: list[tuple[bytes, bytes]] | None = None
        self._pending_block: tuple[bytes, memoryview, int] | None = None
        head = self._take(HEADER_SIZE, "header")
        magic, version, flags, _, lo, hi, uid, prev = _HEADER.unpack_from(head)
        (crc,) = _U32.unpack_from(head, _HEADER.size)
        if magic != MAGIC:
            self._corrupt(0, "not a malhar checkpoint file (bad magic)")
        if _crc32(head[: _HEADER.size]) != crc:
            self._corrupt(0, "header checksum mismatch")
        if version != VERSION:
            self._corrupt(0, f"unsupported checkpoint file version {version}")
        if bool(flags & FLAG_SIGNED) != self._signed_expected:
            self._corrupt(
                0,
                "file is signed but no signer was given"
                if flags & FLAG_SIGNED
                else "file is not signed but a signer was given",
            )
        self._sign.update(head)
        self._zlib = bool(flags & FLAG_ZLIB)
        self.lo, self.hi, self.uid, self.prev = lo, hi, uid.hex(), prev.hex()
        if node is not None and (node.lo, node.hi, node.uid, node.prev) != (
            self.lo,
            self.hi,
            self.uid,
            self.prev,
        ):
            self._corrupt(0, "the header does not match the file name")

    def _corrupt(self, offset: int, detail: str) -> None:
        raise CorruptCheckpointError(
            f"corrupt checkpoint file: {detail}",
            backend=self.fs.backend,
            path=self.where,
            operation="restore",
            offset=offset,
        )

    def _fill(self, need: int) -> None:
        while len(self._buf) - (self._pos - self._buf_at) < need and not self._eof:
            start = self._pos - self._buf_at
            chunk = self.fs.read(self.path, self._buf_at + len(self._buf), _READ_CHUNK)
            if len(chunk) < _READ_CHUNK:
                self._eof = True
            self._buf = self._buf[start:] + chunk
            self._buf_at = self._pos

    def _take(self, n: int, what: str) -> bytes:
        self._fill(n)
        start = self._pos - self._buf_at
        data = self._buf[start : start + n]
        if len(data) < n:
            self._corrupt(self._pos, f"truncated ({what}: {len(data)} of {n} bytes)")
        self._pos += n
        return data

    def _next_block(self) -> tuple[bytes, memoryview, int]:
        at = self._pos
        self._fill(_BLOCK.size)
        if len(self._buf) - (self._pos - self._buf_at) == 0 and self._eof:
            self._corrupt(at, "truncated (no end block)")
        head = self._take(_BLOCK.size, "block header")
        n, crc = _BLOCK.unpack(head)
        payload = self._take(n, "block")
        if _crc32(payload, _crc32(head[:4])) != crc:
            self._corrupt(at, "block checksum mismatch")
        if not payload:
            self._corrupt(at, "empty block")
        kind = payload[:1]
        if kind != b"Z":
            self._sign.update(head)
            self._sign.update(payload)
            if self._zlib:
                try:
                    return kind, memoryview(zlib.decompress(payload[1:])), at
                except zlib.error as exc:
                    self._corrupt(at, f"block does not decompress: {exc}")
        return kind, memoryview(payload)[1:], at

    def ranges(self) -> list[tuple[bytes, bytes]]:
        if self._ranges is None:
            self._ranges = []
            kind, body, at = self._next_block()
            if kind == b"R":
                pos, n = 0, len(body)
                while pos < n:
                    a, b = _RANGE.unpack_from(body, pos)
                    pos += 8
                    lo = bytes(body[pos : pos + a])
                    hi = bytes(body[pos + a : pos + a + b])
                    pos += a + b
                    self._ranges.append((lo, hi))
            else:
                self._pending_block = (kind, body, at)
        return self._ranges

    def entries(self) -> Iterator[tuple[bytes, bytes | None]]:
        """``(key, value or None for a delete)`` in key order; verifies the end block."""
        self.ranges()
        count = 0
        while True:
            if self._pending_block is not None:
                kind, body, at = self._pending_block
                self._pending_block = None
            else:
                kind, body, at = self._next_block()
            if kind == b"E":
                yield from self._decode(body)
                count += self._last_count
            elif kind == b"Z":
                self._check_end(body, at, count)
                return
            else:
                self._corrupt(at, f"unexpected block type {kind!r}")

    def _decode(self, body: memoryview) -> list[tuple[bytes, bytes | None]]:
        out = []
        pos, n = 0, len(body)
        unpack = _ENTRY.unpack_from
        raw = body.tobytes()
        while pos < n:
            op, kl, vl = unpack(raw, pos)
            pos += 9
            k = raw[pos : pos + kl]
            pos += kl
            if op == PUT:
                out.append((k, raw[pos : pos + vl]))
                pos += vl
            else:
                out.append((k, None))
        self._last_count = len(out)
        return out

    def _check_end(self, body: memoryview, at: int, count: int) -> None:
        want_sig = 32 if self._signed_expected else 0
        if len(body) != _END.size + want_sig:
            self._corrupt(at, "malformed end block")
        n_entries, n_ranges = _END.unpack_from(body)
        if n_entries != count or n_ranges != len(self._ranges or ()):
            self._corrupt(at, f"end block counts {n_entries} entries, read {count}")
        if want_sig:
            self._sign.update(_U32.pack(len(body) + 1) + b"Z" + bytes(body[: _END.size]))
            if not hmac.compare_digest(self._sign.digest(), bytes(body[_END.size :])):
                self._corrupt(at, "signature mismatch (tampered, or another signing key)")
        self._fill(1)
        if len(self._buf) - (self._pos - self._buf_at) > 0:
            self._corrupt(self._pos, "bytes after the end block")

    def read_all(self) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes | None]]]:
        ranges = self.ranges()
        return ranges, list(self.entries())


__all__ = [
    "DELETE",
    "PUT",
    "ROOT",
    "FileReader",
    "FileWriter",
    "Node",
    "new_uid",
    "node_name",
    "parse_name",
]
