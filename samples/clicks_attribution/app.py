"""The clicks sample's DAG: two Kafka topics joined on managed state, exactly once.

::

    impressions (KafkaTextInputOperator, 2) -> parse_imps (CsvParser, typed)
      -> imps (BoundedDedup by imp_id, 2, keyed) ------------------------------+
      -duplicate-> dropped (DevNull: re-sent impressions)                        |
    clicks (KafkaTextInputOperator, 2) -> parse_clicks (CsvParser, typed)        |
      -> throttle (Throttle, at most ``max_clicks_per_second`` per partition)    |
      -> click_dedup (TimeBasedDedup by click_id, 2, keyed)                      |
      -> bots (FilterOperator "source != 'bot'")                                 |
      -truePort-> join (StreamJoin on imp_id within ``within_ms``, 2, keyed)   <-+
      -> latency (TransformOperator "right_ts - ts") -> pick (ProjectionOperator)
      -> fork (StreamDuplicater)
           out1 -> attributed (JdbcOutputOperator, insert: one row per attributed click)
           out2 -> per_ad (CountKeyVal by ad, cumulative) -> as_clicks (ProjectionOperator)
             -> ad_clicks (JdbcOutputOperator, upsert: clicks per ad so far)
    click_dedup -duplicate-> rejected (StreamMerger) <-falsePort- bots
      -> rejected_count (Counter, per ``rejected_windows``) -> rejected_row (TransformOperator)
      -> nonzero (FilterOperator "clicks > 0": a count of none touches no table)
      -> rejected_total (JdbcOutputOperator, merge_add: rejected clicks so far)

The rejected chain runs in ``click_dedup``'s two partitions (fused: no task of its own):
each partition's counts go to the table without a unifier (``PARALLEL_PARTITION``), and
``merge_add`` adds them up, each partition exactly once with its own meta row.

Kafka offsets per window are in the inputs' window data managers, the dedups' keys and
the join's both sides in managed state, the cumulative counts in checkpointed state, and
each window's rows reach PostgreSQL in one transaction with its meta row. ``attributed``
is a plain insert into a table keyed by ``click_id``: a click written twice would fail
the window, so the table is the proof that nothing is emitted twice or lost; the
rejected total is added window by window (``merge_add``), so a window counted twice or
lost would show in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from malhar import DAG
from malhar.algo import (
    BoundedDedup,
    Counter,
    CountKeyVal,
    CsvParser,
    DevNull,
    FilterOperator,
    ProjectionOperator,
    StreamDuplicater,
    StreamJoin,
    StreamMerger,
    Throttle,
    TimeBasedDedup,
    TransformOperator,
    partition_by_key,
)
from malhar.io.jdbc import JdbcOutputOperator
from malhar.io.kafka import KafkaTextInputOperator

APPLICATION_NAME = "clicks-attribution"
IMPRESSION_DDL = "imp_id bigint, ad string, ts bigint"
CLICK_DDL = "click_id bigint, imp_id bigint, source string, ts bigint"
ATTRIBUTED_DDL = (
    "click_id bigint PRIMARY KEY, imp_id bigint NOT NULL, ad text NOT NULL, "
    "source text NOT NULL, latency_ms bigint NOT NULL"
)
#: managed-state memory per partition of each stateful operator
_BUDGET = 16 << 20
AD_CLICKS_DDL = "ad text PRIMARY KEY, clicks bigint NOT NULL"
REJECTED_DDL = "what text PRIMARY KEY, clicks bigint NOT NULL"


@dataclass
class ClicksSettings:
    bootstrap_servers: str
    impressions_topic: str
    clicks_topic: str
    url: str
    attributed_table: str = "attributed_clicks"
    ad_clicks_table: str = "ad_clicks"
    rejected_table: str = "rejected_clicks"
    #: a click is attributed to its impression when at most this far apart (event time, ms)
    within_ms: int = 60_000
    #: application windows a tuple stays joinable (longer than any run of the sample)
    join_windows: int = 5_000
    #: streaming windows per application window of the join and the counts
    app_windows: int = 2
    max_records_per_window: int = 2_000
    #: streaming windows per count of rejected clicks (one table write per count)
    rejected_windows: int = 10
    #: a guard on the click stream (per partition): far above what the sample produces,
    #: so it never waits there, but a flood would slow the reader instead of the join
    max_clicks_per_second: int = 50_000

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ClicksSettings:
        known = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        needed = ("bootstrap_servers", "impressions_topic", "clicks_topic", "url")
        missing = [k for k in needed if k not in known]
        if missing:
            raise ValueError(f"the clicks sample needs {', '.join(missing)} in its config")
        return cls(**known)


def _kafka(s: ClicksSettings, topic: str) -> KafkaTextInputOperator:
    return KafkaTextInputOperator(
        bootstrap_servers=s.bootstrap_servers,
        topics=topic,
        initial_offset="APPLICATION_OR_EARLIEST",
        max_records_per_window=s.max_records_per_window,
    )


def rejected_row(count: int) -> dict[str, Any]:
    """A window's count of rejected clicks as the row ``merge_add`` adds to the total."""
    return {"what": "rejected", "clicks": count}


