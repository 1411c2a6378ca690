"""The filesystem layer: the same contract on the local FS and on HDFS (WebHDFS)."""

from __future__ import annotations

import json
import os
import pickle
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from malhar.testing.services.process import free_port
from malhar.util import (
    FSWindowDataManager,
    HdfsFileSystem,
    LocalFileSystem,
    StorageConfigError,
    StorageError,
    filesystem_for,
)
from malhar.util.fs.errors import (
    StorageExistsError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnavailableError,
)


@pytest.fixture
def fs_root(store: Any) -> tuple[Any, str]:
    fs, root = store.fs()
    fs.mkdirs(root)
    return fs, root


def test_create_append_read_ranges(fs_root: tuple[Any, str]) -> None:
    fs, root = fs_root
    path = fs.join(root, "sub", "a.bin")
    fs.create(path, b"hello")  # parents are created
    fs.append(path, b" world")
    assert fs.read_all(path) == b"hello world"
    assert fs.read(path, 6) == b"world"
    assert fs.read(path, 2, 3) == b"llo"
    assert fs.read(path, 9, 100) == b"ld"  # short at EOF
    assert fs.read(path, 11) == b""  # at EOF
    assert fs.read(path, 0, 0) == b""
    st = fs.status(path)
    assert st is not None and st.size == 11 and not st.is_dir
    assert fs.status(fs.join(root, "sub")).is_dir
    assert fs.status(fs.join(root, "missing")) is None
    assert not fs.exists(fs.join(root, "missing"))
    with pytest.raises(StorageExistsError):
        fs.create(path, b"again")
    fs.create(path, b"again", overwrite=True)
    assert fs.read_all(path) == b"again"


def test_create_with_streams_what_fill_writes(fs_root: tuple[Any, str]) -> None:
    fs, root = fs_root
    path = fs.join(root, "sub", "b.bin")

    def fill(f: Any) -> None:
        for i in range(100):
            f.write(b"%03d" % i)

    assert fs.create_with(path, fill) == 300  # parents are created
    assert fs.read_all(path) == b"".join(b"%03d" % i for i in range(100))
    with pytest.raises(StorageExistsError):
        fs.create_with(path, fill)
    assert fs.create_with(path, lambda f: f.write(b"new"), overwrite=True) == 3
    assert fs.read_all(path) == b"new"

    def broken(f: Any) -> None:
        f.write(b"half")
        raise ValueError("the encoder failed")

    with pytest.raises(ValueError, match="encoder failed"):
        fs.create_with(fs.join(root, "c.bin"), broken)
    assert not fs.exists(fs.join(root, "c.bin"))  # no half file left behind
    if isinstance(fs, LocalFileSystem):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # as create: owner-only


def test_appender_buffers_until_flush(fs_root: tuple[Any, str]) -> None:
    fs, root = fs_root
    path = fs.join(root, "log.bin")
    with fs.open_appender(path, create=True) as app:
        app.write(b"ab")
        app.write(b"cd")
        assert app.size == 4
        app.flush()
        assert fs.read_all(path) == b"abcd"  # visible to another reader after flush
        app.write(b"ef")
        app.sync()
        assert fs.read_all(path) == b"abcdef"
        app.write(b"gh")
    assert fs.read_all(path) == b"abcdefgh"  # close flushes
    again = fs.open_appender(path)
    assert again.size == 8
    again.close()
    with pytest.raises(StorageNotFoundError):
        fs.open_appender(fs.join(root, "nope.bin"))


def test_list_rename_delete_truncate(fs_root: tuple[Any, str]) -> None:
    fs, root = fs_root
    a, b, c = (fs.join(root, n) for n in ("a", "b", "c"))
    fs.create(a, b"A")
    fs.create(b, b"B")
    fs.mkdirs(fs.join(root, "d"))
    assert [(s.name, s.is_dir) for s in fs.list(root)] == [
        ("a", False),
        ("b", False),
        ("d", True),
    ]
    with pytest.raises(StorageExistsError) as err:
        fs.rename(a, b)  # no overwrite: a compare-and-swap on the name
    assert fs.backend in str(err.value)
    assert fs.read_all(b) == b"B" and fs.read_all(a) == b"A"
    fs.rename(a, b, overwrite=True)
    assert fs.read_all(b) == b"A" and not fs.exists(a)
    fs.rename(b, c)
    assert fs.read_all(c) == b"A" and not fs.exists(b)
    with pytest.raises(StorageNotFoundError):
        fs.rename(a, fs.join(root, "z"))
    fs.create(a, b"0123456789")
    fs.truncate(a, 4)
    assert fs.read_all(a) == b"0123"
    assert fs.delete(a) is True
    assert fs.delete(a) is False
    with pytest.raises(StorageNotFoundError):
        fs.list(fs.join(root, "nope"))
    assert fs.delete(fs.join(root, "d"), recursive=True)
    assert [s.name for s in fs.list(root)] == ["c"]


