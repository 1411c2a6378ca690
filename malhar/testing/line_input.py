"""A complete replayable input connector: the lines of local text files, exactly once.

The example of ``docs/howto-input.md`` (tested by ``tests/io/test_input_base.py``). The
files are dealt over the operator's partitions; each partition keeps, per file, the byte
offset of its next line (its position, checkpointed state); a window records the byte range
it read from each file; a replayed window reads those bytes again. Files may grow while the
application runs (only complete lines, ending in a newline, are read).
"""

from __future__ import annotations

import json
import os
from typing import Any

from malhar import OperatorContext, OutputPort, Property, State
from malhar.io.base import ReplayableInput, ReplayError, WindowRecord

#: a window record: {"ranges": [[path, start byte, end byte (exclusive), lines], ...]}
Record = dict[str, list[list[Any]]]


class LineFileInput(ReplayableInput[Record]):
    """Emits each line of ``paths`` (a ``str`` without its newline) once, in file order.

    A line that is not valid UTF-8 goes to ``error`` as ``{"path", "offset", "error"}``.
    """

    output = OutputPort()
    error = OutputPort(error=True)

    paths = Property(list, not_null=True, doc="the files to read (dealt over the partitions)")
    lines_per_read = Property(int, default=1_000, min=1, doc="lines read per read() call")
    progress_file = Property(
        str, default=None, doc="where the committed offsets are written (monitoring), per partition"
    )

    #: path -> byte offset of the next line: the position
    offsets = State(dict)

    def __init__(self, paths: list[str], **properties: Any) -> None:
        self.paths = [os.path.abspath(p) for p in paths]
        self.configure(**properties)

    # -- runtime ---------------------------------------------------------------------------
    def open(self, context: OperatorContext) -> None:
        # partition i of n reads files i, i + n, ...: the same split in every process
        self.files = sorted(self.paths)[context.partition :: context.partitions]
        for path in self.files:
            self.offsets.setdefault(path, 0)
        self.progress = f"{self.progress_file}.{context.partition}" if self.progress_file else None

    def begin_new_window(self, window_id: int) -> None:
        self.ranges: dict[str, list[int]] = {}  # path -> [start, end, lines] read this window

    # -- new windows ------------------------------------------------------------------------
    def read(self, limit: int) -> int:
        wanted = min(limit, self.lines_per_read)
        n = 0
        for path in self.files:
            if n == wanted:
                break
            start = self.offsets[path]
            lines = _complete_lines(path, start, wanted - n)
            if not lines:
                continue
            end = start + sum(len(line) for line in lines)
            self._emit(path, start, lines)
            span = self.ranges.setdefault(path, [start, start, 0])
            span[1], span[2] = end, span[2] + len(lines)
            self.offsets[path] = end
            n += len(lines)
        return n  # 0: nothing new in any file, the window ends

    def window_record(self) -> Record:
        return {"ranges": sorted([p, s, e, n] for p, (s, e, n) in self.ranges.items())}

    # -- replay -----------------------------------------------------------------------------
    def replay(self, record: Record) -> int:
        total = 0
        for path, start, end, count in record["ranges"]:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
            lines = data.splitlines(keepends=True)
            if len(data) != end - start or len(lines) != count:
                raise ReplayError(
                    f"{self.label}: window {self.window_id} read {count} lines in bytes "
                    f"[{start}, {end}) of {path}, the file now has {len(lines)} there "
                    "(truncated or rewritten?): cannot replay exactly"
                )
            self._emit(path, start, lines)
            total += count
        return total

    def advance_past(self, record: Record) -> None:
        for path, _, end, _ in record["ranges"]:
            self.offsets[path] = end

    # -- committed --------------------------------------------------------------------------
    def release(self, records: list[WindowRecord[Record]]) -> None:
        if self.progress is None:
            return
        done = json.loads(_read_text(self.progress) or "{}")
        for _, record in records:
            for path, _, end, _ in record["ranges"]:
                done[path] = max(end, done.get(path, 0))
        tmp = f"{self.progress}.tmp"
        with open(tmp, "w") as f:
            json.dump(done, f, sort_keys=True)
        os.replace(tmp, self.progress)  # idempotent: the same offsets again after a restart

    # -- helpers ----------------------------------------------------------------------------
    def _emit(self, path: str, start: int, lines: list[bytes]) -> None:
        offset = start
        for line in lines:
            try:
                self.output.emit(line[:-1].decode("utf-8"))
            except UnicodeDecodeError as exc:
                self.error.emit({"path": path, "offset": offset, "error": str(exc)})
            offset += len(line)


def _complete_lines(path: str, start: int, most: int) -> list[bytes]:
    """Up to ``most`` lines from byte ``start`` of ``path``, each ending in a newline."""
    out: list[bytes] = []
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return out
    with f:
        f.seek(start)
        for line in f:
            if not line.endswith(b"\n"):
                break  # being written: read it once it is complete
            out.append(line)
            if len(out) == most:
                break
    return out


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None
