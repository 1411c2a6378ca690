"""Managed state's default local stores: ``$MALHAR_STATE_DIR``, the checkpoint marker of each
``<hash>`` directory, and ``malhar state clean`` removing the stores of deleted checkpoints."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from malhar.cli import cli
from malhar.util.state import ManagedState
from malhar.util.state.local_dirs import (
    LIVE,
    MARKER,
    ORPHAN,
    UNKNOWN,
    UNMARKED,
    clean,
    mark_store,
    scan,
    state_base,
)
from malhar.util.state.manager import default_local_dir


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$MALHAR_STATE_DIR`` of this test's own."""
    path = tmp_path / "state"
    monkeypatch.setenv("MALHAR_STATE_DIR", str(path))
    return path


def _store(root: str, operator: str = "op", size: int = 100) -> Path:
    """A local store of ``root`` in the default layout, as ``ManagedState`` leaves it."""
    path = Path(default_local_dir(root, operator, 0))
    path.mkdir(parents=True)
    (path / "000001.sst").write_bytes(b"x" * size)
    mark_store(str(path), root)
    return path.parent.parent  # the <hash> directory


def _bytes(hash_dir: Path) -> int:
    return sum(f.stat().st_size for f in hash_dir.rglob("*") if f.is_file())


def _marker(hash_dir: Path) -> dict:
    return json.loads((hash_dir / MARKER).read_text())


