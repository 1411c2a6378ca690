"""Repartitioning a checkpoint: the state of ``window`` from N partitions to M, by key.

A driver-side operation while no partition of the operator runs. Steps:

1. read each old partition's state at ``window`` (its chain merged into one sorted
   stream) and merge the N streams;
2. route every entry by ``key_partition(encoded user key)`` (the engine wraps its
   stream codec; ``structures`` may name, per structure, the part of its key that is the
   stream key, or drop entries their owner rebuilds) into one base file per new
   partition, written under
   ``<operator>/.repartition/<p>/``; sizes of maps and multimaps are recounted,
   time-bucket horizons are copied to every new partition;
3. write ``<operator>/.repartition/COMMIT`` (the commit point);
4. move the files into ``<operator>/<p>/`` (old files deleted) and remove the
   staging directory.

A crash before step 3 leaves the old checkpoint untouched (the staging directory is
removed by the next attempt); after it, :func:`finish_pending` (also called by every
``ManagedState.restore``) completes step 4, idempotently. Lists are per partition and
have no key: a non-empty list cannot be repartitioned (:class:`StateError`).
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from malhar.util.fs import filesystem_for
from malhar.util.fs.base import FileSystem
from malhar.util.state.chain import merge_runs, select_chain
from malhar.util.state.codecs import INT, unescape_from
from malhar.util.state.errors import StateError
from malhar.util.state.fileformat import ROOT, FileReader, FileWriter, new_uid, parse_name
from malhar.util.state.key_set_kinds import join_runs, split_run
from malhar.util.state.keys import (
    BYTES_SETS,
    INT_SETS,
    LIST,
    MAP,
    META,
    MULTIMAP,
    STR_SETS,
    TIME,
    split,
    user_key,
)

_KEY_SETS = (INT_SETS, STR_SETS, BYTES_SETS)

_STAGING = ".repartition"
_COMMIT = "COMMIT"
_Q = struct.Struct("<q")
_RUN0 = INT.encode(0)


def _partition_state(
    fs: FileSystem, pdir: str, window: int, signer: bytes | None
) -> Iterator[tuple[bytes, bytes | None]]:
    nodes = []
    if fs.exists(pdir):
        nodes = [n for st in fs.list(pdir) if (n := parse_name(st.name, st.size)) is not None]
    chain = select_chain(nodes, window, where=fs.describe(pdir))
    if not chain:
        return iter(())
    readers = [FileReader(fs, fs.join(pdir, n.name), n, signer=signer) for n in chain]
    _, entries = merge_runs(
        [r.ranges() for r in readers], [r.entries() for r in readers], bottom=True
    )
    return entries


#: map entries routed per call of ``key_partition.many``
_ROUTE_BATCH = 10_000
#: what the new partitions' writers buffer in all (each at least _MIN_FLUSH_BYTES)
_WRITERS_BYTES, _MIN_FLUSH_BYTES = 128 << 20, 8 << 20


def repartition(
    root: str,
    operator: str,
    window: int,
    old_partitions: int,
    new_partitions: int,
    key_partition: Callable[[bytes], int],
    *,
    fs_options: dict[str, Any] | None = None,
    signer: bytes | None = None,
    target_root: str | None = None,
    structures: Mapping[str, Callable[[bytes], bytes | None]] | None = None,
) -> None:
    """Rewrite the checkpoint of ``window`` of ``operator`` from N to M partitions.

    ``key_partition(encoded_key) -> int`` in ``[0, new_partitions)`` receives a key as
    the structure's key codec encoded it, or, for a map, multimap or time buckets named
    in ``structures``, what its function makes of that key: the part that is the stream key
    (a map keyed by ``(window, key)`` routes by ``key``), or None for an entry that is
    left out (its owner rebuilds it from what was moved). Afterwards partitions
    ``0..M-1`` restore ``window`` (or later) from one base file each; state of windows
    after ``window`` is dropped.

    With ``target_root`` the new partitions are written under that root (on the same
    filesystem) and the old checkpoint is left as it is: the caller's own commit point
    (the engine's partitioning manifest) decides which one is used.
    """
    from malhar.util.state.manager import operator_dir

    if old_partitions < 1 or new_partitions < 1:
        raise ValueError("partition counts must be >= 1")
    fs, base = filesystem_for(root, **(fs_options or {}))
    opdir = operator_dir(fs, base, operator)
    finish_pending(fs, opdir)
    if target_root is not None:
        _, target_base = filesystem_for(target_root, **(fs_options or {}))
        staging = operator_dir(fs, target_base, operator)
    else:
        staging = fs.join(opdir, _STAGING)
    fs.delete(staging, recursive=True)  # an attempt that died before its commit point
    # the writers' buffers together stay near _WRITERS_BYTES (64 MiB each held M x 64 MiB)
    flush_bytes = max(_MIN_FLUSH_BYTES, _WRITERS_BYTES // new_partitions)
    writers = [
        FileWriter(
            fs,
            fs.join(staging, str(p)),
            -1,
            window,
            new_uid(),
            ROOT,
            signer=signer,
            flush_bytes=flush_bytes,
        )
        for p in range(new_partitions)
    ]
    for p in range(new_partitions):
        fs.mkdirs(fs.join(staging, str(p)))
    streams = [
        _tag(_partition_state(fs, fs.join(opdir, str(p)), window, signer), p)
        for p in range(old_partitions)
    ]
    counts = [0] * new_partitions
    meta: dict[bytes, bytes] = {}  # the structure's metadata key -> value (kind + int)
    current_name: bytes | None = None
    last_key: bytes | None = None
    last_from = -1
    # the routing key of the current structure's entries (None: the whole user key)
    keyed_by: Callable[[bytes], bytes | None] | None = None

    def bad_partition(p: Any, uk: bytes) -> StateError:
        return StateError(
            f"operator {operator!r}: key_partition returned {p!r} for key {uk!r}, "
            f"not a partition in [0, {new_partitions})",
            operation="repartition",
        )

    def route(uk: bytes) -> int:
        p = key_partition(uk)
        if not isinstance(p, int) or not 0 <= p < new_partitions:
            raise bad_partition(p, uk)
        return p

    def route_many(uks: list[bytes]) -> list[int]:
        ps = [int(p) for p in many(uks)]  # type: ignore[misc]
        for p, uk in zip(ps, uks, strict=True):
            if not 0 <= p < new_partitions:
                raise bad_partition(p, uk)
        return ps

    many = getattr(key_partition, "many", None)
    if many is not None:
        route.many = route_many  # type: ignore[attr-defined]

    # map entries wait here to be routed many at a time (in order: each writer still gets
    # its entries sorted); flushed before anything else is written
    pending: list[tuple[bytes, bytes, bytes]] = []

    def flush_entries() -> None:
        if not pending:
            return
        uks = [uk for _, uk, _ in pending]
        ps = route_many(uks) if many is not None else [route(uk) for uk in uks]
        for (ik, _, v), p in zip(pending, ps, strict=True):
            writers[p].add(ik, v)
            counts[p] += 1
        pending.clear()

    # the runs of one bucket of key sets, from every old partition: split by key, then one
    # run per new partition (run id 0) once the bucket's last run is read
    runs_head: bytes | None = None
    runs_kind = b""
    runs: list[list[Any]] = [[] for _ in range(new_partitions)]

    def flush_runs() -> None:
        assert runs_head is not None
        for p, parts in enumerate(runs):
            if parts:
                writers[p].add(runs_head + _RUN0, join_runs(runs_kind, parts))
                parts.clear()

    def flush_meta(name: bytes) -> None:
        raw = meta.pop(name + META, None)
        if raw is None:
            return
        kind = raw[:1]
        for p, w in enumerate(writers):
            if kind in (MAP, MULTIMAP):
                w.add(name + META, kind + _Q.pack(counts[p]))
            else:
                w.add(name + META, raw)
        for p in range(new_partitions):
            counts[p] = 0

    try:
        for ik, old_p, v in heapq.merge(*streams):
            if v is None:
                continue
            name, kind, rest = split(ik)
            if pending and (kind in _KEY_SETS or kind in (META, LIST) or name != current_name):
                flush_entries()
            if runs_head is not None and not ik.startswith(runs_head):
                flush_runs()
                runs_head = None
            if name != current_name:  # the structure's entries are all out: its metadata next
                if current_name is not None:
                    flush_meta(current_name)
                current_name = name
                keyed_by = (structures or {}).get(_structure_name(name))
            if kind in _KEY_SETS:
                runs_head, runs_kind = ik[: len(name) + 9], kind  # name | kind | bucket
                for p, part in enumerate(split_run(kind, v, route, new_partitions)):
                    if len(part):
                        runs[p].append(part)
                continue
            if kind == META:
                prev = meta.get(ik)
                if raw_kind(v) == LIST and _Q.unpack_from(v, 1)[0] > 0:
                    _list_error(operator, name)
                if prev is not None and raw_kind(v) in (TIME, *_KEY_SETS):
                    # horizons: the furthest one wins (every partition expired at least that)
                    v = v if _Q.unpack_from(v, 1)[0] > _Q.unpack_from(prev, 1)[0] else prev
                meta[ik] = v
                continue
            if kind == LIST:
                _list_error(operator, name)
            uk = user_key(kind, rest)
            assert uk is not None
            if keyed_by is not None:
                uk = keyed_by(uk)
                if uk is None:  # rebuilt by its owner after the repartitioning
                    continue
            if ik == last_key:
                raise StateError(
                    f"operator {operator!r}: key {ik!r} is in partitions {last_from} and {old_p} "
                    "of the checkpoint: the state was not partitioned by key",
                    operation="repartition",
                )
            last_key, last_from = ik, old_p
            pending.append((ik, uk, v))
            if len(pending) >= _ROUTE_BATCH:
                flush_entries()
        flush_entries()
        if runs_head is not None:
            flush_runs()
        if current_name is not None:
            flush_meta(current_name)
        names = {str(p): w.finish().name for p, w in enumerate(writers)}
    except BaseException:
        for w in writers:
            w.abort()
        fs.delete(staging, recursive=True)
        raise
    if target_root is not None:
        return
    marker = {
        "format": 1,
        "window": window,
        "old_partitions": old_partitions,
        "new_partitions": new_partitions,
        "files": names,
    }
    fs.write_atomic(fs.join(staging, _COMMIT), json.dumps(marker).encode(), overwrite=False)
    finish_pending(fs, opdir)


def raw_kind(meta_value: bytes) -> bytes:
    return meta_value[:1]


def _structure_name(name: bytes) -> str:
    raw, _ = unescape_from(name, 0)
    return raw.decode("utf-8", "replace")


def _list_error(operator: str, name: bytes) -> None:
    raw, _ = unescape_from(name, 0)
    raise StateError(
        f"operator {operator!r}: SpillableList {raw.decode('utf-8', 'replace')!r} is not empty; "
        "lists have no key and cannot be repartitioned (clear it, or keep it in a map)",
        operation="repartition",
    )


def _tag(
    stream: Iterator[tuple[bytes, bytes | None]], p: int
) -> Iterator[tuple[bytes, int, bytes | None]]:
    for k, v in stream:
        yield k, p, v


def finish_pending(fs: FileSystem, opdir: str) -> None:
    """Complete a repartitioning that reached its commit point (idempotent)."""
    staging = fs.join(opdir, _STAGING)
    marker_path = fs.join(staging, _COMMIT)
    if not fs.exists(marker_path):
        return
    marker = json.loads(fs.read_all(marker_path))
    old, new = marker["old_partitions"], marker["new_partitions"]
    for p in range(max(old, new)):
        target = fs.join(opdir, str(p))
        if p >= new:
            fs.delete(target, recursive=True)
            continue
        name = marker["files"][str(p)]
        src = fs.join(staging, str(p), name)
        if not fs.exists(src):
            continue  # moved by an earlier, interrupted completion
        if fs.exists(target):
            for st in fs.list(target):
                fs.delete(st.path, recursive=True)
        fs.mkdirs(target)
        fs.rename(src, fs.join(target, name), overwrite=True)
    fs.delete(staging, recursive=True)


__all__ = ["finish_pending", "repartition"]
