"""What ``sglang-stacks logs`` shows: the server's log and the benchmark's progress on the stack's
host, once or followed as they grow (``programs/logs.sh``).

Each launch of a stack's server writes a log of its own (`server_log_path`): the newest is the one
shown, and a follower switches to a newer one as soon as it appears, so ``logs -f`` started
before ``pulumi up`` shows the new server from its first line. Progress lines are JSON as the load
generator writes them; they are shown as one sentence each.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from sglang_loadgen.progress import LINE_PREFIX
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.logs_contract import FollowLogs, ShowLogs
from sglang_stacks.hostops.programs.runner import call

__all__ = ["StackLogs", "describe_progress", "follow", "server_log_path", "show"]

_SILENT_S = 24 * 3600.0


def server_log_path(log_dir: str, stack: str, instance: str) -> str:
    """The log of the server launch ``instance`` (12 hex digits) of ``stack``, in ``log_dir``."""
    return f"{log_dir.rstrip('/')}/{stack}-{instance}.log"


@dataclass(frozen=True)
class StackLogs:
    """Where a stack's logs are on its host."""

    stack: str
    log_dir: str
    """The folder of its server's logs, one per launch (`server_log_path`)."""
    progress: str
    """Its benchmark's progress file."""


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def describe_progress(line: str) -> str:
    """A progress line as a sentence (``benchmark: concurrency 1, measure 2/5: 1 request, 80.1 tok/s
    so far, 0 errors``); any other line as it is."""
    if not line.startswith(LINE_PREFIX):
        return line
    try:
        step = json.loads(line)
    except ValueError:
        return line
    where = f"benchmark: {step['level']}, " if step.get("level") else "benchmark: "
    phase = step.get("phase")
    if phase == "done":
        return f"{where}done"
    repetition = f" {step['repetition']}/{step['of']}" if phase == "measure" else ""
    done, tok_s, errors = step.get("requests_done", 0), step.get("tok_s_so_far", 0), step.get("errors", 0)
    if not (done or tok_s or errors):
        return f"{where}{phase}{repetition}: starting"
    last = f", last: {step['last_error']}" if step.get("last_error") else ""
    counts = f"{_count(done, 'request')}, {tok_s} tok/s so far, {_count(errors, 'error')}"
    return f"{where}{phase}{repetition}: {counts}{last}"


def show(conn: Connection, logs: StackLogs, lines: int = 40) -> list[str]:
    """The last ``lines`` of the newest server log and of the progress file (those that exist),
    progress lines as sentences."""
    shown = call(conn, ShowLogs(log_dir=logs.log_dir, stack=logs.stack, progress=logs.progress, lines=lines))
    return [describe_progress(line) for line in shown]


def follow(conn: Connection, logs: StackLogs, emit: Callable[[str], None], lines: int = 40) -> None:
    """Print new lines of the server's log and the progress as they come, following each new launch
    of the server, until interrupted (Ctrl-C) or the host goes away."""
    request = FollowLogs(log_dir=logs.log_dir, stack=logs.stack, progress=logs.progress, lines=lines)
    session = call(conn, request)
    try:
        while True:
            emit(describe_progress(session.read_line(timeout_s=_SILENT_S)))
    except KeyboardInterrupt:
        return
    finally:
        session.close(timeout_s=2)
