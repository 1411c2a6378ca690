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

**Files kept.** A file a split of which ended in an error (it could not be read, or a Parquet
file does not fit the schema), or that changed after it was cut, is neither deleted nor
moved: what was not read is nowhere else. An owner that saw it leaves its marker as
``<name>.unread``; the coordinator then logs the file, removes the markers and keeps it
known (not read again, as with ``post_action`` none).

**Retries.** A failed action is logged and tried again at the next release, also after a
restart (``_awaiting`` is state), so both actions may run twice: deleting a file that is
gone is a no-op, a move that finds the file gone takes it as moved by an earlier attempt.
A move never overwrites a file in ``move_to``: when the name is taken (files of one name in
several folders of a recursive or globbed path), the file is moved as ``stem.<hash>.ext``,
the hash of its path, size and mtime, then numbered: the names are tried in a fixed order,
so a move retried after a crash makes no second copy.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

from malhar.io.fs.errors import FileConfigError
from malhar.io.fs.paths import child_url, resolve
from malhar.io.fs.splits import CHANGED, CUT, DEALT, SEEN_MTIME, SIZE, UNREAD, split_owner
from malhar.operator import OperatorContext
from malhar.util.fs import (
    FileSystem,
    LocalFileSystem,
    StorageError,
    StorageExistsError,
    StorageNotFoundError,
)
from malhar.util.fs.names import encode_segment

__all__ = ["PostActions"]

log = logging.getLogger("malhar.io.fs")

#: the suffix of a marker whose partition could not read (a part of) the file
_UNREAD = ".unread"


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
            # ".unread": a split of ours ended in an error (or the file changed after we cut
            # it): the coordinator must keep the file
            unread = _UNREAD if _kept(seen) else ""
            marker = f"{self._mroot}/{_file_id(path)}/{name(self._me)}{unread}"
            try:
                # it says which file it is about: the file as this partition listed it
                self._mfs.create(marker, _identity(seen), overwrite=True)
            except StorageNotFoundError:
                # the coordinator removed the folder while this marker was written (a
                # replayed release after a restart): it had all markers, ours included. A
                # create that makes the folder again leaves it behind instead; a later file
                # at the path is another file than the marker names (see _post_actions)
                pass
            return
        self._awaiting[path] = [name(p) for p in sorted(owners - {self._me})]

    def _post_actions(self) -> None:
        """Apply the action to every awaiting file whose markers are all there."""
        fs = self._mfs
        for path, others in list(self._awaiting.items()):
            seen = self._seen.get(path)
            try:
                if others:
                    folder = f"{self._mroot}/{_file_id(path)}"
                    try:
                        have = {e.name for e in fs.list(folder)}
                    except StorageNotFoundError:
                        have = set()
                    have_ok = {n.removesuffix(_UNREAD) for n in have}
                    if not have and self._fs.status(path) is None:
                        # gone, with no marker: this partition removed it and its markers
                        # and stopped before its checkpoint said so (a replayed release
                        # awaits it again), or it vanished; either way nothing is left to do,
                        # and the path is forgotten, so a new file there is a new file
                        del self._awaiting[path]
                        self._seen.pop(path, None)
                        continue
                    if not {str(p) for p in others} <= have_ok:
                        continue
                    unread = any(f"{p}{_UNREAD}" in have for p in others)
                    unread = unread or self._other_file(folder, have, seen)
                else:
                    unread = False
                keep = unread or (seen is not None and _kept(seen))
                if keep:
                    # deleting or moving it would lose what could not be read (reported on
                    # the error port when it happened): the file stays where it is, and
                    # stays seen (not read again, as with post_action none)
                    log.warning(
                        "%s: %s is not %s: part of it could not be read, or it changed after "
                        "it was listed (see the error port)",
                        self.label,
                        self._url(path),
                        "deleted" if self.post_action == "delete" else "moved",
                    )
                else:
                    self._apply_post_action(path)
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
            if not keep:
                self._seen.pop(path, None)

    def _other_file(self, folder: str, names: set[str], seen: list[Any] | None) -> bool:
        """Whether a marker names another file than ``seen`` (as the coordinator listed
        it): one left for an earlier file at the path (written again by a replayed release
        after its folder was removed), or the file changed between the partitions'
        listings. Either way that partition did not read this file as listed: it is kept.
        A marker of an older release, empty, names none."""
        if seen is None:
            return False
        mine = _identity(seen)
        for n in sorted(names):
            try:
                said = self._mfs.read_all(f"{folder}/{n}")
            except StorageNotFoundError:
                continue
            if said and said != mine:
                return True
        return False

    def _apply_post_action(self, path: str) -> None:
        fs = self._fs
        if self.post_action == "delete":
            fs.delete(path)
            return
        if fs.status(path) is None:
            return  # moved by an earlier attempt
        self._move_fs.mkdirs(self._move_dir)
        seen = self._seen.get(path, [0, 0.0])
        targets = _move_targets(self._move_dir, fs.basename(path), path, seen)
        earlier = _earlier_targets(self._move_dir, fs.basename(path), path, seen)
        for target in dict.fromkeys(targets + earlier):
            if _same_file(fs, path, target):
                # an earlier attempt linked it there and stopped before unlinking the
                # source (the local rename without overwrite): finish that move
                fs.delete(path)
                return
        for target in targets:
            try:
                # never overwrite: another file moved under that name stays (names collide
                # in a recursive or globbed path); the next name is tried
                fs.rename(path, target, overwrite=False)
                return
            except StorageExistsError:
                continue
        raise StorageExistsError(
            f"no free name for {fs.basename(path)} in {self.move_to}",
            backend=self._move_fs.backend,
            path=self._move_dir,
        )


