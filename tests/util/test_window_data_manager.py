"""FSWindowDataManager on the local filesystem and on a real HDFS."""

from __future__ import annotations

import os
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malhar.util import (
    CorruptRecordError,
    FSWindowDataManager,
    NoopWindowDataManager,
    StorageConfigError,
    StorageError,
    WindowDataManager,
)
from malhar.util.fs.errors import (
    ConcurrentWriterError,
    StorageUnavailableError,
    WindowOrderError,
)
from malhar.util.wal import framing

TINY = 1  # every window in a segment of its own (rotation after each save)


def artifact(partition: int, window: int) -> dict[str, Any]:
    return {"partition": partition, "window": window, "offsets": [window * 10, window * 10 + 9]}


def save_windows(m: FSWindowDataManager, windows: range, partition: int = 0) -> None:
    for w in windows:
        m.save(artifact(partition, w), w)


# -- basic contract -------------------------------------------------------------------------------
def test_save_retrieve_and_restart(store: Any) -> None:
    with store.manager(segment_bytes=300) as m:
        assert isinstance(m, WindowDataManager)
        assert m.largest_completed_window() == -1 and m.partition_largest_window() == -1
        assert m.retrieve(1) is None
        save_windows(m, range(1, 8))
        assert m.retrieve(4) == artifact(0, 4)
        assert m.largest_completed_window() == 7 == m.partition_largest_window()
    files = store.files()
    assert any(f.endswith(".log") for f in files) and any(f.endswith(".tmp") for f in files)
    with store.manager(segment_bytes=300) as again:  # a new process would do the same
        assert [again.retrieve(w) for w in range(1, 8)] == [artifact(0, w) for w in range(1, 8)]
        assert again.retrieve(8) is None
        assert again.largest_completed_window() == 7
        again.save(artifact(0, 9), 9)  # gaps between windows are fine
        assert again.retrieve(8) is None and again.retrieve(9) == artifact(0, 9)


def test_committed_purges_finalized_segments_only(store: Any) -> None:
    """Windows 1-9, tiny segments, committed(3), restart: <= 3 gone, 4-9 retrievable."""
    with store.manager(segment_bytes=TINY) as m:
        save_windows(m, range(1, 10))
        assert len([f for f in store.files() if f.endswith(".log")]) == 9
        m.committed(3)
    names = store.files()
    assert sorted(names) == [f"wal-{i:08d}-{i + 1}-{i + 1}.log" for i in range(3, 9)]
    with store.manager(segment_bytes=TINY) as m:
        assert [m.retrieve(w) for w in (1, 2, 3)] == [None, None, None]
        assert [m.retrieve(w) for w in range(4, 10)] == [artifact(0, w) for w in range(4, 10)]
        assert m.largest_completed_window() == 9
        # the segment holding the largest window survives any commit (largest stays known)
        m.committed(100)
        assert store.files() == ["wal-00000008-9-9.log"]
    with store.manager(segment_bytes=TINY) as m:
        assert m.largest_completed_window() == 9 and m.retrieve(9) == artifact(0, 9)
        with pytest.raises(WindowOrderError):
            m.save(artifact(0, 9) | {"changed": True}, 9)
        m.save(artifact(0, 10), 10)


def test_committed_never_purges_the_active_segment(store: Any) -> None:
    with store.manager(segment_bytes=1 << 20) as m:
        save_windows(m, range(1, 6))
        m.committed(5)
        assert [m.retrieve(w) for w in range(1, 6)] == [artifact(0, w) for w in range(1, 6)]
    assert store.files() == ["wal-00000000.tmp"]


def test_save_rejects_old_windows_but_accepts_identical_resave(store: Any) -> None:
    with store.manager() as m:
        m.save({"a": 1}, 5)
        m.save({"a": 1}, 5)  # crash-after-save replay: same bytes -> no-op
        with pytest.raises(WindowOrderError) as err:
            m.save({"a": 2}, 5)
        assert "already saved" in str(err.value) and err.value.backend == store.backend
        with pytest.raises(WindowOrderError, match="not after the largest saved window 5"):
            m.save({"a": 1}, 4)
        with pytest.raises(ValueError):
            m.save({}, -1)
        with pytest.raises(TypeError):
            m.save({}, "7")  # type: ignore[arg-type]
        m.save({"a": 3}, 6)
        assert m.retrieve(5) == {"a": 1} and m.retrieve(6) == {"a": 3}


