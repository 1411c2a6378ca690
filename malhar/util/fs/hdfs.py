"""HDFS backend over WebHDFS (the ``hdfs`` PyPI package, ``hdfs.InsecureClient``).

WebHDFS has no ``hflush``/``hsync`` operation: every append is a complete HDFS
``append`` + ``close`` performed by the DataNode on our behalf. Durability when a
call returns (see ``docs/storage.md``):

- ``create()`` / ``append()`` / ``Appender.flush()`` / ``Appender.sync()``: the
  file was closed by HDFS with the new bytes (more than ``hflush``: every replica
  in the pipeline acknowledged them and the NameNode knows the new length): they
  are *visible* to every reader and survive the death of our process, a NameNode
  restart and a DataNode process restart. They are *power-loss safe* (``hsync``)
  only if the DataNodes fsync a block when it is closed:
  ``dfs.datanode.synconclose=true`` on the DataNodes (HDFS default: false), or, for
  ``create()`` with ``fsync=True``, WebHDFS's ``createflag=create,sync_block``
  (``CreateFlag.SYNC_BLOCK``). WebHDFS's APPEND takes no flags (the DataNode always
  appends with ``CreateFlag.APPEND`` alone), so appends are power-loss safe only
  with ``dfs.datanode.synconclose=true``.
- ``rename()``: an atomic NameNode operation, persisted in the NameNode edit log
  before the call returns. ``overwrite=True`` uses WebHDFS ``renameoptions=OVERWRITE``
  (``rename2``), also atomic.
- ``truncate()``: emulated (WebHDFS TRUNCATE leaves the last block under recovery
  and blocks appends): the kept prefix is written to ``<path>.truncating`` and
  renamed over ``path`` with OVERWRITE. Atomic: a crash leaves the old or the new file.

Permissions: files are created with ``permission=600`` and directories with
``permission=700`` (the NameNode applies ``fs.permissions.umask-mode`` to them,
which can only remove bits; the default 022 removes none of these).

Retries: transient failures (connection refused/reset, timeouts, ``RetriableException``,
``StandbyException``, ``SafeModeException``, lease recovery in progress) are retried
``retries`` times with exponential backoff (``backoff`` doubling up to ``max_backoff``
seconds); then a :class:`~malhar.util.fs.errors.StorageUnavailableError` names the
backend, the operation, the path and the number of attempts. Appends and creates are
never blindly re-sent: after an ambiguous failure the file length is checked, and a
partial append is reported (never duplicated).
"""

from __future__ import annotations

import getpass
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from malhar.util.fs.base import DIR_MODE, FILE_MODE, Appender, Data, FileStatus, FileSystem
from malhar.util.fs.errors import (
    StorageConfigError,
    StorageError,
    StorageExistsError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnavailableError,
)

log = logging.getLogger(__name__)

_BACKEND = "hdfs"
T = TypeVar("T")

#: Java exception names (``RemoteException.exception``) that are worth a retry.
TRANSIENT_EXCEPTIONS = frozenset(
    {
        "RetriableException",
        "StandbyException",
        "SafeModeException",
        "RecoveryInProgressException",
        "AlreadyBeingCreatedException",
        "NotReplicatedYetException",
        "ObserverRetryOnActiveException",
        "ConnectException",
        "ConnectTimeoutException",
        "SocketTimeoutException",
        "NoRouteToHostException",
    }
)
_PERMISSION_EXCEPTIONS = frozenset(
    {"AccessControlException", "SecurityException", "AuthorizationException"}
)
_CONNECTION_MARKERS = (
    "Connection refused",
    "failed on connection exception",
    "Connection reset",
    "could only be written to 0 of the 1 minReplication",
)