def test_write_atomic_is_compare_and_swap(fs_root: tuple[Any, str]) -> None:
    fs, root = fs_root
    path = fs.join(root, "manifest.json")
    fs.write_atomic(path, b"v1", overwrite=False)
    with pytest.raises(StorageExistsError):
        fs.write_atomic(path, b"v2", overwrite=False)
    assert fs.read_all(path) == b"v1"
    fs.write_atomic(path, b"v3")
    assert fs.read_all(path) == b"v3"
    assert [s.name for s in fs.list(root)] == ["manifest.json"]  # no temporary left over


def test_filesystem_is_picklable(fs_root: tuple[Any, str]) -> None:
    fs, root = fs_root
    fs.create(fs.join(root, "x"), b"payload")
    clone = pickle.loads(pickle.dumps(fs))
    assert type(clone) is type(fs)
    assert clone.read_all(fs.join(root, "x")) == b"payload"


# -- URL resolution -------------------------------------------------------------------------------
def test_filesystem_for_local_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fs, path = filesystem_for(str(tmp_path / "a"))
    assert isinstance(fs, LocalFileSystem) and path == str(tmp_path / "a")
    fs2, path2 = filesystem_for(f"file://{tmp_path}/b%20c")
    assert fs2 is fs and path2 == str(tmp_path / "b c")
    monkeypatch.chdir(tmp_path)
    assert filesystem_for("rel/x")[1] == str(tmp_path / "rel" / "x")
    fs3, _ = filesystem_for(str(tmp_path), fsync=True, webhdfs_url="http://ignored:1")
    assert isinstance(fs3, LocalFileSystem) and fs3.fsync and fs3 is not fs


def test_filesystem_for_hdfs_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALHAR_WEBHDFS_URL", raising=False)
    with pytest.raises(StorageConfigError) as err:
        filesystem_for("hdfs://nn:8020/apps/x")
    assert "MALHAR_WEBHDFS_URL" in str(err.value) and "webhdfs_url" in str(err.value)

    fs, path = filesystem_for("hdfs://nn:8020/apps/x", webhdfs_url="http://nn:9870", user="u")
    assert isinstance(fs, HdfsFileSystem)
    assert (fs.webhdfs_url, fs.user, path) == ("http://nn:9870", "u", "/apps/x")
    assert fs.describe(path) == "hdfs://nn:8020/apps/x"

    monkeypatch.setenv("MALHAR_WEBHDFS_URL", "http://nn:50070")
    fs, path = filesystem_for("hdfs://nn:8020/apps/y/")
    assert fs.webhdfs_url == "http://nn:50070" and path == "/apps/y"

    fs, path = filesystem_for("hdfs://nn:8020/z?webhdfs=http://other:9870&user=bob")
    assert (fs.webhdfs_url, fs.user, path) == ("http://other:9870", "bob", "/z")

    fs, path = filesystem_for("webhdfs://nn:9870/apps/z", retries=1)
    assert (fs.webhdfs_url, fs.retries, path) == ("http://nn:9870", 1, "/apps/z")
    assert filesystem_for("swebhdfs://nn:9871/a")[0].webhdfs_url == "https://nn:9871"

    with pytest.raises(StorageConfigError, match="unsupported storage URL scheme 's3'"):
        filesystem_for("s3://bucket/x")
    with pytest.raises(StorageConfigError, match="unknown filesystem option"):
        filesystem_for("/tmp/x", colour="red")
    with pytest.raises(StorageConfigError):
        filesystem_for("")


@pytest.mark.integration
def test_webhdfs_url_reaches_real_hdfs(hdfs_conn: dict[str, Any]) -> None:
    """``webhdfs://host:httpport/path`` and ``hdfs://...`` name the same files."""
    host_port = hdfs_conn["webhdfs_url"].split("://", 1)[1]
    folder = f"/malhar-tests/url-{os.getpid()}-{time.monotonic_ns()}"
    fs1, p1 = filesystem_for(f"webhdfs://{host_port}{folder}", user=hdfs_conn["user"])
    fs2, p2 = filesystem_for(
        f"{hdfs_conn['url']}{folder}", webhdfs_url=hdfs_conn["webhdfs_url"], user=hdfs_conn["user"]
    )
    try:
        fs1.create(fs1.join(p1, "f"), b"same")
        assert fs2.read_all(fs2.join(p2, "f")) == b"same"
        assert fs2.describe(p2) == f"{hdfs_conn['url']}{folder}"
    finally:
        fs1.delete(p1, recursive=True)