def test_json_serializer_and_mismatch(store: Any) -> None:
    with store.manager(serializer="json") as m:
        m.save({"topic": "t", "offsets": {"0": 12}}, 1)
        assert m.retrieve(1) == {"topic": "t", "offsets": {"0": 12}}
    fs, _ = store.fs()
    raw = fs.read_all(store.segment_path(active=True))
    assert b'{"topic":"t","offsets":{"0":12}}' in raw  # readable by non-Python tools
    with pytest.raises(StorageConfigError, match="serializer 'json'"):
        store.manager(serializer="pickle").setup()
    with pytest.raises(StorageConfigError, match="unknown serializer"):
        store.manager(serializer="yaml")


def test_manager_is_picklable_and_lazy(store: Any) -> None:
    m = store.manager(partition=2, segment_bytes=4096)
    m.save({"w": 1}, 1)
    clone = pickle.loads(pickle.dumps(m))  # what Spark ships to an executor
    assert clone.partition_id == 2 and clone.segment_bytes == 4096
    assert set(m.__getstate__()) == {
        "root",
        "operator",
        "partition_id",
        "segment_bytes",
        "serializer",
        "fs_options",
        "durability",
        "integrity_key",
        "_superseded",
    }  # configuration only: no file handles, no HTTP sessions
    m.teardown()
    assert clone.retrieve(1) == {"w": 1}  # opened lazily on first use
    clone.save({"w": 2}, 2)
    clone.teardown()


# -- torn tails and corruption --------------------------------------------------------------------
def test_torn_tail_is_an_unfinished_window(store: Any) -> None:
    """Truncate the last segment mid-record: largest = previous window; saving continues."""
    with store.manager(segment_bytes=1 << 20) as m:
        save_windows(m, range(1, 6))
    fs, _ = store.fs()
    path = store.segment_path(active=True)
    size = fs.status(path).size
    fs.truncate(path, size - 7)  # the writer died in the middle of window 5
    with store.manager(segment_bytes=1 << 20) as m:
        assert m.largest_completed_window() == 4 == m.partition_largest_window()
        assert m.retrieve(5) is None
        assert [m.retrieve(w) for w in range(1, 5)] == [artifact(0, w) for w in range(1, 5)]
        (issue,) = m.issues
        assert issue.kind == "torn" and issue.path == fs.describe(path)
        assert issue.offset == size - len(framing.encode_record(5, pickle.dumps(artifact(0, 5), 5)))
        assert "unfinished window" in issue.action
        # setup() only reads (the partition's writer could be running elsewhere)
        assert fs.status(path).size == size - 7
        m.save(artifact(0, 5) | {"again": True}, 5)  # the window is processed again
        m.save(artifact(0, 6), 6)
    with store.manager(segment_bytes=1 << 20) as m:
        assert m.issues == []  # the tail was cut: the log is clean again
        assert m.retrieve(5) == artifact(0, 5) | {"again": True}
        assert m.largest_completed_window() == 6


def test_flipped_bytes_in_a_finalized_segment_are_reported(store: Any) -> None:
    with store.manager(segment_bytes=200) as m:
        save_windows(m, range(1, 10))
    fs, _ = store.fs()
    first = sorted(n for n in store.files() if n.endswith(".log"))[0]
    path = fs.join(store.log_dir(), first)
    data = bytearray(fs.read_all(path))
    header = len(framing.encode_header("pickle"))
    record2 = header + framing.RECORD_HEADER_SIZE + len(pickle.dumps(artifact(0, 1), 5))
    data[record2 + framing.RECORD_HEADER_SIZE + 5] ^= 0xFF  # inside window 2's artifact
    fs.create(path, bytes(data), overwrite=True)
    with store.manager(segment_bytes=200) as m:
        assert m.largest_completed_window() == 9  # startup is not affected
        assert m.retrieve(1) == artifact(0, 1)
        with pytest.raises(CorruptRecordError) as err:
            m.retrieve(2)
        e = err.value
        assert (e.backend, e.path, e.offset) == (store.backend, fs.describe(path), record2)
        assert "checksum" in str(e) and f"offset={record2}" in str(e)
        assert m.retrieve(3) == artifact(0, 3)  # the record after it is intact
        issues = m.verify()
        assert [(i.path, i.offset, i.kind) for i in issues] == [
            (fs.describe(path), record2, "checksum")
        ]