#: how many names a move tries (the plain one, the one with the file's hash, then numbered)
_MOVE_NAMES = 100


def _move_targets(folder: str, name: str, path: str, seen: list[Any]) -> list[str]:
    """Where ``move`` puts ``path``, in the order tried: ``name``, then ``stem.<hash>.ext``
    with a hash of the source path, size and mtime (the same in a retried move, different
    for another file of that name), then the same numbered. ``ext`` is all of the name
    after its first dot, so a pattern on the suffix (``*.csv.gz``) still matches.
    Deterministic, so that a move retried after a crash looks for the file where an
    earlier attempt may have put it."""
    return [f"{folder.rstrip('/')}/{n}" for n in _move_names(name, path, seen, _first_dot)]


def _move_names(name: str, path: str, seen: list[Any], at: Any) -> list[str]:
    stem, dot, ext = at(name)
    if not stem:  # no extension, or a name like ".x"
        stem, dot, ext = name, "", ""
    key = f"{path}\0{seen[SIZE]}\0{seen[SEEN_MTIME]!r}"
    tag = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    out = [name, f"{stem}.{tag}{dot}{ext}"]
    return out + [f"{stem}.{tag}-{k}{dot}{ext}" for k in range(1, _MOVE_NAMES - 1)]


def _first_dot(name: str) -> tuple[str, str, str]:
    return name.partition(".") if not name.startswith(".") else ("", "", name)


def _last_dot(name: str) -> tuple[str, str, str]:
    return name.rpartition(".")


def _earlier_targets(folder: str, name: str, path: str, seen: list[Any]) -> list[str]:
    """The names an earlier release tried (split at the last dot): a move it began, the
    file linked there and not yet unlinked, is finished there."""
    return [f"{folder.rstrip('/')}/{n}" for n in _move_names(name, path, seen, _last_dot)]


def _kept(seen: list[Any]) -> bool:
    """Whether a ``_seen`` value says the post action must leave the file alone: a split
    ended unread, or the file changed after it was cut (what changed was not read)."""
    return bool(seen[UNREAD] or seen[CHANGED])


def _same_file(fs: FileSystem, path: str, target: str) -> bool:
    """Whether ``target`` is a hard link of ``path`` (local filesystem only). The same
    name through a symbolic link (``move_to`` linked to the scanned folder, made after the
    settings were checked) is refused: taken for a link, the file would be deleted."""
    if not isinstance(fs, LocalFileSystem):
        return False
    try:
        same = os.path.samefile(path, target)
    except OSError:
        return False
    if same and os.path.realpath(path) == os.path.realpath(target):
        raise FileConfigError(
            f"move_to: {target} is {path} itself (through a symbolic link): a move there "
            "would leave the file in the scanned folder; give move_to a folder of its own"
        )
    return same


def _file_id(path: str) -> str:
    """The marker folder's name for ``path``: fixed length, safe on every filesystem."""
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _identity(seen: list[Any]) -> bytes:
    """What a marker holds: the file as listed (size and mtime)."""
    return f"{seen[SIZE]} {seen[SEEN_MTIME]!r}".encode()
