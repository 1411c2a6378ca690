"""Clicks per user in sliding event-time windows, from Kafka into PostgreSQL, exactly once.

::

    clicks (KafkaJsonInputOperator, event-time watermarks per Kafka partition) [4 partitions]
        -> counts (KeyedWindowedOperator: Count per user, 10 s windows sliding by 5 s,
                   early panes every second, ACCUMULATING_AND_RETRACTING)
                                                    [2 partitions, by user]
           -> rows (retractions dropped) -> table (JdbcOutputOperator, upsert)
           late -> late_rows -> late_table (JdbcOutputOperator, insert)

Events are JSON documents ``{"user": "u7", "page": "/a", "ts": <epoch ms>}``. Their event
times arrive out of order (up to ``max_out_of_orderness`` behind the largest so far, per
Kafka partition); the Kafka input turns that bound into watermarks (``event_time``,
``max_out_of_orderness_ms``), one per Kafka reader. Each user's window emits an EARLY pane a second after new clicks (the
streaming windows' implicit time, so a replay fires the same panes), the ON_TIME pane
when the watermark passes the window's end, and a retraction before every pane but the
first: in the table the upsert of the new pane *is* the retraction (the row is replaced).
Clicks more than ``allowed_lateness`` behind the watermark go to the ``late_clicks`` table.

Both tables are written by the transactional JDBC output: a window's rows and its meta
row commit together, so a window replayed after a crash is skipped.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from malhar import DAG, InputPort, Operator, OutputPort
from malhar.io.jdbc import JdbcOutputOperator
from malhar.io.kafka import KafkaJsonInputOperator
from malhar.window import KeyedWindowedOperator, TimeWindows, TriggerOption
from malhar.window.accumulation import Count

APPLICATION_NAME = "event-time-windows"
TABLE_DDL = (
    "user_id text NOT NULL, window_start bigint NOT NULL, window_end bigint NOT NULL, "
    "clicks bigint NOT NULL, timing text NOT NULL, pane_index int NOT NULL, "
    "PRIMARY KEY (user_id, window_start, window_end)"
)
LATE_DDL = (
    "kafka_partition int NOT NULL, kafka_offset bigint NOT NULL, user_id text, ts bigint, "
    "PRIMARY KEY (kafka_partition, kafka_offset)"
)
COLUMNS = ["user_id", "window_start", "window_end", "clicks", "timing", "pane_index"]
LATE_COLUMNS = ["kafka_partition", "kafka_offset", "user_id", "ts"]


def event_time(record: dict[str, Any]) -> int:
    """The click's event time (ms) from a Kafka record of the JSON input."""
    return record["value"]["ts"]


def user_of(record: dict[str, Any]) -> str:
    return record["value"]["user"]


class PaneRows(Operator):
    """Panes (rows) to table rows; retractions are dropped: the upsert of the pane that
    follows a retraction replaces the row it retracts."""

    input = InputPort()
    output = OutputPort()

    def process(self, row: dict[str, Any]) -> None:
        if not row["is_retraction"]:
            self.output.emit({c: row[c] for c in COLUMNS})


class LateRows(Operator):
    """Late Kafka records to rows of the late table."""

    input = InputPort()
    output = OutputPort()

    def process(self, record: dict[str, Any]) -> None:
        value = record["value"]
        self.output.emit(
            {
                "kafka_partition": record["partition"],
                "kafka_offset": record["offset"],
                "user_id": value.get("user"),
                "ts": value.get("ts"),
            }
        )


@dataclass
class ClickSettings:
    """Where the sample reads and writes, and its windowing."""

    bootstrap_servers: str
    topic: str
    url: str
    table: str = "clicks"
    late_table: str = "late_clicks"
    #: Kafka readers: one per Kafka partition, so each watermark follows one partition
    readers: int = 4
    counters: int = 2
    window_ms: int = 10_000
    slide_ms: int = 5_000
    early_every_ms: int = 1_000
    max_out_of_orderness_ms: int = 2_000
    allowed_lateness_ms: int = 5_000
    max_records_per_window: int = 2_000

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ClickSettings:
        known = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        missing = [k for k in ("bootstrap_servers", "topic", "url") if k not in known]
        if missing:
            raise ValueError(f"the event_time_windows sample needs {', '.join(missing)}")
        return cls(**known)


def populate(dag: DAG, s: ClickSettings) -> DAG:
    """Add the sample's operators and streams to ``dag``."""
    clicks = dag.add_operator(
        "clicks",
        KafkaJsonInputOperator(
            bootstrap_servers=s.bootstrap_servers,
            topics=s.topic,
            initial_offset="APPLICATION_OR_EARLIEST",
            max_records_per_window=s.max_records_per_window,
            event_time="value.ts",
            max_out_of_orderness_ms=s.max_out_of_orderness_ms,
        ),
        PARTITIONS=s.readers,
    )
    trigger = (
        TriggerOption.at_watermark()
        .with_early_firings_at_every(dt.timedelta(milliseconds=s.early_every_ms))
        .accumulating_and_retracting_fired_panes()
    )
    counter = KeyedWindowedOperator(
        Count(),
        TimeWindows(s.window_ms).slide_by(s.slide_ms),
        key=user_of,
        timestamp=event_time,
        trigger=trigger,
        allowed_lateness=s.allowed_lateness_ms,
        output_format="row",
        key_names="user_id",
        value_name="clicks",
    )
    counts = dag.add_operator("counts", counter, PARTITIONS=s.counters)
    counts.input.set_attribute("STREAM_CODEC", counter.key_codec())
    rows = dag.add_operator("rows", PaneRows(), PARTITIONS=s.counters)
    table = dag.add_operator(
        "table",
        JdbcOutputOperator(
            s.url, table=s.table, mode="upsert", key_columns=COLUMNS[:3], columns=COLUMNS
        ),
        PARTITIONS=s.counters,
    )
    late_rows = dag.add_operator("late_rows", LateRows(), PARTITIONS=s.counters)
    late_table = dag.add_operator(
        "late_table",
        JdbcOutputOperator(s.url, table=s.late_table, mode="insert", columns=LATE_COLUMNS),
        PARTITIONS=s.counters,
    )
    dag.add_stream("records", clicks.output, counts.input)
    dag.add_stream("panes", counts.output, rows.input)
    dag.add_stream("rows", rows.output, table.input)
    dag.add_stream("late", counts.late, late_rows.input)
    dag.add_stream("late_rows", late_rows.output, late_table.input)
    return dag


def application(dag: DAG, config: dict[str, Any]) -> None:
    """``malhar run samples.event_time_windows.app --config topic=... --config url=...``."""
    populate(dag, ClickSettings.from_config(config))
