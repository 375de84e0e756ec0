"""The SGLang server process on a GPU host: launched detached, ready when its health check
passes, asked how it is, stopped only once its GPU memory is free.

The host side is the program ``programs/server.sh``, called through its contract
(``programs/server_contract.py``). Why a server failed is `hostops.server_failure`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sglang_stacks.errors import StacksError
from sglang_stacks.hostops import claim, serving
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs import server_contract as server
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.hostops.server_failure import FailureContext, ServerState, start_failure

LOG_TAIL_LINES = 25


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
    context: FailureContext = field(default_factory=FailureContext)
    """The settings a failed start's fix names values against."""


@dataclass(frozen=True)
class Running:
    """A started server process: pid and start time identify it (pids are reused)."""

    pid: int
    start_ticks: int


def _whole_s(seconds: float) -> int:
    return max(1, math.ceil(seconds))


def launch(conn: Connection, spec: Launch) -> Running:
    """Starts the server detached and returns its identity, noted in the claim of
    ``spec.claim_stack`` when set; ServerError when it cannot start (its port is taken, or it died
    at once, with its log and class), ClaimError when the stack lost the claim (the server is then
    stopped)."""
    launched = call(
        conn,
        server.Launch(
            python=spec.python,
            port=spec.port,
            log=spec.log_path,
            command=spec.command,
            claim_stack=spec.claim_stack,
            state_dir=spec.state_dir if spec.claim_stack else "",
            secret_env=dict(spec.secret_env),
        ),
    )
    if launched.start_ticks is None:
        # No start time: the process was gone before it could be read; it failed at once.
        raise start_failure(
            conn,
            "exited",
            log_tail(conn, spec.log_path),
            log_path=spec.log_path,
            ready_timeout_s=spec.ready_timeout_s,
            context=spec.context,
        )
    running = Running(launched.pid, launched.start_ticks)
    if spec.claim_stack:
        try:
            claim.check_noted(conn, spec.claim_stack, launched.claim_line, state_dir=spec.state_dir)
        except StacksError:
            stop(conn, running.pid, running.start_ticks, spec.nvidia_smi, spec.stop_timeout_s)
            raise
    return running


def wait_ready(conn: Connection, spec: Launch, running: Running) -> None:
    """Waits until the server answers its health check; on failure stops it and raises
    ServerError with how it ended, its class, the log's last lines and the fix."""
    readiness = call(
        conn,
        server.Ready(
            pid=running.pid,
            start_ticks=running.start_ticks,
            python=spec.python,
            port=spec.port,
            timeout_s=_whole_s(spec.ready_timeout_s),
            log=spec.log_path,
            tail_lines=LOG_TAIL_LINES,
            ready_line=spec.ready_line,
        ),
    )
    if readiness.verdict is not server.ReadyVerdict.READY:
        stop(conn, running.pid, running.start_ticks, spec.nvidia_smi, spec.stop_timeout_s)
        raise start_failure(
            conn,
            readiness.verdict.value,
            readiness.log_tail,
            log_path=spec.log_path,
            ready_timeout_s=spec.ready_timeout_s,
            context=spec.context,
        )


def log_tail(conn: Connection, log_path: str) -> str:
    """The last lines of a server log on the host (empty when there is none)."""
    return call(conn, server.LogTail(log=log_path, tail_lines=LOG_TAIL_LINES))


def server_state(conn: Connection, running: Running, *, python: str, port: int, log_path: str) -> ServerState:
    """Whether the server launched as ``running`` still runs and how it answers its health check,
    and its log's last lines, in one host program run."""
    return call(
        conn,
        server.State(
            pid=running.pid,
            start_ticks=running.start_ticks,
            python=python,
            port=port,
            log=log_path,
            tail_lines=LOG_TAIL_LINES,
        ),
    )


def stop(
    conn: Connection, pid: int, start_ticks: int | None, nvidia_smi: Sequence[str], timeout_s: float
) -> bool:
    """Stops the server's process group and waits until its GPU memory is free; whether the
    server was running (False: it had already ended, only its GPU memory was waited for)."""
    stopped = call(
        conn,
        server.Stop(
            pid=pid, start_ticks=start_ticks, nvidia_smi=tuple(nvidia_smi), timeout_s=_whole_s(timeout_s)
        ),
    )
    return stopped.was_running


def is_running(conn: Connection, running: Running) -> bool:
    """Whether the server process launched as (pid, start time) still runs."""
    return call(conn, server.Alive(pid=running.pid, start_ticks=running.start_ticks))


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
