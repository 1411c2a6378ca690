"""Benchmark of the malhar engine against plain Spark, measured in the same invocation.

    python bench/engine.py                 # full run (~5-7 min on 2 cores, more under load)
    python bench/engine.py --quick         # fewer windows, one round (~1.5-3 min)
    python bench/engine.py --profile       # also cProfile one in-process window per case
    python bench/engine.py --only 1,3      # a subset of the targets (--only 0: in-process only)

Targets (method, results and analysis: docs/performance-engine.md):

1. Per-window overhead of an *empty* malhar window versus Spark's own empty
   micro-batch (target <= 1.2x). Baselines: a minimal Python streaming source
   that advances its offset on every trigger and yields nothing, into
   ``format("noop")`` and into a minimal Python sink, without and with a
   ``repartition(2, col).mapInArrow(identity)`` stage (the shape of a two-level
   DAG). malhar: ``EmptyInput x2 -> Idle x2`` fused (one level) and with a
   ``KeyCodec`` on the edge (two levels); ``launch`` writes into ``noop`` and the
   source records completed windows. Two more malhar variants: the engine's own
   DataFrame (``launcher.build_dataframe``) into ``noop`` with nothing recording
   windows (the floor: what recording costs), and one level with an error port
   (``launch`` then registers the listener that collects error-port counts).
2. Tuples/s through a fused stateless chain of three ``process_batch``
   operators (add, filter, project) ending in a row counter, versus the same
   three ``pyarrow.compute`` steps in one bare ``mapInArrow`` fed by a Python
   source with the same pre-built batches, into ``noop`` (target >= 70%).
3. Tuples/s through a shuffle and a stateful per-key counter at 100k and 1M
   tuples per window (1000 keys): malhar (``KeyCodec("word")``, 2 partitions, a
   ``dict`` of counts pickled per window) versus ``transformWithStateInPandas``
   with a per-key ``ValueState`` (RocksDB provider, as set by ``build_session``);
   the full run adds a stateless ``repartition + mapInArrow`` reference.

Everything runs on ``build_session("local[2]")`` in this one process, one query
at a time, each with a fresh checkpoint, trigger ``processingTime=10 ms`` (so a
batch starts as soon as the previous one ends). The scenarios of a target run
back to back in rounds (full mode: 3 rounds for targets 1-2, 2 for target 3), so
a change in the machine's load hits all of them; ratios are medians of per-round
ratios.

Per scenario, over the measured micro-batches (after warm-up): the median
``durationMs.triggerExecution`` (the headline figure; tuples/s derive from it),
the mean wall time per window (first measured batch start to last batch end),
the CPU seconds per window of this process tree (driver, JVM, Python workers;
sampled from /proc every ~100 ms), the 1-minute load average, and for malhar the
share of tasks that rebuilt their partition runtime from the state store
(``restore``: the worker-side runtime cache missed). Every run is checked: rows
counted by the last operator (or kept in the state) must equal rows emitted.

A last section calls ``malhar.engine.task.run_inputs`` / ``run_window`` directly, level by level,
in this process: the engine's own Python cost per window without Spark.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import hashlib
import io
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
# Python workers inherit the JVM's environment: make `_common` importable there
# (cloudpickle ships its classes by reference) before the JVM starts.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)
WORK = Path(tempfile.mkdtemp(prefix="malhar-bench-engine-"))
SETUP_LOG = WORK / "setuplog"
SETUP_LOG.mkdir()
os.environ["MALHAR_BENCH_SETUP_LOG"] = str(SETUP_LOG)

import _common as C  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from malhar import DAG, KeyCodec, RunningApplication, build_session, launch  # noqa: E402
from malhar.engine.launcher import build_dataframe  # noqa: E402
from malhar.engine.plan import build_plan  # noqa: E402

SPARK: Any = None
TRIGGER = "10 milliseconds"
WINDOW_MS = 10
PARTS = 2


# -- measuring ------------------------------------------------------------------------------------
class CpuTracker:
    """CPU seconds (user + system) burnt by this process and its descendants between
    ``start()`` and the last ``sample()``.

    Each process is followed by (pid, start time): a process that exists at ``start`` counts
    from its CPU then, one born later counts in full, and one that exits counts up to its
    last sample (so sample often: every ~100 ms). Children's ``cutime`` is not used (no
    double counting). The CPU spent sampling is subtracted.
    """

    def __init__(self) -> None:
        self.base: dict[tuple[int, int], int] = {}
        self.last: dict[tuple[int, int], int] = {}
        self.overhead = 0.0
        self.hz = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _snapshot() -> dict[tuple[int, int], int]:
        procs: dict[int, tuple[int, int, int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            rest = s[s.rfind(")") + 2 :].split()
            procs[int(d)] = (int(rest[1]), int(rest[19]), int(rest[11]) + int(rest[12]))
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _, _) in procs.items():
            children[ppid].append(pid)
        out, stack = {}, [os.getpid()]
        while stack:
            pid = stack.pop()
            if pid in procs:
                _, start, cpu = procs[pid]
                out[(pid, start)] = cpu
            stack.extend(children.get(pid, []))
        return out

    def start(self) -> None:
        t = time.process_time()
        self.base = self._snapshot()
        self.last = dict(self.base)
        self.overhead = time.process_time() - t

    def sample(self) -> None:
        t = time.process_time()
        self.last.update(self._snapshot())
        self.overhead += time.process_time() - t

    def seconds(self) -> float:
        ticks = sum(cpu - self.base.get(key, 0) for key, cpu in self.last.items())
        return max(0.0, ticks / self.hz - self.overhead)


def _ts(p: dict) -> float:
    return dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()


@dataclass
class ProtoApp:
    """The engine's DataFrame written to ``noop`` by the bench, with nothing recording windows."""

    query: Any
    plan: Any
    checkpoint: str


