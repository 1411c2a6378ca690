"""Input record formats of the file connectors: decoding complete lines into tuples.

Input decoders take the bytes of complete lines (``\\n``-terminated, ``\\r\\n`` too) that
start at byte ``start`` of a file and return a :class:`Decoded`: an Arrow batch (typed
ports) or a list of tuples (untyped ports), plus one error row per line that cannot be
decoded (``{"file", "offset", "error", "text"}``) and how many items the bytes held
(records and errors: the count a window records and a replay checks). A chunk that fails
as a whole is bisected down to the failing lines, so every other line is still emitted and
the semantics of a line do not depend on its neighbours.

The output's encoders are in :mod:`malhar.io.fs.encoders`.
"""

from malhar.io.fs.decoders.base import (
    DECODE_POLICIES,
    ERROR_DDL,
    ERROR_TEXT_CHARS,
    SUFFIX_CODECS,
    Decoded,
    LineDecoder,
    LinesDecoder,
    codec_for,
    error_row,
    non_blank_lines,
    split_lines,
)
from malhar.io.fs.decoders.csv_lines import CsvDecoder
from malhar.io.fs.decoders.json_lines import JsonLinesDecoder
from malhar.io.fs.decoders.times import to_timestamps, zone_naive

__all__ = [
    "DECODE_POLICIES",
    "ERROR_DDL",
    "ERROR_TEXT_CHARS",
    "SUFFIX_CODECS",
    "CsvDecoder",
    "Decoded",
    "JsonLinesDecoder",
    "LineDecoder",
    "LinesDecoder",
    "codec_for",
    "error_row",
    "non_blank_lines",
    "split_lines",
    "to_timestamps",
    "zone_naive",
]
