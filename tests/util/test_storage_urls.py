"""Paths below a checkpoint URL that carries a query string (``?user.name=``,
``?webhdfs=``): the new segments go to the URL's path, the query stays last (the window
data managers' ``/malhar/wal`` used to land inside the query's last value)."""

from __future__ import annotations

import pytest

from malhar import OperatorContext
from malhar.engine.generations import state_root
from malhar.engine.spark_io import shutdown_flag_path
from malhar.engine.window_log import WindowLog
from malhar.util.fs import filesystem_for
from malhar.util.fs.urls import child_url

CKPT = "webhdfs://nn:9870/apps/ck?user.name=etl"


@pytest.mark.parametrize(
    ("base", "parts", "expected"),
    [
        (CKPT, ("malhar", "wal"), "webhdfs://nn:9870/apps/ck/malhar/wal?user.name=etl"),
        (
            "webhdfs://nn:9870/apps/ck/?user.name=etl#f",
            ("a",),
            "webhdfs://nn:9870/apps/ck/a?user.name=etl#f",
        ),
        ("webhdfs://nn:9870?user.name=etl", ("a",), "webhdfs://nn:9870/a?user.name=etl"),
        (
            "hdfs://nn:8020/ck?webhdfs=http://nn:9870&user=etl",
            ("malhar", "wal"),
            "hdfs://nn:8020/ck/malhar/wal?webhdfs=http://nn:9870&user=etl",
        ),
        ("webhdfs://nn:9870/ck", ("a b%2F",), "webhdfs://nn:9870/ck/a%20b%252F"),
        ("file:///tmp/ck", ("malhar",), "file:///tmp/ck/malhar"),
        ("/tmp/ck/", ("malhar", "wal"), "/tmp/ck/malhar/wal"),
        ("/tmp/odd?name", ("wal",), "/tmp/odd?name/wal"),  # '?' is a file name character
    ],
)
def test_child_url_appends_to_the_path_and_keeps_the_query(
    base: str, parts: tuple[str, ...], expected: str
) -> None:
    assert child_url(base, *parts) == expected


def test_segments_name_the_same_path_on_every_filesystem() -> None:
    # filesystem_for decodes a URL's path: an encoded operator name (a%20b) must survive it
    _, path = filesystem_for(child_url("webhdfs://nn:9870/ck", "a%20b", "x y"))
    assert path == "/ck/a%20b/x y"


def test_the_window_data_managers_live_below_the_checkpoint_path() -> None:
    context = OperatorContext("in", partition=1, partitions=2, checkpoint=CKPT)
    root = context.window_data_manager(serializer="json").root
    assert root == "webhdfs://nn:9870/apps/ck/malhar/wal?user.name=etl"
    assert WindowLog(CKPT).root == root
    fs, path = filesystem_for(root)
    assert path == "/apps/ck/malhar/wal"  # was /apps/ck, user "etl/malhar/wal"
    assert fs.user == "etl"  # WebHDFS's own user.name parameter is understood
    assert filesystem_for(shutdown_flag_path(CKPT))[1] == "/apps/ck/malhar/control/shutdown"
    assert filesystem_for(state_root(CKPT, 2))[1] == "/apps/ck/malhar/gen/2"
    assert state_root(CKPT, 0) == CKPT
