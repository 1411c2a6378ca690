"""The partitions manifest of one operator: which log belongs to which partition, when.

Layout of an operator directory::

    <root>/<operator>/0/ 1/ 2/ 3/            partition logs (directory name = log id)
    <root>/<operator>/manifest-00000002.json  the newest manifest version wins

Before the first repartitioning there is no manifest: every numeric directory is
the log of the partition with that number (generation 0, as in Malhar where
directories are operator ids). :meth:`FSWindowDataManager.partition` appends a
*generation*::

    {"format": 1, "version": 2, "generations": [
        {"generation": 0, "base": -1, "logs": {"0": 0, "1": 1, "2": 2, "3": 3}, "removed": []},
        {"generation": 1, "base": 9,  "logs": {"0": 4, "1": 5}, "removed": [2, 3]}]}

Generation *g* owns the windows ``(base_g, base_{g+1}]``; the new partitions get
fresh, never reused log ids (like Malhar's physical operator ids), and every older
log stays readable. ``base`` of a new generation is the operator's largest
completed window when it was created (the minimum over the old partitions).

Manifest versions are written with a no-overwrite rename (a compare-and-swap on
the file name): two concurrent writers cannot both create version *n*; the loser
re-reads and retries. Versions older than the previous one are deleted.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

from malhar.util.fs.base import FileSystem
from malhar.util.fs.errors import StorageError, StorageNotFoundError

log = logging.getLogger("malhar.util.wal")

MANIFEST_RE = re.compile(r"^manifest-(\d{8,})\.json$")
FORMAT = 1


def manifest_name(version: int) -> str:
    return f"manifest-{version:08d}.json"


@dataclass
class Generation:
    generation: int
    base: int
    logs: dict[int, int]  # partition -> log id
    removed: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "generation": self.generation,
            "base": self.base,
            "logs": {str(p): i for p, i in sorted(self.logs.items())},
            "removed": sorted(self.removed),
        }

    @classmethod
    def from_json(cls, raw: dict) -> Generation:
        return cls(
            int(raw["generation"]),
            int(raw["base"]),
            {int(p): int(i) for p, i in raw["logs"].items()},
            [int(r) for r in raw.get("removed", [])],
        )


@dataclass
class Layout:
    """What an operator directory holds right now."""

    log_ids: set[int]
    version: int  # 0: no manifest
    generations: list[Generation] | None  # None: no manifest (implicit generation 0)
    manifest_versions: list[int]

    def effective(self) -> list[Generation]:
        if self.generations is not None:
            return self.generations
        return [Generation(0, -1, {i: i for i in sorted(self.log_ids)})]


def scan_layout(fs: FileSystem, opdir: str, known: Layout | None = None) -> Layout:
    """List ``opdir``; the manifest is re-read only if its version differs from ``known``."""
    try:
        entries = fs.list(opdir)
    except StorageNotFoundError:
        entries = []
    log_ids: set[int] = set()
    versions: list[int] = []
    for st in entries:
        if st.is_dir and st.name.isdigit():
            log_ids.add(int(st.name))
        elif not st.is_dir:
            m = MANIFEST_RE.match(st.name)
            if m:
                versions.append(int(m[1]))
    versions.sort()
    for version in reversed(versions):
        if known is not None and known.version == version and known.generations is not None:
            gens = [
                Generation(g.generation, g.base, dict(g.logs), list(g.removed))
                for g in known.generations
            ]
            return Layout(log_ids, version, gens, versions)
        path = fs.join(opdir, manifest_name(version))
        try:
            raw = json.loads(fs.read_all(path))
            if raw.get("format") != FORMAT:
                raise ValueError(f"unknown manifest format {raw.get('format')!r}")
            gens = [Generation.from_json(g) for g in raw["generations"]]
        except StorageNotFoundError:
            continue  # pruned meanwhile; an older one is still valid
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(
                f"unreadable partitions manifest: {exc}",
                backend=fs.backend,
                path=fs.describe(path),
                operation="setup",
            ) from exc
        return Layout(log_ids, version, gens, versions)
    return Layout(log_ids, 0, None, versions)


def write_manifest(fs: FileSystem, opdir: str, version: int, generations: list[Generation]) -> None:
    """Create manifest ``version``; StorageExistsError if another writer made it first."""
    body = {
        "format": FORMAT,
        "version": version,
        "generations": [g.to_json() for g in generations],
    }
    data = json.dumps(body, indent=1).encode()
    fs.mkdirs(opdir)
    fs.write_atomic(fs.join(opdir, manifest_name(version)), data, overwrite=False)
    for old in range(max(1, version - 8), version - 1):
        try:
            fs.delete(fs.join(opdir, manifest_name(old)))
        except StorageError as exc:  # pruning is best effort
            log.debug("could not prune manifest %s: %s", old, exc)
