"""Run a Spark script in its own Python process (its own JVM, master and jars)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def run_spark_script(script: str, timeout: float = 300, env: dict[str, str] | None = None) -> Any:
    """Run ``script``; return the JSON it printed on its last line (fails with its stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
