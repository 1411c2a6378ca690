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
