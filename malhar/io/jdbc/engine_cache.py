"""Engines and checked tables shared by the writers of one Python process.

The engine may rebuild an operator partition's runtime on another Python worker
(Spark gives tasks no affinity), and each rebuild runs ``setup`` again. Opening a
writer from scratch costs a new connection pool, table reflection, constraint
checks and the meta table's DDL (measured 47-144 ms per rebuild on the flagship).
Writers with the same connection settings therefore share one engine per process,
and a target table that passed its checks is not reflected again. What must be
fresh is still read per open: the partition's committed window.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from malhar.io.jdbc.config import JdbcSettings
from malhar.io.jdbc.connection import create_engine

_lock = threading.Lock()
_engines: dict[tuple, sa.Engine] = {}
_targets: dict[tuple, Any] = {}
_meta_tables: set[tuple] = set()


def _engine_key(options: JdbcSettings) -> tuple:
    return options.connection_key()


def shared_engine(options: JdbcSettings) -> sa.Engine:
    """The process's engine for ``options``' connection settings (created on first use)."""
    key = _engine_key(options)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = create_engine(options)
        return engine


def checked_target(options: JdbcSettings, check: Callable[[], sa.Table | None]) -> sa.Table | None:
    """``check()``'s table for ``options``, run once per process and target settings."""
    key = (
        _engine_key(options),
        options.table,
        options.mode,
        options.column_names,
        options.keys,
    )
    with _lock:
        if key in _targets:
            return _targets[key]
    table = check()  # raises on a missing table or bad columns: nothing is cached then
    with _lock:
        _targets[key] = table
    return table


def ensure_table_once(options: JdbcSettings, table: str, ensure: Callable[[], None]) -> None:
    """Run ``ensure()`` (a bookkeeping table's DDL and migration) once per process and table."""
    key = (_engine_key(options), table)
    with _lock:
        if key in _meta_tables:
            return
    ensure()
    with _lock:
        _meta_tables.add(key)


def forget(options: JdbcSettings) -> None:
    """Drop what is cached for ``options``' database (after it was found changed)."""
    key = _engine_key(options)
    with _lock:
        engine = _engines.pop(key, None)
        for k in [k for k in _targets if k[0] == key]:
            del _targets[k]
        for k in [k for k in _meta_tables if k[0] == key]:
            _meta_tables.discard(k)
    if engine is not None:
        engine.dispose()


@atexit.register
def _dispose_all() -> None:  # pragma: no cover - process exit
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.dispose()
