"""The flagship word count written with Quix Streams and with Bytewax (``bench/peers.py``).

Each job runs in its own process (``python bench/peers_jobs.py quix|bytewax JSON``), the way
these tools run: one Python process per instance, ``procs`` instances on the machine's cores.
Every job reads the same Kafka topic of text lines and writes ``words(word, count)`` on the
same PostgreSQL server. Everything a job logs for the bench is appended to files under
``logs`` (one small ``O_APPEND`` write per commit: atomic between processes):

- ``ready-<i>``: the wall time just before the instance starts its run loop (imports and
  set-up done); the bench's clock starts at the earliest of them.
- ``commits.log``: one JSON line per database COMMIT: ``{"t": time after COMMIT, ...}``.

**Quix Streams** (``quix``): ``Application(processing_guarantee="exactly-once")`` ->
``app.dataframe(topic)`` -> ``.apply(str.split)`` (the line's words) -> ``.sink(sink)``, a
custom ``BatchingSink``. Quix flushes sinks at each checkpoint *before* it commits the
consumer offsets (in its Kafka transaction), so a sink is at-least-once: a crash between the
two replays the checkpoint. The sink therefore fences in the database: one transaction per
(topic, partition) batch counts the batch's words, merge-adds them (``INSERT ... ON CONFLICT
(word) DO UPDATE SET count = count + EXCLUDED.count``) and moves the partition's row in
``quix_meta(app, topic, partition, next_offset)``; records below ``next_offset`` (a replay)
are skipped. That gives exactly-once counts, like malhar's meta row. ``variant="stateful"`` is
the textbook keyed shape instead: ``.apply(split, expand=True)`` -> ``.group_by(word)``
(an internal repartition topic) -> ``.apply(count, stateful=True)`` (RocksDB state with a
changelog topic) -> Quix's own ``PostgreSQLSink`` upserting the running total per word
(idempotent, so a replay rewrites the same totals).

**Bytewax** (``bytewax``): ``KafkaSource`` -> ``flat_map`` (words keyed by themselves) ->
``stateful_map`` (a running count per word, snapshotted by Bytewax's recovery) ->
``FixedPartitionedSink`` whose partitions upsert the running totals (``SET count =
EXCLUDED.count``). Bytewax's recovery is at-least-once for output: after a crash it resumes
from the last epoch's snapshot (source offsets and counts together) and replays; writing
absolute totals makes the replay idempotent, so the final table is exact, but during the
replay the table can show totals of an earlier snapshot. A merge-add (delta) sink cannot be
made exactly-once this way without a fence: Bytewax gives a sink no epoch or offset to fence
on. Recovery is on (``init_db_dir``, ``RecoveryConfig``), with ``epoch_s`` per snapshot.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _append(path: str | Path, line: str) -> None:
    fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _ready(logs: Path, instance: int) -> None:
    (logs / f"ready-{instance}").write_text(f"{time.time():.6f}")


def _runs(offsets: list[tuple[int, int]]) -> list[list[int]]:
    """``[(partition, offset)]`` -> ``[[partition, start, end_exclusive]]`` runs."""
    out: list[list[int]] = []
    for p, o in sorted(offsets):
        if out and out[-1][0] == p and out[-1][2] == o:
            out[-1][2] = o + 1
        else:
            out.append([p, o, o + 1])
    return out


# -- Quix Streams ----------------------------------------------------------------------------------
def quix(cfg: dict[str, Any]) -> None:
    import psycopg2
    from psycopg2.extras import execute_values
    from quixstreams import Application
    from quixstreams.sinks import BatchingSink, SinkBatch

    logs = Path(cfg["logs"])
    table, app_id = cfg["table"], cfg["app_id"]

    class FencedMergeAddSink(BatchingSink):
        """Counts a checkpoint's words per input partition and merge-adds them in one transaction
        with the partition's next offset (replayed records are skipped: exactly once)."""

        def setup(self) -> None:
            self.conn = psycopg2.connect(cfg["dsn"])  # quix_meta: created by the bench

        def write(self, batch: SinkBatch) -> None:
            with self.conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO quix_meta VALUES (%s, %s, %s, 0) ON CONFLICT DO NOTHING",
                    (app_id, batch.topic, batch.partition),
                )
                cur.execute(
                    "SELECT next_offset FROM quix_meta WHERE app = %s AND topic = %s AND "
                    "partition = %s FOR UPDATE",
                    (app_id, batch.topic, batch.partition),
                )
                (fence,) = cur.fetchone()
                counts: Counter = Counter()
                first = last = None
                for item in batch:
                    if item.offset >= fence:
                        counts.update(item.value)
                        first = item.offset if first is None else first
                        last = item.offset
                if last is None:
                    self.conn.rollback()
                    return
                execute_values(
                    cur,
                    f"INSERT INTO {table} AS t (word, count) VALUES %s ON CONFLICT (word) "
                    "DO UPDATE SET count = t.count + EXCLUDED.count",
                    list(counts.items()),
                )
                cur.execute(
                    "UPDATE quix_meta SET next_offset = %s WHERE app = %s AND topic = %s "
                    "AND partition = %s",
                    (last + 1, app_id, batch.topic, batch.partition),
                )
            self.conn.commit()
            _append(
                logs / "commits.log",
                json.dumps({"t": time.time(), "runs": [[batch.partition, first, last + 1]]}) + "\n",
            )

    app = Application(
        broker_address=cfg["bootstrap"],
        consumer_group=app_id,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=cfg["commit_interval"],
        consumer_extra_config=cfg["consumer_config"],
        state_dir=str(logs / f"quix-state-{cfg['instance']}"),
        loglevel="WARNING",
    )
    topic = app.topic(cfg["topic"], value_deserializer="str")
    sdf = app.dataframe(topic)
    if cfg.get("variant") == "stateful":
        from quixstreams.sinks.community.postgresql import PostgreSQLSink

        def count(word: str, state: Any) -> dict[str, Any]:
            total = state.get("count", 0) + 1
            state.set("count", total)
            return {"word": word, "count": total}

        sdf = sdf.apply(str.split, expand=True)
        sdf = sdf.group_by(lambda word: word, name="word")
        sdf = sdf.apply(count, stateful=True)
        pg = cfg["pg"]
        sdf.sink(
            PostgreSQLSink(
                host=pg["host"],
                port=pg["port"],
                dbname=pg["dbname"],
                user=pg["user"],
                password=pg["password"],
                table_name=table,
                schema_auto_update=False,
                primary_key_columns="word",
                upsert_on_primary_key=True,
                include_metadata=False,
            )
        )
    else:
        sdf = sdf.apply(str.split)
        sdf.sink(FencedMergeAddSink())
    _ready(logs, cfg["instance"])
    app.run()


