"""``filesystem_for(url)``: a URL or path -> ``(FileSystem, path)``.

Accepted forms:

- ``/abs/path``, ``relative/path``, ``~/path``  -> local filesystem (absolute path)
- ``file:///abs/path``                             -> local filesystem
- ``webhdfs://host:httpport/path``                 -> HDFS via WebHDFS at ``http://host:httpport``
- ``swebhdfs://host:httpsport/path``               -> HDFS via WebHDFS at ``https://...``
- ``hdfs://host:rpcport/path``                     -> HDFS; the WebHDFS address comes from, in
  order: the ``webhdfs_url`` option, a ``?webhdfs=http://host:port`` query in the URL, or
  the environment variable ``MALHAR_WEBHDFS_URL``. (The RPC port is not WebHDFS: Python
  talks HTTP to the NameNode's ``dfs.namenode.http-address``, default port 9870.)

Options (``filesystem_for(url, **options)`` / ``fs_options=`` of the window data manager):

- both: ``fsync`` (bool, default False): the strongest durability of the backend on every
  write. Local: fdatasync on every flush. HDFS: files created with ``createflag=sync_block``.
  (The window data manager sets it from its ``durability`` argument.)
- hdfs: ``webhdfs_url``, ``user`` (default ``?user=`` or ``?user.name=`` query, ``$HADOOP_USER_NAME``,
  OS user),
  ``retries`` (5), ``backoff`` (0.1 s), ``max_backoff`` (2 s), ``timeout`` ((10, 120) s).

Options of the other backend are ignored (one ``fs_options`` dict can serve both);
unknown options raise :class:`StorageConfigError`. Instances are cached per process and
configuration, so HTTP connections are reused.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from malhar.util.fs.base import FileSystem
from malhar.util.fs.errors import StorageConfigError
from malhar.util.fs.hdfs import HdfsFileSystem
from malhar.util.fs.local import LocalFileSystem

WEBHDFS_ENV = "MALHAR_WEBHDFS_URL"

_LOCAL_OPTIONS = frozenset({"fsync"})
_HDFS_OPTIONS = frozenset(
    {"webhdfs_url", "user", "retries", "backoff", "max_backoff", "timeout", "fsync"}
)

_cache: dict[tuple, FileSystem] = {}
_cache_lock = threading.Lock()


def _check_options(options: dict[str, Any]) -> None:
    unknown = set(options) - _LOCAL_OPTIONS - _HDFS_OPTIONS
    if unknown:
        raise StorageConfigError(
            f"unknown filesystem option(s) {sorted(unknown)}; "
            f"local: {sorted(_LOCAL_OPTIONS)}, hdfs: {sorted(_HDFS_OPTIONS)}"
        )


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _cached(key: tuple, factory: Any) -> FileSystem:
    with _cache_lock:
        fs = _cache.get(key)
        if fs is None:
            fs = _cache[key] = factory()
        return fs


def filesystem_for(url: str, **options: Any) -> tuple[FileSystem, str]:
    """Resolve ``url`` to a filesystem and an absolute path on it."""
    if not isinstance(url, str) or not url:
        raise StorageConfigError(f"storage URL must be a non-empty string, got {url!r}")
    _check_options(options)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise StorageConfigError(f"file:// URL with a remote host: {url!r}")
            path = unquote(parts.path) or "/"
        else:
            path = url
        path = os.path.abspath(os.path.expanduser(path))
        fsync = bool(options.get("fsync", False))
        return _cached(("local", fsync), lambda: LocalFileSystem(fsync=fsync)), path

    if scheme in ("hdfs", "webhdfs", "swebhdfs"):
        if not parts.netloc:
            raise StorageConfigError(f"{scheme}:// URL needs host:port: {url!r}")
        query = parse_qs(parts.query)
        path = unquote(parts.path) or "/"
        if not path.startswith("/"):
            path = "/" + path
        path = path.rstrip("/") or "/"
        if scheme == "hdfs":
            webhdfs = (
                options.get("webhdfs_url")
                or (query.get("webhdfs") or [None])[0]
                or os.environ.get(WEBHDFS_ENV)
            )
            if not webhdfs:
                raise StorageConfigError(
                    f"{url!r} names the NameNode RPC port, but Python talks WebHDFS (HTTP): "
                    f"pass the WebHDFS address as fs_options={{'webhdfs_url': "
                    f"'http://{parts.hostname}:9870'}}, as ?webhdfs=http://host:port in the "
                    f"URL, or in ${WEBHDFS_ENV}; or use webhdfs://{parts.hostname}:<httpport>/...",
                    backend="hdfs",
                    path=url,
                )
            namenode = f"hdfs://{parts.netloc}"
        else:
            webhdfs = f"{'https' if scheme == 'swebhdfs' else 'http'}://{parts.netloc}"
            namenode = None
        # ``user.name`` is WebHDFS's own parameter: a URL copied from a WebHDFS call works
        user = options.get("user") or (query.get("user") or query.get("user.name") or [None])[0]
        kwargs = {k: options[k] for k in ("retries", "backoff", "max_backoff") if k in options}
        if "timeout" in options:
            kwargs["timeout"] = _freeze(options["timeout"])
        if options.get("fsync"):
            kwargs["fsync"] = True
        key = ("hdfs", webhdfs, user, namenode, tuple(sorted(kwargs.items())))
        fs = _cached(key, lambda: HdfsFileSystem(webhdfs, user=user, namenode=namenode, **kwargs))
        return fs, path

    raise StorageConfigError(
        f"unsupported storage URL scheme {scheme!r} in {url!r}; "
        "use a local path, file://, hdfs:// or webhdfs://"
    )
