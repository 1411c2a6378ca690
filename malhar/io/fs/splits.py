"""How the file input cuts a file into splits and which partition reads each one.

Both are pure functions of what every partition sees the same way (the path, the size
recorded when the file was discovered, ``block_size`` and the partition count it was
discovered with, which the checkpoint records), so every process and every restart agrees without talking, and a replay
or a restore cuts exactly the same blocks.

**Cutting.** A text file larger than ``block_size`` is cut into blocks of at most
``block_size`` (Malhar's ``FileSplitter``), of equal size and as many as a multiple of the
partition count, so that every partition reads the same share of it. Blocks of exactly
``block_size`` left a short last one: a 194 MB file in blocks of 64 MiB gave one partition
two blocks (127 MB) and the other one (67 MB), and the window waited for the larger share
(rule 1 of :data:`CUT_RULE`, which a checkpoint from before the rule was recorded keeps). A
smaller file is still cut into one block per partition when each block keeps at least
:data:`SPREAD_MIN_BLOCK` bytes: otherwise a few files of tens of MB (the common daily dump)
are each read by one partition and, with a hash per file, the partitions' shares differ by
whole files (6 files on 2 partitions fell 4:2, so the window took twice as long as a
balanced one). Spark's file source splits and packs files by size for the same reason.

**Owners.** The file's stable hash picks the partition of its first split; the next splits
go round robin from there. A file cut into ``partitions`` blocks is thus read by every
partition once, and different files start at different partitions.

**After a repartitioning** (:mod:`malhar.io.fs.partitions`) a file keeps the cut it was
discovered with (its ``cut`` count is recorded with it); its unfinished splits go to the
owners :func:`split_owner` gives them among the new partitions, and the file records who
they are (``dealt``), since the cut's count no longer says.

The layout of the partition's checkpointed position (``State`` of the file input) is here
too, shared by the operator and the repartitioning.
"""

from __future__ import annotations

from malhar.io.fs.paths import owner

__all__ = ["CUT_RULE", "SPREAD_MIN_BLOCK", "block_size_for", "split_owner"]

#: a queue entry (one unfinished split of this partition):
#: ``[mtime, path, index, start, end, position]`` (position -1: not started)
MTIME, PATH, INDEX, START, END, POS = range(6)
#: a ``_seen`` value (a file this partition knows): ``[size, mtime, splits owned here, of
#: them finished and released, the partition count it was cut with, its split count,
#: dealt, unread, changed]``; ``dealt`` is None, or ``(epoch, coordinator, others)`` once a
#: repartitioning moved the file's splits (the partitions that read what is left of it, and
#: the repartitioning's number for the file, which names its post-action markers);
#: ``unread``: a released split of it ended in an error (could not be read, a Parquet file
#: that does not fit the schema), so its post action is skipped; ``changed``: a later
#: listing showed another size or mtime than it was cut with (reported once)
SIZE, SEEN_MTIME, OWN, RELEASED, CUT, TOTAL, DEALT, UNREAD, CHANGED = range(9)


def complete_seen(seen: list, partitions: int) -> list:
    """``seen`` (a ``_seen`` value) with the fields an older checkpoint lacks: cut for
    ``partitions``, split count and dealt unknown, not unread, not changed. In place."""
    if len(seen) <= DEALT:
        seen.extend([partitions, None, None][len(seen) - CUT :])
    if len(seen) <= CHANGED:
        seen.extend([False, False][len(seen) - UNREAD :])
    return seen


#: the smallest block a file below ``block_size`` is cut into to spread it over the
#: partitions: below it a block's fixed cost (finding its first line, one more decode call
#: and range in the window record) outweighs the parallelism
SPREAD_MIN_BLOCK = 1 << 20


#: how new applications cut a file larger than ``block_size``: 2, equal blocks, a multiple of
#: the partition count; 1, blocks of ``block_size`` and a shorter last one. The file input
#: records the rule with its checkpoint, since every partition must cut a file alike.
CUT_RULE = 2


def block_size_for(size: int, block_size: int, partitions: int, rule: int = CUT_RULE) -> int:
    """The block size a file of ``size`` bytes is cut with (see the module doc).

    Example:
        >>> block_size_for(4_000_000, 64 << 20, 2)  # spread: one block per partition
        2000000
        >>> block_size_for(1_500_000, 64 << 20, 2)  # too small to spread
        67108864
        >>> block_size_for(300 << 20, 64 << 20, 2)  # large: 6 equal blocks, 3 per partition
        52428800
        >>> block_size_for(300 << 20, 64 << 20, 2, rule=1)  # 4 blocks of 64 MiB and 44 MiB
        67108864
    """
    if partitions <= 1 or size < partitions * SPREAD_MIN_BLOCK:
        return block_size
    if size <= block_size:
        return -(-size // partitions)
    if rule < 2:
        return block_size
    at_most = -(-size // block_size)  # blocks of block_size, the last one shorter
    blocks = -(-at_most // partitions) * partitions
    return -(-size // blocks)


def split_owner(path: str, index: int, partitions: int) -> int:
    """The partition that reads split ``index`` of ``path`` (index -1, a whole Parquet
    file, counts as the first split).

    Example:
        >>> [split_owner("/in/a.csv", i, 2) for i in range(4)] in ([0, 1, 0, 1], [1, 0, 1, 0])
        True
    """
    if partitions <= 1:
        return 0
    return (owner(path, partitions) + max(index, 0)) % partitions
