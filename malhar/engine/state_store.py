"""Checkpointed operator state: one snapshot per changed window, per fused-group partition.

Layout: ``<checkpoint>/malhar/state/<group>/<partition>/<window>.state``. A
snapshot is written (atomically, by rename) only when the state changed, so a
stateless chain writes once. Restoring for window ``W`` takes the newest
snapshot ``<= W - 1``: after a crash the in-flight window's partial snapshot,
if any, is ignored and overwritten by the replay.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

_SUFFIX = ".state"
_STARTED = ".started"


class StateStore:
    def __init__(self, root: str, group_key: str, partition: int) -> None:
        self.root = root.rstrip("/")
        self.group_key = group_key
        self.partition = partition

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_fs",)}

    @cached_property
    def _fs(self) -> tuple[Any, str]:
        from malhar.util.fs import filesystem_for

        fs, base = filesystem_for(self.root)
        path = fs.join(base, "malhar", "state", _safe(self.group_key), str(self.partition))
        fs.mkdirs(path)
        return fs, path

    def _windows(self, suffix: str) -> list[int]:
        fs, path = self._fs
        out = []
        for entry in fs.list(path):
            if entry.name.endswith(suffix) and not entry.name.startswith("."):
                out.append(int(entry.name[: -len(suffix)]))
        return sorted(out)

    def describe(self, window: int) -> str:
        """The snapshot file of ``window``, for error messages."""
        fs, path = self._fs
        return fs.join(path, f"{window:020d}{_SUFFIX}")

    def load(self, before: int) -> tuple[int, bytes] | None:
        """The newest snapshot with window ``<= before``, or None."""
        fs, path = self._fs
        candidates = [w for w in self._windows(_SUFFIX) if w <= before]
        if not candidates:
            return None
        w = candidates[-1]
        return w, fs.read_all(fs.join(path, f"{w:020d}{_SUFFIX}"))

    def save(self, window: int, data: bytes) -> None:
        fs, path = self._fs
        fs.write_atomic(fs.join(path, f"{window:020d}{_SUFFIX}"), data, overwrite=True)

    def mark_started(self, window: int) -> bool:
        """Record that ``window`` began here; True if it had begun before (a replay)."""
        fs, path = self._fs
        marker = fs.join(path, f"{window:020d}{_STARTED}")
        if fs.exists(marker):
            return True
        fs.create(marker, b"", overwrite=True)
        return False

    def purge(self, committed: int) -> None:
        """Drop snapshots no restore can need: all but the newest ``<= committed``."""
        fs, path = self._fs
        keep = [w for w in self._windows(_SUFFIX) if w <= committed]
        for w in keep[:-1]:
            fs.delete(fs.join(path, f"{w:020d}{_SUFFIX}"))
        for w in self._windows(_STARTED):
            if w <= committed:
                fs.delete(fs.join(path, f"{w:020d}{_STARTED}"))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_+." else "_" for c in name)
