"""Child-process plumbing shared by the service managers: ports, waits, logs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from malhar.testing.services.errors import ServiceError

# Run as ``python -c`` before the real command: the kernel SIGKILLs the command when the
# thread that started it dies (PR_SET_PDEATHSIG survives exec). A test run that is itself
# killed (a timeout, an interrupted helper) thus leaves no service or driver behind, which
# its fixtures' orderly stop cannot promise. Not a preexec_fn: unsafe with the JVM's threads.
# With a user name (argv[2], else ""), it also drops root to that user first, itself: the
# kernel clears the parent-death signal on every change of credentials, so a command
# wrapped in ``setpriv --reuid=...`` after the prctl would outlive its starter.
_DIE_WITH_PARENT = """\
import ctypes, os, signal, sys
if sys.argv[2]:
    import pwd
    user = pwd.getpwnam(sys.argv[2])
    os.initgroups(user.pw_name, user.pw_gid)
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    os._exit(70)  # the parent died before the prctl
os.execvp(sys.argv[3], sys.argv[3:])
"""


def as_user(command: Sequence[str], user: str | None) -> list[str]:
    """``command`` run as ``user`` (root drops to it through ``setpriv``); as it is for None.

    Not for a command that must die with its starter: ``setpriv`` changes credentials,
    which clears the parent-death signal; :func:`die_with_parent` takes ``user`` instead.
    """
    if user is None:
        return list(command)
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *command]


def die_with_parent(command: Sequence[str], *, user: str | None = None) -> list[str]:
    """``command`` wrapped so that it is killed when this process (the thread starting it)
    dies; on systems other than Linux, ``command`` as it is (run as ``user`` if given).

    ``user``: run ``command`` as this user (this process must be root). The wrapper drops
    to it before it asks for the parent-death signal, which a change of credentials clears.
    """
    if not sys.platform.startswith("linux"):
        return as_user(command, user)
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), user or "", *command]


# Run as root: drop to the user argv[1], then print the first folder on the way to argv[2]
# (an absolute path) that this user may not traverse, if any (the kernel's own check, ACLs
# included). Python is started as root, so its own files need not be reachable by the user.
_FIRST_UNREACHABLE = """\
import os, pwd, sys
user = pwd.getpwnam(sys.argv[1])
os.initgroups(user.pw_name, user.pw_gid)
os.setgid(user.pw_gid)
os.setuid(user.pw_uid)
path = "/"
for part in [""] + sys.argv[2].strip("/").split("/"):
    path = os.path.join(path, part)
    if not os.access(path, os.X_OK):
        print(path)
        break
"""


def first_unreachable(path: Path, user: str) -> Path | None:
    """The first folder from ``/`` down to ``path`` that ``user`` cannot traverse (None if
    ``user`` can reach ``path``). Asked as root, of a user a server will be run as."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _FIRST_UNREACHABLE, user, str(Path(path).absolute())],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
        check=True,
    )
    found = done.stdout.strip()
    return Path(found) if found else None


# True inside ``outliving_parent()``: services started there are not tied to this process.
_OUTLIVE_PARENT: ContextVar[bool] = ContextVar("malhar_outlive_parent", default=False)


@contextmanager
def outliving_parent() -> Iterator[None]:
    """Service processes started inside keep running after this process exits.

    For ``malhar services up``, whose servers must outlive the command; they are stopped
    by ``malhar services down`` (through the recorded pids). Everywhere else (fixtures,
    ``acquire()`` in a test) a service process dies with the process that started it
    (:func:`die_with_parent`).
    """
    token = _OUTLIVE_PARENT.set(True)
    try:
        yield
    finally:
        _OUTLIVE_PARENT.reset(token)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.1,
    alive: Callable[[], str | None] | None = None,
) -> None:
    """Poll ``predicate`` until true; raise TimeoutError naming ``what``.

    ``what`` may be a callable, asked at failure time (to show the last value seen).
    ``alive`` returns None while the thing we wait for can still succeed, or a
    reason why it cannot (a dead child process), which ends the wait at once.
    """
    name = (lambda: what) if isinstance(what, str) else what
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            if predicate():
                return
        except Exception as exc:
            last_exc = exc
        if alive is not None:
            reason = alive()
            if reason:
                raise RuntimeError(f"{name()}: {reason}")
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"{name()}: not ready after {timeout:.0f}s{detail}")
        time.sleep(interval)


def run_step(
    service: str,
    what: str,
    command: list[str],
    log_path: Path,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    append: bool = False,
    hint: str | None = None,
) -> None:
    """Run one bounded set-up command (format, initdb, a Maven fetch) into ``log_path``.

    Raises ServiceError naming ``what``, the command and the log when it times out
    or exits non-zero.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append else "wb") as log:
        if append:
            log.write(f"=== malhar: {what} ===\n".encode())
            log.flush()
        try:
            result = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(
                service,
                f"{what} took longer than {timeout:.0f}s",
                command=command,
                log_path=log_path,
            ) from exc
        except OSError as exc:
            raise ServiceError(
                service, f"{what} could not start: {exc}", command=command, log_path=log_path
            ) from exc
    if result.returncode != 0:
        raise ServiceError(
            service,
            f"{what} failed (exit {result.returncode})",
            command=command,
            log_path=log_path,
            hint=hint,
        )


def require_java(service: str) -> str:
    """Path of ``java``; a ServiceError that says how to get one otherwise."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ServiceError(
            service,
            "no Java runtime found (JAVA_HOME unset and no `java` on PATH)",
            hint="install OpenJDK 17 (apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME",
        )
    return found


@dataclass
class ManagedProcess:
    """A service child process with its output in a log file.

    The child gets its own process group so that stopping it also stops
    whatever it spawned, and so that Ctrl-C in a test run does not reach it
    before the fixture's orderly shutdown. It is killed when the process that
    started it dies (:func:`die_with_parent`), unless started inside
    :func:`outliving_parent`.
    """

    service: str
    command: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    #: the signal asking for an orderly shutdown (PostgreSQL wants SIGINT: "fast" mode).
    stop_signal: int = signal.SIGTERM
    #: run the command as this user (this process must be root); None: as this process.
    user: str | None = None
    popen: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            if _OUTLIVE_PARENT.get():
                command = as_user(self.command, self.user)
            else:
                command = die_with_parent(self.command, user=self.user)
            self.popen = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ServiceError(
                self.service,
                f"could not start: {exc}",
                command=self.command,
                log_path=self.log_path,
            ) from exc
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def exit_reason(self) -> str | None:
        """None while running; otherwise why it is no longer running."""
        if self.popen is None:
            return "not started"
        code = self.popen.poll()
        return None if code is None else f"process exited with code {code} while starting"

    def wait_ready(self, predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
        try:
            wait_until(predicate, timeout=timeout, what=what, alive=self.exit_reason)
        except (TimeoutError, RuntimeError) as exc:
            self.stop()
            raise ServiceError(
                self.service, str(exc), command=self.command, log_path=self.log_path
            ) from exc
        except BaseException:  # Ctrl-C: nothing left running, even outside die_with_parent
            self.stop()
            raise

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        stop_process_group(self.popen.pid, timeout=timeout, sig=self.stop_signal)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass


def stop_process_group(pid: int, *, timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to the group led by ``pid``, SIGKILL it if it outlives ``timeout``."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our child; a zombie still answers kill(0).
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
