"""A bounded file input: a marker file ends it, and event-time operators downstream then fire
their last windows.

Without it a file input never ends: it lists its path for new files for ever, so its
watermark (through a ``WatermarkGenerator``) stays behind the newest event time and the last
event-time windows of a finished set of files never fire. With ``end_marker`` (Hadoop's and
Spark's ``_SUCCESS``, or any name) the producer says when the set is complete:

1. At every scan due, a partition first looks for the marker, then lists the path. The
   first listing made after the marker was found is the partition's last (its window record
   says ``"sealed": true``, so a replay and a restart agree): a producer that writes the
   marker after its files has them all in that listing, whichever partition lists first.
   Files modified after the marker are left out of it: partitions make their last listings
   at different times, and a file that came in between would otherwise be read in part.
2. A sealed partition reads the splits it holds and lists nothing more.
3. A sealed partition with nothing left to read has *ended*: at the end of that window and
   of every later one it sends ``Watermark(MAX_TIMESTAMP)`` (END_WINDOW), the end-of-input
   watermark (Flink's ``MAX_WATERMARK`` at the end of a bounded source, Beam's end of
   global time). A ``WatermarkGenerator`` sends it on once every upstream partition feeding
   it has; a windowed operator whose senders have all sent it fires every window, the
   global one included, and sends it on in turn.
4. Until it is sealed, a partition with nothing to read does **not** declare itself idle
   (``WatermarkIdle``): another partition might see the marker and end first, and the
   operators downstream would take its end-of-input watermark alone while this one may
   still find files; all of them would then be late. It holds the watermark back instead,
   as a reading partition does, until it lists the path with the marker there.

The metric ``ended`` is 1 on an ended partition. An application whose inputs all end this
way stops by itself, in an orderly last window, once every partition of each has ended
(``malhar run``, ``RunningApplication.await_end_of_input()``).

Example:
    >>> import os, tempfile
    >>> from malhar import OperatorContext
    >>> from malhar.io.fs import LinesFileInput
    >>> from malhar.testing.harness import OperatorHarness
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "a.txt"), "w").write("a\\n")
    >>> op = LinesFileInput(folder, end_marker="_SUCCESS", scan_interval_ms=0)
    >>> h = OperatorHarness(op, OperatorContext("in", checkpoint=folder))
    >>> h.run_window()                       # reads a.txt; no marker yet: nothing said
    >>> h.sink("output").controls
    []
    >>> open(os.path.join(folder, "_SUCCESS"), "w").close()
    >>> h.run_window()
    >>> h.sink("output").controls[0].payload
    Watermark(timestamp=9223372036854775807)
"""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import re
from typing import Any

from malhar.io.fs.paths import is_hidden, location, resolve, split_glob
from malhar.properties import Property
from malhar.state import State

__all__ = ["EndOfInput", "marker_problem"]

log = logging.getLogger("malhar.io.fs")


def _check_marker(value: Any) -> str | None:
    if not str(value).strip() or str(value).endswith("/"):
        return "a file name (e.g. '_SUCCESS') or the path of a file"
    return None


def marker_problem(marker: str | None, pattern: str | None, path: str | None) -> str | None:
    """Why ``end_marker`` would itself be read as an input file of ``path`` (None: it would
    not)."""
    if marker is None:
        return None
    name = posixpath.basename(marker)
    if is_hidden(name) or (pattern is not None and not re.fullmatch(pattern, name)):
        return None
    if path:
        folder = location(path)[1].rstrip("/")
        base, globs = split_glob(folder)
        if marker.startswith("/") or "://" in marker:  # read only if it is in the directory
            if posixpath.dirname(location(marker)[1]) not in (folder, base):
                return None
        elif "/" in marker:
            return None  # in a subdirectory: read only by a recursive input, left to it
        if globs and not fnmatch.fnmatchcase(name, globs[-1]):
            return None
    return (
        f"end_marker {marker!r} would be read as an input file: give it a name starting with "
        "'_' or '.' (as Hadoop's '_SUCCESS'), which the scanner skips, or a pattern it does "
        "not match"
    )


