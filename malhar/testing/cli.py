"""``malhar services up|down|status``: real services for a shell session.

``up`` starts the services and leaves them running after it exits, until ``down``
(their state goes to ``$MALHAR_RUN_DIR/services.json``), so ``export`` lines printed
by ``up`` point later tests or samples at them through the usual environment variables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from malhar.console import step
from malhar.redaction import redact_config
from malhar.testing.services import SERVICES, acquire, service_class
from malhar.testing.services.base import dumps_state, stop_recorded
from malhar.testing.services.maven import jar_dir, jar_sets
from malhar.testing.services.paths import run_dir, write_private
from malhar.testing.services.process import outliving_parent


def _state_file() -> Path:
    return run_dir() / "services.json"


def _load() -> dict[str, dict[str, Any]]:
    path = _state_file()
    return json.loads(path.read_text()) if path.exists() else {}


def _save(states: dict[str, dict[str, Any]]) -> None:
    write_private(_state_file(), dumps_state(states))  # holds passwords: owner-only


def _names(names: tuple[str, ...]) -> list[str]:
    return list(names) or list(SERVICES)


def _answers(name: str, state: dict[str, Any]) -> bool:
    """True if the instance recorded by ``up`` answers a real request now."""
    try:
        return bool(service_class(name).from_state(state).ping())
    except Exception:
        return False


@click.group(name="services")
def services() -> None:
    """Start, inspect and stop real Kafka, PostgreSQL and HDFS servers."""


@services.command()
@click.argument("names", nargs=-1, type=click.Choice(list(SERVICES)))
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for each.")
def up(names: tuple[str, ...], timeout: float) -> None:
    """Start NAMES (all by default), leave them running and print how to use them."""
    states = _load()
    for name in _names(names):
        state = states.get(name)
        if state is not None:
            shown = redact_config(state["connection"])
            if _answers(name, state):
                click.echo(f"{name}: already up ({shown})")
                continue
            # a stale record (stopped by hand, killed, a reboot): clear it and start anew
            stop_recorded(state)
            del states[name]
            _save(states)
            click.echo(f"{name}: recorded instance ({shown}) not answering; removed, restarting")
        done = step(f"{name}: starting")
        with outliving_parent():  # the servers must outlive this command, until `down`
            service = acquire(name, timeout=timeout)
        done()
        states[name] = service.state()
        _save(states)
        cls = service_class(name)
        click.echo(f"{name}: up; logs: {', '.join(map(str, service.log_paths)) or '-'}")
        click.echo(f"export {cls.env_var}='{service.env_value()}'")
    if os.environ.get("MALHAR_RUN_DIR"):  # where `status` and `down` find them again
        click.echo(f"export MALHAR_RUN_DIR='{run_dir()}'")


@services.command()
@click.argument("names", nargs=-1, type=click.Choice(list(SERVICES)))
def down(names: tuple[str, ...]) -> None:
    """Stop NAMES (all by default) started by `up` and remove their data."""
    states = _load()
    for name in _names(names):
        state = states.pop(name, None)
        if state is None:
            click.echo(f"{name}: not up")
            continue
        stop_recorded(state)
        _save(states)
        click.echo(f"{name}: down")


@services.command()
def fetch() -> None:
    """Fetch every official jar set (Kafka, Hadoop, ...) from Maven Central into the cache."""
    for name in jar_sets():
        click.echo(f"{name}: {jar_dir(name)}")


@services.command()
def status() -> None:
    """Show which services `up` started and whether they answer.

    Exits with status 1 if one of them does not answer.
    """
    states = _load()
    if not states:
        click.echo(
            f"no services up (none recorded in {_state_file()}; services started with "
            "another MALHAR_RUN_DIR are recorded there)"
        )
    silent = []
    for name, state in states.items():
        alive = _answers(name, state)
        if not alive:
            silent.append(name)
        shown = redact_config(state["connection"])
        click.echo(f"{name}: {'answering' if alive else 'NOT answering'} {shown}")
        for log in state.get("logs", []):
            click.echo(f"  log: {log}")
    if silent:
        raise SystemExit(1)


def main() -> None:
    services()


if __name__ == "__main__":
    main()
