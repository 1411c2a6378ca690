"""The flagship DAG: a Kafka topic of text lines, counted per word into PostgreSQL exactly once.

::

    lines (KafkaTextInputOperator) -> split (WordSplitter) -> count (UniqueCounter)
        -> words (JdbcOutputOperator, merge_add)
        [4 partitions of each, fused: one pass per Kafka reader, one Spark stage per window]

Each reader's pass counts its lines' words and merge-adds its partial counts into
``words`` itself (``plan="direct"``): the database adds them up, so no unifier and no
shuffle is needed, and a window is one Spark stage (about 200 ms less per window than
a shuffle to one writer; docs/performance-wordcount.md §7). ``plan="combine"`` shuffles
the partial counts to a unifier and one writer (one transaction per window);
``plan="shuffle"`` shuffles every word by ``KeyCodec("word")`` to the counters (a key's
whole count in one partition; measured slower).

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
from malhar.io.kafka import KafkaJsonInputOperator, KafkaTextInputOperator
from malhar.ports import InputPort, OutputPort

APPLICATION_NAME = "wordcount-exactly-once"
TABLE_DDL = "word text PRIMARY KEY, count bigint NOT NULL"
PLANS = ("direct", "combine", "shuffle")


class WordSplitter(Operator):
    """Splits the ``value`` of Kafka records into ``word`` rows.

    Text records arrive as Arrow batches and are split vectorized. JSON records
    arrive as dicts whose ``value`` must be ``{"line": "..."}``; any other document
    goes to the ``error`` port with the reason.
    """

    input = InputPort()
    output = OutputPort("word string")
    error = OutputPort(error=True)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        lines = batch.column(batch.schema.get_field_index("value"))
        words = pc.list_flatten(pc.utf8_split_whitespace(lines))
        if len(words):
            self.output.emit_batch(pa.record_batch([words.cast(pa.string())], names=["word"]))

    def process(self, record: Any) -> None:
        value = record.get("value") if isinstance(record, dict) else record
        line = value.get("line") if isinstance(value, dict) else value
        if not isinstance(line, str):
            self.error.emit(
                {
                    "topic": record.get("topic") if isinstance(record, dict) else None,
                    "offset": record.get("offset") if isinstance(record, dict) else None,
                    "error": 'expected a text line or a JSON document {"line": "..."}, '
                    f"got {type(value).__name__}",
                }
            )
            return
        for word in line.split():
            self.output.emit({"word": word})


@dataclass
class WordCountSettings:
    """Where the sample reads and writes, and how it is partitioned."""

    bootstrap_servers: str
    topic: str
    url: str
    table: str = "words"
    #: UniqueCounter partitions
    counters: int = 4
    #: "direct": readers, splitters, counters and writers fused, ``counters`` of each; each
    #: writer merge-adds its reader's partial counts (one Spark stage per window).
    #: "combine": readers, splitters and counters fused, ``counters`` of each; only partial
    #: (word, count) pairs cross a shuffle, to the unifier. "shuffle": every word is
    #: shuffled by ``KeyCodec("word")`` from ``input_partitions`` readers to the counters.
    plan: str = "direct"
    #: Kafka readers of the "shuffle" plan
    input_partitions: int = 2
    max_records_per_window: int | None = 20_000
    initial_offset: str = "APPLICATION_OR_EARLIEST"
    #: "text" (each message is a line) or "json" (each message is {"line": "..."})
    value_format: str = "text"
    max_message_bytes: int | None = None
    consumer_config: dict[str, Any] = field(default_factory=dict)
    #: requests to a silent Kafka cluster before a window fails (5: about 30 s)
    kafka_retry_attempts: int = 5

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
    readers = {"text": KafkaTextInputOperator, "json": KafkaJsonInputOperator}
    if settings.value_format not in readers:
        raise ValueError(f"value_format {settings.value_format!r}: use one of {sorted(readers)}")
    if settings.plan not in PLANS:
        raise ValueError(f"plan {settings.plan!r}: use one of {list(PLANS)}")
    keyed = settings.plan == "shuffle"
    n_readers = settings.input_partitions if keyed else settings.counters
    lines = dag.add_operator(
        "lines",
        readers[settings.value_format](
            bootstrap_servers=settings.bootstrap_servers,
            topics=settings.topic,
            initial_offset=settings.initial_offset,
            max_records_per_window=settings.max_records_per_window,
            max_message_bytes=settings.max_message_bytes,
            consumer_config=settings.consumer_config or None,
            retry_attempts=settings.kafka_retry_attempts,
        ),
        PARTITIONS=n_readers,
    )
    # As many splitters as readers: fused into the readers' pass (same partition count, no codec).
    split = dag.add_operator("split", WordSplitter(), PARTITIONS=n_readers)
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
    if keyed:
        count.data.set_attribute("STREAM_CODEC", KeyCodec("word"))
    elif settings.plan == "direct":
        # one writer per counter, in the counter's pass: merge_add makes the database add
        # the partial counts, each writer with its own meta row (exactly once per partition)
        words.input.set_attribute("PARALLEL_PARTITION", True)
    return dag


def application(dag: DAG, config: dict[str, Any]) -> None:
    """``malhar run samples.wordcount_exactly_once.app --config topic=... --config url=...``."""
    populate(dag, WordCountSettings.from_config(config))
