"""A local backend's update locks (``.pulumi/locks/.../<stack>/<id>.json``): who holds one, and
letting go of those whose holder, a ``pulumi`` of this machine, no longer runs.

A ``pulumi`` killed during an update leaves its lock, and the next ``pulumi up`` stops at it with
advice to run ``pulumi cancel``. The provider process of that update outlives the CLI by a moment
(`hostops.lifetime` ends it once the engine is gone) and lets go of the dead CLI's lock on its way
out (`release_when_the_engine_is_gone`), so the next ``pulumi up`` simply runs. ``sglang-stacks
recover`` does the same for a lock no provider was there to release.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

from pydantic import ConfigDict, ValidationError

from sglang_stacks.hostops import lifetime
from sglang_stacks.shape import Shape

__all__ = [
    "LOCKED",
    "LOCK_HOLDER_EXIT_S",
    "Lock",
    "backend_url",
    "holds",
    "read_locks",
    "recover_advice",
    "release_dead_locks",
    "release_when_the_engine_is_gone",
]

LOCK_HOLDER_EXIT_S = 30.0
"""How long ``cancel_dead_lock`` waits for a lock's holder of this machine to end."""
_RELEASING: set[str] = set()


class Lock(Shape):
    """A local backend's update lock, as the CLI writes it."""

    model_config = ConfigDict(extra="ignore")

    pid: int
    hostname: str
    timestamp: datetime | None = None


LOCKED = "the stack is currently locked"
"""What Pulumi's refusal of an update lock says."""


def recover_advice(stack: str) -> str:
    """What to run when ``stack``'s lock was left by a killed update."""
    return (
        f"If that update was killed, `sglang-stacks recover {stack}` lets go of its lock and clears "
        "what it left on the host (a lock whose update still runs is left to it)."
    )


def backend_url() -> str:
    """The backend this process's ``pulumi`` uses: ``PULUMI_BACKEND_URL``, else the one ``pulumi
    login`` chose."""
    configured = os.environ.get("PULUMI_BACKEND_URL")
    if configured:
        return configured
    home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
    try:
        return str(json.loads((home / "credentials.json").read_text(encoding="utf-8")).get("current") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def _lock_files(url: str, stack: str) -> list[Path]:
    """The lock files of ``stack`` in a ``file://`` backend; none for other backends."""
    if not url.startswith("file://"):
        return []
    parts = urlparse(url)
    folder = Path(unquote(parts.netloc + parts.path)).expanduser() / ".pulumi" / "locks"
    return sorted(folder.glob(f"**/{stack}/*.json"))


def read_locks(url: str, stack: str) -> list[tuple[Path, Lock]]:
    """The locks ``stack`` holds in the backend at ``url``, each with its file."""
    found = []
    for path in _lock_files(url, stack):
        try:
            found.append((path, Lock.model_validate_json(path.read_text(encoding="utf-8"))))
        except (OSError, ValidationError):
            continue  # gone meanwhile, or a lock this version cannot read: pulumi reports it
    return found


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from ``/proc``; None when it is gone,
    a zombie, or there is no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text(encoding="utf-8").splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    if stat[0] == "Z":
        return None  # dead, not yet reaped
    return boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")


def holds(lock: Lock) -> bool:
    """Whether the process that took ``lock`` on this machine still runs (not another process
    that got its pid since)."""
    started = _started_at(lock.pid)
    if started is None:
        if Path("/proc/self/stat").exists():
            return False
        try:  # no /proc: the pid alone says it
            os.kill(lock.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return lock.timestamp is None or started <= lock.timestamp.timestamp() + 1.0


def release_dead_locks(stack: str, url: str | None = None) -> list[int]:
    """Deletes ``stack``'s locks whose holder ran on this machine and runs no more (what ``pulumi
    cancel`` does, for those only); the pids of the holders let go of."""
    here = socket.gethostname()
    released = []
    for path, lock in read_locks(backend_url() if url is None else url, stack):
        if lock.hostname == here and not holds(lock):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            released.append(lock.pid)
    return released


def release_when_the_engine_is_gone(stack: str) -> None:
    """In a provider process: once the engine of its update is gone, lets go of ``stack``'s lock if
    the CLI that held it no longer runs (killed); a CLI that ended on its own released it already."""
    if stack in _RELEASING or not stack:
        return
    _RELEASING.add(stack)
    url = backend_url()  # read now: the watch runs as the process ends
    lifetime.on_engine_gone(lambda: _release_later(stack, url))


def _release_later(stack: str, url: str) -> None:
    # The engine stops listening a moment before its CLI process is gone.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if release_dead_locks(stack, url) or not read_locks(url, stack):
            return
        time.sleep(0.2)
