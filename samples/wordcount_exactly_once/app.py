"""The flagship DAG: a Kafka topic of text lines, counted per word into PostgreSQL exactly once.

::

    lines (KafkaTextInputOperator) -> split (WordSplitter)
        -> count (UniqueCounter, 4 partitions, KeyCodec("word")) -> unifier
        -> words (JdbcOutputOperator, merge_add on words(word, count))

Each window's counts are added to ``words`` in one transaction per output partition
together with the partition's meta row, so a window replayed after a crash is
skipped; Kafka offsets per window are in the input's window data manager, so a
replayed window reads exactly the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from malhar import DAG, KeyCodec, Operator
from malhar.algo import UniqueCounter
from malhar.io.jdbc import JdbcOutputOperator
from malhar.io.kafka import KafkaTextInputOperator
from malhar.ports import InputPort, OutputPort

APPLICATION_NAME = "wordcount-exactly-once"
TABLE_DDL = "word text PRIMARY KEY, count bigint NOT NULL"


class WordSplitter(Operator):
    """Splits the ``value`` of Kafka text records into ``word`` rows, vectorized."""

    input = InputPort()
    output = OutputPort("word string")

    def process_batch(self, batch: pa.RecordBatch) -> None:
        lines = batch.column(batch.schema.get_field_index("value"))
        words = pc.list_flatten(pc.utf8_split_whitespace(lines))
        if len(words):
            self.output.emit_batch(pa.record_batch([words.cast(pa.string())], names=["word"]))

    def process(self, record: Any) -> None:
        line = record["value"] if isinstance(record, dict) else record
        for word in (line or "").split():
            self.output.emit({"word": word})


@dataclass
class WordCountSettings:
    """Where the sample reads and writes, and how it is partitioned."""

    bootstrap_servers: str
    topic: str
    url: str
    table: str = "words"
    counters: int = 4
    input_partitions: int = 1
    max_records_per_window: int | None = 20_000
    initial_offset: str = "APPLICATION_OR_EARLIEST"
    consumer_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> WordCountSettings:
        known = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        missing = [k for k in ("bootstrap_servers", "topic", "url") if k not in known]
        if missing:
            raise ValueError(
                f"the wordcount sample needs {', '.join(missing)} in its config "
                "(e.g. --config bootstrap_servers=localhost:9092)"
            )
        return cls(**known)


def populate(
    dag: DAG, settings: WordCountSettings, *, output: JdbcOutputOperator | None = None
) -> DAG:
    """Add the flagship's operators and streams to ``dag``; ``output`` replaces the JDBC writer."""
    lines = dag.add_operator(
        "lines",
        KafkaTextInputOperator(
            bootstrap_servers=settings.bootstrap_servers,
            topics=settings.topic,
            initial_offset=settings.initial_offset,
            max_records_per_window=settings.max_records_per_window,
            consumer_config=settings.consumer_config or None,
        ),
        PARTITIONS=settings.input_partitions,
    )
    # As many splitters as readers: fused into the readers' pass, no shuffle before the counter.
    split = dag.add_operator("split", WordSplitter(), PARTITIONS=settings.input_partitions)
    count = dag.add_operator("count", UniqueCounter(key_name="word"), PARTITIONS=settings.counters)
    writer = output or JdbcOutputOperator()
    if not writer.url:
        writer.url = settings.url
    writer.table = settings.table
    writer.mode = "merge_add"
    writer.key_columns = ["word"]
    writer.columns = ["word", "count"]
    words = dag.add_operator("words", writer)
    dag.add_stream("lines", lines.output, split.input)
    dag.add_stream("words", split.output, count.data)
    dag.add_stream("counts", count.count, words.input)
    count.data.set_attribute("STREAM_CODEC", KeyCodec("word"))
    return dag


def application(dag: DAG, config: dict[str, Any]) -> None:
    """``malhar run samples.wordcount_exactly_once.app --config topic=... --config url=...``."""
    populate(dag, WordCountSettings.from_config(config))
