"""How the file input reads a compressed text file: through one decompressing stream.

A compressed stream cannot be entered in the middle, so such a file is one split (index 0,
end -1: to the end of the stream), read by one partition from the start. Positions and the
byte ranges a window records are offsets in the *decompressed* text. The stream stays open
between reads (with the bytes read past the last complete line), so reading on does not
decompress the file again; a split that resumes elsewhere (after a restore) and a replayed
range decompress from the start and skip to their offset, which is the price of exactness
without an index into the compressed file.

With ``compression="infer"`` a file whose name has no compression suffix is recognised by
its first bytes (gzip, bzip2, zstd, LZ4 frame), read once per file and partition: such a
file read as text would be one line of garbage, or errors, and no records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from malhar.io.fs.decoders import codec_for
from malhar.io.fs.errors import UNREADABLE, UnreadableSplit
from malhar.io.fs.paths import open_binary
from malhar.io.fs.splits import INDEX, PATH, POS, SIZE
from malhar.util.fs import FileSystem

__all__ = ["CompressedStreams", "sniff_codec"]

#: bytes at the start of a compressed file -> pyarrow codec (brotli has no signature)
MAGIC_CODECS = (
    (b"\x1f\x8b", "gzip"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x04\x22\x4d\x18", "lz4"),
)
#: bytes read to recognise a codec (bzip2's header and its first block's magic)
MAGIC_BYTES = 10


def sniff_codec(head: bytes) -> str | None:
    """The codec whose signature starts ``head``, else None."""
    for magic, codec in MAGIC_CODECS:
        if head.startswith(magic):
            return codec
    # "BZh" and a block size digit could start a text line; the first block's magic cannot
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] == b"1AY&SY":
        return "bz2"
    return None


class CompressedStreams:
    """Mixin of :class:`~malhar.io.fs.input_operator.FileInputOperator`: reads a split of
    compressed text (:meth:`_read_stream`) and a recorded range again (:meth:`_stream_range`).

    The operator provides ``compression``, ``chunk_bytes``, ``_seen``, ``_fs``, the header
    offset (``first_record``) and the window's bookkeeping (``_emit_bytes`` decodes and
    emits lines, ``_record``, ``_finish``, ``_counts``); it empties ``_streams`` and
    ``_sniffed`` when it opens and calls :meth:`_close_streams` when it closes.
    """

    #: path -> [open stream, its position, bytes read past the last complete line]
    _streams: dict[str, list[Any]]
    #: path -> the codec its first bytes name (None: text), for names without a suffix
    _sniffed: dict[str, str | None]
    #: the operator's (see above)
    compression: str
    chunk_bytes: int
    _seen: dict[str, list[Any]]
    _fs: FileSystem
    _counts: dict[str, int]
    first_record: Callable[[str, int | None], int]
    _emit_bytes: Callable[[str, int, int, bytes], int]
    _record: Callable[[dict[str, Any]], None]
    _finish: Callable[[list[Any]], None]

    def _codec(self, path: str) -> str | None:
        """The pyarrow codec ``path`` is read with (None: uncompressed); see the module doc."""
        codec = codec_for(path, self.compression)
        if codec is not None or self.compression != "infer":
            return codec
        sniffed = self._sniffed
        if path not in sniffed:
            try:
                head = self._fs.read(path, 0, MAGIC_BYTES)
            except UNREADABLE:
                return None  # reading it will say why
            sniffed[path] = sniff_codec(head)
        return sniffed[path]

    def _open_stream(self, path: str) -> Any:
        codec = self._codec(path)
        size = self._seen[path][SIZE] if path in self._seen else None
        raw = open_binary(self._fs, path, size)
        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), codec)

    def _skip(self, stream: Any, pos: int) -> None:
        """Read a fresh decompressed ``stream`` up to byte ``pos`` (streams cannot seek)."""
        skip = pos
        while skip:
            got = stream.read(min(skip, self.chunk_bytes))
            if not got:
                raise UnreadableSplit(f"its decompressed stream ends before byte {pos}")
            skip -= len(got)

    def _stream_at(self, path: str, pos: int) -> list[Any]:
        """The decompressed stream of ``path`` positioned at ``pos`` (reopened if needed)."""
        cur = self._streams.get(path)
        if cur is not None and cur[1] == pos:
            return cur
        if cur is not None:
            cur[0].close()
        stream = self._open_stream(path)
        self._skip(stream, pos)
        cur = self._streams[path] = [stream, pos, b""]
        return cur

    def _read_stream(self, split: list[Any], budget: int) -> tuple[int, bool]:
        path, index = split[PATH], split[INDEX]
        try:
            if split[POS] < 0:
                split[POS] = self.first_record(path, None)
            pos = split[POS]
            cur = self._stream_at(path, pos)
            buf = cur[2]
            eof = False
            chunk = cur[0].read(self.chunk_bytes)
            eof = not chunk
            buf += chunk
            while b"\n" not in buf and not eof:
                chunk = cur[0].read(self.chunk_bytes)
                eof = not chunk
                buf += chunk
        except (OSError, pa.ArrowException) as exc:
            self._streams.pop(path, None)
            raise UnreadableSplit(str(exc)) from None
        if not buf:
            self._record({"f": path, "i": index, "s": pos, "e": pos, "n": 0, "last": True})
            self._streams.pop(path)[0].close()
            self._finish(split)
            return 0, False
        arr = np.frombuffer(buf, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        if len(nl):
            k = min(len(nl), budget)
            cut = int(nl[k - 1]) + 1
            if eof and k == len(nl) and cut < len(buf) and k < budget:
                cut = len(buf)
        else:
            cut = len(buf)  # eof: the last line has no newline
        data, rest = buf[:cut], buf[cut:]
        stop = pos + cut
        last = eof and not rest
        items = self._emit_bytes(path, index, pos, data)
        self._record({"f": path, "i": index, "s": pos, "e": stop, "n": items, "last": last})
        self._counts["bytes"] += len(data)
        if last:
            self._streams.pop(path)[0].close()
            self._finish(split)
        else:
            cur[1], cur[2] = stop, rest
            split[POS] = stop
        return max(items, 1), True

    def _stream_range(self, path: str, start: int, end: int) -> bytes:
        stream = self._open_stream(path)
        try:
            self._skip(stream, start)
            data = stream.read(end - start)
        finally:
            stream.close()
        if len(data) != end - start:
            raise UnreadableSplit(f"its decompressed stream ends before byte {end}")
        return data

    def _close_streams(self) -> None:
        # close() may come without open(): nothing was opened then
        for stream in getattr(self, "_streams", {}).values():
            try:
                stream[0].close()
            except Exception:
                pass
        self._streams = {}
