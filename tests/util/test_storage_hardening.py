"""Issue 12, storage layer: corruption vs torn tails, durability, owner-only files,
temporary-file clean-up, and the test services' state file."""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from malhar.util import (
    CorruptRecordError,
    FSWindowDataManager,
    StorageConfigError,
    filesystem_for,
)
from malhar.util.fs.errors import (
    StoragePermissionError,
    WindowOrderError,
)
from malhar.util.wal import framing


def artifact(window: int) -> dict[str, Any]:
    return {"window": window, "offsets": [window * 10, window * 10 + 9]}


def record_size(window: int) -> int:
    return len(framing.encode_record(window, pickle.dumps(artifact(window), 5)))


@pytest.fixture
def umask_zero() -> Iterator[None]:
    """The most permissive umask: what we create must still be owner-only."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


# -- point 2: corruption is not a torn tail -------------------------------------------------------
def test_corrupt_length_mid_segment_is_corruption_never_cut_and_windows_never_reused(
    store: Any,
) -> None:
    with store.manager(segment_bytes=1 << 20) as m:
        for w in range(1, 7):
            m.save(artifact(w), w)
    fs, _ = store.fs()
    path = store.segment_path(active=True)
    data = bytearray(fs.read_all(path))
    third = len(framing.encode_header("pickle")) + record_size(1) + record_size(2)
    data[third : third + 4] = (1 << 30).to_bytes(4, "little")  # window 3's length field
    fs.create(path, bytes(data), overwrite=True)
    with store.manager(segment_bytes=1 << 20) as m:
        # windows 4-6 are intact after the damaged record: they were completed
        assert m.partition_largest_window() == 6 == m.largest_completed_window()
        assert [m.retrieve(w) for w in (1, 2, 4, 5, 6)] == [artifact(w) for w in (1, 2, 4, 5, 6)]
        with pytest.raises(CorruptRecordError) as err:
            m.retrieve(3)
        assert (err.value.path, err.value.offset) == (fs.describe(path), third)
        assert [(i.offset, i.kind) for i in m.issues] == [(third, "length")]
        # the writer never accepts a lost or a completed window again
        for w in (3, 4):
            with pytest.raises(WindowOrderError):
                m.save(artifact(w) | {"again": True}, w)
        m.save(artifact(7), 7)
    # never repaired away: the damaged bytes and the windows after them are still there
    assert fs.read_all(path)[: len(data)] == bytes(data)
    assert not [n for n in store.files() if ".damaged" in n]
    with store.manager(segment_bytes=1 << 20) as m:
        assert m.retrieve(7) == artifact(7) and m.retrieve(6) == artifact(6)
        with pytest.raises(CorruptRecordError):
            m.retrieve(3)


def test_torn_tail_is_cut_but_kept_in_a_damaged_copy(store: Any) -> None:
    with store.manager(segment_bytes=1 << 20) as m:
        for w in range(1, 4):
            m.save(artifact(w), w)
    fs, _ = store.fs()
    path = store.segment_path(active=True)
    data = fs.read_all(path)
    fs.truncate(path, len(data) - 5)  # the writer died while appending window 3
    torn_at = len(data) - record_size(3)
    with store.manager(segment_bytes=1 << 20) as m:
        assert m.partition_largest_window() == 2
        m.save(artifact(3) | {"again": True}, 3)
    copy = f"wal-00000000.tmp.damaged-{torn_at}"
    assert copy in store.files()
    assert fs.read_all(fs.join(store.log_dir(), copy)) == data[torn_at:-5]


def test_damaged_segment_header_followed_by_records_is_corruption(local_store: Any) -> None:
    with local_store.manager(segment_bytes=1 << 20) as m:
        for w in range(1, 4):
            m.save(artifact(w), w)
    path = local_store.segment_path(active=True)
    data = bytearray(Path(path).read_bytes())
    data[7] ^= 0x04  # inside the serializer name: the header checksum fails
    Path(path).write_bytes(bytes(data))
    with local_store.manager(segment_bytes=1 << 20) as m:
        assert m.partition_largest_window() == 3
        assert [m.retrieve(w) for w in (1, 2, 3)] == [artifact(w) for w in (1, 2, 3)]
        assert [(i.offset, i.kind) for i in m.issues] == [(0, "header")]
        m.save(artifact(4), 4)  # appended after the last valid record, nothing cut
    assert Path(path).read_bytes()[: len(data)] == bytes(data)
    with local_store.manager(segment_bytes=1 << 20) as m:
        assert m.retrieve(4) == artifact(4) and m.retrieve(1) == artifact(1)


def test_valid_record_out_of_order_at_the_end_stops_the_writer(local_store: Any) -> None:
    """A second writer appended window 2 again: the window ids after it are unknown."""
    with local_store.manager(segment_bytes=1 << 20) as m:
        for w in range(1, 4):
            m.save(artifact(w), w)
    path = local_store.segment_path(active=True)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(framing.encode_record(2, pickle.dumps(artifact(2), 5)))
    with local_store.manager(segment_bytes=1 << 20) as m:
        assert [m.retrieve(w) for w in (1, 2, 3)] == [artifact(w) for w in (1, 2, 3)]
        assert [(i.offset, i.kind) for i in m.issues] == [(size, "order")]
        with pytest.raises(CorruptRecordError, match="cannot continue safely") as err:
            m.save(artifact(4), 4)
        assert err.value.offset == size and err.value.path == f"file://{path}"
    assert os.path.getsize(path) > size  # kept


def test_manager_pickled_before_durability_existed_still_loads(local_store: Any) -> None:
    m = local_store.manager(durability="flush")
    state = m.__getstate__()
    del state["durability"], state["integrity_key"]
    state["fs_options"] = {"fsync": False}
    old = FSWindowDataManager.__new__(FSWindowDataManager)
    old.__setstate__(state)
    assert old.durability == "flush" and old.fs_options == {}
    old.save(artifact(1), 1)
    assert old.retrieve(1) == artifact(1)
    old.teardown()


# -- point 3: durability ------------------------------------------------------------------------------
class _SyncSpy:
    """Records the inode of every file descriptor fsynced/fdatasynced (the real calls run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files: list[int] = []
        self.dirs: list[int] = []
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real))

    def _wrap(self, real: Any) -> Any:
        def spy(fd: int) -> None:
            st = os.fstat(fd)
            (self.dirs if stat.S_ISDIR(st.st_mode) else self.files).append(st.st_ino)
            real(fd)

        return spy


