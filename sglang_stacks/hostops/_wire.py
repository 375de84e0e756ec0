"""The wire between this machine and a host's bash: how a script reaches the host (the bootstrap
that reads it from stdin and runs it under ``timeout``), how the session is started (plain bash,
or a session of the host's SSH master) and how its output is collected. `transport` runs scripts
over it and `session` keeps one open.
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import time
from enum import IntEnum
from typing import Literal

from sglang_stacks.errors import HostError
from sglang_stacks.hostops import cancel
from sglang_stacks.hostops._ssh import client_argv
from sglang_stacks.hostops.connection import Connection

__all__ = ["KILL_AFTER_S", "SESSION_MARKER", "WireExit", "collect", "command_line", "spawn"]

# Seconds the host-side `timeout` waits after TERM before it sends KILL.
KILL_AFTER_S = 5
# Seconds of quiet after the script's end after which its output is taken as held open.
_LINGER_S = 3.0
# Ends a session's script on the host's stderr; nothing waits for it.
SESSION_MARKER = "__sglang_stacks_session"


class WireExit(IntEnum):
    """The exit codes of the wire itself, not of a script: the host's ``timeout`` that runs every
    script, and the SSH client."""

    TIMED_OUT = 124
    """``timeout`` stopped the script with TERM at its limit."""
    KILLED = 137
    """``timeout`` killed the script, still there `KILL_AFTER_S` after the TERM."""
    SSH_FAILED = 255
    """The SSH client could not reach, or authenticate to, the host (its stderr says which)."""


# Runs on the host. Reads one header line "<marker> <timeout_s> <script_bytes>", then exactly that
# many bytes of script; whatever follows on stdin is the script's own stdin. The script travels
# on stdin, never on a command line, because the env it exports may hold secrets. The marker line
# written after the script ends lets the caller tell the script's end from the session's end.
_BOOTSTRAP = r"""
IFS=' ' read -r marker limit_s length || { echo "sglang-stacks: no script received" >&2; exit 2; }
LC_ALL=C IFS= read -r -N "$length" script
if ! command -v timeout >/dev/null 2>&1; then
    echo "sglang-stacks: the host has no 'timeout' command; install coreutils" >&2
    exit 2
fi
timeout -k KILL_AFTER "$limit_s" bash <(printf '%s' "$script") <&0 &
child=$!
# The script ends with its caller: this bash gone (a cancelled update; the pipe on fd 3 then reads
# end of file at once), or the process that started it gone (the SSH session of a dropped
# connection, a killed provider). Builtins only: nothing outlives the script.
exec 3> >({ while kill -0 $PPID; do read -r -t 1 _; [ $? -gt 128 ] || break; done
             kill -TERM "$child"; } >/dev/null 2>&1)
wait "$child"
rc=$?
exec 3>&-
printf '\n%s %s\n' "$marker" "$rc" >&2
exit "$rc"
""".replace("KILL_AFTER", str(KILL_AFTER_S))


def command_line(conn: Connection) -> list[str]:
    """The argv that runs the bootstrap on the host: plain bash, or a session of the host's master."""
    if conn.kind == "local":
        return ["bash", "-c", _BOOTSTRAP]
    return client_argv(conn, "bash -c " + shlex.quote(_BOOTSTRAP))


def spawn(conn: Connection, argv: list[str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise HostError(
            f"`{argv[0]}` is not installed on this machine, so {conn.label} cannot be reached. "
            "Install the OpenSSH client (scripts/ensure-sshd.sh does) and run the update again."
        ) from None


def collect(
    process: subprocess.Popen[bytes], marker: bytes, deadline: float
) -> tuple[bytes, bytes, Literal["closed", "held", "hung", "cancelled"]]:
    """Reads stdout and stderr until both close, the output is held open, the deadline, or the
    update is cancelled (`cancel.requested`)."""
    buffers = {process.stdout: bytearray(), process.stderr: bytearray()}
    selector = selectors.DefaultSelector()
    for pipe in buffers:
        assert pipe is not None
        selector.register(pipe, selectors.EVENT_READ)
    last_data = time.monotonic()
    outcome: Literal["closed", "held", "hung", "cancelled"] = "closed"
    with selector:
        while selector.get_map():
            for key, _ in selector.select(timeout=0.1):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    buffers[key.fileobj].extend(chunk)  # type: ignore[index]
                    last_data = time.monotonic()
                else:
                    selector.unregister(key.fileobj)
            now = time.monotonic()
            if now - last_data > _LINGER_S and marker in buffers[process.stderr]:
                outcome = "held"
                break
            if now > deadline:
                outcome = "hung"
                break
            if cancel.requested():
                outcome = "cancelled"
                break
    return bytes(buffers[process.stdout]), bytes(buffers[process.stderr]), outcome
