"""``format("malhar_test_split")``: a stream source whose split of a micro-batch the test
chooses, and whose tasks fail or wait on a condition: the Spark sinks' re-runs of a partly
committed batch (tests/io/test_fs_spark_sink_reruns.py, test_kafka_sink_reruns.py,
test_jdbc_output.py, test_jdbc_hardening.py) and the JDBC sink's driver under kills
(test_jdbc_sink_crash.py).

Batch ``b`` holds the rows ``(b*stride + i, b)`` for ``i`` in ``0..rows-1``, row ``i`` in
partition ``(i + shift) % parts``. Options:

- ``parts``, ``batches``, ``shift``: the split; the source steps one batch per trigger;
- ``rows`` (default ``ROWS``), ``stride`` (default 100): the rows of a batch and their ids;
- ``layout``: ``mod`` (the default, as above) or ``blocks``: row ``i`` in partition
  ``(i*parts // rows + shift) % parts``, the rows in ``parts`` contiguous blocks;
- ``extra`` (``<batch>:<partition>:<id>``): that partition of that batch also yields the row
  ``(<id>, <batch>)``, after its own (say a row the sink's table refuses);
- ``fail`` (``<batch>:<partition>:<condition>``): that partition of that batch fails once
  the condition holds (another partition committed the batch): the batch dies part
  committed, as when its driver is killed while its tasks commit;
- ``wait`` (``<batch>:<partition>:<condition>``): that partition of that batch reads once
  the condition holds;
- ``timeout`` (seconds, default 60): how long ``fail`` and ``wait`` wait for the condition.

A condition is ``path:<path>`` (it exists), ``glob:<folder>/<pattern>`` (a file matches),
``kafka:<bootstrap>|<group>|<topic>|<offset>`` (the group's committed offset of
``<topic>[0]`` is at least ``<offset>``) or ``jdbc:<dsn>|<app>|<partition>|<batch>`` (the
JDBC sink's ``malhar_meta`` row of that application's partition, in the PostgreSQL database
at ``<dsn>``, records at least ``<batch>``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from malhar.testing.services.process import wait_until

ROWS = 6
#: the rows of batches 0-2, each once
EXACT = [b * 100 + i for b in range(3) for i in range(ROWS)]


def path_exists(path: Path | str) -> str:
    return f"path:{path}"


def file_matches(folder: Path | str, pattern: str) -> str:
    return f"glob:{folder}/{pattern}"


def kafka_committed(bootstrap: str, group: str, topic: str, offset: int) -> str:
    return f"kafka:{bootstrap}|{group}|{topic}|{offset}"


def jdbc_committed(dsn: str, app: str, partition: int, batch: int) -> str:
    return f"jdbc:{dsn}|{app}|{partition}|{batch}"


def holds(condition: str) -> bool:
    """Whether ``condition`` (module doc) holds now."""
    kind, _, arg = condition.partition(":")
    if kind == "path":
        return Path(arg).exists()
    if kind == "glob":
        folder, pattern = arg.rsplit("/", 1)
        return any(Path(folder).glob(pattern))
    if kind == "kafka":
        from confluent_kafka import Consumer, TopicPartition

        bootstrap, group, topic, offset = arg.split("|")
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
        )
        try:
            (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
            return found.offset >= int(offset)
        finally:
            consumer.close()
    if kind == "jdbc":
        import psycopg2

        dsn, app, partition, batch = arg.rsplit("|", 3)
        conn = psycopg2.connect(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT window_id FROM malhar_meta WHERE app_id = %s AND partition_id = %s",
                    (app, int(partition)),
                )
                found = cur.fetchone()
        finally:
            conn.close()
        return bool(found and found[0] >= int(batch))
    raise ValueError(f"unknown condition {condition!r}")


def shown(condition: str) -> str:
    """``condition`` for a message: a ``jdbc`` one without its DSN (it holds the password)."""
    kind, _, arg = condition.partition(":")
    if kind == "jdbc":
        return "jdbc:<dsn>|" + "|".join(arg.rsplit("|", 3)[1:])
    return condition


def at(spec: str | None, batch: int, part: int) -> str | None:
    """The condition of ``<batch>:<partition>:<condition>`` when it names this task."""
    if not spec:
        return None
    b, p, condition = spec.split(":", 2)
    return condition if (int(b), int(p)) == (batch, part) else None


class _Split(InputPartition):
    def __init__(self, batch: int, part: int, reader: _SplitReader) -> None:
        self.batch, self.part = batch, part
        self.parts, self.shift = reader.parts, reader.shift
        self.rows, self.stride, self.layout = reader.rows, reader.stride, reader.layout
        self.extra, self.fail, self.wait = reader.extra, reader.fail, reader.wait
        self.timeout = reader.timeout

    def has(self, i: int) -> bool:
        """Whether row ``i`` of the batch is in this partition (module doc)."""
        if self.layout == "blocks":
            return (i * self.parts // self.rows + self.shift) % self.parts == self.part
        return (i + self.shift) % self.parts == self.part


class _SplitReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.parts, self.batches = int(options["parts"]), int(options["batches"])
        self.shift = int(options.get("shift", 0))
        self.rows = int(options.get("rows", ROWS))
        self.stride = int(options.get("stride", 100))
        self.layout = options.get("layout") or "mod"
        if self.layout not in ("mod", "blocks"):
            raise ValueError(f"unknown layout {self.layout!r}")
        self.extra = options.get("extra") or None
        self.fail = options.get("fail") or None
        self.wait = options.get("wait") or None
        self.timeout = float(options.get("timeout", 60))

    def initialOffset(self) -> dict:
        return {"batch": -1}

    def latestOffset(self, start: dict, limit: Any) -> dict:  # type: ignore[override]
        return {"batch": min(int(start["batch"]) + 1, self.batches - 1)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        batches = range(int(start["batch"]) + 1, int(end["batch"]) + 1)
        return [_Split(b, p, self) for b in batches for p in range(self.parts)]

    def read(self, split: _Split) -> Any:  # type: ignore[override]
        failing = at(split.fail, split.batch, split.part)
        if failing:
            wait_until(lambda: holds(failing), timeout=split.timeout, what=shown(failing))
            raise RuntimeError(f"injected: partition {split.part} of batch {split.batch} fails")
        waiting = at(split.wait, split.batch, split.part)
        if waiting:
            wait_until(lambda: holds(waiting), timeout=split.timeout, what=shown(waiting))
        for i in range(split.rows):
            if split.has(i):
                yield (split.batch * split.stride + i, split.batch)
        extra = at(split.extra, split.batch, split.part)
        if extra:
            yield (int(extra), split.batch)


class SplitSource(DataSource):
    """``format("malhar_test_split")`` (module doc)."""

    @classmethod
    def name(cls) -> str:
        return "malhar_test_split"

    def schema(self) -> str:
        return "id bigint, batch bigint"

    def streamReader(self, schema: Any) -> _SplitReader:
        return _SplitReader(dict(self.options))


def split_query(spark: Any, sink: Any, checkpoint: Path) -> Any:
    """Runs of ``SplitSource`` into ``sink(writer)`` (the sink's format and options on a
    ``DataStreamWriter``) with ``checkpoint``, until the source has nothing new: a function
    of the split options returning the query's exception (None: it succeeded)."""
    spark.dataSource.register(SplitSource)

    def run(
        parts: int, batches: int, shift: int = 0, fail: str = "", wait: str = ""
    ) -> BaseException | None:
        writer = (
            spark.readStream.format("malhar_test_split")
            .option("parts", parts)
            .option("batches", batches)
            .option("shift", shift)
            .option("fail", fail)
            .option("wait", wait)
            .load()
            .writeStream
        )
        q = sink(writer).option("checkpointLocation", str(checkpoint)).start()
        try:
            q.processAllAvailable()  # one batch per trigger: the source steps by one
        except Exception as exc:
            return exc
        finally:
            q.stop()
        return None

    return run
