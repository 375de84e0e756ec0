"""Ends an update's SSH master connections and removes their folder once its Pulumi command ends.

Started detached by the first process of an update that connects to a host, as
``python -I -S _ssh_reaper.py PID START_TICKS FOLDER``; standard library only, so it starts fast.
A killed CLI leaves no connection to the host behind, and sessions of orphaned providers end.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path


def _start_ticks(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[19])


def wait_for_end(pid: int, start_ticks: int) -> None:
    """Returns once the process ``pid`` that started at ``start_ticks`` has ended."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if _start_ticks(pid) != start_ticks:
            return  # the pid was reused: the process we watch is long gone
        poller = select.poll()
        poller.register(handle, select.POLLIN)
        while not poller.poll():
            pass
    finally:
        os.close(handle)


def end_masters(folder: Path) -> None:
    """Asks every master in ``folder`` to exit (ending its sessions), then removes the folder."""
    with contextlib.suppress(OSError):
        for socket in folder.glob("*.sock"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "sglang-stacks-host"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                    check=False,
                )
    shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``PID START_TICKS FOLDER``: waits for the process, then ends the masters in the folder."""
    pid, start_ticks, folder = int(argv[1]), int(argv[2]), Path(argv[3])
    wait_for_end(pid, start_ticks)
    end_masters(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
