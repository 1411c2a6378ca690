"""``malhar repartition``: repartition operators of an application ``malhar run`` runs, and
the serving side ``malhar run`` calls between its progress checks
(:mod:`malhar.engine.requests` holds the file protocol)."""

from __future__ import annotations

import logging
import time
from typing import Any

import click

from malhar.engine import requests
from malhar.errors import ConfigError
from malhar.util.fs.errors import StorageError

log = logging.getLogger("malhar")


class RequestServer:
    """Serves a running application's checkpoint: a heartbeat every
    ``requests.HEARTBEAT_S`` and the repartitioning requests found there."""

    def __init__(self, app: Any, *, windows_run: bool = False) -> None:
        self.app = app
        self.checkpoint: str = app.checkpoint
        #: a run of --windows N drains its query to its end: a new query would end it
        self.windows_run = windows_run
        self._beat = 0.0
        self._looked = 0.0
        self._failing = False

    def poll(self) -> None:
        """Beat when due; carry out pending requests (about once a second). A checkpoint
        that cannot be written or read now is said once, and the run goes on."""
        try:
            self._poll()
        except (OSError, StorageError) as exc:
            if not self._failing:
                log.warning(
                    "malhar: cannot serve malhar repartition on %s: %s", self.checkpoint, exc
                )
            self._failing = True
        else:
            self._failing = False

    def _poll(self) -> None:
        now = time.monotonic()
        if now - self._beat >= requests.HEARTBEAT_S:
            self._beat = now
            requests.heartbeat(self.checkpoint, self.app.dag.name)
        if now - self._looked < 1.0:
            return
        self._looked = now
        for request in requests.pending(self.checkpoint):
            self._serve(request)

    def _serve(self, request: requests.Request) -> None:
        name = self.app.dag.name
        if time.time() > request.until:
            requests.answer(self.checkpoint, request.id, requests.Answer(False, "expired"))
            return
        if not requests.take(self.checkpoint, request.id):
            return  # withdrawn by its asker
        if self.windows_run:
            refusal = requests.Answer(
                False,
                f"{name} runs for a number of windows (malhar run --windows): it is "
                "repartitioned only when it runs until stopped",
            )
            requests.answer(self.checkpoint, request.id, refusal)
            return
        asked = ", ".join(f"{op}: {n}" for op, n in request.counts.items())
        click.echo(f"{name}: repartitioning {asked} (asked by malhar repartition) ...")
        requests.heartbeat(self.checkpoint, name)  # a repartitioning takes seconds
        try:
            generation = self.app.repartition(dict(request.counts))
        except Exception as exc:  # refused or failed: the application goes on as it was
            message = f"{type(exc).__name__}: {exc}"
            click.echo(f"{name}: repartitioning refused: {message}")
            requests.answer(self.checkpoint, request.id, requests.Answer(False, message))
            return
        message = (
            f"{asked} partitions after window {generation.window} (generation "
            f"{generation.generation})"
        )
        click.echo(f"{name}: repartitioned {message}")
        requests.answer(self.checkpoint, request.id, requests.Answer(True, message))

    def stop(self) -> None:
        requests.stop_serving(self.checkpoint)


@click.command()
@click.option(
    "--checkpoint",
    required=True,
    help="The checkpoint root the application runs on (malhar run --checkpoint).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds to wait for the repartitioning to be done.",
)
@click.argument("counts", nargs=-1, required=True, metavar="OPERATOR=N...")
def repartition(checkpoint: str, timeout: float, counts: tuple[str, ...]) -> None:
    """Repartition operators of the application `malhar run` runs on CHECKPOINT, between
    two windows, exactly once: its keyed state moves with its keys (docs/partitioning.md).

    \b
    malhar repartition --checkpoint /data/ck count=4 join=2

    Exits 0 once done, 1 when the application refused (it goes on as it was), 2 when no
    application serves the checkpoint or no answer came within --timeout.
    """
    try:
        asked = requests.parse_counts(counts)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="OPERATOR=N") from None
    who = requests.serving(checkpoint)
    if who is None:
        click.echo(
            f"malhar repartition: no application is running on {checkpoint} (no malhar run "
            "serves it). Start it with malhar run --checkpoint, or change its PARTITIONS and "
            "restart it: the launch moves the state to the new counts",
            err=True,
        )
        raise SystemExit(2)
    request = requests.submit(checkpoint, asked, timeout)
    click.echo(f"asked {who['application']} (pid {who['pid']} on {who['host']}) ...")
    result = requests.await_answer(checkpoint, request, timeout)
    if result is None:
        taken = not requests.withdraw(checkpoint, request)
        state = "is being carried out" if taken else "was withdrawn"
        click.echo(
            f"malhar repartition: no answer within {timeout:g}s; the request {state}", err=True
        )
        raise SystemExit(2)
    if not result.ok:
        click.echo(f"malhar repartition: refused: {result.message}", err=True)
        raise SystemExit(1)
    click.echo(f"repartitioned {result.message}")