def is_malhar(handle: Any) -> bool:
    return isinstance(handle, RunningApplication | ProtoApp)


@dataclass
class Result:
    name: str
    target: str
    rows: int  # tuples per window
    n: int  # measured windows
    wall_ms: float  # per window
    trig_p50_ms: float
    cpu_s: float  # per window
    load: float
    durations: dict[str, float] = field(default_factory=dict)  # mean durationMs parts
    note: str = ""
    restore_pct: float | None = None  # malhar: tasks that rebuilt their runtime
    windows_run: int = 0

    @property
    def tps(self) -> float:
        """Tuples/s at the median batch time (robust to spikes of other load)."""
        return self.rows / (self.trig_p50_ms / 1000) if self.rows else 0.0


DURATION_KEYS = ["latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets"]


def measure(
    name: str,
    target: str,
    start: Callable[[], Any],
    *,
    warmup: int,
    n: int,
    rows: int,
    check: Callable[[Any, list[dict]], str] | None = None,
    timeout: float = 900.0,
) -> Result:
    """Start a query, measure batches ``warmup .. warmup+n-1``, run it to its end, stop it."""
    for f in SETUP_LOG.iterdir():
        f.unlink()
    load0 = os.getloadavg()[0]
    handle = start()
    query = handle.query if is_malhar(handle) else handle
    first, last = warmup - 1, warmup - 1 + n
    cpu = CpuTracker()
    started = False
    b0 = b1 = -1
    polls = 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            p = query.lastProgress
            bid = p["batchId"] if p else -1
            if not started and bid >= first:
                cpu.start()
                started, b0 = True, bid
            elif started:
                polls += 1
                if polls % 5 == 0 or bid >= last:
                    cpu.sample()
            if started and bid >= last:
                b1 = bid
                break
            exc = query.exception()
            if exc is not None:
                raise RuntimeError(f"{name}: query failed: {exc}")
            if not query.isActive:
                raise RuntimeError(f"{name}: query stopped at batch {bid}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: batch {last} not reached in {timeout:.0f}s")
            time.sleep(0.02)
        if isinstance(handle, RunningApplication):
            handle.await_completion()  # the last (shutdown) window, then stop
        else:
            query.processAllAvailable()  # nothing left
        exc = query.exception()
        if exc is not None:
            raise RuntimeError(f"{name}: query failed: {exc}")
        progress = [dict(p) for p in query.recentProgress]
    finally:
        query.stop()
    load1 = os.getloadavg()[0]
    by_id = {p["batchId"]: p for p in progress if "addBatch" in p["durationMs"]}
    measured = [by_id[b] for b in range(warmup, warmup + n) if b in by_id]
    if len(measured) != n:
        raise RuntimeError(f"{name}: {len(measured)} of {n} measured batches in the progress log")
    trig = [p["durationMs"]["triggerExecution"] for p in measured]
    wall = (_ts(measured[-1]) + trig[-1] / 1000 - _ts(measured[0])) / n
    res = Result(
        name=name,
        target=target,
        rows=rows,
        n=n,
        wall_ms=wall * 1000,
        trig_p50_ms=statistics.median(trig),
        cpu_s=cpu.seconds() / max(1, b1 - b0),
        load=(load0 + load1) / 2,
        durations={
            k: statistics.fmean(p["durationMs"].get(k, 0) for p in measured) for k in DURATION_KEYS
        },
        windows_run=len(by_id),
    )
    if check is not None:
        res.note = check(handle, [by_id[b] for b in sorted(by_id)])
    if isinstance(handle, RunningApplication):
        # every window of the run, the shutdown window included, is in the window log
        last = handle.last_window
        note = f"window log at {last}" + ("" if last == len(by_id) - 1 else " (LAGGING)")
        if handle.plan.error_ports:
            counts = handle.error_counts(last)
            note += f", errors {counts}" if counts else ", NO ERROR COUNTS"
        res.note = f"{res.note}; {note}" if res.note else note
    if is_malhar(handle):
        res.restore_pct = restore_rate(len(by_id))
    rp = "" if res.restore_pct is None else f"restore {res.restore_pct:3.0f}%  "
    print(
        f"    {name:<52} p50 {res.trig_p50_ms:7.1f} ms/w  mean {res.wall_ms:7.1f}  "
        f"cpu {res.cpu_s:5.3f} s/w {res.tps:>11,.0f} t/s  load {res.load:4.1f}  {rp}{res.note}",
        flush=True,
    )
    return res


