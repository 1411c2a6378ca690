"""The orders sample's data: generated orders (with re-sent duplicates), the products table,
the result table, and the ground truth read back from the topic."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

from samples.orders_top_products.app import TOP_DDL, TOP_FIELDS
from samples.wordcount_exactly_once.data import produce, topic_messages

PRODUCTS = ["tea", "jam", "oat", "rye", "egg", "fig", "nut", "cod", "ham", "soy", "yam", "kale"]


def products(n: int) -> list[tuple[int, str]]:
    return [
        (i + 1, PRODUCTS[i % len(PRODUCTS)] + ("" if i < len(PRODUCTS) else str(i)))
        for i in range(n)
    ]


def orders(
    count: int, n_products: int, *, start: int = 0, seed: int = 3, duplicates: float = 0.1
) -> list[str]:
    """``count`` orders as JSON lines, ids from ``start``; about ``duplicates`` of them are
    sent twice (the same record again a little later: an at-least-once producer)."""
    rng = random.Random(seed + start)
    weights = [1 / (r + 1) for r in range(n_products)]
    out: list[str] = []
    for i in range(start, start + count):
        order = {
            "order_id": i,
            "product_id": rng.choices(range(1, n_products + 1), weights)[0],
            "qty": rng.randint(1, 5),
            "ts": 1_700_000_000_000 + i * 50,
        }
        out.append(json.dumps(order))
        if rng.random() < duplicates:
            out.insert(max(0, len(out) - rng.randint(0, 20)), json.dumps(order))
    return out


def create_tables(url: str, products_table: str, top_table: str, n_products: int) -> None:
    engine = sa.create_engine(url)
    try:
        q = engine.dialect.identifier_preparer.quote
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"CREATE TABLE IF NOT EXISTS {q(products_table)} (id int PRIMARY KEY, name text NOT NULL)"
                )
            )
            conn.execute(sa.text(f"DELETE FROM {q(products_table)}"))
            conn.execute(
                sa.text(f"INSERT INTO {q(products_table)} (id, name) VALUES (:id, :name)"),
                [{"id": i, "name": name} for i, name in products(n_products)],
            )
            conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {q(top_table)} ({TOP_DDL})"))
    finally:
        engine.dispose()


def produce_orders(bootstrap_servers: str, topic: str, lines: list[str]) -> int:
    return produce(bootstrap_servers, topic, lines)


def truth(bootstrap_servers: str, topic: str, n_products: int) -> Counter:
    """Quantity per product name of every distinct order in the topic."""
    names = dict(products(n_products))
    seen: dict[int, dict] = {}
    for value in topic_messages(bootstrap_servers, topic):
        order = json.loads(value)
        seen.setdefault(order["order_id"], order)
    total: Counter = Counter()
    for order in seen.values():
        total[names[order["product_id"]]] += order["qty"]
    return total


def table_rows(url: str, top_table: str) -> list[tuple]:
    engine = sa.create_engine(url)
    try:
        q = engine.dialect.identifier_preparer.quote
        with engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    sa.text(
                        f"SELECT app_window, rank, product, quantity FROM {q(top_table)} ORDER BY app_window, rank"
                    )
                )
            ]
    finally:
        engine.dispose()


def totals(rows: list[tuple]) -> Counter:
    """Quantity per product over every application window of the result table."""
    out: Counter = Counter()
    for _, _, product, quantity in rows:
        out[product] += quantity
    return out


def archive_lines(path: str) -> list[str]:
    """Every line of the archive's visible files, file by file in name order (the names
    starting with ``_`` or ``.`` are the file output's staging and in-progress files)."""
    root = Path(path)
    if not root.is_dir():
        return []
    out: list[str] = []
    for f in sorted(root.iterdir()):
        if f.is_file() and not f.name.startswith(("_", ".")):
            out.extend(f.read_text().splitlines())
    return out


def archived_rows(path: str) -> list[tuple]:
    """The archived rankings as the result table's rows ``(app_window, rank, product,
    quantity)``, one per JSON line."""
    return [tuple(json.loads(line)[k] for k in TOP_FIELDS) for line in archive_lines(path)]
