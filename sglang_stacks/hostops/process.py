"""The SGLang server process on a GPU host: launched detached, ready when its health check
passes, asked how it is, stopped only once its GPU memory is free.

The host side is the program ``programs/server.sh``; this module gives it typed arguments and
turns what it prints into results. Why a server failed is `hostops.server_failure`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import get_args

from sglang_stacks.errors import ServerError, StacksError
from sglang_stacks.hostops import claim, programs, serving
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.server_failure import Health, ServerState, start_failure
from sglang_stacks.hostops.transport import HostPath, quote

LOG_TAIL_LINES = 25
# Seconds that the host-side program may take beyond its own waits.
_SLACK_S = 30.0


@dataclass(frozen=True)
class Launch:
    """What to start: the command line (shell-quoted, variables first) and how to supervise it."""

    command: str
    """``[VAR=value ...] python -m <launcher> <argv>``, as `config.render.render_command` builds it."""
    python: str
    """The host's Python that runs the port and health checks."""
    port: int
    log_path: str
    ready_timeout_s: float
    stop_timeout_s: float
    nvidia_smi: Sequence[str]
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Variables the server inherits without any command line showing them (a hub token)."""
    ready_line: str = ""
    """When set, ready once the log shows this line instead of the health check (a node of a
    multi-node server other than rank 0, which serves no HTTP)."""
    claim_stack: str = ""
    """When set, the stack whose claim notes the server in the same host program run that starts
    it: an update killed at any moment leaves no server the claim does not know."""
    state_dir: str = claim.DEFAULT_STATE_DIR
    """The host's folder of sglang-stacks state, where the claim is."""


@dataclass(frozen=True)
class Running:
    """A started server process: pid and start time identify it (pids are reused)."""

    pid: int
    start_ticks: int


def _server(
    conn: Connection,
    mode: str,
    params: Mapping[str, programs.Param],
    *,
    timeout_s: float,
    secrets: Mapping[str, str] | None = None,
) -> str:
    result = programs.run_bash(
        conn,
        "server.sh",
        {"mode": mode, "port_probe": programs.source("port_probe.py"), **params, **(secrets or {})},
        timeout_s=timeout_s,
    )
    if mode != "alive" and not result.ok:
        raise ServerError(
            f"The server program on {conn.label} failed ({mode}): "
            f"{result.stderr.strip() or result.stdout.strip()}. Check that the Python environment exists."
        )
    return result.stdout if mode != "alive" else ("yes" if result.ok else "")


def _whole_s(seconds: float) -> int:
    return max(1, math.ceil(seconds))


def launch(conn: Connection, spec: Launch) -> Running:
    """Starts the server detached and returns its identity, noted in the claim of
    ``spec.claim_stack`` when set; ServerError when it cannot start (its port is taken, or it died
    at once, with its log and class), ClaimError when the stack lost the claim (the server is then
    stopped)."""
    params: dict[str, programs.Param] = {
        "python": spec.python,
        "port": spec.port,
        "log": HostPath(spec.log_path),
        "command": spec.command,
    }
    if spec.claim_stack:
        params |= {
            "claim_stack": spec.claim_stack,
            "state_dir": spec.state_dir,
            "claim_program": programs.source("claim.py"),
            "system_python": programs.source("system_python.sh"),
        }
    printed = _server(conn, "launch", params, timeout_s=60, secrets=spec.secret_env)
    if printed.strip() == "port-taken":
        raise ServerError(
            f"Port {spec.port} on {conn.label} is taken by another program, so SGLang was not started "
            "(its health check would have reached that program). Stop the program "
            f"(`ss -ltnp 'sport = :{spec.port}'` on the host names it) or set server.port to a free port."
        )
    first, _, noted = printed.partition("\n")
    words = first.split()
    if len(words) < 2:
        # No start time: the process was gone before it could be read; it failed at once.
        raise start_failure(
            conn,
            "exited",
            log_tail(conn, spec.log_path),
            log_path=spec.log_path,
            ready_timeout_s=spec.ready_timeout_s,
        )
    running = Running(int(words[0]), int(words[1]))
    if spec.claim_stack:
        try:
            claim.check_noted(conn, spec.claim_stack, noted.strip(), state_dir=spec.state_dir)
        except StacksError:
            stop(conn, running.pid, running.start_ticks, spec.nvidia_smi, spec.stop_timeout_s)
            raise
    return running


