"""``malhar state list|clean``: the local stores of managed state on this host.

They are caches of checkpoint files (:mod:`malhar.util.state.local_dirs`), kept so that a
restart catches up quickly; ``clean`` removes those nothing will use again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from malhar.util.state.local_dirs import StoreDir


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _dirs(n: int) -> str:
    return f"{n} director{'y' if n == 1 else 'ies'}"


def _line(store: StoreDir) -> str:
    whose = store.checkpoint or "(no marker)"
    return f"{store.path}  {store.status:<8}  {_mib(store.size):>10}  {whose}"


@click.group(name="state")
def state() -> None:
    """The local stores of managed state on this host (caches of checkpoints)."""


@state.command("list")
def list_stores() -> None:
    """List the store directories under $MALHAR_STATE_DIR (default: the temporary
    directory's malhar-state-UID) and their checkpoints: live (it exists), orphan (it is
    gone), unknown (cannot tell: HDFS unreachable, credentials masked) or unmarked (made
    before markers)."""
    from malhar.util.state import local_dirs  # imported by the command: the CLI starts faster

    stores = local_dirs.scan()
    click.echo(f"{local_dirs.state_base()}: {_dirs(len(stores))}")
    for store in stores:
        click.echo(_line(store))


@state.command()
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    metavar="ROOT",
    help="Also remove the stores of this checkpoint root (path or URL, as the application "
    "names it), even if it exists; repeatable. Not while an application of it runs.",
)
@click.option(
    "--all-orphans",
    is_flag=True,
    help="Also remove directories without a marker (made before malhar wrote markers): "
    "whether their checkpoint exists cannot be told, so they count as orphans only with "
    "this flag.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
def clean(checkpoints: tuple[str, ...], all_orphans: bool, dry_run: bool) -> None:
    """Remove the local stores of deleted checkpoints (orphans) and of each --checkpoint.

    Stores of a checkpoint that exists are kept unless --checkpoint names it; those of an
    HDFS checkpoint that cannot be checked are kept. Prints each directory removed and the
    bytes freed."""
    from malhar.util.state import local_dirs

    stores = local_dirs.scan()
    chosen = local_dirs.select(stores, checkpoints=checkpoints, unmarked=all_orphans)
    removed = chosen if dry_run else local_dirs.remove(chosen)
    verb = "would remove" if dry_run else "removed"
    for store in removed:
        click.echo(f"{verb} {_line(store)}")
    freed = sum(s.size for s in removed)
    click.echo(
        f"{verb} {_dirs(len(removed))} under {local_dirs.state_base()}; "
        f"{'would free' if dry_run else 'freed'} {freed} bytes ({_mib(freed)})"
    )
    unmarked = [s for s in stores if s.status == local_dirs.UNMARKED and s not in chosen]
    if unmarked:
        size = sum(s.size for s in unmarked)
        click.echo(
            f"kept {_dirs(len(unmarked))} without a marker ({_mib(size)}); "
            "--all-orphans removes them"
        )