def test_default_durability_syncs_every_save_and_the_new_names(
    local_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _SyncSpy(monkeypatch)
    m = local_store.manager(segment_bytes=1 << 20)  # no durability argument: the default
    m.save(artifact(1), 1)
    segment = local_store.segment_path(active=True)
    log_dir = local_store.log_dir()
    ino = os.stat(segment).st_ino
    assert spy.files.count(ino) == 1, "save 1 returned before the segment was synced"
    # the segment's name is durable too: its directory (and the new directories) synced
    assert os.stat(log_dir).st_ino in spy.dirs
    assert os.stat(os.path.dirname(log_dir)).st_ino in spy.dirs
    m.save(artifact(2), 2)
    m.save(artifact(3), 3)
    assert spy.files.count(ino) == 3
    m.teardown()


def test_flush_durability_is_an_explicit_opt_out(
    local_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = local_store.manager(segment_bytes=1 << 20, durability="flush")
    m.save(artifact(1), 1)  # creates the segment (its creation is still synced)
    spy = _SyncSpy(monkeypatch)
    m.save(artifact(2), 2)
    m.save(artifact(3), 3)
    assert spy.files == []  # written, visible, process-crash safe; not synced
    m.teardown()
    assert spy.files, "teardown syncs the active segment"


def test_durability_option_is_validated(local_store: Any) -> None:
    with pytest.raises(StorageConfigError, match=r"durability.*'fsync'.*'flush'"):
        local_store.manager(durability="sync")
    with pytest.raises(StorageConfigError, match="contradicts"):
        local_store.manager(durability="flush", fs_options={"fsync": True})
    assert local_store.manager(fs_options={"fsync": False}).durability == "flush"
    assert local_store.manager().durability == "fsync"


@pytest.mark.integration
def test_hdfs_fsync_durability_creates_with_sync_block(hdfs_service: Any, hdfs_store: Any) -> None:
    """WebHDFS has no hsync: what it offers is CREATE with createflag=sync_block (the
    DataNode fsyncs the block when the file is closed). The DataNode's request log
    shows what it was asked to do."""
    m = hdfs_store.manager(segment_bytes=1)  # every save creates a new segment
    for w in range(1, 3):
        m.save(artifact(w), w)
    m.teardown()
    flush = hdfs_store.manager("opflush", segment_bytes=1, durability="flush")
    flush.save(artifact(1), 1)
    flush.teardown()
    datanode_log = next(p for p in hdfs_service.log_paths if "datanode" in p.name.lower())
    lines = [ln for ln in datanode_log.read_text().splitlines() if "op=CREATE" in ln]
    _, root = hdfs_store.fs()
    mine = [ln for ln in lines if f"{root}/op/0/wal-" in ln]
    theirs = [ln for ln in lines if f"{root}/opflush/0/wal-" in ln]
    # the NameNode's redirect encodes the flags twice; the DataNode decodes them twice
    assert len(mine) >= 2 and all("createflag=CREATE%252CSYNC_BLOCK" in ln for ln in mine), mine
    assert theirs and not any("SYNC_BLOCK" in ln.upper() for ln in theirs), theirs
    assert all("permission=600" in ln for ln in mine + theirs)
    with hdfs_store.manager(segment_bytes=1) as again:
        assert [again.retrieve(w) for w in (1, 2)] == [artifact(1), artifact(2)]


def _as_nobody(fn: Any) -> str:
    """Fork; the child drops to uid/gid 65534 ('nobody'), runs ``fn`` and reports."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no exec, the interpreter and malhar are already loaded
        status = 0
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                fn()
                msg = "OK"
            except StoragePermissionError as e:
                msg = f"DENIED {e.operation} {e.path} | {e}"
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


def test_parent_directory_fsync_errors_are_not_swallowed() -> None:
    """A directory one may write into but not open (mode 0o333): the file is created,
    but its name cannot be made durable; that must be an error, not a silent success."""
    base = Path(tempfile.mkdtemp(prefix="malhar-dirsync-"))  # outside pytest's 0o700 tree
    try:
        os.chmod(base, 0o711)
        folder = base / "wx-only"
        folder.mkdir()
        os.chmod(folder, 0o333)
        fs, path = filesystem_for(str(folder))
        out = _as_nobody(lambda: fs.create(fs.join(path, "f"), b"x"))
        assert out.startswith("DENIED fsync-dir "), out
        assert str(folder) in out and "permission denied" in out
    finally:
        shutil.rmtree(base)


# -- point 8 (files): owner-only ---------------------------------------------------------------------
def _modes(fs: Any, root: str) -> dict[str, int]:
    """relative path -> permission bits of everything under ``root`` (and root itself)."""
    out = {".": fs.status(root).permission}
    todo = [root]
    while todo:
        folder = todo.pop()
        for entry in fs.list(folder):
            out[entry.path[len(root) + 1 :]] = entry.permission
            if entry.is_dir:
                todo.append(entry.path)
    return out


@pytest.mark.parametrize("umask", [0o000, 0o277])
def test_local_files_and_directories_are_owner_only(tmp_path: Path, umask: int) -> None:
    root = str(tmp_path / "ckpt" / "malhar")
    old = os.umask(umask)
    try:
        with FSWindowDataManager(root, "op", segment_bytes=1) as m:
            for w in range(1, 4):
                m.save(artifact(w), w)
            m.partition(2, [])  # a manifest (write_atomic)
        fs, path = filesystem_for(str(tmp_path / "ckpt"))
        fs.write_atomic(fs.join(path, "x", "state"), b"s")
        fs.create(fs.join(path, "y", "z", "f"), b"f")
        with fs.open_appender(fs.join(path, "y", "log"), create=True) as app:
            app.write(b"l")
    finally:
        os.umask(old)
    modes = {".": stat.S_IMODE(os.stat(path).st_mode)}
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(folder, name)
            modes[os.path.relpath(full, path)] = stat.S_IMODE(os.stat(full).st_mode)
    assert len(modes) > 10
    wrong = {
        p: oct(mode)
        for p, mode in modes.items()
        if mode != (0o700 if os.path.isdir(os.path.join(path, p)) else 0o600)
    }
    assert wrong == {}
    assert {e.permission for e in fs.list(fs.join(path, "y"))} == {0o600, 0o700}


@pytest.mark.integration
def test_hdfs_files_and_directories_are_owner_only(hdfs_store: Any) -> None:
    with hdfs_store.manager(segment_bytes=1) as m:
        for w in range(1, 3):
            m.save(artifact(w), w)
        m.partition(2, [])
    fs, root = hdfs_store.fs()
    fs.write_atomic(fs.join(root, "x", "state"), b"s")
    fs.create(fs.join(root, "y", "z", "f"), b"f")
    modes = _modes(fs, root)
    assert len(modes) > 8
    wrong = {
        p: oct(mode)
        for p, mode in modes.items()
        if mode != (0o700 if fs.status(fs.join(root, p) if p != "." else root).is_dir else 0o600)
    }
    assert wrong == {}


# -- point 14: temporary files of interrupted atomic writes ----------------------------------------
def _age(fs: Any, path: str, seconds: float) -> None:
    """Set the modification time of ``path`` to ``seconds`` ago."""
    when = time.time() - seconds
    if fs.backend == "local":
        os.utime(path, (when, when))
    else:
        fs.client.set_times(path, modification_time=int(when * 1000))


def test_interrupted_atomic_writes_leave_no_temporaries_behind(store: Any) -> None:
    fs, root = store.fs()
    folder = fs.join(root, "state")
    fs.mkdirs(folder)
    stale = fs.join(folder, f".00000007.state.{uuid.uuid4().hex}.tmp")  # a crashed writer's
    fresh = fs.join(folder, f".00000009.state.{uuid.uuid4().hex}.tmp")  # a live writer's
    fs.create(stale, b"half")
    fs.create(fresh, b"in flight")
    _age(fs, stale, 3600)
    fs.write_atomic(fs.join(folder, "00000008.state"), b"v8")
    names = sorted(s.name for s in fs.list(folder))
    assert names == sorted(["00000008.state", fs.basename(fresh)])
    assert fs.read_all(fresh) == b"in flight"  # not older than the writer's own: kept


# -- point 14: the test services' state file --------------------------------------------------------
def test_services_state_file_is_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_zero: None
) -> None:
    from malhar.testing import cli

    monkeypatch.setenv("MALHAR_RUN_DIR", str(tmp_path / "run"))
    cli._save({"postgres": {"connection": {"password": "s3cret"}}})
    state = tmp_path / "run" / "services.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    # others may traverse (a PostgreSQL server run as user postgres), not list or write
    assert stat.S_IMODE(state.parent.stat().st_mode) == 0o711
    assert cli._load() == {"postgres": {"connection": {"password": "s3cret"}}}
    os.chmod(state, 0o644)  # written by an older version: tightened on the next save
    cli._save({})
    assert stat.S_IMODE(state.stat().st_mode) == 0o600


def test_run_dir_owned_by_someone_else_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from malhar.testing.services.errors import ServiceError
    from malhar.testing.services.paths import run_dir

    if os.geteuid() == 0:
        foreign = tmp_path / "planted"
        foreign.mkdir(mode=0o777)
        os.chown(foreign, 65534, 65534)  # e.g. planted in /tmp by another user
    else:
        foreign = Path("/")  # owned by root, not by this user
    monkeypatch.setenv("MALHAR_RUN_DIR", str(foreign))
    with pytest.raises(ServiceError) as err:
        run_dir()
    message = str(err.value)
    assert str(foreign) in message and "owned by uid" in message
    assert "MALHAR_RUN_DIR" in message  # how to fix
    mine = tmp_path / "mine-but-open"
    mine.mkdir()
    os.chmod(mine, 0o777)
    monkeypatch.setenv("MALHAR_RUN_DIR", str(mine))
    with pytest.raises(ServiceError, match="writable by other users"):
        run_dir()
