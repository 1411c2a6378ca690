"""Storage tests run on the local filesystem and on a real HDFS (WebHDFS)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from malhar.util import FileSystem, FSWindowDataManager, filesystem_for

BACKENDS = ["local", pytest.param("hdfs", marks=pytest.mark.integration)]


@dataclass
class Store:
    """Where a test keeps its logs: a root URL plus the filesystem options to reach it."""

    backend: str
    root: str
    fs_options: dict[str, Any] = field(default_factory=dict)

    def manager(self, operator: str = "op", **kwargs: Any) -> FSWindowDataManager:
        kwargs.setdefault("fs_options", dict(self.fs_options))
        return FSWindowDataManager(self.root, operator, **kwargs)

    def fs(self) -> tuple[FileSystem, str]:
        return filesystem_for(self.root, **self.fs_options)

    def log_dir(self, operator: str = "op", log_id: int = 0) -> str:
        fs, root = self.fs()
        return fs.join(root, operator, str(log_id))

    def files(self, operator: str = "op", log_id: int = 0) -> list[str]:
        fs, _ = self.fs()
        return [s.name for s in fs.list(self.log_dir(operator, log_id))]

    def segment_path(self, operator: str = "op", log_id: int = 0, *, active: bool) -> str:
        fs, _ = self.fs()
        names = [
            n
            for n in self.files(operator, log_id)
            if (n.endswith(".tmp") if active else n.endswith(".log"))
        ]
        assert names, f"no {'active' if active else 'finalized'} segment in {self.files()}"
        return fs.join(self.log_dir(operator, log_id), sorted(names)[-1])


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def hdfs_conn(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue("hdfs_service").connection()


def _store(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    if backend == "local":
        yield Store("local", str(tmp_path / "wal"))
        return
    conn = request.getfixturevalue("hdfs_service").connection()
    root = f"{conn['url']}/malhar-tests/wal-{uuid.uuid4().hex[:12]}"
    store = Store(
        "hdfs",
        root,
        {"webhdfs_url": conn["webhdfs_url"], "user": conn["user"], "retries": 3, "backoff": 0.05},
    )
    yield store
    fs, path = store.fs()
    fs.delete(path, recursive=True)


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    yield from _store(backend, request, tmp_path)


@pytest.fixture
def local_store(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Store]:
    yield from _store("local", request, tmp_path)


@pytest.fixture
def hdfs_store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    yield from _store("hdfs", request, tmp_path)
