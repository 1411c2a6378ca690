"""Rejected rows kept beside the checkpoint (malhar.io.base.rejected_log), and the JSON the
stores keep error-port rows in (malhar.io.base.output.rows_json)."""

from __future__ import annotations

import json
from pathlib import Path

from malhar.io.base.output import rows_json
from malhar.io.base.rejected_log import RejectedLog


def test_rows_with_keys_json_has_no_form_for_are_kept_not_a_failure() -> None:
    # json.dumps refuses a tuple key whatever its default: the window failed on every replay
    rows = [{"k": "b", "v": {(1, 2): 3}, "when": b"\x00", "error": "cannot be a row"}]
    assert json.loads(rows_json(rows)) == [
        {"k": "b", "v": {"(1, 2)": 3}, "when": "b'\\x00'", "error": "cannot be a row"}
    ]
    loop: list = []
    loop.append(loop)
    assert json.loads(rows_json([{"v": loop}]))  # a cycle ends as a repr, not an error


def test_a_window_keeps_what_its_committing_attempt_rejected(tmp_path: Path) -> None:
    log = RejectedLog(str(tmp_path), "out/x", 0)
    assert log.load(3) == []
    log.begin()
    log.save(3, [{"k": "a", "error": "too large"}])
    assert log.load(3) == [{"k": "a", "error": "too large"}]
    # a retry of window 3 rejects nothing: the first attempt's row must not come back
    log.begin()
    log.settle(3)
    assert log.load(3) == []
    log.begin()
    log.save(4, [{"k": "b", "error": "nan"}])
    log.settle(4)
    assert log.load(4) == [{"k": "b", "error": "nan"}]
    # the operator's name is one path segment, whatever it holds
    assert [p.name for p in (tmp_path / "malhar" / "rejected").iterdir()] != ["out"]


def test_purge_deletes_the_windows_up_to_the_committed_one(tmp_path: Path) -> None:
    first = RejectedLog(str(tmp_path), "out", 1)
    for w in (1, 2, 5):
        first.save(w, [{"w": w, "error": "x"}])
    again = RejectedLog(str(tmp_path), "out", 1)  # another process: lists the folder once
    again.purge(2)
    assert [again.load(w) for w in (1, 2, 5)] == [[], [], [{"w": 5, "error": "x"}]]
    again.purge(9)
    assert not list((tmp_path / "malhar" / "rejected" / "out" / "1").glob("*.json"))
