"""A real HDFS (one NameNode, one DataNode, WebHDFS on) from the official Hadoop jars.

The jars come from Maven Central (jar set ``hadoop``: ``hadoop-hdfs``,
``hadoop-common``, ``hadoop-hdfs-client``, ``hadoop-auth`` at the version of
the Hadoop client inside pip's pyspark). The daemons are the real ones,
started the way the distribution's ``hdfs`` script starts them, without the
scripts:

1. ``java ... org.apache.hadoop.hdfs.server.namenode.NameNode -format`` (a
   bounded subprocess, ``format.log``);
2. ``java ... NameNode`` and ``java ... DataNode`` as two child processes
   (``namenode.log``, ``datanode.log``), configured by a ``core-site.xml`` and
   an ``hdfs-site.xml`` written into ``<home>/conf``, which comes first on the
   classpath.

Every port (NameNode RPC and HTTP, DataNode data transfer, HTTP and IPC) is
a free loopback port chosen at start (or given explicitly), so nothing binds
Hadoop's default ``0.0.0.0`` ports. The DataNode advertises ``127.0.0.1``, so
WebHDFS redirects for data reach it. Permissions are off, replication is 1,
heartbeats are fast, and the NameNode leaves safe mode as soon as the blocks
it knows are reported (at once on a fresh file system).

``start()`` returns once a WebHDFS write of a small file worked, which proves
that the NameNode is out of safe mode and that the DataNode registered and
answers on its advertised address.
"""

from __future__ import annotations

import getpass
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

from malhar.testing.services.base import Service
from malhar.testing.services.errors import ServiceError
from malhar.testing.services.maven import jar_dir
from malhar.testing.services.paths import new_service_dir
from malhar.testing.services.process import (
    ManagedProcess,
    free_port,
    port_in_use,
    require_java,
    run_step,
    wait_until,
)

_HOST = "127.0.0.1"
_NAMENODE = "org.apache.hadoop.hdfs.server.namenode.NameNode"
_DATANODE = "org.apache.hadoop.hdfs.server.datanode.DataNode"
#: small heaps and a quick-starting JIT: test data is tiny, machines are small.
_JVM_OPTS = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.net.preferIPv4Stack=true",
]
#: what each entry of ``HdfsService.ports`` is for (named in port errors).
_PORT_ROLES = {
    "namenode_rpc": "NameNode RPC (dfs.namenode.rpc-address)",
    "namenode_http": "NameNode HTTP/WebHDFS (dfs.namenode.http-address)",
    "datanode": "DataNode data transfer (dfs.datanode.address)",
    "datanode_http": "DataNode HTTP (dfs.datanode.http.address)",
    "datanode_ipc": "DataNode IPC (dfs.datanode.ipc.address)",
}

#: WebHDFS's default dfs.webhdfs.user.provider.user.pattern
_USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]*[$]?$")

_LOG4J = """\
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.out
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.metrics2=WARN
log4j.logger.org.eclipse.jetty=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.fsdataset.impl.FsDatasetImpl=WARN
"""