def restore_rate(windows: int) -> float:
    """Share of (window, partition) tasks after the first window that rebuilt their runtime.

    Each rebuild calls ``setup`` once per operator of the group; the bench operators log
    those calls. The first window of each partition must build it; the rest should not.
    """
    log = SETUP_LOG / "setup.log"
    lines = log.read_text().splitlines() if log.exists() else []
    per_op = Counter(line.split()[0] for line in lines)
    if not per_op or windows < 2:
        return 0.0
    rates = [(c - PARTS) / ((windows - 1) * PARTS) for c in per_op.values()]
    return 100 * statistics.fmean(rates)


# -- scenarios ------------------------------------------------------------------------------------
def ck(tag: str) -> str:
    path = WORK / f"{tag}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return str(path)


def empty_dag(levels: int, name: str, error_port: bool = False) -> DAG:
    dag = DAG(name)
    src = dag.add_operator(
        "in", C.EmptyInputWithErrorPort() if error_port else C.EmptyInput(), PARTITIONS=PARTS
    )
    op = dag.add_operator("idle", C.Idle(), PARTITIONS=PARTS)
    dag.add_stream("s", src.output, op.input)
    if levels == 2:
        dag.set_port_attribute("idle", "input", "STREAM_CODEC", KeyCodec("word"))
    return dag


def chain_dag(rows_pp: int, name: str) -> DAG:
    dag = DAG(name)
    prev = dag.add_operator("gen", C.BatchGen(rows_pp), PARTITIONS=PARTS)
    for op_name, op in (
        ("add", C.AddOp()),
        ("filter", C.FilterOp()),
        ("project", C.ProjectOp()),
        ("count", C.RowCount()),
    ):
        h = dag.add_operator(op_name, op, PARTITIONS=PARTS)
        dag.add_stream(op_name, prev.output, h.input)
        prev = h
    return dag


def keyed_dag(rows_pp: int, keys: int, name: str) -> DAG:
    dag = DAG(name)
    g = dag.add_operator(
        "gen", C.KeyedGen(rows_pp, keys), PARTITIONS=PARTS, MAX_TUPLES_PER_WINDOW=rows_pp
    )
    c = dag.add_operator("count", C.KeyCount(), PARTITIONS=PARTS)
    dag.add_stream("g", g.output, c.input)
    dag.set_port_attribute("count", "input", "STREAM_CODEC", KeyCodec("word"))
    return dag


class Bench:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        spark.dataSource.register(C.BenchSource)
        spark.dataSource.register(C.NullSink)

    def source(self, kind: str, batches: int, rows: int = 0, keys: int = 0) -> Any:
        return (
            self.spark.readStream.format("bench_src")
            .option("kind", kind)
            .option("partitions", str(PARTS))
            .option("rows", str(rows))
            .option("keys", str(keys))
            .option("batches", str(batches))
            .load()
        )

    def write(self, df: Any, fmt: str, tag: str, mode: str = "append", path: str = "") -> Any:
        return (
            df.writeStream.format(fmt)
            .outputMode(mode)
            .option("checkpointLocation", path or ck(tag))
            .trigger(processingTime=TRIGGER)
            .start()
        )

    def malhar(self, dag: DAG, windows: int) -> RunningApplication:
        return launch(
            dag, spark=self.spark, checkpoint=ck("m"), windows=windows, window_ms=WINDOW_MS
        )

    def malhar_noop(self, dag: DAG, windows: int) -> ProtoApp:
        """The engine's own DataFrame (levels, envelope, ``observe``) into ``noop``, with
        nothing recording completed windows: the floor under ``launch``."""
        root = ck("mnoop")
        dag.set_attribute("CHECKPOINT", root)
        dag.set_attribute("STREAMING_WINDOW_MS", WINDOW_MS)
        plan = build_plan(dag)
        plan.id = uuid.uuid4().hex
        df = build_dataframe(self.spark, plan, windows)
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", f"{root}/spark")
            .trigger(processingTime=TRIGGER)
            .start()
        )
        return ProtoApp(query, plan, root)

    # target 1
    def spark_empty(self, batches: int, sink: str, shuffle: bool) -> Any:
        df = self.source("empty", batches)
        if shuffle:
            df = df.repartition(PARTS, "word").mapInArrow(C.identity_map, C.KEYED_DDL)
        return self.write(df, sink, "t1")

    # target 2
    def spark_chain(self, batches: int, rows_pp: int) -> Any:
        df = self.source("chain", batches, rows=rows_pp).mapInArrow(C.chain_map, "n bigint")
        return self.write(df.observe("chk", F.sum("n").alias("rows")), "noop", "t2")

    # target 3
    def spark_tws(self, batches: int, rows_pp: int, keys: int) -> Any:
        path = ck("t3")
        out = (
            self.source("keyed", batches, rows=rows_pp, keys=keys)
            .groupBy("word")
            .transformWithStateInPandas(
                statefulProcessor=C.TwsCount(),
                outputStructType="word string, c bigint",
                outputMode="Update",
                timeMode="None",
            )
        )
        query = self.write(out, "noop", "", mode="update", path=path)
        query._bench_ck = path
        return query

    def spark_shuffle(self, batches: int, rows_pp: int, keys: int) -> Any:
        df = self.source("keyed", batches, rows=rows_pp, keys=keys)
        df = df.repartition(PARTS, "word").mapInArrow(C.count_map, "n bigint")
        return self.write(df.observe("chk", F.sum("n").alias("rows")), "noop", "t3s")