def test_the_state_dir_variable_is_honoured(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert state_base() == str(base)
    assert default_local_dir("/ckpt", "op", 3).startswith(f"{base}/")
    monkeypatch.delenv("MALHAR_STATE_DIR")
    assert state_base().startswith(f"{tempfile.gettempdir()}/malhar-state-")


def test_a_managed_state_marks_its_directory_with_its_checkpoint(
    base: Path, tmp_path: Path
) -> None:
    root = str(tmp_path / "ckpt")
    ms = ManagedState(root, "counter", 0)
    try:
        ms.restore(-1)
        ms.checkpoint(0)
    finally:
        ms.close()
    (hash_dir,) = base.iterdir()
    assert (hash_dir / "counter" / "0").is_dir()
    assert _marker(hash_dir) == {"checkpoint": root, "local_path": root}


def test_a_store_under_the_applications_directory_is_marked_with_the_application(
    base: Path, tmp_path: Path
) -> None:
    # the engine opens a repartitioned operator's store by the application's checkpoint, its
    # ManagedState has the generation's root
    app, generation = str(tmp_path / "app"), str(tmp_path / "app" / "malhar" / "gen" / "1")
    local = default_local_dir(app, "join", 0)
    ms = ManagedState(generation, "join", 0, local_dir=local)
    try:
        ms.restore(-1)
    finally:
        ms.close()
    assert _marker(Path(local).parent.parent)["checkpoint"] == app


def test_the_marker_masks_credentials(base: Path) -> None:
    root = "hdfs://etl:s3cret@nn:8020/ckpt?webhdfs=http://nn:9870&delegation=T0KEN"
    text = (_store(root) / MARKER).read_text()
    assert "s3cret" not in text and "T0KEN" not in text
    assert json.loads(text) == {
        "checkpoint": "hdfs://etl:***@nn:8020/ckpt?webhdfs=http://nn:9870&delegation=***",
        "local_path": None,
    }


def test_clean_removes_the_stores_of_a_deleted_checkpoint_and_keeps_a_live_one(
    base: Path, tmp_path: Path
) -> None:
    live, gone = tmp_path / "live", tmp_path / "gone"
    live.mkdir()
    kept, orphan = _store(str(live)), _store(str(gone))
    assert {s.path: s.status for s in scan()} == {str(kept): LIVE, str(orphan): ORPHAN}
    size = _bytes(orphan)  # the store and its marker
    removed = clean()
    assert [s.path for s in removed] == [str(orphan)]
    assert removed[0].size == size > 100
    assert kept.exists() and not orphan.exists()


def test_a_dry_run_removes_nothing(base: Path, tmp_path: Path) -> None:
    orphan = _store(str(tmp_path / "gone"))
    assert [s.path for s in clean(dry_run=True)] == [str(orphan)]
    assert orphan.exists()


def test_stores_without_a_marker_go_only_when_asked(base: Path) -> None:
    old = base / "0123456789ab" / "op" / "0"  # made before markers
    old.mkdir(parents=True)
    (base / "not-malhars").mkdir()  # anything else in the directory is left alone
    assert clean() == []
    assert [s.status for s in scan()] == [UNMARKED]
    assert [s.path for s in clean(unmarked=True)] == [str(base / "0123456789ab")]
    assert (base / "not-malhars").exists()


def test_a_named_checkpoint_goes_even_when_it_exists(base: Path, tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    hash_dir = _store(str(live))
    assert clean() == []
    # named as the application named it, or by another spelling of the same path
    assert [s.path for s in clean(checkpoints=[f"{live}/"], dry_run=True)] == [str(hash_dir)]
    assert [s.path for s in clean(checkpoints=[f"file://{live}"])] == [str(hash_dir)]
    assert not hash_dir.exists()


def test_an_hdfs_checkpoint_that_cannot_be_checked_is_kept(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MALHAR_WEBHDFS_URL", raising=False)
    masked = _store("hdfs://etl:pw@nn.invalid:8020/ckpt?webhdfs=http://nn.invalid:9870")
    no_webhdfs = _store("hdfs://nn.invalid:8020/ckpt")  # where is WebHDFS? cannot tell
    assert {s.path: s.status for s in scan()} == {str(masked): UNKNOWN, str(no_webhdfs): UNKNOWN}
    assert clean() == []


def test_a_masked_checkpoint_names_only_its_own_stores(base: Path) -> None:
    """Two HDFS roots whose credentials mask them alike: naming one removes only its own."""
    one = "hdfs://nn.invalid:8020/ck1?webhdfs=http://u:pw@nn.invalid:9870"
    two = "hdfs://nn.invalid:8020/ck2?webhdfs=http://u:pw@nn.invalid:9870"
    first, second = _store(one), _store(two)
    assert _marker(first)["checkpoint"] == _marker(second)["checkpoint"]  # masked alike
    assert [s.path for s in clean(checkpoints=[one])] == [str(first)]
    assert second.exists()


def test_a_directory_that_only_looks_like_a_hash_is_not_a_store(base: Path) -> None:
    """In a shared ``$MALHAR_STATE_DIR``, a 12-hex-digit name alone is not malhar's."""
    other = base / "abcdef012345"
    (other / "photos").mkdir(parents=True)
    (other / "photos" / "cat.jpg").write_bytes(b"x")
    (other / "notes.txt").write_text("mine")
    old = base / "0123456789ab" / "op"  # made before markers, a private store beside
    (old / "0").mkdir(parents=True)
    (old / "1.4242-0a1b2c3d").mkdir()
    assert [s.path for s in scan()] == [str(base / "0123456789ab")]
    clean(unmarked=True)
    assert other.exists() and not old.exists()


def test_the_cli_prints_what_it_removes_and_the_bytes_freed(base: Path, tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    kept, orphan = _store(str(live), size=10), _store(str(tmp_path / "gone"), size=3000)
    size = _bytes(orphan)
    runner = CliRunner()
    dry = runner.invoke(cli, ["state", "clean", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"would remove {orphan}" in dry.output and f"would free {size} bytes" in dry.output
    assert orphan.exists()
    done = runner.invoke(cli, ["state", "clean"])
    assert done.exit_code == 0, done.output
    assert f"removed {orphan}" in done.output and f"freed {size} bytes" in done.output
    assert str(kept) not in done.output and not orphan.exists() and kept.exists()
    named = runner.invoke(cli, ["state", "clean", "--checkpoint", str(live)])
    assert f"removed {kept}" in named.output and not kept.exists()


def test_the_cli_lists_stores_and_names_the_flag_for_unmarked_ones(base: Path) -> None:
    (base / "0123456789ab").mkdir(parents=True)
    runner = CliRunner()
    listed = runner.invoke(cli, ["state", "list"])
    assert listed.exit_code == 0 and "0123456789ab  unmarked" in listed.output
    kept = runner.invoke(cli, ["state", "clean"])
    assert "kept 1 directory without a marker" in kept.output and "--all-orphans" in kept.output
    assert (base / "0123456789ab").exists()
    gone = runner.invoke(cli, ["state", "clean", "--all-orphans"])
    assert "removed 1 directory" in gone.output and not (base / "0123456789ab").exists()
    shutil.rmtree(base)
    assert "0 directories" in runner.invoke(cli, ["state", "list"]).output
