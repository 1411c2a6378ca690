"""Progress for long commands (the sample run, benchmarks, ``malhar services up``).

On a terminal a rich progress bar; otherwise (CI logs, pipes) one plain line at most every
``every`` seconds, so a log shows that the command is alive without flooding it.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> with progress("words counted", total=10, stream=out, every=0) as update:
    ...     update(4)
    ...     update(10)
    >>> print(out.getvalue().strip())
    words counted: 4 of 10 (40%)
    words counted: 10 of 10 (100%)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["progress", "step"]


@contextmanager
def progress(
    what: str, total: float | None = None, *, stream: TextIO | None = None, every: float = 5.0
) -> Iterator[Callable[[float], None]]:
    """Yield ``update(done)``; shows ``done`` (of ``total``) as it moves."""
    out = stream or sys.stdout
    if out.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}"),
        ]
        if total:
            columns.append(TextColumn("of {task.total:,.0f}"))
        with Progress(*columns, TimeElapsedColumn(), console=Console(file=out)) as bar:
            task = bar.add_task(what, total=total)
            yield lambda done: bar.update(task, completed=done)
        return
    last = [-float("inf"), None]

    def update(done: float) -> None:
        now = time.monotonic()
        if done == last[1] or (now - last[0] < every and done != total):
            return
        last[:] = [now, done]
        share = f" ({100 * done / total:.0f}%)" if total else ""
        of = f" of {total:,.0f}" if total else ""
        print(f"{what}: {done:,.0f}{of}{share}", file=out, flush=True)

    yield update


def step(what: str, stream: TextIO | None = None) -> Callable[[], None]:
    """Print ``what ...`` now; the returned ``done()`` prints how long it took."""
    out = stream or sys.stdout
    started = time.monotonic()
    print(f"{what} ...", file=out, flush=True)
    return lambda: print(
        f"  {what}: done in {time.monotonic() - started:.1f}s", file=out, flush=True
    )