def test_flipped_bytes_in_the_active_segment(store: Any) -> None:
    with store.manager(segment_bytes=1 << 20) as m:
        save_windows(m, range(1, 6))
    fs, _ = store.fs()
    path = store.segment_path(active=True)
    data = bytearray(fs.read_all(path))
    header = len(framing.encode_header("pickle"))
    rec = len(framing.encode_record(1, pickle.dumps(artifact(0, 1), 5)))
    mid, last = header + 2 * rec, header + 4 * rec  # windows 3 and 5
    data[mid + 20] ^= 0x01
    data[last + 20] ^= 0x01
    fs.create(path, bytes(data), overwrite=True)
    with store.manager(segment_bytes=1 << 20) as m:
        # a damaged last record is a torn tail: an unfinished window, cut off and kept aside
        assert m.largest_completed_window() == 4
        kinds = {(i.offset, i.kind) for i in m.issues}
        assert kinds == {(mid, "checksum"), (last, "torn")}
        assert all(i.path == fs.describe(path) for i in m.issues)
        with pytest.raises(CorruptRecordError) as err:
            m.retrieve(3)
        assert err.value.offset == mid and err.value.path == fs.describe(path)
        assert m.retrieve(4) == artifact(0, 4) and m.retrieve(5) is None
        m.save(artifact(0, 5), 5)
    damaged = [n for n in store.files() if ".damaged-" in n]
    assert damaged == [f"wal-00000000.tmp.damaged-{last}"]
    assert fs.read_all(fs.join(store.log_dir(), damaged[0])) == bytes(data[last:])


def test_torn_header_and_empty_active_segment(store: Any) -> None:
    with store.manager(segment_bytes=TINY) as m:
        save_windows(m, range(1, 3))
    fs, _ = store.fs()
    tmp = fs.join(store.log_dir(), "wal-00000002.tmp")
    fs.create(tmp, framing.encode_header("pickle")[:5])  # died while creating a segment
    with store.manager(segment_bytes=TINY) as m:
        assert m.largest_completed_window() == 2
        assert [i.kind for i in m.issues] == ["torn"]
        m.save(artifact(0, 3), 3)
        assert m.retrieve(3) == artifact(0, 3)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_random_truncation_point_recovers_the_complete_prefix(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    root = str(tmp_path_factory.mktemp("trunc"))
    sizes = data.draw(st.lists(st.integers(0, 200), min_size=1, max_size=15), label="sizes")
    items = [os.urandom(n) for n in sizes]
    with FSWindowDataManager(root, "op", segment_bytes=1 << 20) as m:
        for w, item in enumerate(items, start=1):
            m.save(item, w)
    path = os.path.join(root, "op", "0", "wal-00000000.tmp")
    full = os.path.getsize(path)
    cut = data.draw(st.integers(0, full), label="cut")
    os.truncate(path, cut)
    header = len(framing.encode_header("pickle"))
    ends = [header]
    for w, item in enumerate(items, start=1):
        ends.append(ends[-1] + len(framing.encode_record(w, pickle.dumps(item, 5))))
    complete = sum(1 for e in ends[1:] if e <= cut)
    with FSWindowDataManager(root, "op", segment_bytes=1 << 20) as m:
        assert m.largest_completed_window() == (complete if complete else -1)
        assert [m.retrieve(w) for w in range(1, complete + 1)] == items[:complete]
        assert m.retrieve(complete + 1) is None
        assert bool(m.issues) == (cut not in ends)
        m.save(b"next", complete + 1)
    with FSWindowDataManager(root, "op", segment_bytes=1 << 20) as m:
        assert m.retrieve(complete + 1) == b"next" and m.issues == []


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    artifacts=st.lists(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(),
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
            ),
            max_leaves=20,
        ),
        min_size=1,
        max_size=20,
    ),
    serializer=st.sampled_from(["pickle", "json"]),
    segment_bytes=st.integers(1, 2000),
)
def test_random_artifacts_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    artifacts: list[Any],
    serializer: str,
    segment_bytes: int,
) -> None:
    root = str(tmp_path_factory.mktemp("rt"))
    with FSWindowDataManager(root, "op", serializer=serializer, segment_bytes=segment_bytes) as m:
        for w, a in enumerate(artifacts):
            m.save(a, w * 3)
    with FSWindowDataManager(root, "op", serializer=serializer, segment_bytes=segment_bytes) as m:
        assert [m.retrieve(w * 3) for w in range(len(artifacts))] == artifacts
        assert m.largest_completed_window() == 3 * (len(artifacts) - 1)
        assert m.verify() == []


