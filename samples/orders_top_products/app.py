"""The orders sample's DAG: the operator catalogue end to end, exactly once.

::

    orders (KafkaTextInputOperator, 2) -> parse (JsonParser, typed; fused)
      -> dedup (TimeBasedDedup by order_id, 2, keyed) -> enrich (Enricher from the
         PostgreSQL products table; fused) -> quantity (Sum per product name, 2, unifier)
      -> top (TopN by quantity, per application window) -> rename (ProjectionOperator)
      -> out (JdbcOutputOperator: upsert into top_products(app_window, rank, product, quantity))
      -> as_json (JsonFormatter) -> archive (LinesFileOutput: rolling JSON-lines files,
         when ``archive_path`` is set)

Kafka offsets per window are in the input's window data manager, the dedup's keys in
managed state, the sums and ranks in checkpointed state, and each window's rows reach
the table in one transaction with its meta row: a crash anywhere replays the same
windows with the same results, and the table ends exact. The archive gets the same
rankings as JSON text, one object per line, in files renamed into place once their
windows are committed: each ranking once, whatever crashes happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from malhar import DAG
from malhar.algo import (
    Enricher,
    JdbcLookup,
    JsonFormatter,
    JsonParser,
    ProjectionOperator,
    Sum,
    TimeBasedDedup,
    TopN,
    partition_by_key,
)
from malhar.io.fs import LinesFileOutput
from malhar.io.jdbc import JdbcOutputOperator
from malhar.io.kafka import KafkaTextInputOperator

APPLICATION_NAME = "orders-top-products"
ORDER_DDL = "order_id bigint, product_id bigint, qty bigint, ts bigint"
TOP_DDL = (
    "app_window bigint NOT NULL, rank int NOT NULL, product text, quantity bigint, "
    "PRIMARY KEY (app_window, rank)"
)
#: the fields of an archived ranking row, in the order of its JSON object
TOP_FIELDS = ["app_window", "rank", "product", "quantity"]


@dataclass
class OrdersSettings:
    bootstrap_servers: str
    topic: str
    url: str
    products_table: str = "products"
    top_table: str = "top_products"
    top_n: int = 10
    #: streaming windows per application window of the sums and the ranking
    app_windows: int = 3
    max_records_per_window: int = 2_000
    #: how long an order id is remembered by the dedup (ms of event time)
    dedup_ms: int = 3_600_000
    #: a directory (local path or HDFS URL) for the rankings as JSON lines; None: no archive
    archive_path: str | None = None
    #: streaming windows per archive file (a file is visible once all of them are committed)
    archive_roll_windows: int = 20

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OrdersSettings:
        known = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        missing = [k for k in ("bootstrap_servers", "topic", "url") if k not in known]
        if missing:
            raise ValueError(f"the orders sample needs {', '.join(missing)} in its config")
        return cls(**known)


def populate(dag: DAG, s: OrdersSettings) -> DAG:
    orders = dag.add_operator(
        "orders",
        KafkaTextInputOperator(
            bootstrap_servers=s.bootstrap_servers,
            topics=s.topic,
            initial_offset="APPLICATION_OR_EARLIEST",
            max_records_per_window=s.max_records_per_window,
        ),
        PARTITIONS=2,
    )
    parse = dag.add_operator("parse", JsonParser(schema=ORDER_DDL, field="value"), PARTITIONS=2)
    dedup = partition_by_key(
        dag.add_operator(
            "dedup",
            TimeBasedDedup(key="order_id", time="ts", expire_after=s.dedup_ms, schema=ORDER_DDL),
            PARTITIONS=2,
        )
    )
    enrich = dag.add_operator(
        "enrich",
        Enricher(
            JdbcLookup(s.url, s.products_table),
            lookup_fields=["product_id"],
            store_fields=["id"],
            include_fields=["name"],
            miss_policy="error",
            schema=f"{ORDER_DDL}, name string",
        ),
        PARTITIONS=2,
    )
    quantity = dag.add_operator(
        "quantity",
        Sum(key="name", value="qty"),
        PARTITIONS=2,
        APPLICATION_WINDOW_COUNT=s.app_windows,
    )
    top = dag.add_operator(
        "top",
        TopN(n=s.top_n, order_by="sum", window_field="app_window"),
        APPLICATION_WINDOW_COUNT=s.app_windows,
    )
    rename = dag.add_operator(
        "rename",
        ProjectionOperator(
            select_fields=["app_window", "rank", "name", "sum"],
            rename={"name": "product", "sum": "quantity"},
        ),
    )
    out = dag.add_operator(
        "out",
        JdbcOutputOperator(
            s.url, table=s.top_table, mode="upsert", key_columns=["app_window", "rank"]
        ),
    )
    dag.add_stream("records", orders.output, parse.input)
    dag.add_stream("orders", parse.out, dedup.input)
    dag.add_stream("unique", dedup.unique, enrich.input)
    dag.add_stream("enriched", enrich.output, quantity.data)
    dag.add_stream("sums", quantity.sum, top.data)
    dag.add_stream("ranked", top.top, rename.input)
    rows = dag.add_stream("rows", rename.projected, out.input)
    if s.archive_path:
        as_json = dag.add_operator("as_json", JsonFormatter(fields=TOP_FIELDS))
        archive = dag.add_operator(
            "archive", LinesFileOutput(s.archive_path, roll_windows=s.archive_roll_windows)
        )
        dag.add_stream(rows.name, rename.projected, as_json.input)
        dag.add_stream("json_lines", as_json.out, archive.input)
    return dag


def application(dag: DAG, config: dict[str, Any]) -> None:
    """``malhar run samples.orders_top_products.app --config topic=... --config url=...``."""
    populate(dag, OrdersSettings.from_config(config))