# -- Bytewax ---------------------------------------------------------------------------------------
def bytewax(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import bytewax.operators as op
    import psycopg2
    from bytewax.connectors.kafka import KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
    from bytewax.recovery import RecoveryConfig
    from bytewax.run import cli_main
    from psycopg2.extras import execute_values

    logs = Path(cfg["logs"])
    table = cfg["table"]
    logged = cfg["logged"]

    class UpsertPartition(StatefulSinkPartition):
        """Upserts the latest running total of each word in a batch, one transaction."""

        def __init__(self) -> None:
            self.conn = psycopg2.connect(cfg["dsn"])

        def write_batch(self, values: list[tuple]) -> None:
            totals: dict[str, int] = {}
            for word, total, _ in values:
                if total > totals.get(word, 0):
                    totals[word] = total
            with self.conn.cursor() as cur:
                execute_values(
                    cur,
                    f"INSERT INTO {table} AS t (word, count) VALUES %s ON CONFLICT (word) "
                    "DO UPDATE SET count = EXCLUDED.count",
                    list(totals.items()),
                )
            self.conn.commit()
            rec: dict[str, Any] = {"t": time.time()}
            if logged:  # the (partition, offset, words in line) of every word written
                rec["items"] = [meta for _, _, meta in values]
            _append(logs / "commits.log", json.dumps(rec) + "\n")

        def snapshot(self) -> None:
            return None  # absolute totals: nothing to resume

        def close(self) -> None:
            self.conn.close()

    class PgUpsertSink(FixedPartitionedSink):
        def list_parts(self) -> list[str]:
            return [str(i) for i in range(cfg["sink_parts"])]

        def build_part(self, step_id: str, for_part: str, resume_state: Any) -> UpsertPartition:
            return UpsertPartition()

    flow = Dataflow("wordcount")
    lines = op.input(
        "kafka",
        flow,
        KafkaSource(
            [cfg["bootstrap"]],
            [cfg["topic"]],
            tail=True,
            batch_size=cfg["batch_size"],
            add_config=cfg["consumer_config"],
        ),
    )
    if logged:

        def split(m: Any) -> list[tuple]:
            words = m.value.decode().split()
            meta = (m.partition, m.offset, len(words))
            return [(w, meta) for w in words]
    else:

        def split(m: Any) -> list[tuple]:
            return [(w, None) for w in m.value.decode().split()]

    words = op.flat_map("split", lines, split)

    def count(state: int | None, meta: Any) -> tuple[int, tuple]:
        total = (state or 0) + 1
        return total, (total, meta)

    counts = op.stateful_map("count", words, count)
    rows = op.map("row", counts, lambda kv: (kv[0], (kv[0], *kv[1])))
    op.output("postgres", rows, PgUpsertSink())

    recovery = Path(cfg["recovery_dir"])
    addresses = cfg.get("addresses")
    _ready(logs, cfg["instance"])
    cli_main(
        flow,
        workers_per_process=cfg.get("workers", 1),
        process_id=cfg["instance"] if addresses else None,
        addresses=addresses,
        epoch_interval=timedelta(seconds=cfg["epoch_s"]),
        recovery_config=RecoveryConfig(str(recovery)),
    )


def main() -> None:
    tool, cfg = sys.argv[1], json.loads(sys.argv[2])
    try:
        {"quix": quix, "bytewax": bytewax}[tool](cfg)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()


# -- Spark real-time / continuous mode (bench/wordcount.py section 4) ----------------------------
_PG: dict[str, Any] = {}  # one connection per Python worker process


class FencedForeachWriter:
    """A ``foreach`` writer for Spark's real-time and continuous modes (they take no
    ``foreachBatch`` and no aggregation): each task counts the words of the records it
    gets and, every ``every_s`` (checked as records arrive) and at the end of its epoch,
    merge-adds them in one transaction with the next offset of each Kafka partition it
    read (``rt_meta``); records below a partition's fence (a replay) are skipped, so the
    counts are exact whatever Spark replays. Appends ``{"t", "runs"}`` per COMMIT to ``log``.
    """

    def __init__(self, dsn: str, table: str, app: str, log: str, every_s: float = 0.02) -> None:
        self.dsn, self.table, self.app, self.log, self.every_s = dsn, table, app, log, every_s

    def open(self, partition_id: int, epoch_id: int) -> bool:
        import psycopg2

        if self.dsn not in _PG:
            _PG[self.dsn] = psycopg2.connect(self.dsn)
        self.conn = _PG[self.dsn]
        self.fence: dict[int, int] = {}
        self._reset()
        return True

    def _reset(self) -> None:
        self.counts: Counter = Counter()
        self.runs: dict[int, list[int]] = {}
        self.since = time.monotonic()

    def process(self, row: Any) -> None:
        p, o = row.partition, row.offset
        if p not in self.fence:
            self.fence[p] = self._fence(p)
        if o < self.fence[p]:
            return
        self.counts.update(row.line.split())
        r = self.runs.get(p)
        if r is None:
            self.runs[p] = [o, o + 1]
        else:
            r[1] = o + 1
        if time.monotonic() - self.since >= self.every_s:
            self._flush()

    def _fence(self, p: int) -> int:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT next_offset FROM rt_meta WHERE app = %s AND partition = %s", (self.app, p)
            )
            row = cur.fetchone()
        self.conn.rollback()
        return row[0] if row else 0

    def _flush(self) -> None:
        from psycopg2.extras import execute_values

        if not self.runs:
            self.since = time.monotonic()
            return
        with self.conn.cursor() as cur:
            for p, (_, end) in sorted(self.runs.items()):
                cur.execute(
                    "INSERT INTO rt_meta VALUES (%s, %s, %s) ON CONFLICT (app, partition) "
                    "DO UPDATE SET next_offset = EXCLUDED.next_offset "
                    "WHERE rt_meta.next_offset <= EXCLUDED.next_offset RETURNING 1",
                    (self.app, p, end),
                )
                if cur.fetchone() is None:  # someone committed past us: a stale replay
                    self.conn.rollback()
                    self._reset()
                    return
            if self.counts:
                execute_values(
                    cur,
                    f"INSERT INTO {self.table} AS t (word, count) VALUES %s ON CONFLICT (word) "
                    "DO UPDATE SET count = t.count + EXCLUDED.count",
                    sorted(self.counts.items()),
                )
        self.conn.commit()
        for p, (_, end) in self.runs.items():
            self.fence[p] = end
        _append(
            self.log,
            json.dumps({"t": time.time(), "runs": [[p, s, e] for p, (s, e) in self.runs.items()]})
            + "\n",
        )
        self._reset()

    def close(self, error: Any) -> None:
        if error is None:
            self._flush()
        else:
            self.conn.rollback()