# -- partitions -----------------------------------------------------------------------------------
def _save_partition(store: Any, partition: int, windows: range, segment_bytes: int) -> int:
    with store.manager(partition=partition, segment_bytes=segment_bytes) as m:
        save_windows(m, windows, partition)
        return m.partition_largest_window()


def test_four_partitions_merge_and_split(store: Any) -> None:
    """4 partitions save concurrently; merge 4 -> 2 and split 2 -> 4 keep every window."""
    seg = 400
    last = {0: 12, 1: 12, 2: 11, 3: 12}  # partition 2 died before finishing window 12
    with ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(_save_partition, store, p, range(1, last[p] + 1), seg) for p in range(4)
        ]
        assert [f.result() for f in futures] == [12, 12, 11, 12]
    driver = store.manager(segment_bytes=seg)
    assert driver.largest_completed_window() == 11  # the minimum over partitions
    assert driver.retrieve_all_partitions(5) == {p: artifact(p, 5) for p in range(4)}
    assert driver.retrieve_all_partitions(12) == {p: artifact(p, 12) for p in (0, 1, 3)}

    merged = driver.partition(2, removed_ids=[2, 3])
    assert [m.partition_id for m in merged] == [0, 1]
    with pytest.raises(StorageError, match="repartitioned"):
        driver.save({}, 13)
    for m in merged:
        assert m.largest_completed_window() == 11
        assert m.partition_largest_window() == 11
        # windows of the old layout stay readable, from every old partition
        for w in range(1, 12):
            assert m.retrieve_all_partitions(w) == {p: artifact(p, w) for p in range(4)}
        assert m.retrieve(3) == artifact(m.partition_id, 3)
        with pytest.raises(WindowOrderError, match="before the last repartitioning"):
            m.save({}, 11)
    # window 12 was not completed by all old partitions: it is processed again
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda m: save_windows(m, range(12, 16), 10 + m.partition_id), merged))
    assert merged[0].largest_completed_window() == 15
    assert merged[1].retrieve_all_partitions(12) == {0: artifact(10, 12), 1: artifact(11, 12)}
    for m in merged:
        m.teardown()

    split = merged[0].partition(4, removed_ids=[])
    assert len(split) == 4
    for m in split:
        assert m.largest_completed_window() == 15
        assert m.partition_largest_window() == 15
        for w in range(1, 12):
            assert m.retrieve_all_partitions(w) == {p: artifact(p, w) for p in range(4)}
        for w in range(12, 16):
            assert m.retrieve_all_partitions(w) == {0: artifact(10, w), 1: artifact(11, w)}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda m: save_windows(m, range(16, 18), 20 + m.partition_id), split))
    assert split[3].largest_completed_window() == 17
    assert split[2].retrieve_all_partitions(17) == {p: artifact(20 + p, 17) for p in range(4)}
    # a half-finished new layout: the minimum again
    split[1].save(artifact(21, 18), 18)
    assert split[0].largest_completed_window() == 17

    # committed past the old layouts' windows: partition 0 deletes their logs
    split[0].committed(16)
    fs, root = store.fs()
    dirs = sorted(int(s.name) for s in fs.list(fs.join(root, "op")) if s.is_dir)
    assert dirs == [6, 7, 8, 9]
    assert split[1].retrieve_all_partitions(5) == {}
    assert split[1].retrieve_all_partitions(17) == {p: artifact(20 + p, 17) for p in range(4)}
    for m in split:
        m.teardown()
    with store.manager(partition=3, segment_bytes=seg) as m:  # a fresh process sees the same
        assert m.largest_completed_window() == 17 and m.retrieve(17) == artifact(23, 17)
    with pytest.raises(StorageConfigError, match="partition 4 does not exist"):
        store.manager(partition=4).setup()


