"""Where a command's private files live: a folder (0700) per Pulumi command, named after that
command's process (or after this process when no Pulumi command runs it). It holds the control
sockets of the command's SSH masters and the key files the Kubernetes client writes for a
kubeconfig that carries its credentials inline; a reaper (``_ssh_reaper``) removes it when the
command ends, and the folders of commands killed with their reaper are swept away by the next."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from sglang_stacks.errors import HostError

__all__ = ["answers", "update_folder"]

# Resolved: the program may import this package through a symbolic link inside its project
# folder, and the reaper must not look like a process of that folder.
_REAPER = Path(__file__).resolve().with_name("_ssh_reaper.py")
# Reapers are detached on purpose; holding them here keeps Popen from warning that they still run.
_reapers: list[subprocess.Popen[bytes]] = []


def answers(control_path: Path) -> bool:
    """Whether a master listens on ``control_path`` (a connect, far cheaper than ``ssh -O check``)."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(control_path))
        except OSError:
            return False
    return True


def update_folder() -> Path:
    """This command's private folder; the first process to make it starts the reaper that removes
    it when the command ends."""
    pid, start = _scope()
    base = _private_base()
    folder = base / f"{pid}-{start}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        _check_private(folder)
        return folder
    if _start_ticks(pid) != start:
        # The Pulumi command is gone (this is an orphaned provider): nothing more runs for it.
        folder.rmdir()
        raise HostError(
            "The Pulumi command this update belonged to has ended, so nothing more is run on the "
            "host. Run `sglang-stacks recover <stack>` (it lets go of the killed update's lock and "
            "clears what it left pending), then the command again."
        )
    _sweep(base, keep=folder)
    _reapers.append(
        subprocess.Popen(
            [sys.executable, "-I", "-S", str(_REAPER), str(pid), str(start), str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    )
    return folder


def _sweep(base: Path, *, keep: Path) -> None:
    """Removes the folders of ended updates whose reaper was killed with them (a machine-wide
    kill); their masters ended with their idle time, or end when their socket goes."""
    for folder in base.iterdir():
        pid, _, start = folder.name.partition("-")
        ended = pid.isdigit() and start.isdigit() and _start_ticks(int(pid)) != int(start)
        if folder != keep and ended and not any(answers(path) for path in folder.glob("*.sock")):
            shutil.rmtree(folder, ignore_errors=True)


def _private_base() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        base = Path(runtime) / "sglang-stacks"
    else:
        base = Path(tempfile.gettempdir()) / f"sglang-stacks-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    _check_private(base)
    return base


def _check_private(folder: Path) -> None:
    """Refuses a folder another user could reach: its sockets are as good as the SSH key."""
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise HostError(
            f"{folder} holds sglang-stacks' SSH connections but is not a folder of yours that only "
            "you can open (owner, mode 0700). Remove it; it is made anew at the next command."
        )


@cache
def _scope() -> tuple[int, int]:
    """The process whose lifetime bounds the connections: the Pulumi CLI this process runs under
    (the program and the providers are its descendants), or this process; as (pid, start ticks)."""
    current = os.getpid()
    while current > 1:
        try:
            comm, parent, start = _stat(current)
        except OSError:
            break
        if comm == "pulumi":
            return current, start
        current = parent
    return os.getpid(), _stat(os.getpid())[2]


def _stat(pid: int) -> tuple[str, int, int]:
    """(command name, parent pid, start time in clock ticks) from ``/proc/<pid>/stat``."""
    text = Path(f"/proc/{pid}/stat").read_text()
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return comm, int(fields[1]), int(fields[19])


def _start_ticks(pid: int) -> int | None:
    try:
        return _stat(pid)[2]
    except OSError:
        return None
