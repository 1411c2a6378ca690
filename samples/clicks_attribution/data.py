"""The clicks sample's data: generated impressions and clicks (re-sent duplicates, bot
clicks, bad lines), the result tables, and the ground truth read back from the topics."""

from __future__ import annotations

import random
from collections import Counter

import sqlalchemy as sa

from samples.clicks_attribution.app import AD_CLICKS_DDL, ATTRIBUTED_DDL, REJECTED_DDL
from samples.wordcount_exactly_once.data import produce, topic_messages

ADS = ["shoes", "books", "tea", "bikes", "maps", "lamps", "socks", "games"]
T0 = 1_700_000_000_000


def events(count: int, *, start: int = 0, seed: int = 7) -> tuple[list[str], list[str]]:
    """``count`` impressions (ids from ``start``) and their clicks as CSV lines.

    About a third of the impressions are clicked (some twice), a tenth of the clicks by a
    bot, some clicks come after the attribution bound; about 5% of the lines are sent
    twice and a few are not valid records."""
    rng = random.Random(seed + start)
    imps: list[str] = []
    clicks: list[str] = []
    for i in range(start, start + count):
        ts = T0 + i * 20
        imps.append(f"{i},{rng.choice(ADS)},{ts}")
        for c in range(rng.choice((0, 0, 0, 1, 1, 2))):
            source = "bot" if rng.random() < 0.1 else rng.choice(("web", "app"))
            clicks.append(f"{i * 10 + c},{i},{source},{ts + rng.randint(0, 90_000)}")
        if rng.random() < 0.01:
            imps.append(f"{i},{rng.choice(ADS)}")  # a field short: to the error port
        if rng.random() < 0.01:
            clicks.append(f"{i * 10 + 9},{i},web,soon")  # not a number: to the error port
    for lines in (imps, clicks):
        for _ in range(len(lines) // 20):  # an at-least-once producer re-sends some lines
            j = rng.randrange(len(lines))
            lines.insert(min(len(lines), j + rng.randint(1, 30)), lines[j])
    return imps, clicks


def create_tables(
    url: str, attributed_table: str, ad_clicks_table: str, rejected_table: str = "rejected_clicks"
) -> None:
    engine = sa.create_engine(url)
    try:
        q = engine.dialect.identifier_preparer.quote
        with engine.begin() as conn:
            for table, ddl in (
                (attributed_table, ATTRIBUTED_DDL),
                (ad_clicks_table, AD_CLICKS_DDL),
                (rejected_table, REJECTED_DDL),
            ):
                conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {q(table)} ({ddl})"))
    finally:
        engine.dispose()


def produce_lines(bootstrap_servers: str, topic: str, lines: list[str]) -> int:
    return produce(bootstrap_servers, topic, lines)


def _records(bootstrap_servers: str, topic: str, width: int) -> list[list[str]]:
    out = []
    for value in topic_messages(bootstrap_servers, topic):
        fields = value.decode().split(",")
        if len(fields) == width and all(f.strip() for f in fields):
            out.append(fields)
    return out


def truth(
    bootstrap_servers: str, impressions_topic: str, clicks_topic: str, within_ms: int
) -> set[tuple]:
    """(click_id, imp_id, ad, source, latency_ms) of every attributable click in the topics:
    a valid, distinct, non-bot click whose impression is at most ``within_ms`` away."""
    imps: dict[int, tuple[str, int]] = {}
    for imp_id, ad, ts in _records(bootstrap_servers, impressions_topic, 3):
        imps.setdefault(int(imp_id), (ad, int(ts)))
    clicks: dict[int, tuple] = {}
    for click_id, imp_id, source, ts in _records(bootstrap_servers, clicks_topic, 4):
        if ts.isdigit() and source != "bot":
            clicks.setdefault(int(click_id), (int(imp_id), source, int(ts)))
    out = set()
    for click_id, (imp_id, source, ts) in clicks.items():
        if imp_id in imps and abs(ts - imps[imp_id][1]) <= within_ms:
            ad, imp_ts = imps[imp_id]
            out.add((click_id, imp_id, ad, source, ts - imp_ts))
    return out


def rejected_truth(bootstrap_servers: str, clicks_topic: str) -> int:
    """Clicks the sample rejects, from the topic: every re-sent copy of a valid click line
    (the dedup comes first) and every distinct valid bot click."""
    lines = 0
    source_of: dict[int, str] = {}
    for click_id, _, source, ts in _records(bootstrap_servers, clicks_topic, 4):
        if ts.isdigit():  # else not a number: the parser's error port
            lines += 1
            source_of.setdefault(int(click_id), source)
    bots = sum(1 for source in source_of.values() if source == "bot")
    return lines - len(source_of) + bots


def rejected_total(url: str, table: str) -> int:
    return sum(n for _, n in _select(url, table, "what, clicks"))


def attributed_rows(url: str, table: str) -> set[tuple]:
    return set(_select(url, table, "click_id, imp_id, ad, source, latency_ms"))


def ad_clicks(url: str, table: str) -> dict[str, int]:
    return dict(_select(url, table, "ad, clicks"))


def per_ad(rows: set[tuple]) -> Counter:
    return Counter(r[2] for r in rows)


def _select(url: str, table: str, columns: str) -> list[tuple]:
    engine = sa.create_engine(url)
    try:
        q = engine.dialect.identifier_preparer.quote
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(f"SELECT {columns} FROM {q(table)}"))]
    finally:
        engine.dispose()
