"""The SGLang server process on a GPU host: launched detached, ready when its health check
passes, classified when it fails, stopped only once its GPU memory is free.

The host side is the program ``programs/server.sh``; this module gives it typed arguments and
turns what it prints into results and errors a user acts on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from sglang_stacks.errors import ServerError, ServingError, StacksError
from sglang_stacks.hostops import claim, programs, serving
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.transport import HostPath, quote

FailureClass = Literal[
    "out_of_memory", "bad_flag", "nccl", "unsupported_gpu", "python_missing", "port_in_use", "other"
]
"""Why a start failed, named whenever the log makes the cause recognisable; ``other`` when not."""
ServingFailureClass = Literal["crash", "out_of_memory", "nccl", "hang", "error_responses"]
"""How a server that was ready failed while serving; a log's recognisable cause names an exit."""
Health = Literal["exited", "healthy", "unhealthy", "unresponsive"]
"""How a server process is now: gone, or how it answers its health check (a status other than
200 or a refused connection is ``unhealthy``; no answer within the wait is ``unresponsive``)."""

LOG_TAIL_LINES = 25
# SGLang's first log line lists every server argument; error messages keep the start of such lines.
_LOG_LINE_CHARS = 400
# Seconds that the host-side program may take beyond its own waits.
_SLACK_S = 30.0
_RENDER_HINT = "`sglang-stacks render <stack>`"


@dataclass(frozen=True)
class Failure:
    """Why a server did not become ready, in the terms a user acts on."""

    kind: FailureClass
    fix: str


# Checked in order. SGLang wraps every error during CUDA-graph capture in "Capture cuda graph
# failed", so the specific causes come before the out-of-memory pattern that phrase belongs to.
_FAILURES: tuple[tuple[re.Pattern[str], Failure], ...] = (
    (
        re.compile(r"error: (unrecognized arguments|ambiguous option|argument [^:]+: invalid)"),
        Failure(
            "bad_flag",
            "The SGLang release on the host rejects a launch flag. Run "
            "`sglang-stacks render <stack> --release <host release>` to see the argv, and "
            "set environment.sglang_release to the release the host really has.",
        ),
    ),
    (
        # A multi-node server: a node that left, or a rendezvous that never formed. Before the
        # generic NCCL pattern, whose fix is about NCCL_ALGO.
        re.compile(r"ncclRemoteError|left the process group"),
        Failure(
            "nccl",
            "Another node of this multi-node server failed or lost the network: read its log on its "
            "host (it names the cause), fix that and run `pulumi up` again; the group is relaunched "
            "together.",
        ),
    ),
    (
        re.compile(r"DistNetworkError|DistStoreError"),
        Failure(
            "nccl",
            "The nodes of this multi-node server did not meet at the init address: check that every "
            "node reaches rank 0's fleet.hosts[i].node_address on fleet.dist_init_port, that "
            "fleet.socket_ifname names their shared network, and that every node was launched.",
        ),
    ),
    (
        re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|NCCL_ALGO"),
        Failure(
            "nccl",
            "Check the NCCL settings in environment.env (NCCL_ALGO=Tree cannot run with CUDA graphs) "
            "and keep server.disable_custom_all_reduce on PCIe hosts.",
        ),
    ),
    (
        # Kernels that do not support the GPU: SGLang reports them inside the CUDA-graph capture
        # error, so they are looked for before out-of-memory.
        re.compile(r"FlashInfer JIT failed|torch symmetric memory|not supported on (this GPU|SM)"),
        Failure(
            "unsupported_gpu",
            "A kernel this flag selects does not support the host's GPU architecture. Remove the flag "
            f"(preflight knows the SM120 cases: {_RENDER_HINT}).",
        ),
    ),
    (
        re.compile(r"Not enough memory|CUDA out of memory|OutOfMemoryError|Capture cuda graph failed"),
        Failure(
            "out_of_memory",
            "Raise server.mem_fraction_static to at least the smallest fraction the memory plan of "
            f"{_RENDER_HINT} gives, or lower server.cuda_graph_max_bs.",
        ),
    ),
    (
        # nohup's and env's words when the program to run is missing.
        re.compile(r"failed to run command|^env: .*No such file or directory", re.MULTILINE),
        Failure(
            "python_missing",
            "The server's Python is not on the host any more. Run `pulumi refresh` so that the Python "
            "environment is seen gone, then `pulumi up` installs it again.",
        ),
    ),
    (
        re.compile(r"[Aa]ddress already in use"),
        Failure(
            "port_in_use",
            "Another process holds the server's port on the host. Stop it, "
            "or set server.port to a free port.",
        ),
    ),
)


