"""A file input partition with nothing to read declares itself idle to event-time operators.

A partition reads the files (blocks) whose stable hash gives them to it, so one partition
may run out of files while another still reads. A ``WatermarkGenerator`` after it then
hears nothing from it and sends nothing, and a windowed operator downstream keeps that
partition's last watermark in its minimum: windows stop firing until
``idle_timeout_windows`` (if set) lets the partition go.

Like a Kafka reader that reads no Kafka partition, a file input partition that had
nothing to read for ``watermark_idle_windows`` streaming windows in a row (no split
queued, none read in the window; 1 by default: the first such window) sends
``WatermarkIdle()`` (END_WINDOW) at the end of each such window: the generator passes the
idleness on, and the windowed operator leaves the partition out of its minimum at once. The
partition counts again from the first window in which it reads a file (the generator's next
watermark). With an ``end_marker`` (:mod:`~malhar.io.fs.end_of_input`) a partition says
nothing until it has listed the path with the marker there. What a window sent is saved in its record (``"idle": true``, with ``"quiet"``,
the quiet windows in a row through it), so a replayed window sends the same
(docs/connectors/files.md, "Event time").

Example:
    >>> import tempfile
    >>> from malhar import OperatorContext
    >>> from malhar.io.fs import LinesFileInput
    >>> from malhar.testing.harness import OperatorHarness
    >>> folder = tempfile.mkdtemp()
    >>> h = OperatorHarness(LinesFileInput(folder), OperatorContext("in", checkpoint=folder))
    >>> h.run_window()
    >>> h.sink("output").controls[0].payload
    WatermarkIdle()
"""

from __future__ import annotations

from typing import Any

from malhar.properties import Property

__all__ = ["IdleWhenNothingToRead"]


class IdleWhenNothingToRead:
    """The idleness of a file input partition (a mixin of
    :class:`~malhar.io.fs.input_operator.FileInputOperator`, see the module doc).

    The operator calls :meth:`_note_quiet` on a new window's record (``window_record``),
    :meth:`_replayed_quiet` on a replayed one (``advance_past``) and :meth:`_say_if_idle`
    after ``end_window``.
    """

    watermark_idle_windows = Property(
        int,
        default=1,
        min=1,
        doc="a partition with nothing to read (no file queued) for this many streaming "
        "windows in a row declares itself idle (WatermarkIdle) to event-time operators "
        "downstream until it reads again (with end_marker: only once it has listed the path "
        "with the marker there); None: never (it holds their watermark back)",
    )

    # provided by the operator
    _queue: list[Any]
    _holds_until_sealed: Any  # () -> bool: not idle before the last listing (end_of_input)
    _ranges: list[dict[str, Any]]
    output: Any

    #: streaming windows in a row, through the last one, with nothing to read. Runtime, not
    #: State: a rebuilt partition (a restart) counts from its last replayed window, else from
    #: 0, so it may hold the watermark back a little longer then, never less; a replay is
    #: exact either way (its record says what it sent)
    _quiet: int = 0

    def _note_quiet(self, record: dict[str, Any]) -> None:
        """Count a new window that read nothing and left nothing queued, and add to its
        record whether it sends ``WatermarkIdle``: what its replay sends again."""
        read = any(e.get("n") for e in self._ranges if "err" not in e)
        # a split still queued is data to come (a slow or unavailable store): not idle
        self._quiet = 0 if read or self._queue else self._quiet + 1
        limit = self.watermark_idle_windows
        self._idle_now = (
            limit is not None and self._quiet >= limit and not self._holds_until_sealed()
        )
        if self._quiet:
            record["quiet"] = self._quiet
        if self._idle_now:
            record["idle"] = True

    def _replayed_quiet(self, record: dict[str, Any]) -> None:
        """A replayed window sends what its first run sent (a record written before the
        file input declared idleness has neither key: it sent nothing)."""
        self._quiet = int(record.get("quiet", 0))
        self._idle_now = bool(record.get("idle", False))

    def _say_if_idle(self) -> None:
        if getattr(self, "_idle_now", False) and not getattr(self, "_ended_now", False):
            from malhar.window.watermark import WatermarkIdle, send_from_input

            send_from_input(self.output, WatermarkIdle())
