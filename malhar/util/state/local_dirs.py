"""The default local stores of managed state: where they live, whose they are, their cleanup.

A partition's local store is a cache of its checkpoint files, kept when the process ends so
that a restart on the same host catches up instead of rebuilding. Default layout::

    <base>/<sha1(checkpoint root)[:12]>/<operator>/<partition>

``<base>`` is ``$MALHAR_STATE_DIR``, else ``<tempdir>/malhar-state-<uid>``. Each ``<hash>``
directory holds a marker, ``_checkpoint.json``, naming the checkpoint root it caches
(passwords masked), so :func:`clean` tells the stores of deleted checkpoints (*orphans*)
from those of live ones. ``malhar state list|clean`` is the command line of this module.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import sha1
from urllib.parse import urlsplit

from malhar.redaction import MASK, redact_url
from malhar.util.fs import StorageError, filesystem_for

__all__ = [
    "LIVE",
    "MARKER",
    "ORPHAN",
    "STATE_DIR_ENV",
    "UNKNOWN",
    "UNMARKED",
    "StoreDir",
    "clean",
    "mark_store",
    "remove",
    "root_dir",
    "scan",
    "select",
    "state_base",
]

log = logging.getLogger(__name__)

STATE_DIR_ENV = "MALHAR_STATE_DIR"
#: no operator's directory can have this name: ``encode_name`` writes ``_`` only before two
#: hex digits
MARKER = "_checkpoint.json"
#: statuses of a ``<hash>`` directory
LIVE, ORPHAN, UNKNOWN, UNMARKED = "live", "orphan", "unknown", "unmarked"

_HASH = re.compile(r"[0-9a-f]{12}")
#: a WebHDFS delegation token is a credential, whatever ``redact_url`` thinks of its name
_DELEGATION = re.compile(r"([?&;]delegation=)[^&;#]*", re.I)
#: one quick try: an unreachable NameNode leaves its stores alone instead of stalling
_REMOTE_OPTIONS = {"retries": 0, "timeout": (3.0, 10.0)}

#: ``<hash>`` directory -> the root :func:`root_dir` named it for (in this process): the
#: engine opens a repartitioned operator's store under the application's checkpoint while
#: its ``ManagedState`` has the generation's root
_roots: dict[str, str] = {}


def state_base() -> str:
    """The directory of all default local stores of this user on this host."""
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"malhar-state-{uid}")


def root_hash(root: str) -> str:
    return sha1(root.encode()).hexdigest()[:12]


def root_dir(root: str) -> str:
    """The ``<hash>`` directory of ``root``'s local stores (remembered for :func:`mark_store`)."""
    path = os.path.join(state_base(), root_hash(root))
    _roots[path] = root
    return path


def mark_store(store_path: str, root: str) -> None:
    """Write the marker of the ``<hash>`` directory holding ``store_path`` unless it exists;
    nothing for a store outside the default layout. A failure is logged: the store works
    without its marker."""
    hash_dir = os.path.dirname(os.path.dirname(store_path))
    owner = _roots.get(hash_dir)
    if owner is None and os.path.join(state_base(), root_hash(root)) == hash_dir:
        owner = root
    marker = os.path.join(hash_dir, MARKER)
    if owner is None or os.path.exists(marker):  # one stat per store opened
        return
    try:
        _write_marker(marker, owner)
    except OSError as exc:
        log.warning("cannot write %s: %s", marker, exc)


def _write_marker(marker: str, root: str) -> None:
    folder = os.path.dirname(marker)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=MARKER, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(_describe(root)) + "\n")
    os.replace(tmp, marker)  # readers never see half a marker


def _describe(root: str) -> dict[str, str | None]:
    """What a marker records of ``root``: a URL with its credentials masked (a local path
    has none), and a local root's absolute path (None for HDFS)."""
    local = _local_path(root)
    masked = _DELEGATION.sub(rf"\g<1>{MASK}", redact_url(root))
    return {"checkpoint": root if local else masked, "local_path": local}


def _local_path(root: str) -> str | None:
    """The absolute path of a local root, as managed state resolves it; None otherwise."""
    if urlsplit(root).scheme.lower() in ("hdfs", "webhdfs", "swebhdfs"):
        return None
    try:
        return filesystem_for(root)[1]
    except StorageError:  # not a root managed state accepts
        return None


# -- inspection and cleanup --------------------------------------------------------------------
@dataclass(frozen=True)
class StoreDir:
    """One ``<hash>`` directory: the local stores of one checkpoint root."""

    path: str
    #: the root as its marker names it (passwords masked); None without a marker
    checkpoint: str | None
    local_path: str | None
    status: str
    size: int


