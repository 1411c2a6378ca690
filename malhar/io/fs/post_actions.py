"""What the file input does with a file once it is read: ``post_action`` ``delete``, or
``move`` to ``move_to``, once every window that read the file is committed in the whole
application.

**Protocol.** A file may be read by several partitions, one per split it owns. A partition
knows its part is done when the windows that finished its splits of the file are
released (``ReplayableInput.release``: committed everywhere, never replayed again). One
partition acts, the *coordinator*: the owner of the file's first split
(:func:`~malhar.io.fs.splits.split_owner`), which every partition computes the same way
without talking. Every other owner, once its part is done, leaves an empty marker file
``<checkpoint>/malhar/files/<operator>/done/<file id>/<name>``. The coordinator, once its own
part is done, keeps the file in ``_awaiting`` (checkpointed) with the marker names it
waits for, and at every release looks for them; when all are there it applies the action and
removes the file's marker folder, then forgets the file.

**Marker names.** The owner's partition number, ``<partition>``, while the file is read by
the partitions it was cut for. Once a repartitioning moved the file's splits
(:mod:`malhar.io.fs.partitions`), the file records who reads what is left (``dealt``:
an epoch that counts the repartitionings of that file, the coordinator, the others) and
the markers are named ``<epoch>.<partition>``: a marker left before that repartitioning
has another name and never counts.

**Retries.** A failed action is logged and tried again at the next release, also after a
restart (``_awaiting`` is state), so both actions may run twice: deleting a file that is
gone is a no-op, a move that finds the file gone takes it as moved by an earlier attempt.
A move onto a name that exists in ``move_to`` appends the file's modification time (ms).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from malhar.io.fs.errors import FileConfigError
from malhar.io.fs.paths import child_url, resolve
from malhar.io.fs.splits import CUT, DEALT, SEEN_MTIME, SIZE, split_owner
from malhar.operator import OperatorContext
from malhar.util.fs import FileSystem, StorageError, StorageNotFoundError
from malhar.util.fs.names import encode_segment

__all__ = ["PostActions"]

log = logging.getLogger("malhar.io.fs")


class PostActions:
    """Mixin of :class:`~malhar.io.fs.input_operator.FileInputOperator`: applies
    ``post_action`` to fully read, committed files (see the module doc).

    The operator provides the settings (``post_action``, ``move_to``, ``label``), the
    checkpointed ``_seen`` and ``_awaiting`` (declared with its other ``State``, since a
    repartitioning deals them together), the file system ``_fs``, its partition ``_me``
    of ``_n``, and ``_splits_of`` and ``_url``; it calls :meth:`_file_done` when the last
    of its splits of a file is released and :meth:`_post_actions` after every release
    while files are awaiting.
    """

    #: where the markers are, and where ``move`` puts the files (set when opened)
    _mfs: FileSystem
    _mroot: str
    _move_fs: FileSystem
    _move_dir: str
    #: the operator's (see above)
    post_action: str
    move_to: str | None
    label: str
    _seen: dict[str, list[Any]]
    _awaiting: dict[str, list[str]]
    _fs: FileSystem
    _me: int
    _n: int
    _splits_of: Callable[[str, int, int], list[tuple[int, int, int]]]
    _url: Callable[[str], str]

    def _prepare_post_actions(self, context: OperatorContext) -> None:
        """Resolve the marker folder and ``move_to`` when the partition opens, so that a
        post action without a checkpoint to hold its markers fails before reading."""
        if self.post_action != "none":
            if not context.checkpoint:
                raise FileConfigError(f"{self.label}: post_action needs a checkpoint location")
            markers = child_url(
                context.checkpoint, "malhar", "files", encode_segment(context.name), "done"
            )
            self._mfs, self._mroot = resolve(markers)
        if self.move_to:
            self._move_fs, self._move_dir = resolve(self.move_to)

    def _file_done(self, path: str) -> None:
        """Every split of ``path`` this partition owns is read and committed."""
        if self.post_action == "none":
            return
        seen = self._seen[path]
        if seen[DEALT] is None:
            splits = self._splits_of(path, seen[SIZE], seen[CUT])
            owners = {split_owner(path, s[0], self._n) for s in splits}
            first = split_owner(path, splits[0][0], self._n)
            name = str
        else:  # its splits were moved by a repartitioning, which named who reads them
            epoch, first, others = seen[DEALT]
            owners = {first, *others}

            def name(p: int) -> str:
                return f"{epoch}.{p}"  # markers left before that repartitioning are stale

        if first != self._me:
            marker = f"{self._mroot}/{_file_id(path)}/{name(self._me)}"
            try:
                self._mfs.create(marker, b"", overwrite=True)
            except StorageNotFoundError:
                # the coordinator removed the folder while this marker was written again
                # (a replayed release after a restart): it had all markers, ours included,
                # and the file is handled
                pass
            return
        self._awaiting[path] = [name(p) for p in sorted(owners - {self._me})]

    def _post_actions(self) -> None:
        """Apply the action to every awaiting file whose markers are all there."""
        fs = self._mfs
        for path, others in list(self._awaiting.items()):
            try:
                if others:
                    folder = f"{self._mroot}/{_file_id(path)}"
                    try:
                        have = {e.name for e in fs.list(folder)}
                    except StorageNotFoundError:
                        have = set()
                    if not {str(p) for p in others} <= have:
                        continue
                self._apply_post_action(path)
                seen = self._seen.get(path)
                if others or (seen is not None and seen[DEALT] is not None):
                    fs.delete(f"{self._mroot}/{_file_id(path)}", recursive=True)
            except StorageError as exc:
                log.warning(
                    "%s: %s of %s failed (%s); trying again later",
                    self.label,
                    self.post_action,
                    self._url(path),
                    exc,
                )
                continue
            del self._awaiting[path]
            self._seen.pop(path, None)

    def _apply_post_action(self, path: str) -> None:
        fs = self._fs
        if self.post_action == "delete":
            fs.delete(path)
            return
        name = fs.basename(path)
        target = f"{self._move_dir.rstrip('/')}/{name}"
        if fs.status(path) is None:
            return  # moved by an earlier attempt
        self._move_fs.mkdirs(self._move_dir)
        if self._move_fs.status(target) is not None:
            mtime = self._seen.get(path, [0, 0.0])[SEEN_MTIME]
            target = f"{target}.{int(mtime * 1000)}"
        fs.rename(path, target, overwrite=True)


def _file_id(path: str) -> str:
    """The marker folder's name for ``path``: fixed length, safe on every filesystem."""
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
