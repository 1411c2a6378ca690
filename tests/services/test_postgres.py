"""The PostgreSQL fixture against a real server: transactions, restarts, bad setups."""

from __future__ import annotations

import socket

import psycopg2
import pytest

from malhar.testing.services import ServiceError
from malhar.testing.services.postgres import PostgresService

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
