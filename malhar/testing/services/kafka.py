"""A real single-node Apache Kafka broker (KRaft, combined broker + controller).

Started from the official jars (``malhar/testing/maven/kafka/pom.xml``, fetched
by Maven once and cached) the way the distribution's scripts do it: format the
storage directory with ``kafka.tools.StorageTool``, then run ``kafka.Kafka``
with a ``server.properties`` written into the service folder. Readiness is a
real metadata request through librdkafka (confluent-kafka) that finds every
partition led, and after a restart a committed-offsets lookup answered by every
group coordinator.

Not run: the example starts a real broker (``tests/services/test_kafka.py`` covers it).

>>> with KafkaService().start() as kafka:             # doctest: +SKIP
...     kafka.create_topic("events", partitions=3)
...     producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap_servers})

``stop_broker()`` / ``start_broker()`` / ``restart()`` stop and start the same
broker again (same ports, same data, no re-format), for crash and recovery tests.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import signal
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Self

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

HOST = "127.0.0.1"
NODE_ID = 1

#: JVM options: a small heap and the serial collector keep the broker light on
#: a 2-core CI machine; it only ever holds test data.
JVM_OPTS = [
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]

#: How long the storage formatter may run before we give up on it.
FORMAT_TIMEOUT = 120.0

#: The internal topic whose partitions the group coordinators load on start.
OFFSETS_TOPIC = "__consumer_offsets"

_LOG4J2_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- written by malhar.testing.services.kafka; the broker logs to stdout,
     which the service manager sends to kafka.log next to this file -->
<Configuration status="WARN">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="INFO">
      <AppenderRef ref="stdout"/>
    </Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.authorizer.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
  </Loggers>
</Configuration>
"""

_client_log = logging.getLogger("malhar.testing.services.kafka.client")


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's ``Uuid.randomUuid()``, never one that starts with ``-`` (a
    command-line parser would take it for an option).
    """
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_of(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition (= group coordinator) Kafka maps ``group`` to."""
    h = _java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions  # Kafka's Utils.abs