def _site_xml(props: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in props.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


#: starts tried when a daemon lost a race for one of the ports chosen for it
_PORT_RACE_ATTEMPTS = 3


class HdfsService(Service):
    """A real single-node HDFS for tests, samples and benchmarks.

    Environment variable ``MALHAR_HDFS_URL`` points at an existing HDFS
    instead. Its value is the NameNode RPC URL with the WebHDFS URL and the
    user in the query string::

        hdfs://127.0.0.1:8020?webhdfs=http://127.0.0.1:9870&user=alice

    ``webhdfs`` defaults to ``http://<same host>:9870`` and ``user`` to the
    current OS user, so a plain ``hdfs://namenode:8020`` works too.
    :meth:`env_value` produces this format.

    ``connection()`` gives ``url`` (``hdfs://...``, for Spark and the Hadoop
    client), ``webhdfs_url`` (``http://...``, for the ``hdfs`` package) and
    ``user``. Explicit ports may be given; any left out is a free loopback port.
    """

    name = "hdfs"
    env_var = "MALHAR_HDFS_URL"

    def __init__(
        self,
        *,
        namenode_rpc_port: int | None = None,
        namenode_http_port: int | None = None,
        datanode_port: int | None = None,
        datanode_http_port: int | None = None,
        datanode_ipc_port: int | None = None,
        user: str | None = None,
    ) -> None:
        super().__init__()
        self.host = _HOST
        self.ports: dict[str, int | None] = {
            "namenode_rpc": namenode_rpc_port,
            "namenode_http": namenode_http_port,
            "datanode": datanode_port,
            "datanode_http": datanode_http_port,
            "datanode_ipc": datanode_ipc_port,
        }
        self.user = user or getpass.getuser()
        if not _USER_NAME.match(self.user):
            raise ServiceError(
                self.name,
                f"user name {self.user!r} is not accepted by WebHDFS "
                f"(dfs.webhdfs.user.provider.user.pattern {_USER_NAME.pattern})",
                hint="pass user= with letters, digits, '.', '_' or '-' only",
            )
        self._webhdfs_url: str | None = None  # set by from_env
        self._namenode: ManagedProcess | None = None
        self._datanode: ManagedProcess | None = None
        self._java = ""
        self._classpath = ""

    # -- start ---------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> Self:
        """Format and start NameNode + DataNode; return once a WebHDFS write worked.

        ``timeout`` bounds the start after the jars are in the cache (the first
        fetch from Maven Central has its own, longer limit).
        """
        self._check_explicit_ports()
        self._java = require_java(self.name)
        jars = jar_dir("hadoop")
        chosen = [role for role, port in self.ports.items() if port is None]
        deadline = time.monotonic() + timeout
        for attempt in range(1, _PORT_RACE_ATTEMPTS + 1):
            try:
                self._start_once(jars, deadline)
                return self
            except ServiceError:
                if attempt == _PORT_RACE_ATTEMPTS or not chosen or not self._lost_port_race():
                    raise
            # Another process took one of the free ports between our choice and the
            # daemon's bind (on a busy machine an outgoing connection's local port can be
            # one of them, even on the second choice): choose again.
            if self.home is not None:
                shutil.rmtree(self.home, ignore_errors=True)
            for role in chosen:
                self.ports[role] = None
        return self

    def _start_once(self, jars: Path, deadline: float) -> None:
        self.home = new_service_dir(self.name)
        self._choose_ports()
        conf = self._write_conf()
        # a wildcard entry (expanded by java) keeps commands and error messages readable
        self._classpath = f"{conf}:{jars / '*'}"
        self._format(max(1.0, deadline - time.monotonic()))
        try:
            self._launch_namenode()
            # The DataNode starts while the NameNode is still coming up (it retries the
            # connection): on a small machine both JVMs warm up in parallel.
            self._datanode = self._process("datanode", _DATANODE, [])
            self._datanode.start()
            self.processes.append(self._datanode)
            self._await(
                self._namenode_answers,
                deadline,
                f"NameNode WebHDFS at {self.webhdfs_url} answering",
            )
            self._await(
                self._probe_write,
                deadline,
                "a WebHDFS write through the DataNode "
                f"(127.0.0.1:{self.ports['datanode_http']}) succeeding",
            )
        except BaseException:
            self._stop_processes()
            raise

    def _lost_port_race(self) -> bool:
        """True if a daemon of the last attempt failed because a port was taken."""
        if self.home is None:
            return False
        for log in self.home.glob("*.log"):
            text = log.read_text(errors="replace")
            if "java.net.BindException" in text or "Address already in use" in text:
                return True
        return False

    def _check_explicit_ports(self) -> None:
        for role, port in self.ports.items():
            if port is not None and port_in_use(port, _HOST):
                raise ServiceError(
                    self.name,
                    f"port {port} on {_HOST} ({_PORT_ROLES[role]}) is already in use",
                    hint="choose another port or leave it unset to pick a free one",
                )
        given = [p for p in self.ports.values() if p is not None]
        if len(given) != len(set(given)):
            raise ServiceError(self.name, f"the same port is given twice: {self.ports}")

    def _choose_ports(self) -> None:
        taken = {p for p in self.ports.values() if p is not None}
        for role, port in self.ports.items():
            if port is None:
                port = free_port(_HOST)
                while port in taken:
                    port = free_port(_HOST)
                self.ports[role] = port
                taken.add(port)

    def _write_conf(self) -> Path:
        assert self.home is not None
        conf = self.home / "conf"
        conf.mkdir()
        p = self.ports
        core = {
            "fs.defaultFS": self.url,
            "hadoop.tmp.dir": str(self.home / "tmp"),
            "hadoop.security.authentication": "simple",
            "hadoop.http.staticuser.user": self.user,
            # the DataNode reconnects quickly to a (re)starting NameNode
            "ipc.client.connect.retry.interval": "200",
            "ipc.client.connect.max.retries": "50",
        }
        hdfs = {
            "dfs.namenode.name.dir": (self.home / "name").as_uri(),
            "dfs.datanode.data.dir": (self.home / "data").as_uri(),
            "dfs.namenode.rpc-address": f"{_HOST}:{p['namenode_rpc']}",
            "dfs.namenode.http-address": f"{_HOST}:{p['namenode_http']}",
            "dfs.datanode.address": f"{_HOST}:{p['datanode']}",
            "dfs.datanode.http.address": f"{_HOST}:{p['datanode_http']}",
            "dfs.datanode.ipc.address": f"{_HOST}:{p['datanode_ipc']}",
            # not started or not enabled (HTTP_ONLY), but never on a 0.0.0.0 default port
            "dfs.namenode.https-address": f"{_HOST}:0",
            "dfs.datanode.https.address": f"{_HOST}:0",
            "dfs.namenode.secondary.http-address": f"{_HOST}:0",
            "dfs.namenode.secondary.https-address": f"{_HOST}:0",
            "dfs.namenode.backup.address": f"{_HOST}:0",
            "dfs.namenode.backup.http-address": f"{_HOST}:0",
            "dfs.http.policy": "HTTP_ONLY",
            # the DataNode advertises the loopback address (WebHDFS redirects go there)
            "dfs.datanode.hostname": _HOST,
            "dfs.client.use.datanode.hostname": "true",
            "dfs.datanode.use.datanode.hostname": "true",
            "dfs.namenode.datanode.registration.ip-hostname-check": "false",
            "dfs.webhdfs.enabled": "true",
            "dfs.permissions.enabled": "false",
            "dfs.replication": "1",
            "dfs.client.block.write.replace-datanode-on-failure.policy": "NEVER",
            # The NameNode-side client waits 400 ms before its first "is the block
            # complete" poll when a file is closed: every WebHDFS create/append paid it.
            "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "5",
            # leave safe mode as soon as the known blocks are reported, no extension
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.safemode.min.datanodes": "0",
            # a nearly full CI disk must not push the NameNode into safe mode
            "dfs.namenode.resource.du.reserved": "0",
            "dfs.heartbeat.interval": "1",
            "dfs.namenode.heartbeat.recheck-interval": "5000",
            "dfs.namenode.stale.datanode.interval": "10000",
            "dfs.blockreport.initialDelay": "0",
            "dfs.namenode.handler.count": "5",
            "dfs.namenode.service.handler.count": "3",
            "dfs.datanode.handler.count": "3",
        }
        (conf / "core-site.xml").write_text(_site_xml(core))
        (conf / "hdfs-site.xml").write_text(_site_xml(hdfs))
        (conf / "log4j.properties").write_text(_LOG4J)
        return conf

    def _command(self, main: str, args: list[str], role: str) -> list[str]:
        assert self.home is not None
        return [
            self._java,
            *_JVM_OPTS,
            f"-Dproc_{role}",
            f"-Dhadoop.home.dir={self.home}",
            f"-Dhadoop.log.dir={self.home}",
            f"-Dhadoop.id.str={self.user}",
            "-cp",
            self._classpath,
            main,
            *args,
        ]

    def _process(self, role: str, main: str, args: list[str]) -> ManagedProcess:
        assert self.home is not None
        return ManagedProcess(
            self.name,
            self._command(main, args, role),
            self.home / f"{role}.log",
            env={"HADOOP_USER_NAME": self.user},
            cwd=self.home,
        )

    def _format(self, timeout: float) -> None:
        assert self.home is not None
        cluster_id = "malhar-" + secrets.token_hex(4)
        command = self._command(
            _NAMENODE, ["-format", "-nonInteractive", "-clusterid", cluster_id], "namenode"
        )
        log_path = self.home / "format.log"
        run_step(
            self.name,
            "formatting the NameNode",
            command,
            log_path,
            timeout=timeout,
            env={"HADOOP_USER_NAME": self.user},
            cwd=self.home,
        )
        if not (self.home / "name" / "current" / "VERSION").exists():
            raise ServiceError(
                self.name,
                "formatting the NameNode wrote no name/current/VERSION",
                command=command,
                log_path=log_path,
            )

    def _launch_namenode(self) -> None:
        self._namenode = self._process("namenode", _NAMENODE, [])
        self._namenode.start()
        # NameNode first: stop() stops in reverse order, DataNode before NameNode.
        self.processes.insert(0, self._namenode)

    def _await(self, predicate: Any, deadline: float, what: str) -> None:
        """Wait for ``predicate``; a daemon that exits meanwhile ends the wait with its log."""

        def dead() -> str | None:
            for proc in self.processes:
                reason = proc.exit_reason()
                if reason:
                    return f"the {Path(proc.log_path).stem} {reason}"
            return None

        try:
            wait_until(
                predicate,
                timeout=max(1.0, deadline - time.monotonic()),
                what=what,
                interval=0.2,
                alive=dead,
            )
        except (TimeoutError, RuntimeError) as exc:
            failed = next((p for p in self.processes if p.exit_reason()), None)
            culprit = failed or self.processes[-1]
            others = [str(p.log_path) for p in self.processes if p is not culprit]
            raise ServiceError(
                self.name,
                str(exc),
                command=culprit.command,
                log_path=culprit.log_path,
                hint=f"see also {', '.join(others)}" if others else None,
            ) from exc

    def _namenode_answers(self) -> bool:
        self.client(timeout=5).status("/")
        return True

    def _probe_write(self) -> bool:
        client = self.client(timeout=10)
        path = f"/.malhar-probe-{secrets.token_hex(4)}"
        client.write(path, data=b"ok", overwrite=True)
        try:
            with client.read(path) as reader:
                ok = reader.read() == b"ok"
        finally:
            client.delete(path)
        return ok

    # -- NameNode outage -----------------------------------------------------------------
    def stop_namenode(self) -> None:
        """Stop the NameNode, keeping its metadata (to simulate a NameNode outage)."""
        self._require_local("stop_namenode")
        if self._namenode is not None:
            self._namenode.stop()

    def start_namenode(self, timeout: float = 60.0) -> None:
        """Start the same NameNode again (no format); return once a write works again.

        The DataNode re-registers by itself and reports its blocks; the NameNode
        leaves safe mode when they are all reported, so existing data is readable
        when this returns.
        """
        self._require_local("start_namenode")
        if self._namenode is not None and self._namenode.exit_reason() is None:
            return
        if self._namenode in self.processes:
            self.processes.remove(self._namenode)
        deadline = time.monotonic() + timeout
        self._launch_namenode()
        self._await(self._probe_write, deadline, "a WebHDFS write after a NameNode restart")

    def _require_local(self, what: str) -> None:
        if self.external or self.home is None:
            raise ServiceError(self.name, f"{what}() needs an HDFS started by this process")

    def _stop_processes(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()

    # -- connection ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``hdfs://host:port`` of the NameNode RPC (``fs.defaultFS``)."""
        return f"hdfs://{self.host}:{self.ports['namenode_rpc']}"

    @property
    def webhdfs_url(self) -> str:
        """``http://host:port`` of the NameNode's WebHDFS."""
        return self._webhdfs_url or f"http://{self.host}:{self.ports['namenode_http']}"

    def client(self, timeout: float = 30.0):  # -> hdfs.InsecureClient
        """An ``hdfs.InsecureClient`` (WebHDFS) acting as :attr:`user`."""
        import requests
        from hdfs import InsecureClient

        session = requests.Session()
        if urlsplit(self.webhdfs_url).hostname in ("127.0.0.1", "localhost"):
            session.trust_env = False  # never send loopback requests through a proxy
        return InsecureClient(self.webhdfs_url, user=self.user, timeout=timeout, session=session)

    def hadoop_conf(self) -> dict[str, str]:
        """Client settings that suit this single-DataNode cluster.

        For Spark, prefix the keys with ``spark.hadoop.`` (or set them on
        ``sparkContext._jsc.hadoopConfiguration()``). Without them Spark still
        works, but writes files with replication 3 (under-replicated blocks).
        """
        return {
            "fs.defaultFS": self.url,
            "dfs.replication": "1",
            "dfs.client.use.datanode.hostname": "true",
        }

    def connection(self) -> dict[str, Any]:
        return {"url": self.url, "webhdfs_url": self.webhdfs_url, "user": self.user}

    def env_value(self) -> str:
        return f"{self.url}?webhdfs={self.webhdfs_url}&user={self.user}"

    def ping(self) -> bool:
        try:
            self.client(timeout=5).list("/")
            return True
        except Exception:
            return False

    @classmethod
    def from_env(cls, value: str) -> Self:
        parts = urlsplit(value)
        if parts.scheme != "hdfs" or not parts.hostname:
            raise ServiceError(
                "hdfs",
                f"{cls.env_var} is not an hdfs://host:port[?webhdfs=http://host:port&user=name] URL",
            )
        query = parse_qs(parts.query)
        service = cls(namenode_rpc_port=parts.port or 8020, user=query.get("user", [None])[0])
        service.host = parts.hostname
        service._webhdfs_url = query.get("webhdfs", [f"http://{parts.hostname}:9870"])[0]
        service._webhdfs_url = service._webhdfs_url.rstrip("/")
        return service

    @classmethod
    def from_docker(cls, timeout: float = 120.0) -> Self:  # pragma: no cover - needs Docker
        # No maintained HDFS testcontainers module: the local daemons need only Java,
        # so MALHAR_SERVICES=docker starts them as usual.
        return cls().start(timeout=timeout)
