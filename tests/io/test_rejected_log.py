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


def test_partition_0_purges_the_partitions_a_repartitioning_removed(tmp_path: Path) -> None:
    for p in (0, 1, 2):
        old = RejectedLog(str(tmp_path), "out", p, 3)
        for w in (4, 7):
            old.save(w, [{"p": p, "w": w, "error": "x"}])
    folder = tmp_path / "malhar" / "rejected" / "out"
    # scaled down to 2: partition 1 keeps only its own folder; partition 0 looks after 2
    RejectedLog(str(tmp_path), "out", 1, 2).purge(5)
    assert sorted(x.name for x in (folder / "2").iterdir()) == ["4.json", "7.json"]
    first = RejectedLog(str(tmp_path), "out", 0, 2)
    first.purge(5)
    assert [x.name for x in (folder / "2").iterdir()] == ["7.json"]
    assert [x.name for x in (folder / "1").iterdir()] == ["7.json"]
    assert RejectedLog(str(tmp_path), "out", 2, 3).load(7) == [{"p": 2, "w": 7, "error": "x"}]
    first.purge(7)
    assert sorted(x.name for x in folder.iterdir()) == ["0", "1"]
