"""Runs a command on the host for as long as the session that started it lives, one at a time.

Runs with any python3 (3.7 or newer, standard library only). Usage:
``bound.py RUNFILE LABEL -- COMMAND [ARG...]``. The command's output is this program's: the
session's. A session that dies (the update's process killed, the connection dropped, sshd
stopped) closes the far end of those pipes; the command is then stopped, with everything it
started, instead of running on unseen. RUNFILE records the running command; a command that an
earlier session left anyway (this host program killed with it) is stopped before the new one
starts, so two never overlap.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

# Seconds a stopped command gets between TERM and KILL.
STOP_WAIT_S = 5.0


def start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (with the pid, its identity), or None."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(") ", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int) -> None:
    """TERM to the command's process group, KILL after STOP_WAIT_S."""
    for sig, wait_s in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, sig)
        except OSError:
            return
        give_up = time.monotonic() + wait_s
        while group_alive(pgid) and time.monotonic() < give_up:
            time.sleep(0.1)
        if not group_alive(pgid):
            return


def stop_left_over(runfile: str) -> None:
    """Stops the command an earlier session left running, if the runfile names a live one."""
    try:
        with open(runfile) as handle:
            record = json.load(handle)
        pid, ticks = int(record["pid"]), record["start_ticks"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if ticks is not None and start_ticks(pid) == ticks:
        sys.stderr.write(
            f"sglang-stacks: stopped the load generator of {record.get('label', '?')} (pid {pid}), "
            "left running by an update whose session ended.\n"
        )
        stop_group(pid)
    remove(runfile, pid)


def remove(runfile: str, pid: int) -> None:
    """Removes the runfile if it still names ``pid``."""
    try:
        with open(runfile) as handle:
            if int(json.load(handle)["pid"]) != pid:
                return
        os.unlink(runfile)
    except (OSError, ValueError, KeyError, TypeError):
        return


def session_gone() -> bool:
    """Whether the reader of this program's output went away: the session is over."""
    poller = select.poll()
    for fd in (1, 2):
        poller.register(fd, select.POLLERR | select.POLLHUP)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: bound.py RUNFILE LABEL -- COMMAND [ARG...]\n")
        return 2
    runfile, label, command = os.path.expanduser(argv[0]), argv[1], argv[3:]
    os.makedirs(os.path.dirname(runfile) or ".", mode=0o700, exist_ok=True)
    stop_left_over(runfile)
    # Its own session and group: stopping it reaches everything it started, and nothing else.
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    staging = f"{runfile}.{child.pid}"
    with open(staging, "w") as handle:
        json.dump({"pid": child.pid, "start_ticks": start_ticks(child.pid), "label": label}, handle)
    os.replace(staging, runfile)

    def stop(signum: int, _frame: object) -> None:
        # The host's `timeout` (or a person) stops this program: the command goes with it.
        stop_group(child.pid)
        remove(runfile, child.pid)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        while True:
            try:
                return child.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            if session_gone():
                stop_group(child.pid)
                return 255
    finally:
        remove(runfile, child.pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