def scan(base: str | None = None) -> list[StoreDir]:
    """Every ``<hash>`` directory under ``base`` (default :func:`state_base`), with the
    status of its checkpoint. Other entries of ``base`` are not malhar's and are ignored:
    a directory counts only with a marker or the stores' layout
    (``<operator>/<partition>``, nothing else), in case ``base`` is shared."""
    base = base or state_base()
    if not os.path.isdir(base):
        return []
    paths = (os.path.join(base, name) for name in sorted(os.listdir(base)) if _HASH.fullmatch(name))
    return [_inspect(p) for p in paths if _is_store_dir(p)]


#: a partition's store, or the private one of a process that found it in use
_PARTITION = re.compile(r"\d+(\.\d+-[0-9a-f]+)?")


def _is_store_dir(path: str) -> bool:
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    if os.path.exists(os.path.join(path, MARKER)):
        return True
    try:
        operators = [os.path.join(path, name) for name in os.listdir(path)]
        return all(  # an empty one: what a removal interrupted left
            os.path.isdir(op)
            and not os.path.islink(op)
            and all(_PARTITION.fullmatch(name) for name in os.listdir(op))
            for op in operators
        )
    except OSError:
        return False


def _inspect(path: str) -> StoreDir:
    marker = _read_marker(path)
    if marker is None:
        return StoreDir(path, None, None, UNMARKED, _size(path))
    checkpoint, local = marker.get("checkpoint"), marker.get("local_path")
    if local:
        exists: bool | None = os.path.exists(local)
    else:
        exists = _remote_exists(checkpoint) if isinstance(checkpoint, str) else None
    status = UNKNOWN if exists is None else LIVE if exists else ORPHAN
    return StoreDir(path, checkpoint, local, status, _size(path))


def _read_marker(path: str) -> dict | None:
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _remote_exists(url: str) -> bool | None:
    """Whether an HDFS root exists; None when that cannot be told (a masked credential,
    no WebHDFS address in the URL, an unreachable NameNode)."""
    if MASK in url:
        return None
    try:
        fs, path = filesystem_for(url, **_REMOTE_OPTIONS)
        return fs.exists(path)
    except Exception as exc:  # any failure means "cannot tell": the stores stay
        log.info("cannot tell whether %s exists: %s", url, exc)
        return None


def _size(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass  # removed meanwhile
    return total


def _named(store: StoreDir, checkpoints: list[str]) -> bool:
    """Whether ``store`` caches one of ``checkpoints``: by its hash (the engine hashes the
    root as the application spelled it), or by what its marker records."""
    for root in checkpoints:
        recorded = _describe(root)
        local = recorded["local_path"]
        spellings = {root, root.rstrip("/"), *([local] if local else [])}
        if os.path.basename(store.path) in {root_hash(s) for s in spellings}:
            return True
        if local and store.local_path == local:
            return True
        # a masked URL may stand for several checkpoints (``hdfs://nn:***@...``): only an
        # unmasked one names this one
        checkpoint = recorded["checkpoint"]
        if checkpoint and MASK not in checkpoint and store.checkpoint == checkpoint:
            return True
    return False


def select(
    stores: Iterable[StoreDir], *, checkpoints: Iterable[str] = (), unmarked: bool = False
) -> list[StoreDir]:
    """Of ``stores``: the orphans, those of ``checkpoints`` (even when they exist) and, with
    ``unmarked``, those without a marker. ``live`` and ``unknown`` ones are kept otherwise."""
    roots = list(checkpoints)
    return [
        s
        for s in stores
        if s.status == ORPHAN or (unmarked and s.status == UNMARKED) or _named(s, roots)
    ]


def remove(stores: Iterable[StoreDir]) -> list[StoreDir]:
    """Delete ``stores``; return those deleted (a failure is logged and skipped)."""
    removed = []
    for store in stores:
        try:
            shutil.rmtree(store.path)
        except OSError as exc:
            log.warning("cannot remove %s: %s", store.path, exc)
            continue
        removed.append(store)
    return removed


def clean(
    *,
    checkpoints: Iterable[str] = (),
    unmarked: bool = False,
    dry_run: bool = False,
    base: str | None = None,
) -> list[StoreDir]:
    """Remove the ``<hash>`` directories :func:`select` chooses under ``base`` (default
    :func:`state_base`); return them (``dry_run``: those it would remove, removing none).
    Do not name the checkpoint of a running application: its stores are in use."""
    chosen = select(scan(base), checkpoints=checkpoints, unmarked=unmarked)
    return chosen if dry_run else remove(chosen)
