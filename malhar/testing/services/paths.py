"""Where the service managers keep downloads, data and logs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from malhar.util.cache import cache_dir

__all__ = ["cache_dir", "new_service_dir", "run_dir"]


def run_dir() -> Path:
    """Data and logs of running services: ``$MALHAR_RUN_DIR`` or a per-user temp folder."""
    root = os.environ.get("MALHAR_RUN_DIR") or Path(tempfile.gettempdir()) / f"malhar-{os.getuid()}"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_service_dir(service: str) -> Path:
    """A fresh folder for one service instance: its data and its log live here."""
    return Path(tempfile.mkdtemp(prefix=f"{service}-", dir=run_dir()))
