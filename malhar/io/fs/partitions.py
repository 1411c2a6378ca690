"""A file input's splits dealt to a new partition count (issue 18 §4: the file input splits
its file set again).

The file input is its own ``Partitioner``, like Malhar's ``AbstractFileInputOperator``
subclasses that repartition themselves. The engine calls it only after an orderly stop at
window ``W``: every partition ended ``W``, ``W`` is complete in the window log, so every
window up to ``W`` is durable downstream and is never replayed again. Then:

- **every file any partition knows stays known to every new partition**, so that no new
  partition discovers it again (with the new count, a partition may own splits it did not
  own before);
- **a file keeps its cut** (the block boundaries it was discovered with); each of its
  unfinished splits, with its position, goes to the owner
  :func:`~malhar.io.fs.splits.split_owner` gives it among the new partitions. A split whose
  old owner had not discovered the file yet (each partition lists the path on its own
  schedule) is queued from its start, unless the file is gone or older than
  ``max_file_age_ms``;
- the file records the new owners of what is left (``dealt``: a number for this
  repartitioning of the file, the coordinator and the others), because the cut's count no
  longer tells them. The coordinator is the owner of the first split left; it applies the
  ``post_action`` once the others left markers named after that number (markers left before
  the repartitioning are stale and are removed with the folder);
- a file read to its end in a window up to ``W`` whose ``post_action`` was not applied yet
  (``W`` itself is not released when the query stops) is handed to its new coordinator,
  which applies it once the first window after ``W`` is committed;
- the released position is the read position (``W`` is complete): the new partitions carry
  no unreleased windows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from malhar.io.fs.splits import (
    CUT,
    DEALT,
    INDEX,
    OWN,
    PATH,
    SEEN_MTIME,
    SIZE,
    TOTAL,
    complete_seen,
    split_owner,
)
from malhar.util.fs import StorageNotFoundError, StoragePermissionError

if TYPE_CHECKING:
    from malhar.io.fs.input_operator import FileInputOperator

__all__ = ["deal"]


def deal(inputs: list[FileInputOperator], count: int) -> list[FileInputOperator]:
    """``count`` partitions holding every file and unfinished split of ``inputs`` (see the
    module doc)."""
    old = len(inputs)
    seen: dict[str, dict[int, list[Any]]] = defaultdict(dict)  # path -> old partition -> seen
    pending: dict[str, list[list[Any]]] = defaultdict(list)  # path -> unfinished splits
    for k, op in enumerate(inputs):
        for path, entry in op._seen.items():
            seen[path][k] = complete_seen(list(entry), op._partitions or old)
        for split in op._queue:
            pending[split[PATH]].append(list(split))
    newest = max(op._newest for op in inputs)
    sealed = all(op._sealed for op in inputs)  # else every new partition lists once more
    released = max(max([op._released, *op._unreleased]) for op in inputs)
    first = inputs[0]
    cutter = _Cutter(first, old)

    cut = list(first._cut_with())  # before _partitions changes: it tells an old checkpoint
    out = [first.clone() for _ in range(count)]
    for op in out:
        op._seen, op._queue, op._awaiting = {}, [], {}
        op._newest, op._partitions, op._cut = newest, count, list(cut)
        op._unreleased, op._released = [], released
        op._sealed = sealed
    for path, holders in seen.items():
        any_seen = next(iter(holders.values()))
        size, mtime = any_seen[SIZE], any_seen[SEEN_MTIME]
        cut, total = any_seen[CUT], any_seen[TOTAL]
        dealt = next((s[DEALT] for s in holders.values() if s[DEALT] is not None), None)
        left = pending.get(path, [])
        if dealt is None and total != sum(s[OWN] for s in holders.values()):
            left += cutter.undiscovered(path, size, mtime, cut, holders, newest)
        left.sort(key=lambda s: s[INDEX])
        owners = [split_owner(path, s[INDEX], count) for s in left]
        coordinator = owners[0] if owners else split_owner(path, 0, count)
        others = tuple(sorted(set(owners) - {coordinator}))
        epoch = (dealt[0] if dealt else 0) + 1
        for q, op in enumerate(out):
            op._seen[path] = [
                size,
                mtime,
                owners.count(q),
                0,
                cut,
                total,
                (epoch, coordinator, others),
            ]
        for split, q in zip(left, owners, strict=True):
            out[q]._queue.append(split)
        if not left and first.post_action != "none" and cutter.exists(path):
            out[coordinator]._awaiting[path] = []  # read to its end, the action not yet done
    for op in out:
        op._queue.sort()
    return out


class _Cutter:
    """Cuts files and looks at them on the driver, for the splits nobody discovered yet."""

    def __init__(self, template: FileInputOperator, partitions: int) -> None:
        self._template, self._partitions = template, partitions
        self._op: FileInputOperator | None = None

    @property
    def op(self) -> FileInputOperator:
        if self._op is None:
            self._op = self._template.clone()._cutter(self._partitions)
        return self._op

    def exists(self, path: str) -> bool:
        try:
            return self.op._fs.status(path) is not None
        except (StorageNotFoundError, StoragePermissionError):
            return False

    def undiscovered(
        self,
        path: str,
        size: int,
        mtime: float,
        cut: int,
        holders: dict[int, list[Any]],
        newest: float,
    ) -> list[list[Any]]:
        """The splits of ``path`` whose owner (among the ``cut`` partitions) has not
        discovered it, as fresh queue entries; none when the file is gone or too old to be
        read (an owner that finished its splits forgets a file only then)."""
        age = self._template.max_file_age_ms
        if (age and mtime < newest - age / 1000) or not self.exists(path):
            return []
        try:
            splits = self.op._splits_of(path, size, cut)
        except (StorageNotFoundError, StoragePermissionError):
            return []
        return [
            [mtime, path, index, start, end, -1]
            for index, start, end in splits
            if split_owner(path, index, cut) not in holders
        ]
