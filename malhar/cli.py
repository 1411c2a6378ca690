"""The ``malhar`` command line.

- ``malhar list [--kind KIND] [--json]``: operators, connectors and applications
  registered through entry points (built-ins and installed packs);
- ``malhar info NAME``: one operator's ports, properties and constructor arguments;
- ``malhar validate APP``: load and validate an application, print its physical plan;
- ``malhar run APP``: run it on Spark, for ``--windows N`` or until Ctrl-C;
- ``malhar services ...``: real Kafka, PostgreSQL and HDFS servers for a shell session;
- ``malhar state list|clean``: managed state's local stores on this host (caches).

Exit codes: 0 success, 1 the application failed while running, 2 the application
cannot be loaded or is not valid (or the command line is wrong).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import click

from malhar import registry
from malhar.app import ApplicationError, load_application, parse_config
from malhar.cli_repartition import RequestServer, repartition
from malhar.cli_state import state
from malhar.engine.failure import ApplicationFailed, reason_of
from malhar.engine.failure import summary as failure_summary  # noqa: F401 - public name
from malhar.engine.stop_signals import StopSignals
from malhar.errors import ConfigError, ConfigWarning, StateError
from malhar.preflight import DEFAULT_TIMEOUT_S as DEFAULT_CONNECT_TIMEOUT_S
from malhar.redaction import Scrubber, redact, redact_config
from malhar.session import DEFAULT_MASTER
from malhar.testing.cli import services

#: exit code of an application that cannot be loaded or is not valid
EXIT_INVALID = 2
#: exit code of an application that failed while running
EXIT_FAILED = 1
#: exit code of ``validate --connect`` when a system the application uses is not ready
EXIT_NOT_READY = 3
#: seconds between progress lines of an unbounded ``run``
PROGRESS_EVERY = 10.0


def _fail(title: str, problems: list[str], scrub: Callable[[str], str], code: int) -> NoReturn:
    click.echo(scrub(title), err=True)
    for problem in problems:
        click.echo(f"  - {scrub(problem)}", err=True)
    sys.exit(code)


#: the master URLs Spark takes (SparkContext.createTaskScheduler, SparkMasterRegex)
_MASTER = re.compile(
    r"local(\[\s*(\*|[1-9]\d*)\s*(,\s*\d+\s*)?\])?"
    r"|local-cluster\[\s*[1-9]\d*\s*(,\s*[1-9]\d*\s*){2}\]|yarn"
    r"|(spark|k8s|mesos)://\S+"
)


def _check_master(master: str) -> str:
    # a JVM refusing a master it does not know prints 50 lines ending in JAVA_GATEWAY_EXITED
    if not _MASTER.fullmatch(master):
        raise click.BadParameter(
            f"{master!r} is not a Spark master URL: use local[N], local[*], local[N,F], "
            "local-cluster[W,C,M] (counts of at least 1), spark://HOST:PORT, yarn or k8s://URL"
        )
    return master


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("debug"))


@click.group()
@click.version_option(package_name="malhar")
@click.option("--debug", is_flag=True, help="Print full tracebacks of errors.")
def cli(debug: bool) -> None:
    """malhar: Apex Malhar connectors and operators with exactly-once delivery, on PySpark."""


cli.add_command(services)
cli.add_command(state)
cli.add_command(repartition)


# -- list / info -----------------------------------------------------------------------------
def _ports(entry: registry.Entry) -> str:
    parts = []
    if entry.inputs:
        parts.append("in: " + ", ".join(entry.inputs))
    if entry.outputs:
        parts.append("out: " + ", ".join(entry.outputs))
    return "; ".join(parts)


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)
    return console


@cli.command("list")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(registry.KINDS),
    help="Only entries of this kind (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_command(kinds: tuple[str, ...], as_json: bool) -> None:
    """List registered operators, connectors and applications (built-ins and packs)."""
    items = registry.entries(kinds or None)
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in items], indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "KIND", "PORTS", "PACK", "DESCRIPTION"):
        table.add_column(column, overflow="fold")
    for e in items:
        doc = escape(e.doc) if e.ok else "[red]cannot load (see below)[/red]"
        table.add_row(escape(e.name), e.kind, escape(_ports(e)), escape(e.pack), doc)
    console = _console()
    if items:
        with console.capture() as captured:
            console.print(table)
        text = "\n".join(line.rstrip() for line in captured.get().splitlines())
        click.echo(text)
    else:
        click.echo("nothing registered" + (f" of kind {', '.join(kinds)}" if kinds else ""))
    broken = [e for e in items if not e.ok]
    if broken:
        click.echo(f"\n{len(broken)} entry point(s) cannot be loaded:")
        for e in broken:
            click.echo(f"  {e.name} = {e.target} [{e.group}] from {e.pack}: {e.error}")


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(name: str, as_json: bool) -> None:
    """Show an operator's or connector's ports, properties and constructor arguments.

    NAME is a registered name (see `malhar list`) or module:Class.
    """
    found = registry.available()
    try:
        cls = registry.load(name, found)
    except registry.RegistryError as exc:
        _fail(f"malhar info {name}:", [str(exc)], str, EXIT_INVALID)
    entry = found.get(name) or next((e for e in found.values() if e.obj is cls), None)
    described = registry.describe_class(cls)
    described.update(
        name=name,
        kind=entry.kind if entry else registry.component_kind(cls),
        pack=entry.pack if entry else None,
    )
    if as_json:
        click.echo(json.dumps(described, indent=2, default=repr))
        return
    click.echo(
        f"{name}  ({described['kind']}, {described['class']}, pack: {described['pack'] or '-'})"
    )
    if described["doc"]:
        click.echo("\n" + "\n".join(f"  {line}" for line in described["doc"].splitlines()))
    click.echo(f"\nconstructor args: {', '.join(described['args']) or '(none)'}")
    click.echo("ports:")
    for p in described["ports"]:
        flags = [f"{p['direction']} port", "optional" if p["optional"] else "required"]
        flags += ["error port"] if p.get("error") else []
        schema = p["schema"] or "Python objects"
        click.echo(f"  {p['name']} ({', '.join(flags)}): {schema}")
    click.echo("properties:" + ("" if described["properties"] else " (none)"))
    for p in described["properties"]:
        default = repr(redact(p["default"], p["name"]))
        extra = f" ({', '.join(p['constraints'])})" if p["constraints"] else ""
        doc = f": {p['doc']}" if p["doc"] else ""
        click.echo(f"  {p['name']}: {p['type']} = {default}{extra}{doc}")


# -- loading applications ----------------------------------------------------------------------
def _app_options(fn: Callable) -> Callable:
    fn = click.option(
        "--name",
        default=None,
        help="The application's name (APPLICATION_NAME); stable across runs.",
    )(fn)
    fn = click.option(
        "--config-file",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="A JSON object of configuration (the --config pairs win over it).",
    )(fn)
    fn = click.option(
        "-c",
        "--config",
        "pairs",
        multiple=True,
        metavar="KEY=VALUE",
        help="Configuration for the application (repeatable). VALUE is JSON when it parses. "
        "dt.operator.OP.prop.NAME, dt.operator.OP.attr.NAME, dt.attr.NAME set properties and "
        "attributes.",
    )(fn)
    return click.argument("app")(fn)


def _load(
    app: str, pairs: tuple[str, ...], config_file: str | None, name: str | None, scrub: Scrubber
) -> tuple[Any, dict[str, Any]]:
    config: dict[str, Any] = {}
    if config_file:
        try:
            data = json.loads(Path(config_file).read_text())
        except ValueError as exc:
            raise click.BadParameter(f"{config_file} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise click.BadParameter(f"{config_file} must hold a JSON object")
        config.update(data)
    try:
        config.update(parse_config(pairs))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from exc
    scrub.add(config)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", ConfigWarning)
            dag = load_application(app, config, name=name)
    except ApplicationError as exc:
        if _debug():
            traceback.print_exc()
        _fail(f"{app}: cannot load the application:", exc.problems, scrub, EXIT_INVALID)
    for warning in said:
        if issubclass(warning.category, ConfigWarning):
            click.echo(scrub(f"warning: {warning.message}"), err=True)
        else:  # the application's own: as Python would have shown them
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    scrub.add_operators(meta.operator for meta in dag.operators.values())
    return dag, config


def _echo_config(config: Mapping[str, Any], scrub: Scrubber) -> None:
    if config:
        click.echo(scrub("config: " + json.dumps(redact_config(config), default=str)))


def _check(app: str, dag: Any, scrub: Scrubber) -> Any:
    """The physical plan of a valid ``dag``; exits 2 listing every problem otherwise."""
    from malhar.engine.plan import build_plan
    from malhar.validation import ValidationError

    try:
        return build_plan(dag, strict=True)
    except ValidationError as exc:
        _fail(f"{app}: the application is not valid:", exc.problems, scrub, EXIT_INVALID)


@cli.command()
@_app_options
@click.option(
    "--connect",
    is_flag=True,
    help="Also check, from this machine, the systems APP reads and writes: Kafka topics, "
    "database tables and columns, input and output paths (nothing is changed).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0.5),
    default=DEFAULT_CONNECT_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for a system that does not answer (--connect).",
)
def validate(
    app: str,
    pairs: tuple[str, ...],
    config_file: str | None,
    name: str | None,
    connect: bool,
    connect_timeout: float,
) -> None:
    """Load APP, validate it and print its physical plan.

    APP is module:attr, path/to/file.py[:attr], path/to/app.json or the name of a
    registered application. Exits with 2 and lists every problem when APP is not valid;
    with --connect, exits with 3 when a system it uses is not there or not ready.
    """
    from malhar.engine.plan import describe

    scrub = Scrubber()
    dag, config = _load(app, pairs, config_file, name, scrub)
    plan = _check(app, dag, scrub)
    _echo_config(config, scrub)
    click.echo(
        f"application {dag.name!r} is valid: {len(dag.operators)} operator(s), "
        f"{len(dag.streams)} stream(s)"
    )
    click.echo(scrub(describe(plan)))
    if connect:
        _check_connections(app, dag, connect_timeout, scrub)


def _check_connections(app: str, dag: Any, timeout: float, scrub: Scrubber) -> None:
    from malhar.preflight import check_connections

    checks = check_connections(dag, timeout)
    click.echo("connections (checked from this machine; nothing changed):")
    for check in checks:
        click.echo(scrub(f"  {check.operator}: {check.found if check.ok else 'FAILED'}"))
    if not checks:
        click.echo("  (no operator reads or writes an external system)")
    problems = [c.problem for c in checks if c.problem is not None]
    if problems:
        _fail(f"{app}: not ready to run:", problems, scrub, EXIT_NOT_READY)


# -- run ---------------------------------------------------------------------------------------
def _error_summary(app: Any, first: int, last: int) -> str:
    totals: dict[str, int] = {}
    for window in range(max(first, 0), last + 1):
        for port, count in app.error_counts(window).items():
            totals[port] = totals.get(port, 0) + int(count)
    shown = [f"{port}={count}" for port, count in sorted(totals.items()) if count]
    return f"; tuples on error ports: {', '.join(shown)}" if shown else ""


def _runtime_failure(app_name: str, exc: BaseException, scrub: Scrubber) -> NoReturn:
    if _debug():
        traceback.print_exception(exc)
        shown = [str(exc)]
    else:
        shown = [exc.reason if isinstance(exc, ApplicationFailed) else reason_of(exc)]
        shown.append("malhar --debug run ... prints the whole error")
    _fail(f"{app_name}: the application failed:", [scrub(s) for s in shown], scrub, EXIT_FAILED)


@cli.command()
@_app_options
@click.option(
    "--master",
    default=DEFAULT_MASTER,
    show_default=True,
    callback=lambda _ctx, _param, value: _check_master(value),
    help="Spark master URL (the default: all cores, 4 attempts per task).",
)
@click.option(
    "--checkpoint",
    default=None,
    help="Checkpoint root (path or hdfs:// URL); reuse it to recover. A temporary folder by default.",
)
@click.option(
    "--windows",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after N windows (default: run until Ctrl-C or SIGTERM).",
)
@click.option(
    "--window-ms",
    type=click.IntRange(min=1),
    default=None,
    help="Streaming window period in ms (default: the STREAMING_WINDOW_MS attribute).",
)
@click.option(
    "--log-level",
    default="WARN",
    show_default=True,
    type=click.Choice(["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"]),
    help="Spark's log level.",
)
@click.option(
    "--progress",
    is_flag=True,
    help="Show a live table of per-operator metrics (tuples/s, window time, backlog).",
)
@click.option(
    "--prometheus-port",
    type=int,
    default=None,
    help="Serve the metrics for Prometheus on this port (needs malhar[metrics]).",
)
@click.option(
    "--spark-conf",
    "spark_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting for the session (repeatable).",
)
def run(
    app: str,
    pairs: tuple[str, ...],
    config_file: str | None,
    name: str | None,
    master: str,
    checkpoint: str | None,
    windows: int | None,
    window_ms: int | None,
    log_level: str,
    progress: bool,
    prometheus_port: int | None,
    spark_pairs: tuple[str, ...],
) -> None:
    """Run APP on Spark: for --windows N, or until Ctrl-C / SIGTERM (then it stops
    after the current window, tearing every operator down).

    APP is module:attr, path/to/file.py[:attr], path/to/app.json or the name of a
    registered application.
    """
    spark_conf = {}
    for pair in spark_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--spark-conf")
        spark_conf[key] = value
    scrub = Scrubber()
    scrub.add(spark_conf)
    dag, config = _load(app, pairs, config_file, name, scrub)
    _check(app, dag, scrub)
    _echo_config(config, scrub)

    import malhar
    from malhar.session import MasterUnreachable, check_master_reachable

    try:
        check_master_reachable(master)  # also when this process has a session already
    except MasterUnreachable as exc:
        _fail(f"{dag.name}: not started", [str(exc)], scrub, 2)
    if checkpoint and "://" not in checkpoint and os.path.isfile(checkpoint):
        _fail(  # said before Spark starts, naming the option
            f"{dag.name}: not started",
            [f"--checkpoint {checkpoint} is a file: give a directory (or a new path)"],
            scrub,
            EXIT_INVALID,
        )
    if checkpoint:
        from malhar.engine.reconcile import refusal_before_launch

        refused = refusal_before_launch(
            dag, os.path.abspath(checkpoint) if "://" not in checkpoint else checkpoint
        )
        if refused:  # the launch would refuse it too, after Spark's start
            _fail(f"{dag.name}: not started", [scrub(refused)], scrub, EXIT_INVALID)
    spark = malhar.build_session(
        master, app_name=f"malhar-{dag.name}", conf=spark_conf, log_level=log_level
    )
    if not _debug() and log_level in ("WARN", "ERROR", "FATAL", "OFF"):
        # a failure is printed once, at the end (malhar --debug run shows Spark's copies)
        from malhar.session import NOISE_LOGGERS, TASK_FAILURE_LOGGERS, set_logger_levels

        set_logger_levels(spark, dict.fromkeys(TASK_FAILURE_LOGGERS, "OFF"))
        set_logger_levels(spark, dict.fromkeys(NOISE_LOGGERS, "ERROR"))
    try:
        with StopSignals() as stop:
            _run(
                dag,
                spark,
                checkpoint,
                windows,
                window_ms,
                master,
                scrub,
                stop,
                Watch(progress, prometheus_port),
            )
    finally:
        try:
            spark.stop()
        except Exception:  # the JVM may already be gone after a failure
            pass


def _run(
    dag: Any,
    spark: Any,
    checkpoint: str | None,
    windows: int | None,
    window_ms: int | None,
    master: str,
    scrub: Scrubber,
    stop: StopSignals,
    watch: Watch | None = None,
) -> None:
    import malhar

    started = time.monotonic()
    if checkpoint and "://" not in checkpoint:
        checkpoint = os.path.abspath(checkpoint)
    try:
        app = malhar.launch(
            dag, spark=spark, checkpoint=checkpoint, windows=windows, window_ms=window_ms
        )
    except (ConfigError, StateError) as exc:
        # refused before its first window (a checkpoint that cannot take this DAG's counts,
        # another application's checkpoint ...): nothing ran
        _fail(f"{dag.name}: not started", [scrub(str(exc))], scrub, EXIT_INVALID)
    except Exception as exc:
        _runtime_failure(dag.name, exc, scrub)
    until = "until its input ends or Ctrl-C" if app.bounded else "until Ctrl-C"
    how = f"{windows} window(s)" if windows else until
    click.echo(f"{dag.name}: running {how} on {master}; checkpoint {scrub(app.checkpoint)}")
    if app.resumed_after >= 0:
        click.echo(
            f"{dag.name}: resuming from the checkpoint after window {app.resumed_after} "
            "(a window begun before is replayed with the same id and tuples)"
        )
    first = app.last_window + 1
    try:
        finished = _wait(app, windows is not None, stop, dag.name, watch or Watch(), scrub)
    except KeyboardInterrupt:
        finished = False
    except Exception as exc:
        _runtime_failure(dag.name, exc, scrub)
    if not finished:
        click.echo(f"{dag.name}: stopping after the current window ...")
        try:
            app.stop()
        except KeyboardInterrupt:
            click.echo(f"{dag.name}: interrupted again; stopping now")
            app.abort()
            click.echo(
                f"{dag.name}: not a clean stop (as after a crash): the next launch replays "
                "the window in flight, and refuses other PARTITIONS until a run stops cleanly"
            )
        except Exception as exc:
            _runtime_failure(dag.name, exc, scrub)
    last = app.last_window
    ran = f"{time.monotonic() - started:.1f}s"
    said = f"done in {ran}" if finished else f"stopped after running {ran}"
    click.echo(f"{dag.name}: {said}; last window {last}{_error_summary(app, first, last)}")


class Watch:
    """How ``run`` shows what the application does: a live metrics table (``--progress`` on
    a terminal; in a log, the same figures as lines every PROGRESS_EVERY s), a Prometheus
    endpoint (``--prometheus-port``), or a line every PROGRESS_EVERY s."""

    def __init__(
        self,
        progress: bool = False,
        prometheus_port: int | None = None,
        *,
        terminal: bool | None = None,
    ) -> None:
        self.progress = progress
        self.prometheus_port = prometheus_port
        # rich's live table redraws only on a terminal: a log would get its last state only
        self.terminal = sys.stdout.isatty() if terminal is None else terminal
        self._live: Any = None
        self._server: Any = None
        self._shown: int | None = None
        self._shown_at = 0.0

    def start(self, app: Any) -> None:
        if self.prometheus_port is not None:
            from malhar.metrics_view import serve_prometheus

            self._server, port = serve_prometheus(app, self.prometheus_port, addr="0.0.0.0")
            click.echo(f"{app.dag.name}: metrics for Prometheus on port {port}")
        if self.progress and self.terminal:
            from rich.live import Live

            from malhar.metrics_view import table

            self._live = Live(table(app.metrics(), app.dag.name), refresh_per_second=2)
            self._live.start()
        self._shown, self._shown_at = app.last_window, time.monotonic()

    def update(self, app: Any) -> None:
        last = app.last_window
        if self._live is not None:
            from malhar.metrics_view import table

            at = f"window {last}" if last >= 0 else "starting (no window complete yet)"
            self._live.update(table(app.metrics(), f"{app.dag.name}: {at}"))
            return
        now = time.monotonic()
        if now - self._shown_at < PROGRESS_EVERY or last == self._shown:
            return
        self._shown, self._shown_at = last, now
        click.echo(f"{app.dag.name}: window {last} complete")
        if self.progress:
            self._echo_metrics(app)

    def stop(self, app: Any | None = None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live.console.line()  # the next message starts below the table
        elif self.progress and app is not None:
            self._echo_metrics(app)  # the last figures, as the live table leaves them
        if self._server is not None:
            self._server.shutdown()

    @staticmethod
    def _echo_metrics(app: Any) -> None:
        from malhar.metrics_view import lines

        for line in lines(app.metrics()):
            click.echo(f"{app.dag.name}: {line}")


def _wait(
    app: Any, bounded: bool, stop: StopSignals, name: str, watch: Watch, scrub: Scrubber
) -> bool:
    """Wait for the end of a bounded run (True) or a stop request (False), serving
    ``malhar repartition`` meanwhile."""
    watch.start(app)
    server = RequestServer(app, windows_run=bounded, scrub=scrub).start()
    try:
        return _wait_loop(app, bounded, stop, name, watch, server)
    finally:
        server.stop()
        watch.stop(app)


def _wait_loop(
    app: Any, bounded: bool, stop: StopSignals, name: str, watch: Watch, server: RequestServer
) -> bool:
    done = threading.Event()
    failure: list[BaseException] = []

    def drain() -> None:  # a bounded run ends when its source has nothing more
        try:
            app.query.processAllAvailable()
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    if bounded:
        threading.Thread(target=drain, name="malhar-run-drain", daemon=True).start()
    while not stop.requested:
        ended = app.input_ended_at()  # every input is bounded and has read everything
        if ended is not None:
            click.echo(f"{name}: every input ended at window {ended}; stopping")
            app.stop()
            return True
        server.poll()
        if bounded and done.wait(0.25):
            app.raise_if_failed()
            if failure:
                raise failure[0]
            app.abort()  # the source has delivered its last window: nothing is cut short
            return True
        if not bounded and app.query.awaitTermination(0.5):
            app.raise_if_failed()
            app.abort()
            return True
        watch.update(app)
    return False


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
