"""Paths below a storage URL: ``child_url(base, "malhar", "wal")``.

A checkpoint or data location is a local path or a URL such as
``hdfs://nn:8020/ckpt?webhdfs=http://nn:9870&user=etl`` or
``webhdfs://nn:9870/ckpt?user.name=etl``. Appending ``/malhar/wal`` to such a string put it
after the query (``...?user.name=etl/malhar/wal``): the path stayed ``/ckpt`` and the query
value changed. :func:`child_url` appends to the URL's *path* and keeps its query and
fragment, and percent-encodes the new segments, since :func:`~malhar.util.fs.filesystem_for`
decodes a URL's path (a segment such as ``a%20b``, from
:func:`~malhar.util.fs.names.encode_segment`, would otherwise name ``a b`` on HDFS and
``a%20b`` on the local filesystem).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["child_url"]


def child_url(url: str, *parts: str) -> str:
    """``url`` with ``parts`` appended to its path, as path segments.

    A local path (no scheme, or a one-letter Windows drive) is joined as it is: ``?`` is a
    legal character of a file name there. A ``file:`` URL or a URL with a scheme and host
    gets its query and fragment kept after the new path, and every part percent-encoded.

    Example:
        >>> child_url("webhdfs://nn:9870/ckpt?user.name=etl", "malhar", "wal")
        'webhdfs://nn:9870/ckpt/malhar/wal?user.name=etl'
        >>> child_url("hdfs://nn:8020/ckpt/?webhdfs=http://nn:9870", "malhar", "files")
        'hdfs://nn:8020/ckpt/malhar/files?webhdfs=http://nn:9870'
        >>> child_url("webhdfs://nn:9870?user.name=etl", "a b%")
        'webhdfs://nn:9870/a%20b%25?user.name=etl'
        >>> child_url("/tmp/ckpt/", "malhar", "wal")
        '/tmp/ckpt/malhar/wal'
    """
    split = urlsplit(url)
    if not split.scheme or len(split.scheme) == 1:
        return "/".join([url.rstrip("/"), *parts])
    path = "/".join([split.path.rstrip("/"), *(quote(p, safe="") for p in parts)])
    return urlunsplit((split.scheme, split.netloc, path, split.query, split.fragment))
