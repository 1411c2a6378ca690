"""The sample's data: generated click events, the tables, and the batch reference.

Main clicks carry event times that advance with their position in the stream, each up
to ``jitter_ms`` behind it (out of order, never more than the watermark's bound), so none
of them is late. *Late* clicks are an hour old: produced once the application's
watermark has passed the start of the stream, they are beyond any allowed lateness and
belong in the late table. The batch reference groups the main clicks by user and
sliding window; it is computed from the messages read back from the topic.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from typing import Any

import sqlalchemy as sa

from samples.event_time_windows.app import LATE_DDL, TABLE_DDL

#: the event time of the first main click (ms): 2023-11-14T22:13:20Z
BASE_TS = 1_700_000_000_000
LATE_BEFORE = BASE_TS - 60_000  # late clicks are older than this


def clicks(
    n: int,
    *,
    first: int = 0,
    users: int = 50,
    step_ms: int = 20,
    jitter_ms: int = 2_000,
    seed: int = 5,
) -> list[dict[str, Any]]:
    """Main clicks ``first .. first + n - 1`` of the stream (deterministic for a seed)."""
    rng = random.Random(seed * 1_000_003 + first)
    out = []
    for i in range(first, first + n):
        out.append(
            {
                "user": f"u{rng.randrange(users)}",
                "page": f"/p{rng.randrange(20)}",
                "ts": BASE_TS + i * step_ms - rng.randrange(jitter_ms),
            }
        )
    return out


def late_clicks(n: int, *, users: int = 50, seed: int = 9) -> list[dict[str, Any]]:
    """Clicks an hour old."""
    rng = random.Random(seed)
    return [
        {"user": f"u{rng.randrange(users)}", "page": "/late", "ts": BASE_TS - 3_600_000 + i}
        for i in range(n)
    ]


def encode(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(e, separators=(",", ":")) for e in events]


def produce(bootstrap_servers: str, topic: str, events: list[dict[str, Any]]) -> int:
    """Produce ``events`` as JSON, round robin over the topic's partitions, in order."""
    from samples.wordcount_exactly_once.data import produce as produce_values

    return produce_values(bootstrap_servers, topic, encode(events))


def topic_events(bootstrap_servers: str, topic: str) -> list[dict[str, Any]]:
    """Every event in the topic now."""
    from samples.wordcount_exactly_once.data import topic_messages

    return [json.loads(v) for v in topic_messages(bootstrap_servers, topic)]


def reference(
    events: list[dict[str, Any]], window_ms: int = 10_000, slide_ms: int = 5_000
) -> tuple[dict[tuple[str, int, int], int], Counter]:
    """The batch reference: clicks per (user, window start, window end) of the main
    clicks, and the late clicks as a Counter of (user, ts)."""
    counts: dict[tuple[str, int, int], int] = defaultdict(int)
    late: Counter = Counter()
    for e in events:
        ts = e["ts"]
        if ts < LATE_BEFORE:
            late[(e["user"], ts)] += 1
            continue
        last = ts - ts % slide_ms
        for start in range(last - window_ms + slide_ms, last + 1, slide_ms):
            counts[(e["user"], start, start + window_ms)] += 1
    return dict(counts), late


# -- PostgreSQL ------------------------------------------------------------------------------
def create_tables(url: str, table: str = "clicks", late_table: str = "late_clicks") -> None:
    engine = sa.create_engine(url)
    try:
        q = engine.dialect.identifier_preparer.quote
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {q(table)} ({TABLE_DDL})"))
            conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {q(late_table)} ({LATE_DDL})"))
    finally:
        engine.dispose()


def read_tables(
    url: str, table: str = "clicks", late_table: str = "late_clicks"
) -> tuple[dict[tuple[str, int, int], int], Counter, Counter]:
    """(user, start, end) -> clicks; the late clicks as a Counter of (user, ts); and the
    timings of the rows."""
    engine = sa.create_engine(url)
    try:
        q = engine.dialect.identifier_preparer.quote
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT user_id, window_start, window_end, clicks, timing FROM {q(table)}")
            ).all()
            late = conn.execute(sa.text(f"SELECT user_id, ts FROM {q(late_table)}")).all()
        counts = {(u, s, e): n for u, s, e, n, _ in rows}
        timings = Counter(t for *_, t in rows)
        return counts, Counter((u, ts) for u, ts in late), timings
    finally:
        engine.dispose()


def compare(got: dict, expected: dict) -> str:
    """A one-line account of the difference between the table and the reference."""
    if got == expected:
        return f"EXACT ({len(got)} user windows, {sum(got.values())} window clicks)"
    missing = [k for k in expected if k not in got][:3]
    wrong = [(k, got[k], expected[k]) for k in expected if k in got and got[k] != expected[k]][:3]
    extra = [k for k in got if k not in expected][:3]
    return (
        f"MISMATCH: {len(got)} rows, {len(expected)} expected; missing {missing}, "
        f"wrong (got, expected) {wrong}, extra {extra}"
    )
