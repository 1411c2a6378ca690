"""The flagship word count against the Python peers: Quix Streams and Bytewax (issue 19).

    python bench/peers.py                 # full: 1M lines x 2 rounds, 30 s latency per tool
    python bench/peers.py --quick         # 200k lines, 1 round, 15 s latency
    python bench/peers.py --tools malhar,quix --only throughput

One invocation, one Kafka broker and one PostgreSQL server (``malhar.testing.services``),
the same generated corpus (``samples.wordcount_exactly_once.data.corpus``) and the same
producer code and measurement as ``bench/wordcount.py`` for four tools:

- **malhar**: the flagship (``bench/wordcount.py``'s ``Malhar``, ``plan="direct"``);
- **pyspark**: the hand-written exactly-once PySpark job (``bench/wordcount.py``'s
  ``SparkBaseline``); both in one SparkSession, ``local[2]``;
- **quix**: Quix Streams, ``processing_guarantee="exactly-once"``, a fenced merge-add
  ``BatchingSink`` (``bench/peers_jobs.py``; ``--quix-variant stateful``: ``group_by`` +
  stateful count + Quix's ``PostgreSQLSink`` upserting totals);
- **bytewax**: Bytewax, ``KafkaSource`` -> ``flat_map`` -> ``stateful_map`` count ->
  ``FixedPartitionedSink`` upserting totals, recovery on.

The peers run as ``--procs`` processes each (Quix: instances of one consumer group; Bytewax:
a cluster of processes), started fresh for each run; their clock starts when the first
instance is about to enter its run loop (imports done), as malhar's starts at ``launch`` and
Spark's at ``start()`` on a warm session. Same Kafka fetch settings for all
(``connectors.FETCH_CONFIG``).

1. **throughput**: a 4-partition topic preloaded with ``--lines`` lines, drained from the
   earliest offset into a fresh table; lines/s end to end (start until the table holds every
   word, polled every 50 ms) and after the first commit; the table checked exact. Rounds
   rotate the order of the tools.
2. **latency**: ``--rate`` lines/s for ``--duration`` s into a fresh LogAppendTime topic
   per tool; per record, wall time just after the COMMIT of the transaction holding its
   counts minus its Kafka timestamp (joined by offset: the peers' sinks log the offsets
   they committed); records of the first ``--warmup`` s left out; p50 / p99 / max.

Target: malhar >= 2x the faster peer's throughput (end to end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)

import connectors as K  # noqa: E402
import wordcount as W  # noqa: E402

from samples.wordcount_exactly_once.data import corpus, produce, word_counts  # noqa: E402

TOOLS = ("malhar", "pyspark", "quix", "bytewax")

#: what each tool's job guarantees into PostgreSQL, printed with the figures
GUARANTEE = {
    "malhar": "exactly once: Kafka ranges per window in malhar's own WAL, each writer's rows "
    "and meta row (app, operator, partition) -> window in one transaction; survives the loss "
    "of Spark's checkpoint (window ids continue from malhar's window log)",
    "pyspark": "exactly once while Spark's checkpoint lives: the meta row fences on Spark's "
    "batchId; a lost checkpoint restarts batch ids at 0, so replayed batches are skipped "
    "(lost) or, with a fresh meta row, counted twice",
    "quix": "not by Quix itself: its exactly-once (Kafka transactions) covers Kafka outputs "
    "and its state, while a sink is flushed before the offsets commit (at least once into "
    "PostgreSQL); exactly once here only through the bench's own per-partition offset fence "
    "in the database (quix_meta)",
    "bytewax": "at least once into PostgreSQL: recovery replays from the last snapshot and a "
    "sink gets no epoch or offset to fence on; the job upserts absolute totals, so the final "
    "table is exact, but during a replay it can show older totals (a merge-add job would "
    "count twice)",
}


class Peer:
    """A Quix Streams or Bytewax job run as ``procs`` processes of ``bench/peers_jobs.py``."""

    def __init__(self, tool: str, args: argparse.Namespace, kafka: Any, pg: Any) -> None:
        self.name = tool
        self.args, self.kafka, self.pg = args, kafka, pg
        self.procs: list[subprocess.Popen] = []

    def start(
        self, topic: str, table: str, *, logged: bool = False, logs: Path | None = None
    ) -> None:
        a = self.args
        self.logs = logs or Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=W.WORK))
        self.logs.mkdir(exist_ok=True)
        u = urlsplit(self.pg.dsn)
        base = {
            "bootstrap": self.kafka.bootstrap_servers,
            "topic": topic,
            "dsn": self.pg.dsn,
            "table": table,
            "logs": str(self.logs),
            "logged": logged,
            "consumer_config": {k: str(v) for k, v in K.FETCH_CONFIG.items()},
            "app_id": f"bench-{self.name}-{uuid.uuid4().hex[:8]}",
        }
        n = a.procs
        if self.name == "quix":
            import psycopg2

            with contextlib.closing(psycopg2.connect(self.pg.dsn)) as conn, conn.cursor() as cur:
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS quix_meta (app text, topic text, partition int, "
                    "next_offset bigint NOT NULL, PRIMARY KEY (app, topic, partition))"
                )
                conn.commit()
            base |= {
                "commit_interval": a.quix_commit_interval,
                "variant": a.quix_variant,
                "pg": {
                    "host": u.hostname,
                    "port": u.port,
                    "dbname": u.path.lstrip("/"),
                    "user": unquote(u.username or ""),
                    "password": unquote(u.password or ""),
                },
            }
        else:
            from bytewax.recovery import init_db_dir

            recovery = self.logs / "recovery"
            recovery.mkdir()
            init_db_dir(recovery, n)
            ports = [_free_port() for _ in range(n)] if n > 1 else None
            base |= {
                "recovery_dir": str(recovery),
                "epoch_s": a.bytewax_epoch_s,
                "batch_size": a.bytewax_batch,
                "sink_parts": n,
                "addresses": [f"127.0.0.1:{p}" for p in ports] if ports else None,
            }
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.t_spawn = time.time()
        for i in range(n):
            cfg = dict(base, instance=i)
            err = open(self.logs / f"stderr-{i}", "wb")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, str(BENCH / "peers_jobs.py"), self.name, json.dumps(cfg)],
                    stdout=err,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(ROOT),
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 120
        ready = [self.logs / f"ready-{i}" for i in range(n)]
        while not all(r.exists() and r.read_text() for r in ready):
            if err := self.failed():
                raise RuntimeError(err)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: instances not ready after 120 s")
            time.sleep(0.02)
        self.started_at = min(float(r.read_text()) for r in ready)

    def failed(self) -> str | None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                tail = (self.logs / f"stderr-{i}").read_text(errors="replace")[-3000:]
                return f"{self.name} instance {i} exited with {p.returncode}:\n{tail}"
        return None

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGINT if self.name == "bytewax" else signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []

    def _commits(self) -> list[dict]:
        path = self.logs / "commits.log"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().split("\n") if x]

    def batches(self) -> list[dict]:
        """One entry per COMMIT, shaped like Spark's progress: the time since the previous one."""
        ts = sorted(c["t"] for c in self._commits())
        return [
            {"durationMs": {"triggerExecution": (b - a) * 1000}}
            for a, b in zip([self.started_at, *ts], ts, strict=False)
        ]

    def _lines(self) -> tuple[dict[int, float], list[tuple[int, int, int, int]]]:
        commits = self._commits()
        times: dict[int, float] = {}
        ranges: list[tuple[int, int, int, int]] = []
        if self.name == "quix":
            for i, c in enumerate(commits):
                times[i] = c["t"]
                ranges += [(i, p, s, e) for p, s, e in c["runs"]]
            return times, ranges
        # bytewax: a line is committed when the last of its words' totals is
        seen: dict[tuple[int, int], list] = {}
        for c in commits:
            for p, o, n in c.get("items", ()):
                s = seen.setdefault((p, o), [0, n, 0.0])
                s[0] += 1
                s[2] = max(s[2], c["t"])
        for i, ((p, o), (got, n, t)) in enumerate(sorted(seen.items())):
            if got >= n:
                times[i] = t
            ranges.append((i, p, o, o + 1))
        return times, ranges

    def commit_times(self, logs: Path) -> dict[int, float]:
        self.n_commits = len(self._commits())
        return self._lines()[0]

    def windows_of_records(self, logs: Path) -> list[tuple[int, int, int, int]]:
        return self._lines()[1]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def throughput(args: argparse.Namespace, engines: list[Any], kafka: Any, pg: Any) -> list[dict]:
    lines = corpus(args.lines)
    truth = word_counts(lines)
    topic = f"wc-peers-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, partitions=4)
    t = time.perf_counter()
    produce(kafka.bootstrap_servers, topic, lines)
    print(
        f"\n[1] throughput: {args.lines:,} lines ({sum(truth.values()):,} words) preloaded in "
        f"{time.perf_counter() - t:.1f}s into {topic} (4 partitions)",
        flush=True,
    )
    out = []
    for r in range(args.rounds):
        order = engines[r % len(engines) :] + engines[: r % len(engines)]
        for engine in order:
            res = W.throughput_run(engine, topic, args.lines, truth, pg.dsn)
            res["round"] = r
            out.append(res)
            print(
                f"  round {r} {res['engine']:<8} {res['elapsed']:6.1f}s {res['lines_s']:>9,.0f} "
                f"lines/s  after first commit {res['steady_lines_s']:>9,.0f}  first commit at "
                f"{res['to_first']:.1f}s  {res['batches']} commits, median gap "
                f"{res['batch_ms']:.0f} ms  exact={res['exact']}  load "
                f"{res['load'][0]:.2f}->{res['load'][1]:.2f}",
                flush=True,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--only", default="throughput,latency")
    ap.add_argument("--lines", type=int, default=None, help="throughput corpus (1M; quick 200k)")
    ap.add_argument("--rounds", type=int, default=None, help="throughput rounds (2; quick 1)")
    ap.add_argument("--rate", type=int, default=2_000)
    ap.add_argument("--duration", type=float, default=None, help="latency s (30; quick 15)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=2, help="processes per peer (2 cores)")
    ap.add_argument("--quix-variant", choices=("fenced", "stateful"), default="fenced")
    ap.add_argument(
        "--quix-commit-interval", type=float, default=None, help="s (throughput 1.0, latency 0.1)"
    )
    ap.add_argument("--bytewax-epoch-s", type=float, default=10.0, help="snapshot interval")
    ap.add_argument("--bytewax-batch", type=int, default=1000, help="KafkaSource batch_size")
    # bench/wordcount.py's settings for malhar and PySpark
    ap.add_argument("--batch", type=int, default=200_000)
    ap.add_argument("--trigger-ms", type=int, default=100)
    ap.add_argument("--counters", type=int, default=4)
    args = ap.parse_args(argv)
    args.lines = args.lines or (200_000 if args.quick else 1_000_000)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.duration = args.duration or (15.0 if args.quick else 30.0)
    args.plan, args.input_partitions, args.readers = "direct", 2, args.counters
    args.fetch_tuned, args.slot_claims = True, True
    tools = [t for t in args.tools.split(",") if t]
    only = set(args.only.split(","))
    W.WORK = Path(tempfile.mkdtemp(prefix="malhar-bench-peers-"))

    import warnings

    from malhar import build_session
    from malhar.testing.services import acquire
    from malhar.testing.services.maven import jars

    warnings.filterwarnings("ignore", module="authlib")
    from importlib.metadata import version

    import bytewax as _bw  # noqa: F401  (installed?)
    import quixstreams

    print(
        f"bench/peers.py: {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; quixstreams {quixstreams.__version__}, bytewax "
        f"{version('bytewax')}, confluent-kafka {version('confluent-kafka')}, pyspark "
        f"{version('pyspark')}; uptime: {os.popen('uptime').read().strip()}"
    )
    print(
        f"settings: malhar/pyspark batch {args.batch:,} lines, trigger {args.trigger_ms} ms; "
        f"peers {args.procs} processes each; quix {args.quix_variant}; bytewax epoch "
        f"{args.bytewax_epoch_s}s, KafkaSource batch_size {args.bytewax_batch}"
    )
    print("delivery into PostgreSQL:")
    for t in tools:
        print(f"  {t:<8} {GUARANTEE[t]}")
    t_all = time.monotonic()
    verdicts = []
    with contextlib.ExitStack() as services:
        kafka = services.enter_context(acquire("kafka"))
        pg = services.enter_context(acquire("postgres"))
        spark = None
        engines: list[Any] = []
        if {"malhar", "pyspark"} & set(tools):
            spark = build_session(
                "local[2]",
                app_name="bench-peers",
                shuffle_partitions=2,
                jars=jars("spark-kafka"),
                conf={"spark.sql.streaming.numRecentProgressUpdates": "100000"},
            )
        for t in tools:
            if t == "malhar":
                engines.append(W.Malhar(args, kafka, pg, spark))
            elif t == "pyspark":
                engines.append(W.SparkBaseline(args, kafka, pg, spark))
            else:
                engines.append(Peer(t, args, kafka, pg))
        spark_engines = [e for e in engines if e.name in ("malhar", "pyspark")]
        if spark_engines:  # warm the JVM and the Python workers (not measured)
            warm = corpus(5_000, seed=3)
            topic = f"wc-warm-{uuid.uuid4().hex[:6]}"
            kafka.create_topic(topic, partitions=4)
            produce(kafka.bootstrap_servers, topic, warm)
            for e in spark_engines:
                W.throughput_run(e, topic, len(warm), word_counts(warm), pg.dsn)
        if "throughput" in only:
            args.quix_commit_interval = args.quix_commit_interval or 1.0
            res = throughput(args, engines, kafka, pg)
            by = {t: W.med([r["lines_s"] for r in res if r["engine"] == t]) for t in tools}
            steady = {
                t: W.med([r["steady_lines_s"] for r in res if r["engine"] == t]) for t in tools
            }
            print(f"  all exact: {all(r['exact'] for r in res)}")
            print("  median lines/s end to end (after first commit):")
            for t in tools:
                print(f"    {t:<8} {by[t]:>10,.0f}  ({steady[t]:>10,.0f})")
            if "malhar" in by:
                for t in tools:
                    if t != "malhar":
                        print(
                            f"  malhar / {t}: {by['malhar'] / by[t]:.2f}x end to end, "
                            f"{steady['malhar'] / steady[t]:.2f}x after the first commit"
                        )
                peers = [by[t] for t in ("quix", "bytewax") if t in by]
                if peers:
                    verdicts.append(
                        (
                            "malhar >= 2x the faster peer (end to end)",
                            by["malhar"] / max(peers),
                            2.0,
                        )
                    )
        if "latency" in only:
            if "throughput" in only:
                args.quix_commit_interval = None
            args.quix_commit_interval = args.quix_commit_interval or 0.1
            lat = W.latency(args, engines, kafka, pg)
            ref = {r["engine"]: r for r in lat}
            if "malhar" in ref:
                for t, r in ref.items():
                    if t != "malhar":
                        m = ref["malhar"]
                        print(
                            f"  malhar / {t}: p50 {m['p50'] / r['p50']:.2f}x, "
                            f"p99 {m['p99'] / r['p99']:.2f}x"
                        )
        if spark is not None:
            spark.stop()
    print(f"\ntargets (total {time.monotonic() - t_all:.0f}s, load average {W.loadavg():.2f}):")
    for name, ratio, goal in verdicts:
        print(f"  {name:<50} {ratio:6.2f}x  {'met' if ratio >= goal else 'MISSED'}")
    shutil.rmtree(W.WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
