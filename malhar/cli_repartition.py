"""``malhar repartition``: repartition operators of an application ``malhar run`` runs, and
the serving side ``malhar run`` calls between its progress checks
(:mod:`malhar.engine.requests` holds the file protocol)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import click

from malhar.engine import generations, requests
from malhar.errors import ConfigError
from malhar.redaction import redact

log = logging.getLogger("malhar")


class RequestServer:
    """Serves a running application's checkpoint: a heartbeat every
    ``requests.HEARTBEAT_S`` from a thread of its own (it goes on while a repartitioning
    or a slow file system holds the run loop), and the repartitioning requests found
    there, carried out by the run loop (:meth:`poll`). Nothing it meets stops the run: a
    checkpoint it cannot use now, or a file that is not a request, is said once."""

    def __init__(
        self, app: Any, *, windows_run: bool = False, scrub: Callable[[str], str] = str
    ) -> None:
        self.app = app
        self.checkpoint: str = app.checkpoint
        #: a run of --windows N drains its query to its end: a new query would end it
        self.windows_run = windows_run
        self._scrub = scrub  # the run's: messages may hold configuration values
        self._looked = 0.0
        #: tells this run's heartbeat and taken requests from another run's
        self.run = uuid.uuid4().hex[:12]
        self._failing: set[str] = set()
        self._stopped = threading.Event()
        self._beats = threading.Thread(target=self._beat, name="malhar-requests", daemon=True)

    def start(self) -> RequestServer:
        self._guarded("sweep", lambda: requests.sweep(self.checkpoint))
        self._beats.start()
        return self

    def _beat(self) -> None:
        name = self.app.dag.name
        while not self._stopped.is_set():
            self._guarded("heartbeat", lambda: requests.heartbeat(self.checkpoint, name, self.run))
            self._stopped.wait(requests.HEARTBEAT_S)

    def _guarded(self, what: str, step: Callable[[], Any]) -> None:
        try:
            step()
        except Exception as exc:  # never the run's end: said once until it works again
            if what not in self._failing:
                log.warning(
                    "malhar: cannot serve malhar repartition (%s) on %s: %s",
                    what,
                    self._scrub(self.checkpoint),
                    self._scrub(f"{type(exc).__name__}: {exc}"),
                )
            self._failing.add(what)
        else:
            self._failing.discard(what)

    def poll(self) -> None:
        """Carry out pending requests (looks about once a second)."""
        now = time.monotonic()
        if now - self._looked < 1.0:
            return
        self._looked = now
        self._guarded("requests", self._serve_pending)

    def _serve_pending(self) -> None:
        for request in requests.pending(self.checkpoint):
            self._serve(request)

    def _answer(self, request: requests.Request, ok: bool, message: str) -> None:
        requests.answer(self.checkpoint, request.id, requests.Answer(ok, self._scrub(message)))

    def _serve(self, request: requests.Request) -> None:
        name = self.app.dag.name
        if time.time() > request.until:
            self._answer(request, False, "expired")
            return
        by = {"application": name, "host": socket.gethostname(), "pid": os.getpid()}
        if not requests.take(self.checkpoint, request.id, {**by, "run": self.run}):
            return  # withdrawn by its asker
        if self.windows_run:
            message = (
                f"{name} runs for a number of windows (malhar run --windows): it is "
                "repartitioned only when it runs until stopped"
            )
            self._answer(request, False, message)
            return
        asked = ", ".join(f"{op}: {n}" for op, n in request.counts.items())
        click.echo(f"{name}: repartitioning {asked} (asked by malhar repartition) ...")
        try:
            generation = self.app.repartition(dict(request.counts))
        except Exception as exc:  # refused or failed: the application goes on as it was
            message = self._scrub(f"{type(exc).__name__}: {exc}")
            click.echo(f"{name}: repartitioning refused: {message}")
            self._answer(request, False, message)
            return
        counts = ", ".join(
            f"{op} {n} partition{'s' * (n != 1)}" for op, n in request.counts.items()
        )
        message = f"after window {generation.window} (generation {generation.generation}): {counts}"
        click.echo(f"{name}: repartitioned {message}")
        self._answer(request, True, message)

    def stop(self) -> None:
        """Stop beating and remove the heartbeat (a failure is said, not raised: the run
        is ending and must end in order)."""
        self._stopped.set()
        if self._beats.is_alive():
            self._beats.join(timeout=10)
        self._guarded("heartbeat removal", lambda: requests.stop_serving(self.checkpoint))


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

    Exits 0 once done, 1 when the application refused (it goes on as it was; a run of
    --windows N refuses), 2 when no application serves the checkpoint, it stopped before
    taking the request, it stopped or died while repartitioning (said: the partition
    counts the checkpoint records now), no answer came within --timeout, or Ctrl-C (the
    request is withdrawn unless under way).
    """
    try:
        asked = requests.parse_counts(counts)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="OPERATOR=N") from None
    who = requests.serving(checkpoint)
    if who is None and "://" not in checkpoint and not os.path.exists(checkpoint):
        click.echo(
            f"malhar repartition: there is no checkpoint at {redact(checkpoint)} (the path "
            "does not exist): give the --checkpoint the application runs with",
            err=True,
        )
        raise SystemExit(2)
    if who is None:
        click.echo(
            f"malhar repartition: no application is running on {redact(checkpoint)} (no malhar run "
            "serves it). Start it with malhar run --checkpoint, or change its PARTITIONS and "
            "restart it: the launch moves the state to the new counts",
            err=True,
        )
        raise SystemExit(2)
    before = _generation(checkpoint)
    request = requests.submit(checkpoint, asked, timeout)
    click.echo(f"asked {who['application']} (pid {who['pid']} on {who['host']}) ...")
    try:
        result = _await(checkpoint, request, who, timeout, asked, before)
    except KeyboardInterrupt:
        withdrawn = requests.withdraw(checkpoint, request)
        state = "withdrawn" if withdrawn else "under way already (the application says how it ends)"
        click.echo(f"malhar repartition: interrupted; the request is {state}", err=True)
        raise SystemExit(2) from None
    if not result.ok:
        click.echo(f"malhar repartition: refused: {result.message}", err=True)
        raise SystemExit(1)
    click.echo(f"repartitioned {result.message}")


