"""A checkpoint's identity: a random token written the first time an application runs on
its checkpoint and kept for the checkpoint's life (also when Spark's own checkpoint is
deleted: it lives in malhar's part, ``<checkpoint>/malhar/identity``).

Transactional outputs record it with each committed window (as the window's
:attr:`~malhar.io.base.output.CommitMark.run`, see :func:`checkpoint_run`), so that a
window committed under the same application name by *another* checkpoint is not taken for
a replay of this one: window ids start again at 0 in a new checkpoint, and window 0 of the
new one would otherwise look like a replay of the old one's window 0.
"""

from __future__ import annotations

import re
import uuid

from malhar.errors import StateError

__all__ = ["checkpoint_identity"]

IDENTITY_FILE = "identity"
_TOKEN = re.compile(rb"[0-9a-f]{32}")


def checkpoint_identity(checkpoint: str) -> str:
    """The identity of ``checkpoint``, created (atomically, once) when it has none."""
    from malhar.util.fs import filesystem_for
    from malhar.util.fs.errors import StorageExistsError

    fs, base = filesystem_for(checkpoint)
    folder = fs.join(base, "malhar")
    path = fs.join(folder, IDENTITY_FILE)
    if not fs.exists(path):
        fs.mkdirs(folder)
        try:
            fs.write_atomic(path, uuid.uuid4().hex.encode("ascii"), overwrite=False)
        except StorageExistsError:
            pass  # another launcher made it first: its token is the checkpoint's
    return _checked(fs.read_all(path), fs.join(folder, IDENTITY_FILE), checkpoint)


def _checked(data: bytes, path: str, checkpoint: str) -> str:
    token = data.strip()
    if not _TOKEN.fullmatch(token):
        raise StateError(
            f"the checkpoint identity {path} of {checkpoint} is damaged (expected 32 hex "
            f"digits, got {len(data)} bytes). It is written once when the checkpoint is "
            "created and never changed; restore it from a copy of the checkpoint, or start "
            "from a new checkpoint"
        )
    return token.decode("ascii")
