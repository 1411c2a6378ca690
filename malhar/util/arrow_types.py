"""Arrow type families the library treats alike: text (``string``, ``large_string``) and
bytes (``binary``, ``large_binary``), whatever the offset width."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["is_binary", "is_text"]


def is_text(kind: pa.DataType) -> bool:
    """``string`` or ``large_string``."""
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def is_binary(kind: pa.DataType) -> bool:
    """``binary`` or ``large_binary`` (not fixed-size or view binaries)."""
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