def classify_failure(log_text: str) -> Failure:
    """The class and the fix of a failed start, from the server's log."""
    for pattern, failure in _FAILURES:
        if pattern.search(log_text):
            return failure
    return Failure("other", "Read the log lines above; fix the cause and run `pulumi up` again.")


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
        raise start_failure(conn, spec, "exited", log_tail(conn, spec.log_path))
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
        raise start_failure(conn, spec, verdict.strip(), tail_text)


def log_tail(conn: Connection, log_path: str) -> str:
    """The last lines of a server log on the host (empty when there is none)."""
    return _server(conn, "log-tail", {"log": HostPath(log_path), "tail_lines": LOG_TAIL_LINES}, timeout_s=30)


def _shorten_lines(text: str) -> str:
    return "\n".join(
        line
        if len(line) <= _LOG_LINE_CHARS
        else f"{line[:_LOG_LINE_CHARS]} [... {len(line) - _LOG_LINE_CHARS} more characters]"
        for line in text.rstrip().splitlines()
    )


def _failure_message(summary: str, log_path: str, tail_text: str, fix: str) -> str:
    """A server's failure as the user reads it: what happened and its class, the log's last lines,
    the fix. Start failures and failures while serving share it."""
    lines = _shorten_lines(tail_text) or "(the log is empty)"
    return f"{summary} Last log lines of {log_path}:\n{lines}\n{fix}"


def start_failure(conn: Connection, spec: Launch, verdict: str, tail_text: str) -> ServerError:
    """The error of a start that did not reach ready: how it ended, its class, the log, the fix."""
    failure = classify_failure(tail_text)
    fix = failure.fix
    if verdict == "timeout":
        why = f"was not ready within {spec.ready_timeout_s:g} s and was stopped"
        if failure.kind == "other":
            fix = (
                "If the log shows it still loading, raise launch.ready_timeout_s; if it stopped making "
                "progress, fix what its last lines name and run `pulumi up` again."
            )
    else:
        why = "exited before it became ready" if verdict == "exited" else "could not be checked"
    summary = f"SGLang on {conn.label} {why} ({failure.kind})."
    return ServerError(
        _failure_message(summary, spec.log_path, tail_text, fix), cause=failure.kind, summary=summary
    )


@dataclass(frozen=True)
class ServerState:
    """How a server that was ready is now, with its log's last lines."""

    health: Health
    log_tail: str


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


def serving_failure(
    conn: Connection, state: ServerState, *, log_path: str, stack: str, answered_errors: str = ""
) -> ServingError | None:
    """The server's own failure during a benchmark, from its state after it, or None when it serves
    as it should (then any failed requests were the benchmark's own fault). ``answered_errors``
    names the requests the server answered with an error status, event or abort, if any."""
    kind: ServingFailureClass
    if state.health == "exited":
        found = classify_failure(state.log_tail)
        kind = "crash"
        if found.kind in ("out_of_memory", "nccl"):  # a cause its log makes recognisable
            kind = "out_of_memory" if found.kind == "out_of_memory" else "nccl"
        why = "exited while it was being benchmarked"
        cause = found.fix if kind != "crash" else "Its last log lines above say why; fix that."
        fix = f"{cause} `pulumi up -s {stack}` then relaunches it (its refresh finds it gone)."
    elif state.health == "unresponsive":
        kind = "hang"
        why = "still runs but stopped answering during the benchmark (its health check got no answer)"
        fix = (
            f"Its last log lines above show where it stopped. `pulumi destroy -s {stack}` stops it; "
            f"`pulumi up -s {stack}` then launches it anew."
        )
    elif state.health == "unhealthy" or answered_errors:
        kind = "error_responses"
        why = (
            f"answered {answered_errors} with errors during the benchmark"
            if answered_errors
            else "answers its health check with an error since the benchmark"
        )
        fix = (
            "Its last log lines above say why it failed those requests; fix that, and run "
            f"`pulumi up -s {stack}` to measure it again (nothing was recorded)."
        )
    else:
        return None
    summary = f"SGLang on {conn.label} {why} ({kind})."
    return ServingError(
        _failure_message(summary, log_path, state.log_tail, fix), cause=kind, stack=stack, summary=summary
    )


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