def wait_ready(conn: Connection, spec: Launch, running: Running) -> None:
    """Waits until the server answers its health check; on failure stops it and raises
    ServerError with how it ended, its class, the log's last lines and the fix."""
    printed = _server(
        conn,
        "ready",
        {
            "pid": running.pid,
            "start_ticks": running.start_ticks,
            "python": spec.python,
            "port": spec.port,
            "timeout_s": _whole_s(spec.ready_timeout_s),
            "log": HostPath(spec.log_path),
            "tail_lines": LOG_TAIL_LINES,
            "ready_line": spec.ready_line,
        },
        timeout_s=spec.ready_timeout_s + _SLACK_S,
    )
    verdict, _, tail_text = printed.partition("---log---\n")
    if verdict.strip() != "ready":
        stop(conn, running.pid, running.start_ticks, spec.nvidia_smi, spec.stop_timeout_s)
        raise start_failure(
            conn, verdict.strip(), tail_text, log_path=spec.log_path, ready_timeout_s=spec.ready_timeout_s
        )


def log_tail(conn: Connection, log_path: str) -> str:
    """The last lines of a server log on the host (empty when there is none)."""
    return _server(conn, "log-tail", {"log": HostPath(log_path), "tail_lines": LOG_TAIL_LINES}, timeout_s=30)


def server_state(conn: Connection, running: Running, *, python: str, port: int, log_path: str) -> ServerState:
    """Whether the server launched as ``running`` still runs and how it answers its health check,
    and its log's last lines, in one host program run."""
    printed = _server(
        conn,
        "state",
        {
            "pid": running.pid,
            "start_ticks": running.start_ticks,
            "python": python,
            "port": port,
            "log": HostPath(log_path),
            "tail_lines": LOG_TAIL_LINES,
        },
        timeout_s=_SLACK_S + 15,
    )
    verdict, _, tail_text = printed.partition("---log---\n")
    health = next((known for known in get_args(Health) if known == verdict.strip()), None)
    if health is None:
        raise ServerError(
            f"The state of SGLang (pid {running.pid}) on {conn.label} could not be read "
            f"({verdict.strip()!r}). Check that the server's Python environment is complete."
        )
    return ServerState(health, tail_text)


def stop(
    conn: Connection, pid: int, start_ticks: int | None, nvidia_smi: Sequence[str], timeout_s: float
) -> bool:
    """Stops the server's process group and waits until its GPU memory is free; whether the
    server was running (False: it had already ended, only its GPU memory was waited for)."""
    printed = _server(
        conn,
        "stop",
        {
            "pid": pid,
            "start_ticks": "" if start_ticks is None else start_ticks,
            "nvidia_smi": " ".join(quote(word) for word in nvidia_smi),
            "timeout_s": _whole_s(timeout_s),
        },
        timeout_s=timeout_s + _SLACK_S,
    )
    if printed.strip().startswith("still-held"):
        raise ServerError(
            f"SGLang (pid {pid}) on {conn.label} stopped, but processes {printed.split()[1:]} still "
            f"hold GPU memory after {timeout_s:g} s. Check `nvidia-smi` on the host and stop them."
        )
    return printed.split()[1:2] == ["running"]


def is_running(conn: Connection, running: Running) -> bool:
    """Whether the server process launched as (pid, start time) still runs."""
    params = {"pid": running.pid, "start_ticks": running.start_ticks}
    return bool(_server(conn, "alive", params, timeout_s=30))


def stop_recorded(
    conn: Connection,
    recorded: claim.Claim,
    nvidia_smi: Sequence[str],
    stop_timeout_s: float,
    state_dir: str,
) -> bool:
    """Stops the server a claim records, if it records one, and removes the host's note that it
    serves (a takeover, or a server a killed update left behind). Whether it stopped a server that
    was serving: running, and noted on the host as ready (`serving`)."""
    if not recorded.server_pid:
        return False
    noted = serving.serves(conn, state_dir, recorded.stack, recorded.server_pid)
    running = stop(conn, recorded.server_pid, recorded.server_start_ticks, nvidia_smi, stop_timeout_s)
    serving.forget(conn, state_dir, recorded.server_pid)
    return noted and running