# -- result checks --------------------------------------------------------------------------------
def malhar_state(checkpoint: str, group: str) -> list[dict]:
    """The newest state snapshot of each partition of ``group`` (engine layout, read-only)."""
    out = []
    base = Path(checkpoint) / "malhar" / "state" / group
    for part in sorted(base.iterdir(), key=lambda p: int(p.name)):
        snaps = sorted(part.glob("*.state"))
        out.append(cloudpickle.loads(snaps[-1].read_bytes()))
    return out


def check_chain(rows_pp: int) -> Callable[[Any, list[dict]], str]:
    def check(handle: Any, progress: list[dict]) -> str:
        windows = len(progress)
        if is_malhar(handle):
            states = malhar_state(handle.checkpoint, "gen+add+filter+project+count")
            got = sum(s["ops"]["count"].rows for s in states)
        else:
            got = sum(int(p["observedMetrics"]["chk"]["rows"]) for p in progress)
        want = C.chain_expected(rows_pp, PARTS, windows)
        return f"rows ok ({got:,})" if got == want else f"ROWS WRONG: {got:,} != {want:,}"

    return check


def check_keyed(rows_pp: int, keys: int, spark: Any) -> Callable[[Any, list[dict]], str]:
    def check(handle: Any, progress: list[dict]) -> str:
        windows = len(progress)
        nkeys = keys
        if is_malhar(handle):
            dicts = [s["ops"]["count"].counts for s in malhar_state(handle.checkpoint, "count")]
            if set(dicts[0]) & set(dicts[1]):
                return "SAME KEY IN BOTH PARTITIONS"
            got, nkeys = sum(sum(d.values()) for d in dicts), sum(len(d) for d in dicts)
        elif "chk" in progress[0].get("observedMetrics", {}):
            got = sum(int(p["observedMetrics"]["chk"]["rows"]) for p in progress)
        else:
            try:
                st = spark.read.format("statestore").option("stateVarName", "count")
                agg = st.load(handle._bench_ck).selectExpr("sum(value.c)", "count(*)").collect()
                got, nkeys = int(agg[0][0]), int(agg[0][1])
            except Exception as exc:  # the state reader is a convenience, not the benchmark
                return f"(state not read: {type(exc).__name__})"
        want = rows_pp * PARTS * windows
        ok = got == want and nkeys == keys
        return f"rows ok ({got:,}, {nkeys:,} keys)" if ok else f"ROWS WRONG: {got:,} != {want:,}"

    return check


