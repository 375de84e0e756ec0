"""Why an SGLang server failed, read from its log and its state: the class of a failed start or of
a failure while serving, and the message a user acts on (how it ended, its log's last lines, the fix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sglang_stacks.errors import Cause, ServerError, ServingError
from sglang_stacks.hostops.connection import Connection

Health = Literal["exited", "healthy", "unhealthy", "unresponsive"]
"""How a server process is now: gone, or how it answers its health check (a status other than
200 or a refused connection is ``unhealthy``; no answer within the wait is ``unresponsive``)."""

# SGLang's first log line lists every server argument; error messages keep the start of such lines.
_LOG_LINE_CHARS = 400
_RENDER_HINT = "`sglang-stacks render <stack>`"


@dataclass(frozen=True)
class Failure:
    """Why a server did not become ready, in the terms a user acts on."""

    kind: Cause
    """Why a start failed, named whenever the log makes the cause recognisable; ``other`` when not."""
    fix: str


# Checked in order. SGLang wraps every error during CUDA-graph capture in "Capture cuda graph
# failed", so the specific causes come before the out-of-memory pattern that phrase belongs to.
_FAILURES: tuple[tuple[re.Pattern[str], Failure], ...] = (
    (
        re.compile(r"error: (unrecognized arguments|ambiguous option|argument [^:]+: invalid)"),
        Failure(
            Cause.BAD_FLAG,
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
            Cause.NCCL,
            "Another node of this multi-node server failed or lost the network: read its log on its "
            "host (it names the cause), fix that and run `pulumi up` again; the group is relaunched "
            "together.",
        ),
    ),
    (
        re.compile(r"DistNetworkError|DistStoreError"),
        Failure(
            Cause.NCCL,
            "The nodes of this multi-node server did not meet at the init address: check that every "
            "node reaches rank 0's fleet.hosts[i].node_address on fleet.dist_init_port, that "
            "fleet.socket_ifname names their shared network, and that every node was launched.",
        ),
    ),
    (
        re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|NCCL_ALGO"),
        Failure(
            Cause.NCCL,
            "Check the NCCL settings in environment.env (NCCL_ALGO=Tree cannot run with CUDA graphs) "
            "and keep server.disable_custom_all_reduce on PCIe hosts.",
        ),
    ),
    (
        # Kernels that do not support the GPU: SGLang reports them inside the CUDA-graph capture
        # error, so they are looked for before out-of-memory.
        re.compile(r"FlashInfer JIT failed|torch symmetric memory|not supported on (this GPU|SM)"),
        Failure(
            Cause.UNSUPPORTED_GPU,
            "A kernel this flag selects does not support the host's GPU architecture. Remove the flag "
            f"(preflight knows the SM120 cases: {_RENDER_HINT}).",
        ),
    ),
    (
        re.compile(r"Not enough memory|CUDA out of memory|OutOfMemoryError|Capture cuda graph failed"),
        Failure(
            Cause.OUT_OF_MEMORY,
            "Raise server.mem_fraction_static to at least the smallest fraction the memory plan of "
            f"{_RENDER_HINT} gives, or lower server.cuda_graph_max_bs.",
        ),
    ),
    (
        # nohup's and env's words when the program to run is missing.
        re.compile(r"failed to run command|^env: .*No such file or directory", re.MULTILINE),
        Failure(
            Cause.PYTHON_MISSING,
            "The server's Python is not on the host any more. Run `pulumi refresh` so that the Python "
            "environment is seen gone, then `pulumi up` installs it again.",
        ),
    ),
    (
        re.compile(r"[Aa]ddress already in use"),
        Failure(
            Cause.PORT_IN_USE,
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
    return Failure(Cause.OTHER, "Read the log lines above; fix the cause and run `pulumi up` again.")


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


def start_failure(
    conn: Connection, verdict: str, tail_text: str, *, log_path: str, ready_timeout_s: float
) -> ServerError:
    """The error of a start that did not reach ready: how it ended, its class, the log, the fix."""
    failure = classify_failure(tail_text)
    fix = failure.fix
    if verdict == "timeout":
        why = f"was not ready within {ready_timeout_s:g} s and was stopped"
        if failure.kind is Cause.OTHER:
            fix = (
                "If the log shows it still loading, raise launch.ready_timeout_s; if it stopped making "
                "progress, fix what its last lines name and run `pulumi up` again."
            )
    else:
        why = "exited before it became ready" if verdict == "exited" else "could not be checked"
    summary = f"SGLang on {conn.label} {why} ({failure.kind})."
    return ServerError(
        _failure_message(summary, log_path, tail_text, fix), cause=failure.kind, summary=summary
    )


@dataclass(frozen=True)
class ServerState:
    """How a server that was ready is now, with its log's last lines."""

    health: Health
    log_tail: str


def serving_failure(
    conn: Connection, state: ServerState, *, log_path: str, stack: str, answered_errors: str = ""
) -> ServingError | None:
    """The server's own failure during a benchmark, from its state after it, or None when it serves
    as it should (then any failed requests were the benchmark's own fault). ``answered_errors``
    names the requests the server answered with an error status, event or abort, if any."""
    # How a server that was ready failed while serving; a log's recognisable cause names an exit.
    kind: Cause
    if state.health == "exited":
        found = classify_failure(state.log_tail)
        kind = Cause.CRASH
        if found.kind in (Cause.OUT_OF_MEMORY, Cause.NCCL):  # a cause its log makes recognisable
            kind = found.kind
        why = "exited while it was being benchmarked"
        cause = found.fix if kind is not Cause.CRASH else "Its last log lines above say why; fix that."
        fix = f"{cause} `pulumi up -s {stack}` then relaunches it (its refresh finds it gone)."
    elif state.health == "unresponsive":
        kind = Cause.HANG
        why = "still runs but stopped answering during the benchmark (its health check got no answer)"
        fix = (
            f"Its last log lines above show where it stopped. `pulumi destroy -s {stack}` stops it; "
            f"`pulumi up -s {stack}` then launches it anew."
        )
    elif state.health == "unhealthy" or answered_errors:
        kind = Cause.ERROR_RESPONSES
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