def probe_groups(partitions: int) -> list[str]:
    """One group id per ``__consumer_offsets`` partition, to ask each coordinator once."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < partitions:
        group = f"malhar-readiness-{n}"
        found.setdefault(offsets_partition_of(group, partitions), group)
        n += 1
    return [found[p] for p in range(partitions)]


def _admin(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka.admin import AdminClient

    config = {
        "bootstrap.servers": bootstrap,
        # a broker that is restarting is found again quickly
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": 5000,
        # librdkafka's own log goes to Python logging, not the test's stderr
        "logger": _client_log,
        **extra,
    }
    return AdminClient(config)


class KafkaService(Service):
    """One Kafka broker on loopback, or an existing cluster named by ``MALHAR_KAFKA_BOOTSTRAP``."""

    name = "kafka"
    env_var = "MALHAR_KAFKA_BOOTSTRAP"

    def __init__(self, port: int | None = None, controller_port: int | None = None) -> None:
        super().__init__()
        self._explicit_port = port
        self._explicit_controller_port = controller_port
        self.port: int | None = port
        self.controller_port: int | None = controller_port
        #: a second client listener, SASL_PLAINTEXT with PLAIN (user ``sasl_user``), whose
        #: clients are subject to ACLs: for authorization tests (see ``sasl_client_config``)
        self.sasl_port: int | None = None
        self.sasl_password = secrets.token_hex(12)
        self._bootstrap: str | None = None
        self._java: str | None = None
        self._classpath: str | None = None
        self._log_path: Path | None = None
        self._admin_client: Any = None
        #: seconds from start() to the first successful metadata request
        self.startup_seconds: float | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> Self:
        """Format a fresh storage folder and start the broker; return once it answers metadata.

        ``timeout`` bounds the broker's own start; fetching the jars the first
        time has its own (longer) bound in :mod:`malhar.testing.services.maven`.
        """
        began = time.monotonic()
        if (
            self._explicit_port is not None
            and self._explicit_port == self._explicit_controller_port
        ):
            raise ServiceError(
                self.name, f"port and controller_port are both {self._explicit_port}"
            )
        for label, explicit in (
            ("port", self._explicit_port),
            ("controller_port", self._explicit_controller_port),
        ):
            if explicit is not None and port_in_use(explicit, HOST):
                raise ServiceError(
                    self.name,
                    f"{label} {explicit} on {HOST} is already in use",
                    hint=f"pass another {label}, or leave it out to pick a free one",
                )
        self._java = require_java(self.name)
        # the JVM expands "<dir>/*" itself: keeps commands (and error messages) short
        self._classpath = str(jar_dir("kafka") / "*")
        self.port = self._explicit_port or free_port(HOST)
        self.controller_port = self._explicit_controller_port or free_port(HOST)
        while self.controller_port == self.port:
            self.controller_port = free_port(HOST)
        self.sasl_port = free_port(HOST)
        while self.sasl_port in (self.port, self.controller_port):
            self.sasl_port = free_port(HOST)
        self._bootstrap = f"{HOST}:{self.port}"

        self.home = new_service_dir(self.name)
        self._log_path = self.home / "kafka.log"
        self._write_config()
        # on failure the folder stays: the error names the log inside it
        self._format_storage()
        self._launch(timeout)
        self.startup_seconds = time.monotonic() - began
        return self

    @classmethod
    def from_env(cls, value: str) -> Self:
        service = cls()
        service._bootstrap = value.strip()
        service.external = True
        return service

    @classmethod
    def from_docker(cls, timeout: float = 120.0) -> Self:  # pragma: no cover - needs Docker
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        service = cls()
        service.container = container
        service._bootstrap = container.get_bootstrap_server()
        return service

    def stop(self) -> None:
        self._admin_client = None
        super().stop()

    def stop_broker(self, *, graceful: bool = True, timeout: float = 30.0) -> None:
        """Stop the local broker but keep its ports and data for :meth:`start_broker`.

        ``graceful=False`` kills it (SIGKILL), as a crash would.
        """
        self._require_local("stop_broker")
        self._admin_client = None
        for proc in self.processes:
            if graceful:
                proc.stop(timeout=timeout)
            elif proc.popen is not None and proc.popen.poll() is None:
                try:
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.popen.wait(timeout=timeout)
        self.processes.clear()

    def start_broker(self, timeout: float = 120.0) -> None:
        """Start the broker stopped by :meth:`stop_broker` again (same ports, same data)."""
        self._require_local("start_broker")
        if self.processes:
            raise ServiceError(self.name, "start_broker: the broker is already running")
        began = time.monotonic()
        for port in (self.port, self.controller_port, self.sasl_port):
            if port is not None and port_in_use(port, HOST):
                raise ServiceError(
                    self.name,
                    f"cannot restart: port {port} on {HOST} was taken while the broker was down",
                    log_path=self._log_path,
                )
        self._launch(timeout)
        self.startup_seconds = time.monotonic() - began

    def restart(self, *, graceful: bool = True, timeout: float = 120.0) -> Self:
        """Stop and start the same broker; return once it answers metadata again."""
        self.stop_broker(graceful=graceful)
        self.start_broker(timeout=timeout)
        return self

    # -- connection ----------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        if not self._bootstrap:
            raise ServiceError(self.name, "not started: no bootstrap servers yet")
        return self._bootstrap

    def connection(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers}

    #: the user of the SASL listener (the PLAINTEXT listener's clients are ANONYMOUS, a
    #: super user: ACLs never stop them)
    sasl_user = "malhar"

    def sasl_client_config(self) -> dict[str, str]:
        """librdkafka settings of a client that logs in as :attr:`sasl_user` on the SASL
        listener, where ACLs apply (``allow.everyone.if.no.acl.found``: a resource with no
        ACL is open to it)."""
        if self.sasl_port is None:
            raise ServiceError(
                self.name, "the SASL listener exists on a locally started broker only"
            )
        return {
            "bootstrap.servers": f"{HOST}:{self.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": self.sasl_user,
            "sasl.password": self.sasl_password,
        }

    def env_value(self) -> str:
        return self.bootstrap_servers

    def ping(self, timeout: float = 5.0) -> bool:
        if not self._any_server_listens(min(timeout, 2.0)):
            return False  # nothing to ask: no need to wait out librdkafka's timeout
        try:
            metadata = self.admin().list_topics(timeout=timeout)
        except Exception:
            return False
        return bool(metadata.brokers)

    @property
    def log_paths(self) -> list[Path]:
        return [self._log_path] if self._log_path is not None else []

    # -- helpers -------------------------------------------------------------------------
    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` for this broker (one per service, reused)."""
        if self._admin_client is None:
            self._admin_client = _admin(self.bootstrap_servers)
        self._admin_client.poll(0)  # hands queued librdkafka log lines to Python logging
        return self._admin_client

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        timeout: float = 30.0,
        *,
        exist_ok: bool = False,
    ) -> None:
        """Create topic ``name``; return once every partition has a leader.

        With ``exist_ok``, an existing topic with the same partition count is fine.
        """
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
        )
        future = self.admin().create_topics([topic], operation_timeout=timeout)[name]
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            exists = getattr(error, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS
            if not (exist_ok and exists):
                raise ServiceError(self.name, f"could not create topic {name!r}: {exc}") from exc
            found = len(self.admin().list_topics(topic=name, timeout=10).topics[name].partitions)
            if found != partitions:
                raise ServiceError(
                    self.name, f"topic {name!r} exists with {found} partitions, not {partitions}"
                ) from exc
        except TimeoutError as exc:
            raise ServiceError(
                self.name,
                f"creating topic {name!r} took longer than {timeout:.0f}s",
                log_path=self._log_path,
            ) from exc
        self._await(
            lambda: self._topic_ready(name, partitions),
            timeout,
            f"topic {name!r} with {partitions} partition(s) and leaders",
        )

    def add_partitions(self, name: str, total: int, timeout: float = 30.0) -> None:
        """Grow topic ``name`` to ``total`` partitions; return once every one has a leader."""
        from confluent_kafka.admin import NewPartitions

        future = self.admin().create_partitions([NewPartitions(name, total)])[name]
        try:
            future.result(timeout=timeout)
        except Exception as exc:
            raise ServiceError(
                self.name, f"could not grow topic {name!r} to {total} partitions: {exc}"
            ) from exc
        self._await(
            lambda: self._topic_ready(name, total),
            timeout,
            f"topic {name!r} with {total} partition(s) and leaders",
        )

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        """Delete topic ``name``; return once the broker's metadata no longer lists it."""
        from confluent_kafka import KafkaException

        future = self.admin().delete_topics([name], operation_timeout=timeout)[name]
        try:
            future.result(timeout=timeout)
        except (KafkaException, TimeoutError) as exc:
            raise ServiceError(
                self.name, f"could not delete topic {name!r}: {exc!r}", log_path=self._log_path
            ) from exc
        self._await(
            lambda: name not in self.admin().list_topics(timeout=5).topics,
            timeout,
            f"topic {name!r} deleted",
        )

    def _await(self, predicate: Any, timeout: float, what: str) -> None:
        try:
            wait_until(predicate, timeout=timeout, what=what)
        except TimeoutError as exc:
            raise ServiceError(self.name, str(exc), log_path=self._log_path) from exc

    def topics(self) -> set[str]:
        """Names of the topics on the broker (internal ones excluded)."""
        return {t for t in self.admin().list_topics(timeout=10).topics if not t.startswith("__")}

    def _topic_ready(self, name: str, partitions: int) -> bool:
        metadata = self.admin().list_topics(topic=name, timeout=5)
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != partitions:
            return False
        return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())

    # -- internals ------------------------------------------------------------------------
    def _any_server_listens(self, timeout: float) -> bool:
        for server in self.bootstrap_servers.split(","):
            host, _, port = server.strip().rpartition(":")
            host = host.split("://")[-1].strip("[]")
            try:
                with socket.create_connection((host, int(port)), timeout=timeout):
                    return True
            except (OSError, ValueError):
                continue
        return False

    def _require_local(self, what: str) -> None:
        if self.external or self.container is not None or self.home is None:
            raise ServiceError(self.name, f"{what}: only a locally started broker can be stopped")

    @property
    def _properties_path(self) -> Path:
        assert self.home is not None
        return self.home / "server.properties"

    @property
    def _log4j_path(self) -> Path:
        assert self.home is not None
        return self.home / "log4j2.xml"

    def _write_config(self) -> None:
        assert self.home is not None
        data = self.home / "data"
        data.mkdir()
        controller = f"{HOST}:{self.controller_port}"
        sasl = f"SASL_PLAINTEXT://{HOST}:{self.sasl_port}"
        props = {
            "process.roles": "broker,controller",
            "node.id": NODE_ID,
            "controller.quorum.bootstrap.servers": controller,
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{controller},{sasl}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{controller},"
            f"{sasl}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT",
            # ACLs for the SASL listener's user; the broker itself and the PLAINTEXT clients
            # (ANONYMOUS) are super users, and a resource without ACLs is open to everyone
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "true",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{self.sasl_user}="{self.sasl_password}";'
            ),
            "log.dirs": data,
            "num.partitions": 1,
            "default.replication.factor": 1,
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            # internal topics on a single node: one replica, few partitions
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "share.coordinator.state.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            # after a kill the restarted controller keeps the dead broker's
            # registration until its lease ends (default 9 s): shorter leases
            # make crash-restarts quick
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 4000,
            # light on a 2-core machine
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 2,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 2 * 1024 * 1024,
        }
        lines = [
            "# written by malhar.testing.services.kafka",
            *(f"{k}={v}" for k, v in props.items()),
        ]
        self._properties_path.write_text("\n".join(lines) + "\n")
        self._log4j_path.write_text(_LOG4J2_XML)

    def _java_command(self, main: str, *args: str) -> list[str]:
        assert self._java and self._classpath
        return [
            self._java,
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={self._log4j_path}",
            "-cp",
            self._classpath,
            main,
            *args,
        ]

    def _format_storage(self) -> None:
        assert self._log_path is not None
        command = self._java_command(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            random_cluster_id(),
            "-c",
            str(self._properties_path),
            "--standalone",
        )
        run_step(
            self.name,
            "formatting the storage",
            command,
            self._log_path,
            timeout=FORMAT_TIMEOUT,
            append=True,
        )

    def _launch(self, timeout: float) -> None:
        assert self._log_path is not None
        with self._log_path.open("ab") as log:
            log.write(b"=== malhar: starting broker ===\n")
        proc = ManagedProcess(
            self.name,
            self._java_command("kafka.Kafka", str(self._properties_path)),
            self._log_path,
            cwd=self.home,
        )
        self.processes.append(proc.start())
        try:
            # the metadata probe only once the port listens, so librdkafka does
            # not back off on refused connections while the JVM boots
            proc.wait_ready(
                lambda: port_in_use(self.port or 0, HOST) and self._metadata_ok(),
                timeout=timeout,
                what=f"kafka broker on {self.bootstrap_servers} answering a metadata request",
            )
        except BaseException:  # also Ctrl-C: no broker left running behind our back
            proc.stop()
            self.processes.clear()
            raise

    def _metadata_ok(self) -> bool:
        metadata = self.admin().list_topics(timeout=3)
        if NODE_ID not in metadata.brokers:
            return False
        # a restarted broker answers metadata before it leads its partitions
        # again; until then group calls fail with NOT_COORDINATOR and
        # producers with NOT_LEADER, so "ready" waits for every leader
        if not all(
            p.leader == NODE_ID and p.error is None
            for topic in metadata.topics.values()
            for p in topic.partitions.values()
        ):
            return False
        # ... and a coordinator leads its offsets partition before it has
        # loaded it: committed() then fails with NOT_COORDINATOR
        offsets = metadata.topics.get(OFFSETS_TOPIC)
        return offsets is None or self._coordinators_loaded(len(offsets.partitions))

    def _coordinators_loaded(self, partitions: int) -> bool:
        # a consumer's committed(), not AdminClient.list_consumer_group_offsets:
        # with that, a test run died of SIGSEGV in a restart (docs/services.md)
        from confluent_kafka import Consumer, TopicPartition

        for group in probe_groups(partitions):
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "group.id": group,
                    "enable.auto.commit": False,
                    "logger": _client_log,
                }
            )
            try:
                consumer.committed([TopicPartition(OFFSETS_TOPIC, 0)], timeout=3)
            except Exception:
                return False
            finally:
                consumer.close()
        return True
