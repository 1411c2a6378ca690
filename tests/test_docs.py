"""Docs that run: every ``>>>`` example in the package and every Python block in the
README and ``docs/`` runs here, or says why it cannot.

- Package examples run with :mod:`doctest`. An example marked ``# doctest: +SKIP``
  must say why in its docstring, on a line starting ``Not run:``.
- Markdown: every fenced ``python`` block runs in a fresh interpreter (its own
  working directory). A block that cannot run says so on the line before it::

      <!-- not-runnable: needs a YARN cluster -->

  A block that names ``MALHAR_KAFKA_BOOTSTRAP``, ``MALHAR_POSTGRES_DSN`` or
  ``MALHAR_HDFS_URL`` gets that real service (started by the project's fixtures)
  in its environment.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_NOT_RUNNABLE = re.compile(r"<!--\s*not-runnable:\s*(.*?)\s*-->")
_FENCE = re.compile(r"^```python\s*$\n(.*?)^```\s*$", re.M | re.S)
_SERVICES = {
    "MALHAR_KAFKA_BOOTSTRAP": "kafka_service",
    "MALHAR_POSTGRES_DSN": "postgres_service",
    "MALHAR_HDFS_URL": "hdfs_service",
}


# -- package doctests ----------------------------------------------------------------------------
def _modules_with_examples() -> list[str]:
    out = []
    for path in sorted((ROOT / "malhar").rglob("*.py")):
        if ">>>" in path.read_text():
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.append(".".join(parts))
    return out


@pytest.mark.parametrize("module", _modules_with_examples())
def test_package_examples_run(module: str) -> None:
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder()
    for test in finder.find(mod):
        skipped = [ex for ex in test.examples if ex.options.get(doctest.SKIP)]
        if skipped:
            assert test.docstring and "Not run:" in test.docstring, (
                f"{test.name}: an example is marked +SKIP without a 'Not run: <reason>' line"
            )
    result = doctest.testmod(
        mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, f"{module}: {result.failed} example(s) failed (output above)"


# -- markdown blocks -----------------------------------------------------------------------------
@dataclass
class Block:
    path: Path
    line: int
    code: str
    reason: str | None  # why it does not run, or None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    out = []
    for path in MARKDOWN:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            before = text[: match.start()].rstrip().splitlines()
            marker = _NOT_RUNNABLE.search(before[-1]) if before else None
            line = text.count("\n", 0, match.start()) + 1
            out.append(Block(path, line, match.group(1), marker.group(1) if marker else None))
    return out


BLOCKS = _blocks()


def test_every_not_runnable_block_says_why() -> None:
    vague = [b.id for b in BLOCKS if b.reason is not None and len(b.reason) < 8]
    assert vague == [], f"give a reason after 'not-runnable:' for {vague}"


@pytest.mark.integration
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.reason is None], ids=lambda b: b.id)
def test_markdown_python_blocks_run(block: Block, request: pytest.FixtureRequest, tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for var, fixture in _SERVICES.items():
        if var in block.code:
            env[var] = request.getfixturevalue(fixture).env_value()
    script = tmp_path / "block.py"
    script.write_text(block.code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
