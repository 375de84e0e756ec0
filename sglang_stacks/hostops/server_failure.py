"""Why an SGLang server failed, read from its log and its state: the class of a failed start or of
a failure while serving, and the message a user acts on (how it ended, its log's last lines, the
fix; the fix itself is `hostops.failure_fixes`'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sglang_stacks.errors import Cause, ServerError, ServingError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.failure_fixes import (
    FailureContext,
    LogCause,
    became_ready,
    fix_for,
    recognise,
    stopped_while,
)

__all__ = [
    "Failure",
    "FailureContext",
    "Health",
    "ServerState",
    "classify_failure",
    "serving_failure",
    "start_failure",
]

Health = Literal["exited", "healthy", "unhealthy", "unresponsive"]
"""How a server process is now: gone, or how it answers its health check (a status other than
200 or a refused connection is ``unhealthy``; no answer within the wait is ``unresponsive``)."""

# SGLang's first log line lists every server argument; error messages keep the start of such lines.
_LOG_LINE_CHARS = 400


_CAUSES: dict[LogCause, Cause] = {
    "bad_flag": Cause.BAD_FLAG,
    "nccl_peer": Cause.NCCL,
    "nccl_rendezvous": Cause.NCCL,
    "nccl_algo": Cause.NCCL,
    "nccl_abort": Cause.NCCL,
    "nccl": Cause.NCCL,
    "unsupported_gpu": Cause.UNSUPPORTED_GPU,
    "oom_kv_cache": Cause.OUT_OF_MEMORY,
    "oom_cuda_graph": Cause.OUT_OF_MEMORY,
    "oom_weights": Cause.OUT_OF_MEMORY,
    "oom": Cause.OUT_OF_MEMORY,
    "illegal_memory_access": Cause.CRASH,
    "python_missing": Cause.PYTHON_MISSING,
    "port_in_use": Cause.PORT_IN_USE,
}
"""The `Cause` users see of each cause a log names."""


def _cause_of(found: LogCause | None) -> Cause | None:
    return None if found is None else _CAUSES[found]


@dataclass(frozen=True)
class Failure:
    """Why a server stopped, in the terms a user acts on."""

    kind: Cause
    """Why it stopped: the cause its log names, else how it ended."""
    fix: str


def classify_failure(log_text: str, context: FailureContext | None = None) -> Failure:
    """The class and the fix of a server that exited, from its log (``crash`` when it names no
    cause this tool knows); ``context`` gives the settings the fix names values against."""
    cause = recognise(log_text)
    return Failure(_cause_of(cause) or Cause.CRASH, fix_for(cause, log_text, context or FailureContext()))


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


def _timeout_fix(tail_text: str, ready_timeout_s: float, context: FailureContext) -> str:
    doing = stopped_while(tail_text)
    return (
        f"If its log was still moving, raise launch.ready_timeout_s from {ready_timeout_s:g} to "
        f"{ready_timeout_s * 2:g} (a large model loads for minutes). If its last line had not changed "
        f"for long, it hung while {doing}: its last lines above show where; fix that and run `pulumi up "
        f"-s {context.stack}` again."
    )


def start_failure(
    conn: Connection,
    verdict: str,
    tail_text: str,
    *,
    log_path: str,
    ready_timeout_s: float,
    context: FailureContext | None = None,
) -> ServerError:
    """The error of a start that did not reach ready: how it ended, its class, the log, the fix."""
    context = context or FailureContext()
    cause = recognise(tail_text)
    found = _cause_of(cause)
    fix = fix_for(cause, tail_text, context)
    kind: Cause
    if verdict == "timeout":
        why = f"was not ready within {ready_timeout_s:g} s and was stopped, while {stopped_while(tail_text)}"
        kind = found or Cause.START_TIMEOUT
        if found is None:
            fix = _timeout_fix(tail_text, ready_timeout_s, context)
    elif verdict == "exited":
        kind = found or Cause.CRASH
        when = "right after" if became_ready(tail_text) else "before"
        why = f"exited {when} it became ready"
    else:
        kind = found or Cause.HOST  # the host program's answer, not the server, is unreadable
        why = "could not be checked (the host program's answer could not be read)"
    summary = f"SGLang on {conn.label} {why} ({kind})."
    return ServerError(_failure_message(summary, log_path, tail_text, fix), cause=kind, summary=summary)


@dataclass(frozen=True)
class ServerState:
    """How a server that was ready is now, with its log's last lines."""

    health: Health
    log_tail: str


def serving_failure(
    conn: Connection,
    state: ServerState,
    *,
    log_path: str,
    stack: str,
    answered_errors: str = "",
    context: FailureContext | None = None,
) -> ServingError | None:
    """The server's own failure during a benchmark, from its state after it, or None when it serves
    as it should (then any failed requests were the benchmark's own fault). ``answered_errors``
    names the requests the server answered with an error status, event or abort, if any."""
    context = context or FailureContext(stack=stack)
    # How a server that was ready failed while serving; a log's recognisable cause names an exit.
    kind: Cause
    if state.health == "exited":
        cause = recognise(state.log_tail)
        found = _cause_of(cause)
        kind = found if found in (Cause.OUT_OF_MEMORY, Cause.NCCL) else Cause.CRASH
        why = "exited while it was being benchmarked"
        relaunch = f"`pulumi up -s {stack}` then relaunches it (its refresh finds it gone)."
        fix = f"{fix_for(cause, state.log_tail, context)} {relaunch}"
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