# -- in-process: the engine's Python work for one window, without Spark -------------------------
def inprocess(
    dag: DAG, windows: int, *, miss: bool = False, profile: bool = False
) -> tuple[float, float, int, float, str]:
    """Run ``windows`` windows of ``dag`` by calling ``run_inputs`` (level 0) and ``run_window``
    level by level in this
    process, routing envelope rows by pkey as Spark's hash partitioner does. ``miss``: drop
    the cached runtimes before each window, as when a task lands in another Python worker.
    Return median wall and CPU seconds per window (after the first), the snapshot size,
    state snapshots written per task and window (after the first window; counted by wrapping
    ``StateStore.save`` in this process only) and a cProfile report of the last window."""
    from malhar.engine import state_store as S
    from malhar.engine import task as T

    root = ck("inproc")
    dag.set_attribute("CHECKPOINT", root)
    plan = build_plan(dag)
    plan.id = uuid.uuid4().hex
    times, cpus, report = [], [], ""
    saves: list[int] = []
    original_save = S.StateStore.save

    def counting_save(self: Any, window: int, data: bytes) -> None:
        if window > 0:
            saves.append(window)
        original_save(self, window, data)

    S.StateStore.save = counting_save  # type: ignore[method-assign]
    try:
        _inprocess_windows(plan, windows, miss, profile, times, cpus)
    finally:
        S.StateStore.save = original_save  # type: ignore[method-assign]
        T._CACHE.evict(lambda key, _: key[0] == plan.app)
    report = _PROFILE.pop("report", "")
    snap = max((p.stat().st_size for p in Path(root).rglob("*.state")), default=0)
    per_task = len(saves) / ((windows - 1) * sum(plan.levels))
    return statistics.median(times[1:]), statistics.median(cpus[1:]), snap, per_task, report


_PROFILE: dict[str, str] = {}


def _inprocess_windows(
    plan: Any, windows: int, miss: bool, profile: bool, times: list, cpus: list
) -> None:
    from malhar.engine import task as T

    for w in range(windows):
        if miss:
            for key in [k for k in list(T._CACHE.live) if k[0] == plan.app]:
                T._CACHE.take(key)  # the runtime now lives in "another worker": no teardown
        prof = cProfile.Profile() if profile and w == windows - 1 else None
        t, c = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        batches: list[pa.RecordBatch] = []
        for slot in range(plan.levels[0]):
            batches += T.run_inputs(plan, [slot], window=w, committed=w - 1)
        for level in range(1, len(plan.levels)):
            slot_of = {k: s for s, k in enumerate(plan.pkeys[level])}
            per_slot: dict[int, list[pa.RecordBatch]] = defaultdict(list)
            for b in batches:
                slots = pa.array([slot_of[k] for k in b.column(0).to_pylist()], pa.int32())
                for s in set(slots.to_pylist()):
                    per_slot[s].append(b.filter(pa.compute.equal(slots, s)))
            batches = []
            for slot in range(plan.levels[level]):
                batches += T.run_window(plan, level, slot, iter(per_slot.get(slot, [])))
        if prof:
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(16)
            _PROFILE["report"] = buf.getvalue()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)


def routing_microbench(keys: int, rows: int = 500_000, n: int = 2) -> list[str]:
    """What ``RouteBuffer.batch`` does with a ``KeyCodec`` per emitted batch (task.py), next
    to cheaper equivalents that give the same partition of every row."""
    import numpy as np
    import pandas as pd
    import pyarrow.compute as pc

    from malhar.engine import envelope as E

    batch = C.keyed_batch(rows, keys)
    codec = KeyCodec("word")

    def timed(fn: Callable[[], Any], reps: int = 5) -> tuple[float, Any]:
        out = fn()
        t = time.process_time()
        for _ in range(reps):
            fn()
        return (time.process_time() - t) / reps * 1000, out

    def dictionary_keys() -> np.ndarray:
        enc = batch.column(0).dictionary_encode()
        frame = pd.DataFrame({"word": enc.dictionary.to_pandas()})
        hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy()
        return ((hashed >> np.uint64(1)).astype(np.int64))[enc.indices.to_numpy()]

    t_codec, ref = timed(lambda: codec.partition_batch(batch))
    t_dict, alt = timed(dictionary_keys)
    dest = ref % n
    t_unique, _ = timed(lambda: [batch.filter(pa.array(dest == d)) for d in np.unique(dest)])
    t_range, _ = timed(lambda: [batch.filter(pa.array(dest == d)) for d in range(n)])
    part = batch.filter(pa.array(dest == 0))
    t_enc, payload = timed(lambda: E.encode_batch(part))
    t_dec, _ = timed(lambda: E.decode_batch(payload))
    t_vc, _ = timed(lambda: pc.value_counts(part.column(0)))
    same = "same partitions" if np.array_equal(ref, alt) else "DIFFERENT partitions"
    rows_ = [
        ("KeyCodec.partition_batch (pandas hash of every row)", t_codec, ""),
        (f"  dictionary_encode, hash the {keys} distinct values", t_dict, f"({same})"),
        ("split: np.unique(dest) + filter per destination", t_unique, ""),
        ("  filter per destination over range(n)", t_range, ""),
        (f"encode_batch, {part.num_rows:,} rows ({len(payload) / 1e6:.1f} MB)", t_enc, ""),
        ("decode_batch, same chunk", t_dec, ""),
        ("pc.value_counts of the chunk (the operator's work)", t_vc, ""),
    ]
    return [f"{label:<54}{ms:6.1f}  {note}".rstrip() for label, ms, note in rows_]


