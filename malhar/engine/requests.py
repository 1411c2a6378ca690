"""Requests to a running application through its checkpoint (``malhar repartition``).

``malhar run`` serves the checkpoint it runs on: it keeps a heartbeat file
``<checkpoint>/malhar/requests/serving.json`` (who serves, refreshed every
:data:`HEARTBEAT_S` seconds, removed when it stops) and, between its progress checks,
takes each request file ``<id>.json`` in that folder (renamed ``<id>.taken``: its asker
can no longer withdraw it), carries it out (``RunningApplication.repartition``) and writes
the answer ``<id>.answer.json`` before it removes the request. The taken file names the
run that took it (``by``: host, pid and the run's id, as its heartbeat does), so that its
asker notices when that run stops or dies before it answers (a stale heartbeat, or another
run serving the checkpoint). A request its asker
stopped waiting for is answered "expired", not carried out. The files are written atomically (a rename), so a reader never sees
half of one; they hold operator names and counts only. ``malhar repartition`` submits a
request and waits for its answer; it refuses at once when no fresh heartbeat says that an
application serves the checkpoint.

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> serving(root) is None
    True
    >>> request = submit(root, {"count": 3})
    >>> [(r.id == request, r.counts) for r in pending(root)]
    [(True, {'count': 3})]
    >>> take(root, request)
    True
    >>> answer(root, request, Answer(True, "count: 3 partitions after window 7"))
    >>> pending(root), await_answer(root, request, timeout=1).message
    ([], 'count: 3 partitions after window 7')
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from malhar.errors import ConfigError
from malhar.util.fs import filesystem_for

__all__ = [
    "Answer",
    "Request",
    "answer",
    "await_answer",
    "forget",
    "heartbeat",
    "parse_counts",
    "pending",
    "same_run",
    "serving",
    "stop_serving",
    "submit",
    "sweep",
    "take",
    "taken",
    "withdraw",
]

#: how often ``malhar run`` refreshes its heartbeat; one older than 3x that is stale
HEARTBEAT_S = 2.0
#: seconds without a heartbeat after which the run that took a request is taken for dead:
#: much longer than a fresh heartbeat's 3 beats, as a run moving state (or writing to a
#: slow file system) may beat late, and a false "it died" would send its asker away
SILENT_S = 20.0
_FOLDER = "malhar/requests"
_SERVING = "serving.json"
_ANSWER = ".answer.json"
_TAKEN = ".taken"


@dataclass(frozen=True)
class Request:
    """A repartitioning asked of the running application: operator -> partition count."""

    id: str
    counts: dict[str, int]
    #: when the asker stops waiting (epoch seconds): an older request is not carried out
    until: float = float("inf")


@dataclass(frozen=True)
class Answer:
    """What came of a request: done (``ok``) or refused, and what was said."""

    ok: bool
    message: str


def parse_counts(pairs: list[str] | tuple[str, ...]) -> dict[str, int]:
    """``["count=3", "join=2"]`` -> ``{"count": 3, "join": 2}``; a clear error otherwise."""
    counts: dict[str, int] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not sep or not name or n < 1:
            raise ConfigError(
                f"{pair!r}: write OPERATOR=N with N a partition count of 1 or more (e.g. count=3)"
            )
        counts[name] = n
    return counts


def _folder(checkpoint: str) -> tuple[Any, str]:
    fs, base = filesystem_for(checkpoint)
    return fs, fs.join(base, _FOLDER)


def _write(fs: Any, path: str, doc: dict[str, Any]) -> None:
    fs.mkdirs(fs.dirname(path))
    fs.write_atomic(path, json.dumps(doc).encode())


def _read(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        return json.loads(fs.read_all(path))
    except Exception:  # gone meanwhile, or written by something else: not ours
        return None


# -- the serving side (malhar run) ----------------------------------------------------------------
def heartbeat(checkpoint: str, application: str, run: str = "") -> None:
    """Say (again) that this process serves ``checkpoint``'s requests (``run``: an id of
    this run, that tells it from an earlier run in a process of the same pid)."""
    fs, folder = _folder(checkpoint)
    doc = {"application": application, "host": socket.gethostname(), "pid": os.getpid()}
    _write(fs, fs.join(folder, _SERVING), {**doc, "run": run, "at": time.time()})


def stop_serving(checkpoint: str) -> None:
    """Remove the heartbeat (the application stopped)."""
    fs, folder = _folder(checkpoint)
    fs.delete(fs.join(folder, _SERVING))


def pending(checkpoint: str) -> list[Request]:
    """The requests not answered yet, oldest first."""
    fs, folder = _folder(checkpoint)
    if not fs.exists(folder):
        return []
    found = []
    for status in fs.list(folder):
        name = status.name
        if not name.endswith(".json") or name.endswith(_ANSWER) or name == _SERVING:
            continue
        request = _request(name[: -len(".json")], _read(fs, fs.join(folder, name)))
        if request is not None:
            found.append(request)
    return [r for _, r in sorted(found, key=lambda f: f[0])]


def _request(request: str, doc: Any) -> tuple[float, Request] | None:
    """(when asked, the request) of a request file's content, or None: not one of ours
    (any other file in the folder is left alone)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("counts"), dict):
        return None
    counts = doc["counts"]
    if not all(isinstance(k, str) and type(v) is int and v >= 1 for k, v in counts.items()):
        return None
    try:
        at, until = float(doc.get("at", 0.0)), float(doc.get("until", float("inf")))
    except (TypeError, ValueError):
        return None
    return at, Request(request, dict(counts), until)


