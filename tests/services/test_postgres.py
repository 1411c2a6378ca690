"""The PostgreSQL fixture against a real server: transactions, restarts, bad setups."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from malhar.testing.services import ServiceError
from malhar.testing.services.postgres import PostgresService
from malhar.testing.services.process import wait_until

pytestmark = pytest.mark.integration


def _rows(service: PostgresService, sql: str) -> list[tuple]:
    with service.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_commit_is_visible_and_rollback_is_not(postgres_service: PostgresService) -> None:
    conn = postgres_service.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE tx_probe (id int PRIMARY KEY, note text)")
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO tx_probe VALUES (%s, %s)", (1, "kept"))
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO tx_probe VALUES (%s, %s)", (2, "dropped"))
        conn.rollback()
    finally:
        conn.close()
    assert _rows(postgres_service, "SELECT id, note FROM tx_probe ORDER BY id") == [(1, "kept")]


def test_database_is_fresh_and_named_in_connection(postgres_service: PostgresService) -> None:
    info = postgres_service.connection()
    assert info["dbname"].startswith("malhar_")
    assert _rows(postgres_service, "SELECT current_database()") == [(info["dbname"],)]
    assert info["url"].startswith("postgresql+psycopg2://")


def test_wrong_password_is_refused(postgres_service: PostgresService) -> None:
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(
            host=postgres_service.host,
            port=postgres_service.port,
            user=postgres_service.user,
            password="not-the-password",
            dbname=postgres_service.dbname,
        )


def test_restart_keeps_committed_data() -> None:
    with PostgresService().start() as pg:
        with pg.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE durable (v int)")
            cur.execute("INSERT INTO durable VALUES (42)")
        pg.stop_server()
        assert not pg.ping()
        pg.start_server()
        assert _rows(pg, "SELECT v FROM durable") == [(42,)]


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        with pytest.raises(ServiceError, match=f"postgres: port {port} .* already in use"):
            PostgresService(port=port).start()


def test_env_var_points_at_existing_server(
    postgres_service: PostgresService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from malhar.testing.services import acquire

    monkeypatch.setenv("MALHAR_POSTGRES_DSN", postgres_service.dsn)
    other = acquire("postgres")
    assert other.external and other.dbname == postgres_service.dbname
    other.stop()  # must leave the real server alone
    assert postgres_service.ping()


def test_env_var_pointing_nowhere_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from malhar.testing.services import acquire
    from malhar.testing.services.process import free_port

    monkeypatch.setenv("MALHAR_POSTGRES_DSN", f"postgresql://u:p@127.0.0.1:{free_port()}/db")
    with pytest.raises(ServiceError, match="MALHAR_POSTGRES_DSN does not answer"):
        acquire("postgres")


# -- the server dies with the process that started it, also when root drops to `postgres` ----
@pytest.fixture
def fresh_run_dir() -> Iterator[Path]:
    """A new ``MALHAR_RUN_DIR`` in the temporary folder that the ``postgres`` user can reach
    (pytest's own ``tmp_path`` is inside a 0o700 folder: a server run as root could not)."""
    path = Path(tempfile.mkdtemp(prefix="malhar-pg-lifetime-"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


_STARTER = """
import time
from malhar.testing.services import acquire

pg = acquire("postgres")
conn = pg.connect()  # a backend process too, not only the postmaster and its helpers
print(pg.home, flush=True)
time.sleep(600)
"""


def _processes_in(folder: Path) -> list[int]:
    """Pids of the processes working in ``folder`` (the postmaster chdirs to its data
    folder; its helpers and backends inherit that)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if state != "Z" and Path(cwd) == folder:
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_server_dies_with_its_starter(fresh_run_dir: Path) -> None:
    """A SIGKILLed test run leaves no PostgreSQL behind. As root the server runs as the
    ``postgres`` user, and a change of credentials after the parent-death signal was set
    (``setpriv --reuid``) cleared it: the postmaster used to outlive its starter."""
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER],
        env={**os.environ, "MALHAR_RUN_DIR": str(fresh_run_dir)},
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    data: Path | None = None
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline().strip()
        assert line, f"the starter printed no folder (exit {starter.poll()})"
        data = (Path(line) / "data").resolve()
        assert len(_processes_in(data)) >= 2  # postmaster, helpers, a backend
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=30)
        wait_until(
            lambda: not _processes_in(data),
            timeout=30,
            what=lambda: f"no process left in {data}: pids {_processes_in(data)}",
        )
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(timeout=30)
        for pid in _processes_in(data) if data else []:  # a failed test leaves nothing either
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="only root runs the server as another user (`postgres`)",
)
def test_run_dir_the_postgres_user_cannot_reach_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    private = Path(tempfile.mkdtemp(prefix="malhar-private-"))  # 0o700, like `mktemp -d`
    try:
        run = private / "run"
        monkeypatch.setenv("MALHAR_RUN_DIR", str(run))
        with pytest.raises(ServiceError) as failure:
            PostgresService().start()
        message = str(failure.value)
        assert "`postgres` user" in message and "cannot reach" in message
        assert f"may not traverse {private} (mode 0o700)" in message
        assert f"chmod o+x {private}" in message
        assert list(run.iterdir()) == []  # no half-made instance left behind
    finally:
        shutil.rmtree(private, ignore_errors=True)