# -- main -----------------------------------------------------------------------------------------
def median_of(results: list[Result], name: str) -> Result:
    rs = sorted((r for r in results if r.name == name), key=lambda r: r.trig_p50_ms)
    return rs[len(rs) // 2]


def engine_version() -> str:
    files = sorted((ROOT / "malhar" / "engine").glob("*.py")) + [
        ROOT / "malhar" / n for n in ("operator.py", "ports.py", "codec.py")
    ]
    digest = hashlib.sha1(b"".join(f.read_bytes() for f in files)).hexdigest()[:10]
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        head = "?"
    return f"git {head or '?'}, engine sources sha1 {digest}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer windows, one round (~1.5-3 min)")
    ap.add_argument("--profile", action="store_true", help="print cProfile of in-process windows")
    ap.add_argument("--only", default="1,2,3", help="targets to run, e.g. 1,3")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="alternations for targets 1 and 2 (3: 2 in full mode)",
    )
    ap.add_argument("--keys", type=int, default=1000, help="distinct keys in target 3")
    ap.add_argument("--rows", type=int, default=100_000, help="tuples per window in target 2")
    args = ap.parse_args()
    only = {int(x) for x in args.only.split(",")}
    q = args.quick
    rounds = args.rounds or (1 if q else 3)
    t_all = time.monotonic()

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(
        f"malhar engine benchmark — {os.cpu_count()} cores, {mem:.0f} GiB, "
        f"Python {platform.python_version()}, load average {os.getloadavg()}"
    )
    print(f"{engine_version()}; work dir {WORK}")
    spark = build_session(
        "local[2]",
        conf={"spark.sql.streaming.numRecentProgressUpdates": "300"},
        log_level="ERROR",
    )
    import pyspark

    print(
        f"PySpark {pyspark.__version__}, pyarrow {pa.__version__}, local[2], shuffle "
        f"partitions {spark.conf.get('spark.sql.shuffle.partitions')}, trigger {TRIGGER}, "
        f"{PARTS} partitions everywhere; {'quick' if q else 'full'} mode, {rounds} round(s)"
    )
    global SPARK
    SPARK = spark
    b = Bench(spark)
    results: list[Result] = []

    print("warm-up (JVM, Python workers; not reported)", flush=True)
    measure("warm-up", "-", lambda: b.spark_empty(6, "noop", True), warmup=2, n=3, rows=0)

    if 1 in only:
        w, n = (2, 10) if q else (2, 12)
        print(f"\n[1] empty windows: {w} warm-up + {n} measured per scenario", flush=True)
        for _ in range(rounds):
            for name, fn in (
                ("spark: py source -> noop", lambda: b.spark_empty(w + n, "noop", False)),
                ("spark: py source -> py sink", lambda: b.spark_empty(w + n, "bench_null", False)),
                ("malhar: 1 level", lambda: b.malhar(empty_dag(1, "e1"), w + n + 1)),
                (
                    "malhar: 1 level, engine DataFrame -> noop",
                    lambda: b.malhar_noop(empty_dag(1, "e1n"), w + n + 1),
                ),
                (
                    "spark: py src -> shuffle+mapInArrow -> noop",
                    lambda: b.spark_empty(w + n, "noop", True),
                ),
                (
                    "spark: py src -> shuffle+mapInArrow -> py sink",
                    lambda: b.spark_empty(w + n, "bench_null", True),
                ),
                (
                    "malhar: 2 levels (KeyCodec edge)",
                    lambda: b.malhar(empty_dag(2, "e2"), w + n + 1),
                ),
                (
                    "malhar: 2 levels, engine DataFrame -> noop",
                    lambda: b.malhar_noop(empty_dag(2, "e2n"), w + n + 1),
                ),
                (
                    "malhar: 1 level, error port (metrics listener)",
                    lambda: b.malhar(empty_dag(1, "e1x", error_port=True), w + n + 1),
                ),
            ):
                results.append(measure(name, "1", fn, warmup=w, n=n, rows=0))

    if 2 in only:
        rows_pp = args.rows // PARTS
        w, n = (2, 8) if q else (2, 12)
        print(
            f"\n[2] fused stateless chain, {args.rows:,} tuples/window: {w} warm-up + {n} measured",
            flush=True,
        )
        for _ in range(rounds):
            results.append(
                measure(
                    "spark: py source -> mapInArrow(3 steps) -> noop",
                    "2",
                    lambda: b.spark_chain(w + n, rows_pp),
                    warmup=w,
                    n=n,
                    rows=args.rows,
                    check=check_chain(rows_pp),
                )
            )
            results.append(
                measure(
                    "malhar: gen -> add -> filter -> project -> count",
                    "2",
                    lambda: b.malhar(chain_dag(rows_pp, "chain"), w + n + 1),
                    warmup=w,
                    n=n,
                    rows=args.rows,
                    check=check_chain(rows_pp),
                )
            )

    if 3 in only:
        sizes = [(100_000, (1, 4) if q else (2, 8)), (1_000_000, (1, 2) if q else (1, 3))]
        for total, (w, n) in sizes:
            rows_pp = total // PARTS
            tag = f"{total // 1000}k"
            print(
                f"\n[3] shuffle + per-key count, {total:,} tuples/window, {args.keys:,} keys: "
                f"{w} warm-up + {n} measured",
                flush=True,
            )
            chk = check_keyed(rows_pp, args.keys, spark)
            scenarios = [
                (
                    f"spark: shuffle + mapInArrow, no state ({tag})",
                    lambda w=w, n=n, rows_pp=rows_pp: b.spark_shuffle(w + n, rows_pp, args.keys),
                ),
                (
                    f"spark: transformWithStateInPandas ({tag})",
                    lambda w=w, n=n, rows_pp=rows_pp: b.spark_tws(w + n, rows_pp, args.keys),
                ),
                (
                    f"malhar: KeyCodec shuffle + KeyCount ({tag})",
                    lambda w=w, n=n, rows_pp=rows_pp, tag=tag: b.malhar(
                        keyed_dag(rows_pp, args.keys, f"keyed{tag}"), w + n + 1
                    ),
                ),
            ]
            for _ in range(1 if q else 2):
                for name, fn in scenarios:
                    if q and "no state" in name:
                        continue
                    results.append(measure(name, "3", fn, warmup=w, n=n, rows=total, check=chk))
    spark_secs = time.monotonic() - t_all

    print(
        "\n[in-process] engine Python time per window: run_window called directly for every "
        "partition of every level, no Spark, one core",
        flush=True,
    )
    cases: list[tuple[str, Callable[[], DAG], int, bool]] = [
        ("empty, 1 level", lambda: empty_dag(1, "ip-e1"), 10, False),
        ("empty, 1 level, runtime rebuilt", lambda: empty_dag(1, "ip-e1m"), 10, True),
        ("empty, 2 levels", lambda: empty_dag(2, "ip-e2"), 10, False),
        (f"chain {args.rows // 1000}k", lambda: chain_dag(args.rows // PARTS, "ip-c"), 8, False),
        (f"keyed 100k, {args.keys} keys", lambda: keyed_dag(50_000, args.keys, "ip-k"), 6, False),
        (
            f"keyed 100k, {args.keys} keys, runtime rebuilt",
            lambda: keyed_dag(50_000, args.keys, "ip-km"),
            6,
            True,
        ),
        ("keyed 100k, 100k keys", lambda: keyed_dag(50_000, 100_000, "ip-kb"), 6, False),
        (
            "keyed 100k, 100k keys, runtime rebuilt",
            lambda: keyed_dag(50_000, 100_000, "ip-kbm"),
            6,
            True,
        ),
    ]
    if not q:
        cases.append(
            ("keyed 1000k, 1000 keys", lambda: keyed_dag(500_000, 1000, "ip-k1m"), 4, False)
        )
    inproc: list[tuple[str, float, float, int, float]] = []
    for label, make, nwin, miss in cases:
        wall, cpu, snap, saves, report = inprocess(make(), nwin, miss=miss, profile=args.profile)
        inproc.append((label, wall, cpu, snap, saves))
        print(
            f"    {label:<44} {wall * 1000:7.1f} ms/window wall {cpu * 1000:7.1f} ms cpu   "
            f"snapshot {snap:>9,} B, {saves:.2f} written per task-window",
            flush=True,
        )
        if args.profile:
            print(report)
    routing = routing_microbench(args.keys)
    for line in routing:
        print(f"    {line}", flush=True)

    # -- the table ------------------------------------------------------------------------------
    bar = "=" * 124
    print(f"\n{bar}\nRESULTS  ({os.cpu_count()} cores, {mem:.0f} GiB; {engine_version()})")
    print(
        f"{'tgt':<4}{'scenario':<52}{'tuples/w':>10}{'p50 ms/w':>9}{'mean':>8}{'cpu s/w':>8}"
        f"{'tuples/s':>12}{'load':>6}{'restore':>8}  rounds (p50 ms/w)"
    )
    names = list(dict.fromkeys(r.name for r in results))
    for name in names:
        r = median_of(results, name)
        runs = [x for x in results if x.name == name]
        spread = ", ".join(f"{x.trig_p50_ms:.0f}" for x in runs) if len(runs) > 1 else ""
        rp = "" if r.restore_pct is None else f"{r.restore_pct:.0f}%"
        print(
            f"{r.target:<4}{name:<52}{r.rows:>10,}{r.trig_p50_ms:>9.1f}{r.wall_ms:>8.1f}"
            f"{r.cpu_s:>8.3f}{r.tps:>12,.0f}{r.load:>6.1f}{rp:>8}  {spread}"
        )

    print(
        "\nRATIOS: median over rounds of the per-round ratio of median batch times (each round "
        "runs the\npair back to back); CPU-seconds-per-window ratio in brackets; per-round "
        "values at the end"
    )

    def ratio(label: str, a: str, base: str, kind: str, goal: str, ok: Callable | None) -> None:
        ra = [r for r in results if r.name == a]
        rb = [r for r in results if r.name == base]
        if not ra or not rb:
            return
        if kind == "time":
            vals = [x.trig_p50_ms / y.trig_p50_ms for x, y in zip(ra, rb, strict=False)]
            cpus = [x.cpu_s / y.cpu_s for x, y in zip(ra, rb, strict=False)]
            val, cpu = statistics.median(vals), statistics.median(cpus)
            text = f"{val:5.2f}x  (cpu {cpu:4.2f}x)"
            each = ", ".join(f"{v:.2f}" for v in vals)
        else:
            vals = [x.tps / y.tps for x, y in zip(ra, rb, strict=False)]
            cpus = [y.cpu_s / x.cpu_s for x, y in zip(ra, rb, strict=False)]
            val, cpu = statistics.median(vals), statistics.median(cpus)
            text = f"{val * 100:5.0f}%  (cpu {cpu * 100:4.0f}%)"
            each = ", ".join(f"{v * 100:.0f}%" for v in vals)
        verdict = "" if ok is None else ("MET" if ok(val) else "MISSED")
        print(f"  {label:<74} {text:<24} {goal:<8} {verdict:<7} {each if len(vals) > 1 else ''}")

    le = lambda v: v <= 1.2  # noqa: E731
    for lv, base_shape in (("1 level", ""), ("2 levels", "shuffle+mapInArrow -> ")):
        m = "malhar: 1 level" if lv == "1 level" else "malhar: 2 levels (KeyCodec edge)"
        src = "spark: py source -> " if lv == "1 level" else "spark: py src -> "
        ratio(
            f"1  malhar {lv} / Spark empty batch, noop sink",
            m,
            f"{src}{base_shape}noop",
            "time",
            "<= 1.2x",
            le,
        )
        ratio(
            f"1  malhar {lv} / Spark empty batch, Python sink",
            m,
            f"{src}{base_shape}py sink",
            "time",
            "<= 1.2x",
            le,
        )
        ratio(
            f"1  malhar {lv} engine DataFrame -> noop, nothing recorded / Spark, noop",
            f"malhar: {lv}, engine DataFrame -> noop",
            f"{src}{base_shape}noop",
            "time",
            "<= 1.2x",
            le,
        )
    ratio(
        "1  malhar 1 level with an error port / Spark empty batch, noop sink",
        "malhar: 1 level, error port (metrics listener)",
        "spark: py source -> noop",
        "time",
        "<= 1.2x",
        le,
    )
    ratio(
        "2  malhar fused chain / bare mapInArrow (tuples/s)",
        "malhar: gen -> add -> filter -> project -> count",
        "spark: py source -> mapInArrow(3 steps) -> noop",
        "tps",
        ">= 70%",
        lambda v: v >= 0.7,
    )
    for tag in ("100k", "1000k"):
        ratio(
            f"3  malhar keyed / transformWithStateInPandas, {tag} (tuples/s)",
            f"malhar: KeyCodec shuffle + KeyCount ({tag})",
            f"spark: transformWithStateInPandas ({tag})",
            "tps",
            "report",
            None,
        )
        ratio(
            f"3  malhar keyed / stateless shuffle + mapInArrow, {tag} (tuples/s)",
            f"malhar: KeyCodec shuffle + KeyCount ({tag})",
            f"spark: shuffle + mapInArrow, no state ({tag})",
            "tps",
            "report",
            None,
        )

    print("\nmean durationMs per measured micro-batch: " + " / ".join(DURATION_KEYS))
    for name in names:
        d = median_of(results, name).durations
        print(f"  {name:<52} " + " / ".join(f"{d[k]:6.1f}" for k in DURATION_KEYS))
    print("\nin-process engine Python time per window (median; no Spark, one core):")
    for label, wall, cpu, snap, saves in inproc:
        print(
            f"  {label:<44} {wall * 1000:7.1f} ms wall {cpu * 1000:7.1f} ms cpu   "
            f"snapshot {snap:>9,} B, {saves:.2f} written per task-window"
        )
    print("\nrouting a 500k-row typed batch to 2 partitions (KeyCodec), CPU ms per call:")
    for line in routing:
        print(f"  {line}")
    print(
        f"\ntotal {time.monotonic() - t_all:.0f} s (Spark part {spark_secs:.0f} s); "
        f"load average now {os.getloadavg()}"
    )
    spark.stop()
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
