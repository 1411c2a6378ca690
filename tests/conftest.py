"""Test-wide setup: Spark's Python workers must import test modules (tests.engine.ops)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
_path = os.environ.get("PYTHONPATH", "")
if ROOT not in _path.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, _path) if p)
