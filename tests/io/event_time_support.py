"""The event-time pipeline the input tests run through the engine: an input of 2 partitions
-> a ``WatermarkGenerator`` per partition -> per-minute counts by user -> a collector, and
the minutes that fired."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from malhar import DAG, Operator
from malhar.testing.operators import Collector, collected
from malhar.window import KeyedWindowedOperator, TimeWindows, WatermarkGenerator
from malhar.window.accumulation import Count

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MINUTE = 60_000


def per_minute_counts(name: str, source: Operator, key: str, *others: tuple[str, Operator]) -> DAG:
    """``source`` ("in", 2 partitions) -> generator ("wm", on ``ts``, 5 s out of order) ->
    per-minute counts of ``key`` ("counts") -> collector "out"; each of ``others`` (a name
    and a windowed operator) also reads the generator's stream, into a collector
    ``<name>-out``."""
    dag = DAG(name)
    src = dag.add_operator("in", source, PARTITIONS=2)
    gen = dag.add_operator(
        "wm", WatermarkGenerator(timestamp="ts", max_out_of_orderness=5_000), PARTITIONS=2
    )
    counts = dag.add_operator(
        "counts",
        KeyedWindowedOperator(
            Count(), TimeWindows(MINUTE), key=key, timestamp="ts", output_format="row"
        ),
    )
    more = [(n, dag.add_operator(n, op)) for n, op in others]
    dag.add_stream("clicks", src.output, gen.input)
    dag.add_stream("timed", gen.output, counts.input, *(h.input for _, h in more))
    dag.add_stream("panes", counts.output, dag.add_operator("out", Collector()).input)
    for n, h in more:
        dag.add_stream(f"{n}-panes", h.output, dag.add_operator(f"{n}-out", Collector()).input)
    return dag


def fired_minutes(checkpoint: str) -> list[tuple[int, Any]]:
    """``(minute after T0, count)`` of every pane the counts sent, sorted."""
    panes = [p for rows in collected(checkpoint, "out").values() for p in rows]
    start = int(T0.timestamp() * 1000)
    return sorted(((p["window_start"] - start) // MINUTE, p["value"]) for p in panes)
