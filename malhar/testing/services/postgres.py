"""A real PostgreSQL server from the machine's packages, in a temporary folder.

``initdb`` creates a fresh cluster with password (SCRAM) authentication on a
free loopback port; a fresh database is created for each instance. When the
calling process is root (CI containers), the server runs as the ``postgres``
system user, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote, urlsplit

from malhar.testing.services.base import Service
from malhar.testing.services.errors import ServiceError
from malhar.testing.services.paths import new_service_dir
from malhar.testing.services.process import (
    ManagedProcess,
    as_user,
    first_unreachable,
    free_port,
    port_in_use,
    run_step,
)

_USER = "malhar"


def _bindir() -> Path:
    """The folder of ``initdb``/``postgres``: $MALHAR_PG_BINDIR, pg_config, Debian's layout, PATH."""
    candidates: list[str] = []
    if os.environ.get("MALHAR_PG_BINDIR"):
        candidates.append(os.environ["MALHAR_PG_BINDIR"])
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    if shutil.which("initdb"):
        candidates.append(str(Path(shutil.which("initdb")).resolve().parent))
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "postgres").exists():
            return Path(c)
    raise ServiceError(
        "postgres",
        "PostgreSQL server binaries (initdb, postgres) not found",
        hint="apt-get install -y postgresql (or `make setup`), or set MALHAR_PG_BINDIR",
    )


