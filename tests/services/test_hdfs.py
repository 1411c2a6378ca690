"""A real HDFS (NameNode + DataNode from the official jars): WebHDFS, Spark, outages."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest
import requests
from hdfs.util import HdfsError

import malhar.testing.services.hdfs as hdfs_module
from malhar.testing.services import ServiceError, acquire, service_class
from malhar.testing.services.hdfs import HdfsService
from malhar.testing.services.process import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def folder(hdfs_service: HdfsService) -> Iterator[str]:
    """A fresh HDFS folder for one test, removed afterwards."""
    path = f"/malhar-tests/{uuid.uuid4().hex[:12]}"
    client = hdfs_service.client()
    client.makedirs(path)
    yield path
    client.delete(path, recursive=True)


@pytest.fixture
def own_hdfs() -> Iterator[HdfsService]:
    """An HDFS of its own, for tests that take the NameNode down (explicit NameNode ports)."""
    rpc = free_port()
    http = free_port()
    while http == rpc:
        http = free_port()
    service = HdfsService(namenode_rpc_port=rpc, namenode_http_port=http).start(timeout=180)
    assert service.connection()["url"] == f"hdfs://127.0.0.1:{rpc}"
    assert service.connection()["webhdfs_url"] == f"http://127.0.0.1:{http}"
    try:
        yield service
    finally:
        service.stop()


def test_registry_knows_hdfs() -> None:
    assert service_class("hdfs") is HdfsService


def test_connection_and_env_value(hdfs_service: HdfsService) -> None:
    conn = hdfs_service.connection()
    assert conn["url"].startswith("hdfs://127.0.0.1:")
    assert conn["webhdfs_url"].startswith("http://127.0.0.1:")
    assert conn["user"]
    assert hdfs_service.ping()

    attached = HdfsService.from_env(hdfs_service.env_value())
    assert attached.connection() == conn
    assert attached.ping()
    # the env value is what acquire() reads from MALHAR_HDFS_URL
    assert hdfs_service.env_value().startswith(conn["url"] + "?")
    assert hdfs_service.hadoop_conf()["fs.defaultFS"] == conn["url"]
    assert hdfs_service.state()["pids"] == [p.pid for p in hdfs_service.processes]


def test_acquire_attaches_to_the_server_named_by_the_env_var(
    hdfs_service: HdfsService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MALHAR_HDFS_URL", hdfs_service.env_value())
    attached = acquire("hdfs")
    assert attached.external
    assert attached.connection() == hdfs_service.connection()
    attached.stop()  # leaves an external server alone
    assert hdfs_service.ping()

    nowhere = f"hdfs://127.0.0.1:{free_port()}?webhdfs=http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MALHAR_HDFS_URL", nowhere)
    with pytest.raises(ServiceError, match="does not answer"):
        acquire("hdfs")


def test_from_env_defaults_and_errors() -> None:
    service = HdfsService.from_env("hdfs://namenode.example:8020")
    assert service.connection()["url"] == "hdfs://namenode.example:8020"
    assert service.connection()["webhdfs_url"] == "http://namenode.example:9870"
    assert HdfsService.from_env("hdfs://nn").url == "hdfs://nn:8020"
    with pytest.raises(ServiceError, match="MALHAR_HDFS_URL"):
        HdfsService.from_env("http://127.0.0.1:9870")
    assert HdfsService.from_env("hdfs://nn:8020?user=alice").user == "alice"
    with pytest.raises(ServiceError, match="not accepted by WebHDFS"):
        HdfsService(user="a&b")


def test_webhdfs_create_append_rename_read_delete(hdfs_service: HdfsService, folder: str) -> None:
    client = hdfs_service.client()
    first = f"{folder}/a.bin"
    second = f"{folder}/b.bin"
    head = bytes(range(256)) * 64  # 16 KiB, every byte value
    tail = b"\x00tail\xff" * 1000

    client.write(first, data=head)
    assert client.status(first)["length"] == len(head)

    client.write(first, data=tail, append=True)
    assert client.status(first)["length"] == len(head) + len(tail)

    client.rename(first, second)
    assert client.status(first, strict=False) is None
    assert sorted(client.list(folder)) == ["b.bin"]

    with client.read(second) as reader:
        assert reader.read() == head + tail
    with client.read(second, offset=len(head), length=6) as reader:
        assert reader.read() == b"\x00tail\xff"

    assert client.delete(second)
    assert client.list(folder) == []
    with pytest.raises(HdfsError, match="not found"), client.read(second) as reader:
        reader.read()


def test_spark_writes_parquet_to_hdfs(spark, hdfs_service: HdfsService, folder: str) -> None:
    url = f"{hdfs_service.url}{folder}/numbers.parquet"
    rows = [(i, f"value-{i}") for i in range(100)]
    df = spark.createDataFrame(rows, "id long, name string").repartition(2)
    df.write.mode("overwrite").parquet(url)

    back = spark.read.parquet(url)
    assert sorted((r.id, r.name) for r in back.collect()) == rows

    # the same files through WebHDFS
    names = hdfs_service.client().list(f"{folder}/numbers.parquet")
    assert "_SUCCESS" in names
    parts = [n for n in names if n.startswith("part-") and n.endswith(".parquet")]
    assert parts, names
    status = hdfs_service.client().status(f"{folder}/numbers.parquet/{parts[0]}")
    assert status["type"] == "FILE" and status["length"] > 0


def test_namenode_outage_and_restart(own_hdfs: HdfsService) -> None:
    client = own_hdfs.client(timeout=10)
    payload = b"survives a NameNode restart\n" * 100
    client.write("/outage/kept.txt", data=payload)
    webhdfs_port = own_hdfs.ports["namenode_http"]

    own_hdfs.stop_namenode()
    assert not own_hdfs.ping()
    with pytest.raises(requests.exceptions.ConnectionError, match=str(webhdfs_port)):
        client.list("/outage")
    datanode = own_hdfs.processes[-1]
    assert datanode.exit_reason() is None  # only the NameNode is down

    own_hdfs.start_namenode(timeout=120)
    assert own_hdfs.ping()
    assert client.list("/outage") == ["kept.txt"]
    with client.read("/outage/kept.txt") as reader:
        assert reader.read() == payload
    client.write("/outage/after.txt", data=b"new")
    with client.read("/outage/after.txt") as reader:
        assert reader.read() == b"new"

    # a clean stop removes processes and data
    home = own_hdfs.home
    pids = [p.pid for p in own_hdfs.processes]
    own_hdfs.stop()
    assert home is not None and not home.exists()
    assert own_hdfs.processes == []
    assert len(pids) == 2


@pytest.mark.parametrize(
    "role",
    [
        "namenode_rpc_port",
        "namenode_http_port",
        "datanode_port",
        "datanode_http_port",
        "datanode_ipc_port",
    ],
)
def test_explicit_port_in_use_is_refused(role: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        service = HdfsService(**{role: port})
        with pytest.raises(ServiceError, match=rf"port {port} on 127\.0\.0\.1 .* in use"):
            service.start(timeout=30)
        assert service.home is None  # refused before anything was created or launched
        assert service.processes == []


def test_daemon_dying_while_starting_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hdfs_module, "_DATANODE", "org.example.NoSuchDataNode")
    service = HdfsService()
    started = time.monotonic()
    with pytest.raises(ServiceError) as failure:
        service.start(timeout=120)
    elapsed = time.monotonic() - started
    try:
        message = str(failure.value)
        assert "datanode process exited" in message
        assert "datanode.log" in message
        assert "NoSuchDataNode" in message  # the tail of the daemon's own log
        assert elapsed < 60
        assert service.processes == []  # the NameNode was stopped too
    finally:
        service.stop()


def test_a_port_taken_after_it_was_chosen_is_chosen_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        handed_out: list[int] = []

        def racy_free_port(host: str = "127.0.0.1") -> int:
            # the first "free" port is one that someone else binds meanwhile
            port = taken if not handed_out else free_port(host)
            handed_out.append(port)
            return port

        monkeypatch.setattr(hdfs_module, "free_port", racy_free_port)
        service = HdfsService()
        try:
            service.start(timeout=180)
            assert service.ports["namenode_rpc"] != taken
            assert service.ping()
        finally:
            service.stop()
        assert handed_out[0] == taken