def test_partition_validates_removed_ids(local_store: Any) -> None:
    with local_store.manager() as m:
        m.save({}, 1)
        with pytest.raises(StorageConfigError, match=r"removed partition\(s\) \[7\]"):
            m.partition(1, removed_ids=[7])
        with pytest.raises(StorageConfigError):
            m.partition(0, removed_ids=[])


def test_new_partition_that_never_saved_counts_as_not_completed(local_store: Any) -> None:
    with local_store.manager(partition=0) as p0, local_store.manager(partition=1) as p1:
        save_windows(p0, range(1, 4))
        assert p0.largest_completed_window() == -1  # partition 1 has not finished any window
        p1.save(artifact(1, 1), 1)
        assert p0.largest_completed_window() == 1 == p1.largest_completed_window()


# -- concurrency ----------------------------------------------------------------------------------
def test_one_manager_shared_by_threads(local_store: Any) -> None:
    m = local_store.manager(segment_bytes=2048)
    counter = iter(range(1, 2001))
    lock = threading.Lock()
    saved: list[int] = []

    def worker() -> None:
        for _ in range(250):
            with lock:  # window ids are handed out in order; saves race on the manager
                w = next(counter)
                m.save(artifact(0, w), w)
                saved.append(w)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert saved == list(range(1, 2001))
    assert all(m.retrieve(w) == artifact(0, w) for w in range(1, 2001))
    m.teardown()


def test_second_writer_on_the_same_partition_is_detected(local_store: Any) -> None:
    a = local_store.manager(segment_bytes=1 << 20)
    b = local_store.manager(segment_bytes=1 << 20)
    a.save({"w": 1}, 1)
    b.save({"w": 2}, 2)  # b scanned after a's save: it is ahead now
    with pytest.raises(ConcurrentWriterError) as err:
        a.save({"w": 3}, 3)
    assert "another writer" in str(err.value) and err.value.path.endswith("/op/0/wal-00000000.tmp")
    assert a.retrieve(3) is None  # detected before writing: nothing interleaved
    b.teardown()
    assert a.partition_largest_window() == 2  # a re-scanned the log: it sees b's window
    a.teardown()


def test_reader_of_a_live_partition_sees_new_windows_and_changes_nothing(store: Any) -> None:
    """The driver (or another task) may read partition 0 while its writer appends."""
    writer = store.manager(segment_bytes=500)
    save_windows(writer, range(1, 4))
    reader = store.manager(segment_bytes=500)  # same partition, never saves
    assert reader.largest_completed_window() == 3 == reader.partition_largest_window()
    save_windows(writer, range(4, 10))  # rotations happen meanwhile
    assert reader.partition_largest_window() == 9
    assert [reader.retrieve(w) for w in range(1, 10)] == [artifact(0, w) for w in range(1, 10)]
    finalized = sorted(f for f in store.files() if f.endswith(".log"))
    assert finalized == ["wal-00000000-1-7.log"] and "wal-00000001.tmp" in store.files()
    # a non-writing instance purges conservatively: it keeps the newest finalized segment
    reader.committed(7)
    assert [reader.retrieve(w) for w in range(1, 10)] == [artifact(0, w) for w in range(1, 10)]
    writer.committed(7)  # the writer knows the active segment holds windows 8-9
    assert writer.retrieve(1) is None and writer.retrieve(7) is None
    with store.manager(segment_bytes=500) as fresh:
        assert fresh.retrieve(1) is None and fresh.retrieve(8) == artifact(0, 8)
    assert [writer.retrieve(w) for w in range(8, 10)] == [artifact(0, w) for w in range(8, 10)]
    writer.save(artifact(0, 10), 10)
    assert reader.retrieve(10) == artifact(0, 10)
    writer.teardown()
    reader.teardown()