def _server_user() -> str | None:
    """The user the server runs as: ``postgres`` when this process is root, else None (us)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ServiceError(
            "postgres",
            "running as root and there is no `postgres` system user to run the server as",
            hint="apt-get install -y postgresql creates it, or run the tests as a normal user",
        ) from None
    return "postgres"


def _check_reachable(home: Path, user: str) -> None:
    """A clear error if ``user`` cannot reach ``home``, where initdb and the server work.

    A run directory inside a private folder (``mktemp -d`` makes them 0o700) is the
    usual cause: initdb, run as ``user``, would fail on reading its password file.
    """
    blocked = first_unreachable(home, user)
    if blocked is None:
        return
    mode = oct(stat.S_IMODE(blocked.stat().st_mode))
    raise ServiceError(
        "postgres",
        f"the server runs as the `{user}` user (this process is root), which cannot reach "
        f"its folder {home}: it may not traverse {blocked} (mode {mode}). The run directory "
        "and every folder above it must be traversable by that user",
        hint=f"chmod o+x {blocked} (or chmod 755 {blocked}), or set MALHAR_RUN_DIR to a "
        "folder that other users may traverse (the default is /tmp/malhar-$UID)",
    )


class PostgresService(Service):
    """A PostgreSQL server for tests, samples and benchmarks.

    Environment variable ``MALHAR_POSTGRES_DSN`` (``postgresql://user:pw@host:port/db``)
    points at an existing server instead.
    """

    name = "postgres"
    env_var = "MALHAR_POSTGRES_DSN"

    def __init__(self, port: int | None = None) -> None:
        super().__init__()
        self.host = "127.0.0.1"
        self.port = port
        self.user = _USER
        self.password = secrets.token_urlsafe(16)
        self.dbname = "malhar_" + secrets.token_hex(4)

    # -- start / stop ------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> Self:
        if self.port is not None and port_in_use(self.port):
            raise ServiceError(
                "postgres",
                f"port {self.port} on 127.0.0.1 is already in use",
                hint="choose another port or leave it unset to pick a free one",
            )
        self.port = self.port or free_port()
        bindir = _bindir()
        user = _server_user()
        self.home = new_service_dir("postgres")
        os.chmod(self.home, 0o755)
        if user:
            shutil.chown(self.home, user, user)
            try:
                _check_reachable(self.home, user)
            except ServiceError:
                shutil.rmtree(self.home, ignore_errors=True)  # empty: no log to keep
                self.home = None
                raise
        self._bindir = bindir
        data = self.home / "data"
        pwfile = self.home / "pwfile"
        pwfile.write_text(self.password + "\n")
        if user:
            shutil.chown(pwfile, user, user)
        os.chmod(pwfile, 0o600)
        command = as_user(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                self.user,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            user,
        )
        try:
            run_step(self.name, "initdb", command, self.home / "initdb.log", timeout=timeout)
        finally:
            pwfile.unlink(missing_ok=True)
        self._launch(timeout)
        self._create_database()
        return self

    def _launch(self, timeout: float) -> None:
        data = self.home / "data"
        command = [
            str(self._bindir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={self.host}",
            "-c",
            f"unix_socket_directories={self.home}",
            "-c",
            "max_connections=100",
            "-c",
            "max_prepared_transactions=20",
        ]
        # as the ``postgres`` user when root: ManagedProcess drops to it in a way that keeps
        # the server tied to this process (a ``setpriv`` prefix would untie it)
        proc = ManagedProcess(
            "postgres",
            command,
            self.home / "postgres.log",
            stop_signal=signal.SIGINT,
            user=_server_user(),
        ).start()
        self.processes = [proc]
        proc.wait_ready(
            lambda: self._query("postgres", "SELECT 1") == [(1,)],
            timeout=timeout,
            what=f"PostgreSQL on 127.0.0.1:{self.port} accepting SELECT 1",
        )

    def _create_database(self) -> None:
        import psycopg2

        conn = psycopg2.connect(**self._params("postgres"))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{self.dbname}"')
        finally:
            conn.close()

    def stop_server(self) -> None:
        """Stop the server, keeping its data (to simulate a database outage)."""
        for proc in self.processes:
            proc.stop()

    def start_server(self, timeout: float = 60.0) -> None:
        """Start the same server again on the same port with the same data."""
        self._launch(timeout)

    def restart(self, timeout: float = 60.0) -> None:
        self.stop_server()
        self.start_server(timeout)

    # -- connection ----------------------------------------------------------------------
    def _params(self, dbname: str | None = None) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "dbname": dbname or self.dbname,
            "connect_timeout": 5,
        }

    def _query(self, dbname: str, sql: str) -> list[tuple]:
        import psycopg2

        conn = psycopg2.connect(**self._params(dbname))
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()

    @property
    def dsn(self) -> str:
        """``postgresql://`` URL of the test database (holds the password: do not log it)."""
        return (
            f"postgresql://{quote(self.user)}:{quote(self.password)}@{self.host}:{self.port}/"
            f"{self.dbname}"
        )

    @property
    def sqlalchemy_url(self) -> str:
        return self.dsn.replace("postgresql://", "postgresql+psycopg2://", 1)

    def connect(self):  # -> psycopg2 connection
        """A new psycopg2 connection to the test database."""
        import psycopg2

        return psycopg2.connect(**self._params())

    def connection(self) -> dict[str, Any]:
        return {
            "dsn": self.dsn,
            "url": self.sqlalchemy_url,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "dbname": self.dbname,
        }

    def env_value(self) -> str:
        return self.dsn

    def ping(self) -> bool:
        try:
            return self._query(self.dbname, "SELECT 1") == [(1,)]
        except Exception:
            return False

    @classmethod
    def from_env(cls, value: str) -> Self:
        parts = urlsplit(value)
        if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
            raise ServiceError(
                "postgres",
                "MALHAR_POSTGRES_DSN is not a postgresql://user:password@host:port/db URL",
            )
        service = cls(port=parts.port or 5432)
        service.host = parts.hostname
        service.user = parts.username or _USER
        service.password = parts.password or ""
        service.dbname = parts.path.lstrip("/") or "postgres"
        return service

    @classmethod
    def from_docker(cls, timeout: float = 120.0) -> Self:  # pragma: no cover - needs Docker
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine").start()
        service = cls.from_env(container.get_connection_url(driver=None))
        service.container = container
        return service
