"""Run an operator as N partitions with harnesses and its unifiers, as the engine would.

``run_partitioned(make, windows, n, ...)`` spreads every window's ``(port, tuple)`` inputs
over ``n`` harness instances (by the operator's codec when it is keyed, at random
otherwise), runs a harness of the port's unifier over all partitions' output of each
window (in a random partition order), and returns ``{port: {window: [tuples]}}``.
``replay_window`` restores a checkpoint and runs a window again.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from malhar import OperatorContext
from malhar.algo._base import Partitioning, order_key
from malhar.operator import Operator, PassThroughUnifier
from malhar.ports import ports_of
from malhar.testing.harness import OperatorHarness

Windows = list[list[tuple[str, Any]]]
Outputs = dict[str, dict[int, list[Any]]]


def _context(op: Operator, partition: int, n: int, ckpt: Path | None) -> OperatorContext:
    return OperatorContext(
        name=type(op).__name__.lower(),
        partition=partition,
        partitions=n,
        checkpoint=str(ckpt) if ckpt else None,
    )


def partitioning_of(op: Operator) -> Partitioning:
    how = getattr(op, "partitioning", None)
    return how() if how is not None else Partitioning("unifier")


def _route(op: Operator, port: str, value: Any, n: int, rng: random.Random) -> list[int]:
    """The partitions that receive ``value``."""
    part = partitioning_of(op)
    if part.kind == "single":
        return [0]
    codec = part.codecs.get(port)
    if codec is None:
        return [rng.randrange(n)]
    return [codec.partition(value) % n]


def _split_batch(op: Operator, port: str, batch: pa.RecordBatch, n: int, rng: random.Random):
    part = partitioning_of(op)
    codec = part.codecs.get(port)
    if part.kind == "single":
        return {0: batch}
    if codec is None:
        import numpy as np

        dest = np.array([rng.randrange(n) for _ in range(batch.num_rows)])
    else:
        dest = codec.partition_batch(batch) % n
    return {int(d): batch.filter(pa.array(dest == d)) for d in sorted(set(dest.tolist()))}


def run_partitioned(
    make: Callable[[], Operator],
    windows: Windows,
    n: int,
    *,
    seed: int = 0,
    ckpt: Path | None = None,
    unify: bool = True,
) -> Outputs:
    rng = random.Random(seed)
    op0 = make()
    harnesses = []
    for p in range(n):
        root = ckpt / f"n{n}" if ckpt else None
        harnesses.append(OperatorHarness(make(), _context(op0, p, n, root)))
    _, outputs = ports_of(type(op0))
    unifiers: dict[str, OperatorHarness] = {}
    if n > 1 and unify:
        for port in outputs:
            u = op0.get_unifier(port)
            if u is not None and type(u) is not PassThroughUnifier:
                unifiers[port] = OperatorHarness(u, OperatorContext(name=f"{port}#unifier"))
    result: Outputs = {port: {} for port in outputs}
    for w, inputs in enumerate(windows):
        for h in harnesses:
            h.begin_window(w)
        for port, value in inputs:
            if isinstance(value, pa.RecordBatch):
                for d, part in _split_batch(op0, port, value, n, rng).items():
                    harnesses[d].put(port, part)
            else:
                for d in _route(op0, port, value, n, rng):
                    harnesses[d].put(port, value)
        for h in harnesses:
            h.end_window()
        order = list(range(n))
        rng.shuffle(order)
        for port in outputs:
            partials = [t for p in order for t in harnesses[p].sink(port).per_window.get(w, [])]
            if port in unifiers:
                u = unifiers[port]
                u.run_window([("input", t) for t in partials], window=w)
                partials = u.sink("output").per_window.get(w, [])
            result[port][w] = partials
    for h in harnesses:
        h.teardown()
    return result


def run_with_replay(
    make: Callable[[], Operator], windows: Windows, replayed: int, ckpt: Path | None
) -> tuple[list[Outputs], Outputs]:
    """One partition; checkpoint before window ``replayed``, run it, then restore a fresh
    operator from that checkpoint and run it again. Returns (first run outputs per window,
    replay outputs)."""
    op = make()
    context = _context(op, 0, 1, ckpt / "replay" if ckpt else None)
    h = OperatorHarness(op, context)
    saved = None
    for w, inputs in enumerate(windows[: replayed + 1]):
        if w == replayed:
            saved = h.checkpoint()
        h.run_window(inputs, window=w)
    first = {port: {replayed: s.per_window.get(replayed, [])} for port, s in h.sinks.items()}
    h.teardown()
    assert saved is not None
    again = OperatorHarness.restored(make(), saved, context)
    again.run_window(windows[replayed], window=replayed)
    second = {port: {replayed: s.per_window.get(replayed, [])} for port, s in again.sinks.items()}
    again.teardown()
    return [first], second


# -- comparing outputs -------------------------------------------------------------------------
def _round(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return value
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_round(v) for v in value)
    return value


def as_multiset(tuples: list[Any]) -> list[Any]:
    """Order-free comparison form: floats rounded to 9 significant digits, sorted."""
    return sorted((_round(t) for t in tuples), key=order_key)


def as_sequence(tuples: list[Any]) -> list[Any]:
    return [_round(t) for t in tuples]


def normalized(outputs: Outputs, ordered: bool = False) -> dict[str, dict[int, list[Any]]]:
    form = as_sequence if ordered else as_multiset
    return {port: {w: form(ts) for w, ts in per.items() if ts} for port, per in outputs.items()}


def run_application_window(
    make: Callable[[], Operator], windows: Windows, restore_after: int | None, ckpt: Path | None
) -> Outputs:
    """One partition; every window of ``windows`` is a streaming window of ONE application
    window (``APPLICATION_WINDOW_COUNT=len(windows)``): ``begin_window`` once, state
    checkpointed after each streaming window. With ``restore_after``, the partition is
    lost after that streaming window and a fresh operator restored from its checkpoint
    runs the rest without a new ``begin_window``, as the engine does."""
    op = make()
    context = _context(op, 0, 1, ckpt)
    h = OperatorHarness(op, context)
    h.begin_window(0)
    done: list[OperatorHarness] = []
    for w, inputs in enumerate(windows):
        for sink in h.sinks.values():
            sink.window = 0
        for port, value in inputs:
            h.put(port, value)
        if w == len(windows) - 1:
            break
        h.managed.checkpoint(w)  # the engine checkpoints after every streaming window
        h.window = w
        if w == restore_after:
            saved = h.checkpoint()
            done.append(h)
            h = OperatorHarness.restored(make(), saved, context).setup()
            h.window = w + 1
            h.dispatcher.begin_window(w + 1)
    h.window = len(windows) - 1
    h.end_window()
    done.append(h)
    out: Outputs = {}
    for port in h.sinks:
        out[port] = {0: [t for x in done for t in x.sink(port).per_window.get(0, [])]}
    for x in done:
        x.teardown()
    return out