# -- errors ---------------------------------------------------------------------------------------
def _save_as_nobody(root: str) -> str:
    """Fork; the child drops to uid/gid 65534 ('nobody') and saves under ``root``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no exec, the interpreter and malhar are already loaded
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                FSWindowDataManager(root, "op").save({"x": 1}, 1)
                msg = "SAVED"
            except StoragePermissionError as e:
                msg = f"DENIED {e.backend} {e.path} | {e}"
            except BaseException as e:
                msg = f"OTHER {type(e).__name__}: {e}"
            os.write(write_end, msg.encode())
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


def test_local_permission_denied_names_path_and_backend(tmp_path: Path) -> None:
    """A real EACCES: a process without write permission saves into a directory."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    if os.geteuid() == 0:
        out = _save_as_nobody(str(locked))  # root ignores permission bits: drop to 'nobody'
    else:
        locked.chmod(0o555)
        try:
            FSWindowDataManager(str(locked), "op").save({"x": 1}, 1)
            out = "SAVED"
        except StoragePermissionError as e:
            out = f"DENIED {e.backend} {e.path} | {e}"
        finally:
            locked.chmod(0o755)
    assert out.startswith("DENIED local "), out
    assert str(locked / "op") in out
    assert "permission denied" in out
    assert not (locked / "op").exists()  # nothing half-written


class _FakeNameNode(BaseHTTPRequestHandler):
    """Answers every WebHDFS call the way a NameNode refuses a user (HTTP 403)."""

    def _deny(self) -> None:
        body = json.dumps(
            {
                "RemoteException": {
                    "exception": "AccessControlException",
                    "javaClassName": "org.apache.hadoop.security.AccessControlException",
                    "message": 'Permission denied: user=eve, access=WRITE, inode="/secure"',
                }
            }
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = _deny

    def log_message(self, *args: Any) -> None:
        pass


def test_hdfs_permission_denied_is_mapped_not_retried() -> None:
    """WebHDFS's 403 AccessControlException -> StoragePermissionError, first attempt.

    (The project's HDFS fixture runs with ``dfs.permissions.enabled=false``, so the
    refusal comes from a stand-in speaking the WebHDFS error format.)
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeNameNode)
    calls = {"n": 0}
    original = _FakeNameNode._deny

    def counting(self: _FakeNameNode) -> None:
        calls["n"] += 1
        original(self)

    _FakeNameNode.do_GET = _FakeNameNode.do_PUT = counting  # type: ignore[method-assign]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"webhdfs://127.0.0.1:{server.server_address[1]}/secure"
        m = FSWindowDataManager(url, "op", fs_options={"retries": 4, "backoff": 0.01})
        with pytest.raises(StoragePermissionError) as err:
            m.setup()
        assert err.value.backend == "hdfs"
        assert err.value.path.endswith("/secure/op")
        assert "Permission denied: user=eve" in str(err.value)
        assert calls["n"] == 1  # not retried
    finally:
        _FakeNameNode.do_GET = _FakeNameNode.do_PUT = original  # type: ignore[method-assign]
        server.shutdown()
        server.server_close()


def test_unreachable_webhdfs_fails_after_bounded_retries() -> None:
    port = free_port()  # nothing listens here
    fs, path = filesystem_for(f"webhdfs://127.0.0.1:{port}/x", retries=3, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as err:
        fs.list(path)
    assert time.monotonic() - started < 10
    e = err.value
    assert (e.backend, e.path, e.operation, e.attempts) == (
        "hdfs",
        f"webhdfs://127.0.0.1:{port}/x",
        "list",
        4,
    )
    assert "after 4 attempts" in str(e) and f"127.0.0.1:{port}" in str(e)
    assert isinstance(e, StorageError) and isinstance(e, ConnectionError)
    clone = pickle.loads(pickle.dumps(e))  # crosses process boundaries intact
    assert (type(clone), str(clone), clone.attempts) == (type(e), str(e), 4)


@pytest.mark.integration
@pytest.mark.parametrize("lost", ["request", "answer"])
def test_hdfs_write_retried_once_when_datanode_connection_drops(
    hdfs_conn: dict[str, Any], monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    """A dropped datanode connection is retried; if only the answer was lost the bytes
    are not written again (create and append alike)."""
    import requests

    fs, root = filesystem_for(
        f"{hdfs_conn['url']}/malhar-tests/drop-{lost}-{time.monotonic_ns()}",
        webhdfs_url=hdfs_conn["webhdfs_url"],
        user=hdfs_conn["user"],
        backoff=0.01,
    )
    real = fs._data_request
    sent: list[str] = []

    def drop_first(method: str, location: str, data: bytes) -> None:
        first_try = method not in sent
        sent.append(method)
        if first_try:
            if lost == "answer":
                real(method, location, data)
            raise requests.exceptions.ConnectionError("connection reset by peer")
        real(method, location, data)

    monkeypatch.setattr(fs, "_data_request", drop_first)
    path = fs.join(root, "f")
    try:
        fs.create(path, b"head-")
        fs.append(path, b"tail")
        assert fs.read_all(path) == b"head-tail"
        assert sent == (["PUT", "POST"] if lost == "answer" else ["PUT", "PUT", "POST", "POST"])
    finally:
        monkeypatch.undo()
        fs.delete(root, recursive=True)
