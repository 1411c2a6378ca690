"""Where the service managers keep downloads, data and logs."""

from __future__ import annotations

import os
import stat
import tempfile
import uuid
from pathlib import Path

from malhar.testing.services.errors import ServiceError
from malhar.util.cache import cache_dir

__all__ = ["cache_dir", "new_service_dir", "run_dir", "write_private"]


def run_dir() -> Path:
    """Data and logs of running services: ``$MALHAR_RUN_DIR`` or a per-user temp folder.

    It holds the services' state (passwords included), so a folder that already
    exists must belong to the current user and be writable by nobody else: in a
    shared ``/tmp`` another user could have created it first to read or plant files.
    Created with mode 0o711: other users cannot list it, but may traverse it, because
    a PostgreSQL server started by root runs as the ``postgres`` user and must reach
    its own (0o755) folder inside. Secrets inside are files of mode 0o600.
    """
    root = os.environ.get("MALHAR_RUN_DIR") or Path(tempfile.gettempdir()) / f"malhar-{os.getuid()}"
    path = Path(root)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o711)
            os.chmod(path, 0o711)  # whatever the umask
        except FileExistsError:
            pass  # created meanwhile (by us in another process, or by someone else: checked)
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        owner = f"owned by uid {st.st_uid}" if stat.S_ISDIR(st.st_mode) else what
        raise ServiceError(
            "services",
            f"run directory {path} is {owner}, not by the current user (uid {os.getuid()}); "
            "it would hold service state and passwords",
            hint="remove it if it is not yours, or set MALHAR_RUN_DIR to a directory you own",
        )
    if st.st_mode & 0o022:
        raise ServiceError(
            "services",
            f"run directory {path} is writable by other users (mode "
            f"{oct(stat.S_IMODE(st.st_mode))}); it would hold service state and passwords",
            hint=f"chmod go-w {path}, or set MALHAR_RUN_DIR to a directory only you can write",
        )
    return path


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, readable by its owner only (0o600)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise


def new_service_dir(service: str) -> Path:
    """A fresh folder for one service instance: its data and its log live here."""
    return Path(tempfile.mkdtemp(prefix=f"{service}-", dir=run_dir()))