def _process_partition(args: tuple[FSWindowDataManager, int]) -> int:
    manager, windows = args
    for w in range(1, windows + 1):
        manager.save(artifact(manager.partition_id, w), w)
    largest = manager.partition_largest_window()
    manager.teardown()
    return largest


def test_partitions_in_separate_processes(local_store: Any) -> None:
    """Managers are pickled to worker processes (as to Spark executors) and save there."""
    managers = [local_store.manager(partition=p, segment_bytes=4096) for p in range(4)]
    import multiprocessing

    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert list(pool.map(_process_partition, [(m, 300) for m in managers])) == [300] * 4
    reader = local_store.manager(partition=0, segment_bytes=4096)
    assert reader.largest_completed_window() == 300
    for w in (1, 150, 300):
        assert reader.retrieve_all_partitions(w) == {p: artifact(p, w) for p in range(4)}


# -- volume ---------------------------------------------------------------------------------------
def _round_trip(store: Any, windows: int, partitions: int, segment_bytes: int) -> None:
    blob = os.urandom(256)

    def write(p: int) -> None:
        with store.manager(partition=p, segment_bytes=segment_bytes) as m:
            for w in range(windows):
                m.save((p, w, blob), w)

    with ThreadPoolExecutor(partitions) as pool:
        list(pool.map(write, range(partitions)))
    with store.manager(partition=0, segment_bytes=segment_bytes) as m:
        assert m.largest_completed_window() == windows - 1
        for w in range(windows):
            got = m.retrieve_all_partitions(w)
            assert got == {p: (p, w, blob) for p in range(partitions)}, f"window {w}"
        assert m.retrieve_all_partitions(windows) == {}


def test_10000_windows_x_4_partitions_round_trip_local(local_store: Any) -> None:
    _round_trip(local_store, 10_000, 4, 256 << 10)


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_10000_windows_x_4_partitions_round_trip_hdfs(hdfs_store: Any) -> None:
    _round_trip(hdfs_store, 10_000, 4, 1 << 20)


@pytest.mark.integration
def test_round_trip_hdfs(hdfs_store: Any) -> None:
    _round_trip(hdfs_store, 200, 4, 8 << 10)


@pytest.mark.integration
def test_namenode_down_is_a_clear_error_and_nothing_is_lost(
    hdfs_service: Any, hdfs_store: Any
) -> None:
    """NameNode down: bounded retries, an error naming backend and path; no silent loss."""
    m = hdfs_store.manager(segment_bytes=1 << 20)
    save_windows(m, range(1, 4))
    hdfs_service.stop_namenode()
    try:
        with pytest.raises(StorageUnavailableError) as err:
            m.save(artifact(0, 4), 4)
        e = err.value
        assert e.backend == "hdfs" and e.attempts == 4  # retries=3 in the store's options
        assert e.path.startswith(hdfs_store.root) and "/op/0" in e.path
        assert "did not answer" in str(e) or "kept failing" in str(e)
        with pytest.raises(StorageUnavailableError):
            m.retrieve(2)
        with pytest.raises(StorageUnavailableError):
            hdfs_store.manager(partition=1).setup()
    finally:
        hdfs_service.start_namenode()
    # the failed window was not saved; everything before it is there; saving goes on
    assert m.partition_largest_window() == 3
    assert m.retrieve(4) is None
    m.save(artifact(0, 4), 4)
    m.teardown()
    with hdfs_store.manager(segment_bytes=1 << 20) as again:
        assert [again.retrieve(w) for w in range(1, 5)] == [artifact(0, w) for w in range(1, 5)]
        assert again.issues == []


# -- no-op ----------------------------------------------------------------------------------------
def test_noop_manager() -> None:
    m = NoopWindowDataManager()
    with m:
        m.save({"x": 1}, 1)
        assert m.retrieve(1) is None
        assert m.retrieve_all_partitions(1) == {}
        assert m.largest_completed_window() == -1 == m.partition_largest_window()
        m.committed(1)
        parts = m.partition(3, [])
        assert len(parts) == 3 and all(isinstance(p, NoopWindowDataManager) for p in parts)
    assert isinstance(pickle.loads(pickle.dumps(m)), NoopWindowDataManager)