def sweep(checkpoint: str, older_than: float = 3600.0) -> None:
    """Remove what earlier runs and askers left behind: answers nobody read and requests
    taken by a run that died, older than ``older_than`` seconds."""
    fs, folder = _folder(checkpoint)
    if not fs.exists(folder):
        return
    now = time.time()
    for status in fs.list(folder):
        left = status.name.endswith(_ANSWER) or status.name.endswith(_TAKEN)
        if left and now - status.mtime > older_than:
            fs.delete(fs.join(folder, status.name))


def take(checkpoint: str, request: str, by: dict[str, Any] | None = None) -> bool:
    """Take ``request`` to carry it out (True); False: it was withdrawn meanwhile. ``by``
    (the taker's heartbeat: application, host, pid, run) is written into the taken file,
    for its asker to see whether the run that carries it out still serves."""
    fs, folder = _folder(checkpoint)
    path = fs.join(folder, request + _TAKEN)
    try:
        fs.rename(fs.join(folder, request + ".json"), path)
    except Exception:  # gone: withdrawn by its asker
        return False
    if by is not None:
        doc = _read(fs, path)
        _write(fs, path, {**(doc if isinstance(doc, dict) else {}), "by": by})
    return True


def answer(checkpoint: str, request: str, result: Answer) -> None:
    """Answer ``request`` (taken or not) and remove it."""
    fs, folder = _folder(checkpoint)
    _write(fs, fs.join(folder, request + _ANSWER), asdict(result))
    for suffix in (_TAKEN, ".json"):
        fs.delete(fs.join(folder, request + suffix))


# -- the asking side (malhar repartition) ---------------------------------------------------------
def serving(checkpoint: str) -> dict[str, Any] | None:
    """Who serves ``checkpoint`` (application, host, pid), or None: no fresh heartbeat."""
    doc = last_heartbeat(checkpoint)
    if doc is None or time.time() - float(doc.get("at", 0.0)) > 3 * HEARTBEAT_S:
        return None
    return doc


def last_heartbeat(checkpoint: str) -> dict[str, Any] | None:
    """The last heartbeat written on ``checkpoint``, fresh or not (None: none)."""
    fs, folder = _folder(checkpoint)
    return _read(fs, fs.join(folder, _SERVING))


def silent_for(checkpoint: str, run: dict[str, Any]) -> float | None:
    """Seconds since ``run`` last beat on ``checkpoint`` (None: the heartbeat there is
    another run's, or there is none)."""
    doc = last_heartbeat(checkpoint)
    if doc is None or not same_run(doc, run):
        return None
    return time.time() - float(doc.get("at", 0.0))


def submit(checkpoint: str, counts: dict[str, int], timeout: float = 300.0) -> str:
    """Ask for ``counts``, to be carried out within ``timeout`` seconds; returns the
    request's id."""
    fs, folder = _folder(checkpoint)
    request = f"repartition-{uuid.uuid4().hex[:12]}"
    now = time.time()
    doc = {"counts": counts, "at": now, "until": now + timeout}
    _write(fs, fs.join(folder, request + ".json"), doc)
    return request


def taken(checkpoint: str, request: str) -> dict[str, Any] | None:
    """Who took ``request`` (the ``by`` of :func:`take`; ``{}`` when it is not written
    yet, or by a run that did not say), or None: it is not taken (waiting, answered or
    gone)."""
    fs, folder = _folder(checkpoint)
    path = fs.join(folder, request + _TAKEN)
    if not fs.exists(path):
        return None
    doc = _read(fs, path)
    by = doc.get("by") if isinstance(doc, dict) else None
    return dict(by) if isinstance(by, dict) else {}


def same_run(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two heartbeats (or takers) are of the same run: the same run id when both
    have one, else the same host and pid."""
    if not a or not b:
        return False
    if a.get("run") and b.get("run"):
        return bool(a["run"] == b["run"])
    return (a.get("host"), a.get("pid")) == (b.get("host"), b.get("pid"))


def forget(checkpoint: str, request: str) -> None:
    """Remove the taken ``request`` of a run that stopped or died while it carried it out
    (no run acts on a taken file: :func:`pending` skips it). Its stale heartbeat stays:
    the next run writes over it, and a run only slow to beat must not lose it."""
    fs, folder = _folder(checkpoint)
    fs.delete(fs.join(folder, request + _TAKEN))


def withdraw(checkpoint: str, request: str) -> bool:
    """Take back a request not taken yet (True); False: it is being carried out."""
    fs, folder = _folder(checkpoint)
    return bool(fs.delete(fs.join(folder, request + ".json")))


def await_answer(checkpoint: str, request: str, timeout: float) -> Answer | None:
    """The answer to ``request`` (removed once read), or None after ``timeout`` seconds."""
    fs, folder = _folder(checkpoint)
    path = fs.join(folder, request + _ANSWER)
    deadline = time.monotonic() + timeout
    while True:
        doc = _read(fs, path) if fs.exists(path) else None
        if doc is not None:
            fs.delete(path)
            return Answer(bool(doc.get("ok")), str(doc.get("message", "")))
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)  # polling a file: there is nothing to wait on across processes
