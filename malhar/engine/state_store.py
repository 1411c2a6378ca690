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

SNAPSHOT_SUFFIX = ".state"
_STARTED = ".started"


def windows_in(fs: Any, path: str, suffix: str = SNAPSHOT_SUFFIX) -> list[int]:
    """The windows of the ``<window><suffix>`` files in a partition folder, ascending
    (temporary files, ``.<name>.<uuid>.tmp``, are not windows)."""
    out = []
    for entry in fs.list(path):
        stem = entry.name[: -len(suffix)]
        if entry.name.endswith(suffix) and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


class StateStore:
    """The snapshots of one group partition.

    Args:
        integrity_key: an HMAC key (bytes, or a ``${env:...}`` / ``${file:...}``
            reference): every snapshot is signed, bound to its group, partition and
            window, and a snapshot that does not verify is refused (``IntegrityError``).
    """

    def __init__(
        self, root: str, group_key: str, partition: int, integrity_key: str | bytes | None = None
    ) -> None:
        self.root = root.rstrip("/")
        self.group_key = group_key
        self.partition = partition
        self.integrity_key = integrity_key

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_fs", "_signer")}

    @cached_property
    def _signer(self) -> Any:
        from malhar.util.integrity import Signer

        return Signer.from_setting(self.integrity_key, setting="CHECKPOINT_INTEGRITY_KEY")

    @cached_property
    def _fs(self) -> tuple[Any, str]:
        from malhar.util.fs import filesystem_for
        from malhar.util.fs.names import encode_segment

        fs, base = filesystem_for(self.root)
        parent = fs.join(base, "malhar", "state")
        path = fs.join(parent, encode_segment(self.group_key), str(self.partition))
        legacy = fs.join(parent, _legacy_segment(self.group_key), str(self.partition))
        if legacy != path and not fs.exists(path) and fs.exists(legacy):
            # written before group names were encoded injectively: move it over once
            fs.mkdirs(fs.dirname(path))
            fs.rename(legacy, path)
        fs.mkdirs(path)
        return fs, path

    def _context(self, window: int) -> bytes:
        return f"{self.group_key}\0{self.partition}\0{window}".encode()

    def _windows(self, suffix: str) -> list[int]:
        return windows_in(*self._fs, suffix)

    def describe(self, window: int) -> str:
        """The snapshot file of ``window``, for error messages."""
        fs, path = self._fs
        return fs.join(path, f"{window:020d}{SNAPSHOT_SUFFIX}")

    def load(self, before: int) -> tuple[int, bytes] | None:
        """The newest snapshot with window ``<= before``, or None."""
        fs, path = self._fs
        candidates = [w for w in self._windows(SNAPSHOT_SUFFIX) if w <= before]
        if not candidates:
            return None
        w = candidates[-1]
        where = fs.join(path, f"{w:020d}{SNAPSHOT_SUFFIX}")
        data = fs.read_all(where)
        if self._signer is not None:
            data = self._signer.verify(
                data, self._context(w), path=where, offset=0, backend=fs.backend
            )
        return w, data

    def save(self, window: int, data: bytes) -> None:
        fs, path = self._fs
        if self._signer is not None:
            data = self._signer.sign(data, self._context(window))
        fs.write_atomic(fs.join(path, f"{window:020d}{SNAPSHOT_SUFFIX}"), data, overwrite=True)

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
        keep = [w for w in self._windows(SNAPSHOT_SUFFIX) if w <= committed]
        for w in keep[:-1]:
            fs.delete(fs.join(path, f"{w:020d}{SNAPSHOT_SUFFIX}"))
        for w in self._windows(_STARTED):
            if w <= committed:
                fs.delete(fs.join(path, f"{w:020d}{_STARTED}"))


def _legacy_segment(name: str) -> str:
    """How group names were turned into directories before (not injective)."""
    return "".join(c if c.isalnum() or c in "-_+." else "_" for c in name)