class EndOfInput:
    """The end of a bounded file input (a mixin of
    :class:`~malhar.io.fs.input_operator.FileInputOperator`, see the module doc).

    The operator calls :meth:`_last_listing` before a due scan, :meth:`_sealed_by` after it,
    :meth:`_note_end` on a new window's record, :meth:`_replayed_end` on a replayed one and
    :meth:`_say_if_ended` after ``end_window``.
    """

    end_marker = Property(
        str,
        default=None,
        check=_check_marker,
        doc="a file whose presence ends the input (e.g. _SUCCESS; a name: in the input "
        "directory, a glob's: in the directory before its first glob component; an "
        "absolute path: on the input's filesystem; or a URL): each "
        "partition lists the path once more after finding it, reads what it holds, then "
        "sends the end-of-input watermark, so event-time windows all fire; None: the input "
        "never ends",
    )

    #: the partition made its last listing (the marker was there): it lists no more
    _sealed = State(default=False)

    # provided by the operator
    _queue: list[Any]
    _scanner: Any
    output: Any

    def settings_problems(self) -> list[str]:
        out: list[str] = super().settings_problems()  # type: ignore[misc]
        problem = marker_problem(self.end_marker, self.pattern, self.path)  # type: ignore[attr-defined]
        return out if problem is None else [*out, problem]

    def _last_listing(self) -> float | None:
        """The marker's modification time when it is there (the scan about to be made is
        then this partition's last), else None. Looked for before the listing, so that the
        listing holds every file written before the marker; files modified after it are
        left out of the listing (:meth:`_before_marker`), so that partitions listing at
        different times agree on the files."""
        if self.end_marker is None:
            return None
        fs, path = self._marker_location()
        status = fs.status(path)
        return None if status is None else status.mtime

    def _before_marker(self, found: list[Any], marker_mtime: float | None) -> list[Any]:
        """The files of the last listing not modified after the marker (by modification
        time: a file renamed into place keeps its own); those left out are logged."""
        if marker_mtime is None:
            return found
        kept = [f for f in found if f.mtime <= marker_mtime]
        seen = self._seen  # type: ignore[attr-defined]
        later = [f.path for f in found if f.mtime > marker_mtime and f.path not in seen]
        if later and self._me == 0:  # type: ignore[attr-defined]  # said once, not per partition
            later = [self._url(p) for p in later]  # type: ignore[attr-defined]
            log.warning(
                "%s: %d file(s) modified after the end marker are not read (the input "
                "ended with the marker): %s",
                self.label,  # type: ignore[attr-defined]
                len(later),
                ", ".join(later[:10]) + (", ..." if len(later) > 10 else ""),
            )
        return kept

    def _marker_location(self) -> tuple[Any, str]:
        """Where the marker is: a URL as written; an absolute path on the input's
        filesystem; a name (or relative path) in the input directory: the path itself, a
        file's directory, or a glob's directory before its first glob component."""
        marker = self.end_marker
        assert marker is not None
        if "://" in marker:
            return resolve(marker)
        scanner = self._scanner
        if marker.startswith("/"):
            return scanner.fs, marker
        status = scanner.fs.status(scanner.literal)  # as the scanner: literal when it exists
        if status is not None:
            folder = scanner.literal if status.is_dir else posixpath.dirname(scanner.literal)
        else:
            folder = scanner.base if scanner.globs else scanner.literal
        return scanner.fs, posixpath.normpath(posixpath.join(folder, marker))

    def _sealed_by(self, marker_mtime: float | None) -> None:
        """After a listing: seal the partition when it was the last."""
        if marker_mtime is not None and not self._sealed:
            self._sealed = True
            self._sealed_now = True

    def _new_window_unsealed(self) -> None:
        self._sealed_now = False

    def is_bounded(self) -> bool:
        """With an ``end_marker`` the input ends (see the module doc)."""
        return self.end_marker is not None

    def _holds_until_sealed(self) -> bool:
        """Whether a partition with nothing to read must still not say it is idle."""
        return self.end_marker is not None and not self._sealed

    def _note_end(self, record: dict[str, Any]) -> None:
        """Add to a new window's record whether it sealed the partition and whether it sends
        the end-of-input watermark: what its replay does again."""
        if getattr(self, "_sealed_now", False):
            record["sealed"] = True
        self._ended_now = bool(self._sealed and not self._queue)
        if self._ended_now:
            record["end"] = True

    def _replayed_end(self, record: dict[str, Any]) -> None:
        if record.get("sealed"):
            self._sealed = True
        self._ended_now = bool(record.get("end", False))

    def _say_if_ended(self) -> None:
        """Send the end-of-input watermark if this window ended the partition (or came
        after)."""
        if getattr(self, "_ended_now", False):
            from malhar.window.watermark import Watermark, send_from_input
            from malhar.window.windows import MAX_TIMESTAMP

            send_from_input(self.output, Watermark(MAX_TIMESTAMP))
