"""Package hygiene: what importing costs, and the one exception base."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import malhar
from malhar import MalharError


@pytest.mark.parametrize(
    "module", ["malhar", "malhar.util", "malhar.io", "malhar.errors", "malhar.state"]
)
def test_importing_does_not_start_pyspark(module: str) -> None:
    code = f"import sys, {module}; print('pyspark' in sys.modules, 'pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"], f"{module} imports pyspark or pandas"


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(malhar.__path__, "malhar."):
        if ".testing.maven" in info.name or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_every_library_error_derives_from_malhar_error() -> None:
    stray = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not attr.startswith("_")
                and not issubclass(value, MalharError)
            ):
                stray.append(f"{name}.{attr}")
    assert stray == [], f"not derived from malhar.MalharError: {stray}"


def test_public_names_of_the_top_level_package_resolve() -> None:
    for name in malhar.__all__:
        assert getattr(malhar, name) is not None


def test_the_wheel_carries_its_type_marker_and_data_files(tmp_path) -> None:
    # PEP 561: without py.typed, type checkers ignore an installed package's hints
    import shutil
    import zipfile
    from pathlib import Path

    root = Path(malhar.__file__).resolve().parents[1]
    src = tmp_path / "src"  # a copy: setuptools writes build/ and egg-info beside the sources
    shutil.copytree(root / "malhar", src / "malhar", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
        timeout=300,
    )
    [wheel] = out.glob("malhar-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "malhar/py.typed" in names
    assert "malhar/testing/maven/kafka/pom.xml" in names