def _generation(checkpoint: str) -> generations.Generation | None:
    """The checkpoint's partitioning manifest, or None: it cannot be read now."""
    try:
        return generations.load(checkpoint)
    except Exception:  # unreachable, or not a manifest: the message says where to look
        return None


def _await(
    checkpoint: str,
    request: str,
    who: dict[str, Any],
    timeout: float,
    asked: dict[str, int],
    before: generations.Generation | None,
) -> requests.Answer:
    """The answer to ``request``; exits 2 when the application stops serving before it
    takes it, when the run that took it stops or dies before it answers, or when none
    comes within ``timeout`` (withdrawn unless under way)."""
    where = redact(checkpoint)
    application = who["application"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = requests.await_answer(checkpoint, request, min(1.0, timeout))
        if result is not None:
            return result
        now = requests.serving(checkpoint)
        # the application stopped (or died) before it took the request: no answer comes
        if now is None and requests.withdraw(checkpoint, request):
            click.echo(
                f"malhar repartition: {application} stopped serving {where} before it took "
                "the request (it stopped, or was killed); nothing changed",
                err=True,
            )
            raise SystemExit(2)
        taker = requests.taken(checkpoint, request)
        if taker is None:
            continue  # waiting to be taken (by this run or the next), or answered just now
        taker = taker or who  # taken, by a run that has not said so yet: the one asked
        if now is not None and requests.same_run(now, taker):
            continue  # under way
        silent = requests.silent_for(checkpoint, taker)
        if now is None and silent is not None and silent < requests.SILENT_S:
            continue  # late to beat (moving state, a slow file system): not taken for dead
        # the run that took it no longer serves (silent for SILENT_S, or another run serves
        # the checkpoint): it stopped or died while repartitioning, so no answer comes
        late = requests.await_answer(checkpoint, request, 0)  # unless it answered just now
        if late is not None:
            return late
        _stopped_while_repartitioning(checkpoint, request, taker, now, asked, before)
    if not requests.withdraw(checkpoint, request):
        late = requests.await_answer(checkpoint, request, 0)  # answered just now
        if late is not None:
            return late
        click.echo(
            f"malhar repartition: no answer within {timeout:g}s; the request is under way "
            "(the application says how it ends)",
            err=True,
        )
    else:
        click.echo(f"malhar repartition: no answer within {timeout:g}s; withdrawn", err=True)
    raise SystemExit(2)


def _counts(generation: generations.Generation, names: list[str]) -> str:
    """``sums 3, out 2``: the counts a manifest records for ``names`` (``?``: none)."""

    def count(name: str) -> str:
        if name in generation.operators:
            return str(generation.operators[name].partitions)
        return str(generation.counts.get(name, "?"))

    return ", ".join(f"{name} {count(name)}" for name in names)


def _stopped_while_repartitioning(
    checkpoint: str,
    request: str,
    taker: dict[str, Any],
    now: dict[str, Any] | None,
    asked: dict[str, int],
    before: generations.Generation | None,
) -> None:
    """Say that the run that took ``request`` ended before it answered, and which
    partition counts the checkpoint records now (a repartitioning commits its new
    generation at once, or not at all); exits 2."""
    where = redact(checkpoint)
    manifest = f"{where}/malhar/{generations.MANIFEST}"
    try:
        requests.forget(checkpoint, request)  # no run acts on it; for tidiness
    except Exception:  # left for the next run's sweep (an hour on)
        pass
    names = list(asked)
    after = _generation(checkpoint)
    if after is None or before is None:
        state = f"which partition counts are in force: see {manifest}"
    elif after.generation == before.generation:
        state = (
            f"it had not committed: nothing changed, the checkpoint records "
            f"{_counts(after, names)} (generation {after.generation}, {manifest})"
        )
    elif all(
        (after.operators[n].partitions if n in after.operators else after.counts.get(n)) == c
        for n, c in asked.items()
    ):
        state = (
            f"it had committed: the checkpoint records {_counts(after, names)} "
            f"(generation {after.generation}, after window {after.window}, {manifest})"
        )
    else:
        state = (
            f"the checkpoint's partitioning changed since it was asked (generation "
            f"{before.generation} -> {after.generation}): it records {_counts(after, names)} "
            f"({manifest})"
        )
    if now is not None:
        nxt = f"a new run (pid {now.get('pid')} on {now.get('host')}) serves it now"
    else:
        nxt = "the next launch runs on these counts unless its PARTITIONS changed"
    click.echo(
        f"malhar repartition: {taker.get('application', 'the application')} (pid "
        f"{taker.get('pid')} on {taker.get('host')}) stopped while repartitioning, before "
        f"it answered (it stopped, or was killed): {state}; {nxt}",
        err=True,
    )
    raise SystemExit(2)