class _Transient(Exception):
    """Internal: a failure that may succeed when retried."""

    def __init__(self, detail: str, *, connection: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.connection = connection


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HdfsAppender(Appender):
    """Buffers writes; each ``flush()`` is one WebHDFS CREATE (first) or APPEND."""

    def __init__(self, fs: HdfsFileSystem, path: str, *, create: bool) -> None:
        self._fs = fs
        self.path = path
        st = fs.status(path)
        if st is None and not create:
            raise StorageNotFoundError(
                "cannot append: file does not exist",
                backend=_BACKEND,
                path=fs.describe(path),
                operation="open-append",
            )
        self._needs_create = st is None
        self._size = 0 if st is None else st.size
        self._buffer: list[bytes] = []
        self._pending = 0
        self._closed = False

    @property
    def size(self) -> int:
        return self._size + self._pending

    def write(self, data: bytes) -> None:
        self._buffer.append(data)
        self._pending += len(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._buffer[0] if len(self._buffer) == 1 else b"".join(self._buffer)
        before = self._size
        # the buffer is dropped whatever happens: the caller decides (the WAL re-scans)
        self._buffer.clear()
        self._pending = 0
        if self._needs_create:
            self._fs.create(self.path, data, overwrite=False)
            self._needs_create = False
        else:
            self._fs._append_at(self.path, data, before)
        self._size = before + len(data)

    def sync(self) -> None:
        self.flush()  # each WebHDFS append is already closed by HDFS

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.flush()


class HdfsFileSystem(FileSystem):
    """HDFS through WebHDFS.

    :param webhdfs_url: ``http://namenode:9870`` (several separated by ``;`` for HA).
    :param user: HDFS user (``user.name``); default ``$HADOOP_USER_NAME`` or the OS user.
    :param namenode: ``hdfs://host:port`` used only to name paths in messages.
    :param retries: retries after the first attempt for transient failures.
    :param backoff: first retry delay in seconds (doubles each retry).
    :param max_backoff: cap of one retry delay.
    :param timeout: requests timeout (seconds, or ``(connect, read)``).
    :param fsync: create files with ``createflag=create,sync_block`` (the DataNode
        fsyncs the block on close); appends depend on ``dfs.datanode.synconclose``.
    """

    backend = "hdfs"

    def __init__(
        self,
        webhdfs_url: str,
        *,
        user: str | None = None,
        namenode: str | None = None,
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        timeout: float | tuple[float, float] = (10.0, 120.0),
        fsync: bool = False,
    ) -> None:
        if not webhdfs_url or urlsplit(webhdfs_url).scheme not in ("http", "https"):
            raise StorageConfigError(
                f"WebHDFS address must be http(s)://host:port, got {webhdfs_url!r}",
                backend=_BACKEND,
            )
        self.webhdfs_url = webhdfs_url.rstrip("/")
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        self.namenode = namenode.rstrip("/") if namenode else None
        self.retries = max(0, int(retries))
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.timeout = tuple(timeout) if isinstance(timeout, list | tuple) else timeout
        self.fsync = bool(fsync)
        self._client: Any = None
        self._lock = threading.Lock()

    # -- pickling: config only -------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state.pop("_lock", None)
        state.pop("_swept", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HdfsFileSystem({self.webhdfs_url!r}, user={self.user!r}, fsync={self.fsync})"

    def describe(self, path: str) -> str:
        if self.namenode:
            return f"{self.namenode}{path}"
        parts = urlsplit(self.webhdfs_url.split(";")[0])
        return f"webhdfs://{parts.netloc}{path}"

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    try:
                        import requests
                        from hdfs import InsecureClient
                    except ImportError as exc:  # pragma: no cover - optional dependency
                        raise StorageConfigError(
                            "the HDFS backend needs the 'hdfs' package: pip install hdfs "
                            "(malhar's 'hdfs' extra)",
                            backend=_BACKEND,
                        ) from exc
                    session = requests.Session()
                    if all(_is_loopback(u) for u in self.webhdfs_url.split(";")):
                        session.trust_env = False  # never send loopback requests via a proxy
                    self._client = InsecureClient(
                        self.webhdfs_url, user=self.user, timeout=self.timeout, session=session
                    )
        return self._client

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client._session.close()

    # -- error handling ----------------------------------------------------------------------
    def _classify(self, exc: BaseException, operation: str, path: str) -> BaseException:
        """Map an exception to a StorageError, or to _Transient if worth a retry."""
        import requests
        from hdfs.util import HdfsError

        where = {"backend": _BACKEND, "path": self.describe(path), "operation": operation}
        if isinstance(exc, StorageError | _Transient):
            return exc
        if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return _Transient(f"{type(exc).__name__}: {exc}", connection=True)
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            return _Transient(f"{type(exc).__name__}: {exc}", connection=True)
        if isinstance(exc, HdfsError):
            name = getattr(exc, "exception", None) or ""
            message = str(exc.message if hasattr(exc, "message") else exc)
            message = message.split("\n\tat ")[0].strip()
            if name == "FileNotFoundException":
                return StorageNotFoundError(f"no such file or directory: {message}", **where)
            if name == "FileAlreadyExistsException":
                return StorageExistsError(f"already exists: {message}", **where)
            if name in _PERMISSION_EXCEPTIONS or "Authentication failure" in message:
                return StoragePermissionError(f"permission denied: {message}", **where)
            if name in TRANSIENT_EXCEPTIONS:
                return _Transient(f"{name}: {message}", connection=name.startswith("Connect"))
            if any(marker in message for marker in _CONNECTION_MARKERS):
                return _Transient(f"{name or 'error'}: {message}", connection=True)
            return StorageError(
                f"{operation} failed: {name + ': ' if name else ''}{message}", **where
            )
        return exc

    def _retry(self, operation: str, path: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with bounded retries of transient failures."""
        attempt = 0
        delay = self.backoff
        started = time.monotonic()
        while True:
            attempt += 1
            try:
                return fn()
            except BaseException as exc:
                mapped = self._classify(exc, operation, path)
                if not isinstance(mapped, _Transient):
                    if mapped is exc:
                        raise
                    raise mapped from exc
                if attempt > self.retries:
                    elapsed = time.monotonic() - started
                    what = "did not answer" if mapped.connection else "kept failing"
                    raise StorageUnavailableError(
                        f"HDFS ({self.webhdfs_url}) {what} after {attempt} attempts in "
                        f"{elapsed:.1f}s: {mapped.detail}",
                        attempts=attempt,
                        backend=_BACKEND,
                        path=self.describe(path),
                        operation=operation,
                    ) from exc
                log.warning(
                    "hdfs %s %s: attempt %d failed (%s); retrying in %.2fs",
                    operation,
                    path,
                    attempt,
                    mapped.detail,
                    delay,
                )
                time.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    def _data_request(self, method: str, location: str, data: bytes) -> None:
        """Second WebHDFS step: send the bytes to the DataNode named by the redirect."""
        from hdfs.client import _to_error

        client = self.client
        res = client._request(method=method, url=location, data=data)
        if not res:
            raise _to_error(res)

    # -- metadata ------------------------------------------------------------------------------
    def status(self, path: str) -> FileStatus | None:
        raw = self._retry("status", path, lambda: self.client.status(path, strict=False))
        if raw is None:
            return None
        return self._to_status(path, self.basename(path), raw)

    def _to_status(self, path: str, name: str, raw: dict[str, Any]) -> FileStatus:
        return FileStatus(
            name,
            path,
            int(raw.get("length", 0)),
            raw.get("type") == "DIRECTORY",
            float(raw.get("modificationTime", 0)) / 1000.0,
            int(raw["permission"], 8) if "permission" in raw else None,
        )

    def list(self, path: str) -> list[FileStatus]:
        def call() -> list[dict[str, Any]]:
            return self.client._list_status(path).json()["FileStatuses"]["FileStatus"]

        raw = self._retry("list", path, call)
        if len(raw) == 1 and not raw[0].get("pathSuffix"):
            raise StorageError(
                "not a directory", backend=_BACKEND, path=self.describe(path), operation="list"
            )
        out = [self._to_status(self.join(path, s["pathSuffix"]), s["pathSuffix"], s) for s in raw]
        out.sort(key=lambda s: s.name)
        return out

    def mkdirs(self, path: str) -> None:
        # parents created on the way get the same mode (plus u+wx, already in 0o700)
        perm = f"{DIR_MODE:o}"
        self._retry("mkdirs", path, lambda: self.client.makedirs(path, permission=perm))

    # -- data ------------------------------------------------------------------------------------
    def create(self, path: str, data: Data = b"", *, overwrite: bool = False) -> None:
        data = bytes(data)  # the HTTP client sends bytes (no copy when it is bytes)

        def outcome() -> tuple[bool, str] | None:
            st = self.status(path)
            if st is not None and st.size == len(data):
                return None  # the create went through; only the answer was lost
            have = "no" if st is None else st.size
            return st is not None and not overwrite, f"the file has {have} bytes of {len(data)}"

        self._two_step_write(
            "create",
            "PUT",
            path,
            data,
            lambda: self.client._create(path, **self._create_params(overwrite)).headers["location"],
            outcome,
        )

    def _create_params(self, overwrite: bool) -> dict[str, str]:
        params = {"overwrite": "true" if overwrite else "false", "permission": f"{FILE_MODE:o}"}
        if self.fsync:
            # CreateFlag.SYNC_BLOCK: the DataNode fsyncs the block file when it is closed
            params["createflag"] = "create,sync_block"
        return params

    def append(self, path: str, data: bytes) -> None:
        st = self.status(path)
        if st is None:
            raise StorageNotFoundError(
                "cannot append: file does not exist",
                backend=_BACKEND,
                path=self.describe(path),
                operation="append",
            )
        self._append_at(path, data, st.size)

    def _append_at(self, path: str, data: bytes, before: int) -> None:
        """Append ``data`` to a file of ``before`` bytes; never appends it twice."""
        if not data:
            return

        def outcome() -> tuple[bool, str] | None:
            st = self.status(path)
            size = -1 if st is None else st.size
            if size == before + len(data):
                return None  # appended; only the answer was lost
            return size != before, (
                f"the file has {size} bytes, "
                f"expected {before} (nothing appended) or {before + len(data)}"
            )

        self._two_step_write(
            "append",
            "POST",
            path,
            data,
            lambda: self.client._append(path).headers["location"],
            outcome,
        )

    def _two_step_write(
        self,
        operation: str,
        method: str,
        path: str,
        data: bytes,
        locate: Callable[[], str],
        outcome: Callable[[], tuple[bool, str] | None],
    ) -> None:
        """WebHDFS's namenode redirect, then the data to the datanode, retried without
        ever writing twice: after a transient failure ``outcome`` looks at the file and
        returns None if the write landed, else (a retry cannot repair it, what it found)."""
        attempts = 0
        while True:
            attempts += 1
            location = self._retry(operation, path, locate)
            try:
                self._data_request(method, location, data)
                return
            except BaseException as exc:
                mapped = self._classify(exc, operation, path)
                if not isinstance(mapped, _Transient):
                    if mapped is exc:
                        raise
                    raise mapped from exc
                found = outcome()
                if found is None:
                    return
                beyond_repair, state = found
                if beyond_repair or attempts > self.retries:
                    raise StorageUnavailableError(
                        f"{operation} did not complete ({mapped.detail}); {state}",
                        attempts=attempts,
                        backend=_BACKEND,
                        path=self.describe(path),
                        operation=operation,
                    ) from exc
                time.sleep(min(self.backoff * 2 ** (attempts - 1), self.max_backoff))

    def open_appender(self, path: str, *, create: bool = False) -> HdfsAppender:
        return HdfsAppender(self, path, create=create)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        if length is not None and length <= 0:
            return b""

        def call() -> bytes:
            from hdfs.util import HdfsError

            try:
                with self.client.read(path, offset=offset, length=length) as reader:
                    return reader.read()
            except HdfsError as exc:
                if offset > 0 and "out of the range" in str(exc):
                    return b""  # offset at (or past) the end of the file
                raise

        return self._retry("read", path, call)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        attempt = {"n": 0}

        def call() -> None:
            attempt["n"] += 1
            client = self.client
            try:
                if overwrite:
                    client._rename(src, destination=dst, renameoptions="OVERWRITE")
                    return
                ok = client._rename(src, destination=dst).json()["boolean"]
            except BaseException as exc:
                mapped = self._classify(exc, "rename", src)
                if (
                    attempt["n"] > 1
                    and isinstance(mapped, StorageNotFoundError)
                    and self.status(dst) is not None
                ):
                    return  # an earlier attempt renamed it; its answer was lost
                raise
            if ok:
                return
            if self.status(src) is None:
                if attempt["n"] > 1 and self.status(dst) is not None:
                    return
                raise StorageNotFoundError(
                    f"rename source does not exist (target {dst})",
                    backend=_BACKEND,
                    path=self.describe(src),
                    operation="rename",
                )
            if self.status(dst) is not None:
                raise StorageExistsError(
                    f"rename target exists: {self.describe(dst)}",
                    backend=_BACKEND,
                    path=self.describe(dst),
                    operation="rename",
                )
            raise StorageError(
                f"rename to {dst} refused (missing parent directory?)",
                backend=_BACKEND,
                path=self.describe(src),
                operation="rename",
            )

        self._retry("rename", src, call)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        return bool(
            self._retry("delete", path, lambda: self.client.delete(path, recursive=recursive))
        )

    def truncate(self, path: str, length: int) -> None:
        data = self.read(path, 0, length)
        if len(data) != length:
            raise StorageError(
                f"cannot truncate to {length} bytes: file has only {len(data)}",
                backend=_BACKEND,
                path=self.describe(path),
                operation="truncate",
            )
        tmp = f"{path}.truncating"
        self.create(tmp, data, overwrite=True)
        self.rename(tmp, path, overwrite=True)