def populate(dag: DAG, s: ClicksSettings) -> DAG:
    impressions = dag.add_operator("impressions", _kafka(s, s.impressions_topic), PARTITIONS=2)
    parse_imps = dag.add_operator(
        "parse_imps", CsvParser(schema=IMPRESSION_DDL, field="value"), PARTITIONS=2
    )
    imps = partition_by_key(
        dag.add_operator(
            "imps",
            BoundedDedup(
                key="imp_id", max_keys=10_000_000, budget_bytes=_BUDGET, schema=IMPRESSION_DDL
            ),
            PARTITIONS=2,
        )
    )
    clicks = dag.add_operator("clicks", _kafka(s, s.clicks_topic), PARTITIONS=2)
    parse_clicks = dag.add_operator(
        "parse_clicks", CsvParser(schema=CLICK_DDL, field="value"), PARTITIONS=2
    )
    throttle = dag.add_operator(
        "throttle",
        Throttle(rate=s.max_clicks_per_second, schema=CLICK_DDL),
        PARTITIONS=2,
    )
    click_dedup = partition_by_key(
        dag.add_operator(
            "click_dedup",
            TimeBasedDedup(
                key="click_id",
                time="ts",
                expire_after=86_400_000,
                budget_bytes=_BUDGET,
                schema=CLICK_DDL,
            ),
            PARTITIONS=2,
        )
    )
    bots = dag.add_operator(
        "bots", FilterOperator("source != 'bot'", schema=CLICK_DDL), PARTITIONS=2
    )
    # two partitions like ``imps``: fused into its tasks, no task of its own
    dropped = dag.add_operator("dropped", DevNull(), PARTITIONS=2)
    join = partition_by_key(
        dag.add_operator(
            "join",
            StreamJoin(
                "imp_id",
                expiry_windows=s.join_windows,
                within=s.within_ms,
                left_time="ts",
                right_time="ts",
                budget_bytes=_BUDGET,
            ),
            PARTITIONS=2,
            APPLICATION_WINDOW_COUNT=s.app_windows,
        )
    )
    latency = dag.add_operator(
        "latency", TransformOperator({"latency_ms": "right_ts - ts"}, copy_fields=True)
    )
    pick = dag.add_operator(
        "pick",
        ProjectionOperator(select_fields=["click_id", "imp_id", "ad", "source", "latency_ms"]),
    )
    fork = dag.add_operator("fork", StreamDuplicater())
    attributed = dag.add_operator(
        "attributed", JdbcOutputOperator(s.url, table=s.attributed_table, mode="insert")
    )
    per_ad = dag.add_operator(
        "per_ad",
        CountKeyVal(key="ad", cumulative=True),
        APPLICATION_WINDOW_COUNT=s.app_windows,
    )
    as_clicks = dag.add_operator(
        "as_clicks", ProjectionOperator(select_fields=["ad", "count"], rename={"count": "clicks"})
    )
    ad_clicks = dag.add_operator(
        "ad_clicks",
        JdbcOutputOperator(s.url, table=s.ad_clicks_table, mode="upsert", key_columns=["ad"]),
    )
    # re-sent clicks and (distinct) bot clicks: one stream, counted, added to a total; all
    # in click_dedup's partitions (see the module doc)
    rejected = dag.add_operator("rejected", StreamMerger(schema=CLICK_DDL), PARTITIONS=2)
    rejected_count = dag.add_operator(
        "rejected_count", Counter(), PARTITIONS=2, APPLICATION_WINDOW_COUNT=s.rejected_windows
    )
    as_row = dag.add_operator("rejected_row", TransformOperator(function=rejected_row))
    as_row.input.set_attribute("PARALLEL_PARTITION", True)  # partial counts: no unifier
    nonzero = dag.add_operator("nonzero", FilterOperator("clicks > 0"), PARTITIONS=2)
    rejected_total = dag.add_operator(
        "rejected_total",
        JdbcOutputOperator(s.url, table=s.rejected_table, mode="merge_add", key_columns=["what"]),
        PARTITIONS=2,
    )
    dag.add_stream("imp_records", impressions.output, parse_imps.input)
    dag.add_stream("imp_rows", parse_imps.out, imps.input)
    dag.add_stream("unique_imps", imps.unique, join.left)
    dag.add_stream("resent_imps", imps.duplicate, dropped.data)
    dag.add_stream("click_records", clicks.output, parse_clicks.input)
    dag.add_stream("click_rows", parse_clicks.out, throttle.data)
    dag.add_stream("paced_clicks", throttle.out, click_dedup.input)
    dag.add_stream("unique_clicks", click_dedup.unique, bots.input)
    dag.add_stream("resent_clicks", click_dedup.duplicate, rejected.data1)
    dag.add_stream("bot_clicks", bots.falsePort, rejected.data2)
    dag.add_stream("rejected_clicks", rejected.out, rejected_count.input)
    dag.add_stream("rejected_counts", rejected_count.output, as_row.input)
    dag.add_stream("rejected_rows", as_row.output, nonzero.input)
    dag.add_stream("rejected_nonzero", nonzero.truePort, rejected_total.input)
    dag.add_stream("human_clicks", bots.truePort, join.right)
    dag.add_stream("pairs", join.output, latency.input)
    dag.add_stream("with_latency", latency.output, pick.input)
    dag.add_stream("rows", pick.projected, fork.data)
    dag.add_stream("attributed_rows", fork.out1, attributed.input)
    dag.add_stream("for_counts", fork.out2, per_ad.data)
    dag.add_stream("counts", per_ad.count, as_clicks.input)
    dag.add_stream("ad_rows", as_clicks.projected, ad_clicks.input)
    return dag


def application(dag: DAG, config: dict[str, Any]) -> None:
    """``malhar run samples.clicks_attribution.app --config impressions_topic=... ...``."""
    populate(dag, ClicksSettings.from_config(config))
