"""Where malhar keeps what survives between runs (Maven jars, the Spark home overlay)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$MALHAR_CACHE_DIR`` or ``~/.cache/malhar``, created if missing."""
    root = os.environ.get("MALHAR_CACHE_DIR") or Path.home() / ".cache" / "malhar"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
