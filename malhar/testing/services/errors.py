"""The one error type every service manager raises."""

from __future__ import annotations

from pathlib import Path

from malhar.errors import MalharError


class ServiceError(MalharError, RuntimeError):
    """A real service could not be started, reached or stopped.

    The message always names the service, what was attempted, and the log file
    to read, so a failing CI run says where to look without a re-run.
    """

    def __init__(
        self,
        service: str,
        problem: str,
        *,
        command: list[str] | str | None = None,
        log_path: Path | str | None = None,
        hint: str | None = None,
    ) -> None:
        parts = [f"{service}: {problem}"]
        if command:
            shown = command if isinstance(command, str) else " ".join(map(str, command))
            parts.append(f"command: {shown}")
        if log_path:
            parts.append(f"log: {log_path}")
            tail = _tail(Path(log_path))
            if tail:
                parts.append("last log lines:\n" + tail)
        if hint:
            parts.append(f"how to fix: {hint}")
        super().__init__("\n".join(parts))
        self.service = service
        self.log_path = Path(log_path) if log_path else None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])
