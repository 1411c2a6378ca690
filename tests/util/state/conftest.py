"""Managed-state tests: a checkpoint root on the local FS or on the real HDFS fixture."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from malhar.util import FileSystem, filesystem_for
from malhar.util.state import ManagedState
from malhar.util.state.manager import operator_dir


@dataclass
class Root:
    """A checkpoint root plus how to reach it; ``new()`` opens a manager with a fresh local dir."""

    backend: str
    url: str
    local_base: str
    fs_options: dict[str, Any] = field(default_factory=dict)
    opened: list[ManagedState] = field(default_factory=list)

    def new(self, operator: str = "op", partition: int = 0, **kwargs: Any) -> ManagedState:
        kwargs.setdefault("local_dir", f"{self.local_base}/{uuid.uuid4().hex[:8]}")
        kwargs.setdefault("fs_options", dict(self.fs_options))
        ms = ManagedState(self.url, operator, partition, **kwargs)
        self.opened.append(ms)
        return ms

    def fs(self) -> tuple[FileSystem, str]:
        return filesystem_for(self.url, **self.fs_options)

    def pdir(self, operator: str = "op", partition: int = 0) -> str:
        fs, base = self.fs()
        return fs.join(operator_dir(fs, base, operator), str(partition))

    def files(self, operator: str = "op", partition: int = 0) -> list[str]:
        fs, _ = self.fs()
        path = self.pdir(operator, partition)
        return (
            [s.name for s in fs.list(path) if s.name.endswith(".ckpt")] if fs.exists(path) else []
        )


def _root(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Root]:
    if backend == "local":
        root = Root("local", str(tmp_path / "ckpt"), str(tmp_path / "local"))
        yield root
    else:
        conn = request.getfixturevalue("hdfs_service").connection()
        url = f"{conn['url']}/malhar-tests/state-{uuid.uuid4().hex[:12]}"
        opts = {"webhdfs_url": conn["webhdfs_url"], "user": conn["user"], "retries": 3}
        root = Root("hdfs", url, str(tmp_path / "local"), opts)
        yield root
        fs, path = root.fs()
        fs.delete(path, recursive=True)
    for ms in root.opened:
        ms.close()


@pytest.fixture
def root(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Root]:
    yield from _root("local", request, tmp_path)


@pytest.fixture(params=["local", pytest.param("hdfs", marks=pytest.mark.integration)])
def any_root(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Root]:
    yield from _root(request.param, request, tmp_path)


@pytest.fixture
def new_state(root: Root) -> Callable[..., ManagedState]:
    return root.new


@pytest.fixture
def hdfs_root(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Root]:
    yield from _root("hdfs", request, tmp_path)
