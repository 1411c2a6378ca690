"""The application's record of completed windows (``malhar.engine.window_log``): a window
is recorded once, a replayed commit is told apart, and a new recorder (a restarted query)
continues from what is on storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from malhar.engine.window_log import WindowLog
from malhar.util.fs.local import LocalFileSystem


def test_a_window_is_recorded_once_and_a_restart_continues_after_it(tmp_path: Path) -> None:
    log = WindowLog(str(tmp_path))
    assert log.largest_completed() == -1
    assert log.record(0, {}) is True
    assert log.record(1, {"n": 1}) is True
    assert log.record(1, {"n": 1}) is False  # a restart re-commits the last batch
    assert log.record(0, {}) is False
    assert log.largest_completed() == 1
    log.close()

    again = WindowLog(str(tmp_path))  # the source process of the next run
    assert again.largest_completed() == 1
    assert again.record(1, {"n": 1}) is False
    assert again.record(2, {}) is True
    assert again.get(1) == {"n": 1}
    assert WindowLog(str(tmp_path)).largest_completed() == 2  # a reader sees the writer's
    again.close()


def test_recording_a_window_does_not_list_the_log_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one recorder per query: listing the folder per window was a round trip on HDFS
    log = WindowLog(str(tmp_path))
    log.record(0, {})
    calls: list[str] = []
    real = LocalFileSystem.list

    def counting(self: LocalFileSystem, path: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(path)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "list", counting)
    for window in range(1, 6):
        assert log.record(window, {}) is True
    assert calls == []
    assert log.largest_completed() == 5
    log.close()
