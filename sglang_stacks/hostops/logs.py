"""What ``sglang-stacks logs`` shows: the server's log and the benchmark's progress on the stack's
host, once or followed as they grow (``tail -F``, which also waits for a file not written yet).

Progress lines are JSON as the load generator writes them; they are shown as one sentence each.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from sglang_stacks.errors import HostError
from sglang_stacks.hostops import session as session_module
from sglang_stacks.hostops import transport
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.transport import quote_path

__all__ = ["describe_progress", "follow", "show"]

_SILENT_S = 24 * 3600.0


def _script(paths: Iterable[str], lines: int, follow: bool) -> str:
    quoted = " ".join(quote_path(path) for path in paths)
    if follow:
        return f"exec tail -n {lines} -F {quoted} 2>/dev/null\n"
    # Only the files that exist: a stack that never benchmarked has no progress file.
    return f'for f in {quoted}; do [ -f "$f" ] || continue; echo "==> $f <=="; tail -n {lines} "$f"; done\n'


def describe_progress(line: str) -> str:
    """A progress line as a sentence; any other line as it is."""
    if not line.startswith('{"time_unix_s"'):
        return line
    try:
        step = json.loads(line)
    except ValueError:
        return line
    where = f"{step['level']}, " if step.get("level") else ""
    repetition = f" {step['repetition']}/{step['of']}" if step.get("phase") == "measure" else ""
    errors = f", last: {step['last_error']}" if step.get("last_error") else ""
    return (
        f"benchmark: {where}{step.get('phase')}{repetition}: {step.get('requests_done', 0)} requests, "
        f"{step.get('tok_s_so_far', 0)} tok/s so far, {step.get('errors', 0)} errors{errors}"
    )


def show(conn: Connection, paths: list[str], lines: int = 40) -> list[str]:
    """The last ``lines`` of each file that exists, progress lines as sentences."""
    result = transport.run(conn, _script(paths, lines, follow=False), timeout_s=60)
    if not result.ok:
        raise HostError(
            f"Reading the logs on {conn.label} failed (exit {result.exit_code}): "
            f"{result.stderr.strip()[-500:]}"
        )
    return [describe_progress(line) for line in result.stdout.splitlines()]


def follow(conn: Connection, paths: list[str], emit: Callable[[str], None], lines: int = 40) -> None:
    """Print new lines of the files as they come, until interrupted (Ctrl-C) or the host goes away."""
    session = session_module.open_session(conn, _script(paths, lines, follow=True), max_lifetime_s=_SILENT_S)
    try:
        while True:
            emit(describe_progress(session.read_line(timeout_s=_SILENT_S)))
    except KeyboardInterrupt:
        return
    finally:
        session.close(timeout_s=2)
