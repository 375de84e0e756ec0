"""Whose failure a failed benchmark is: the measured server, asked how it is, is named when it
exited, hangs or answered with errors (`hostops.server_failure`'s ServingError); the benchmark's
own faults (its client, its connection) stay BenchmarkErrors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sglang_stacks.components._benchmark_run import run_on_host
from sglang_stacks.errors import BenchmarkError, ServingError, StacksError
from sglang_stacks.hostops import process
from sglang_stacks.hostops.server_failure import FailureContext, ServerState, serving_failure
from sglang_stacks.resources.benchmark_shape import BenchmarkInputs

if TYPE_CHECKING:
    from sglang_loadgen.document import Document, Level


def measured_document(inputs: BenchmarkInputs) -> Document:
    """The load generator's document, once every measured request succeeded; the server's failure
    (ServingError) or the benchmark's own (BenchmarkError, HostError) otherwise."""
    try:
        document = run_on_host(inputs)
    except StacksError:
        failure = _server_failure(inputs, _server_state(inputs))
        if failure is None:
            raise
        # The benchmark's error (a connection reset, no request answered) is what the server's
        # failure caused: the server's log says why.
        raise failure from None
    failed = [level for level in document.levels if level.errors]
    if failed:
        answered = "; ".join(
            f"{level.answered_by_the_server} of {level.requests} measured requests at {level.name} "
            f"(first: {level.error_samples[0]})"
            for level in failed
            if level.answered_by_the_server
        )
        state = _server_state(inputs)
        raise _server_failure(inputs, state, answered) or _failed_requests(
            inputs, failed, server_serves=state is not None
        )
    return document


def _failed_requests(
    inputs: BenchmarkInputs, failed: Sequence[Level], *, server_serves: bool
) -> BenchmarkError:
    """The error of a benchmark whose measured requests failed, not by the server's fault as far
    as it can be told (``server_serves``: it was asked, and runs and answers its health check):
    tok/s would count them as no tokens, so nothing is recorded."""
    counts = "; ".join(
        f"{level.errors} of {level.requests} measured requests failed at {level.name} "
        f"(first: {level.error_samples[0]})"
        for level in failed
    )
    stack = inputs.stack
    where = (
        "The server still runs and answers its health check, so they failed on the way (the load "
        "generator or the connection): check the network and the workload's request_timeout_s, then "
        f"run `pulumi up -s {stack}` again."
        if server_serves
        else f"If a server died, `pulumi refresh -s {stack}` shows it gone and its log tells why; fix "
        f"that and run `pulumi up -s {stack}` again."
    )
    return BenchmarkError(
        f"The benchmark of stack {stack!r} on {inputs.connection.label} is not a measure of the "
        f"server: {counts}. Nothing was recorded. {where}",
        stack=stack,
    )


def _server_state(inputs: BenchmarkInputs) -> ServerState | None:
    """How the measured server is after a failed benchmark, or None when it cannot be asked (no
    one server behind a router, or a host that does not answer)."""
    server = inputs.server
    if server is None:
        return None
    try:
        return process.server_state(
            inputs.connection,
            process.Running(server.pid, server.start_ticks),
            python=inputs.python,
            port=server.port,
            log_path=server.log_path,
        )
    except StacksError:
        return None  # the host does not answer: the benchmark's own error says what happened


def _server_failure(
    inputs: BenchmarkInputs, state: ServerState | None, answered_errors: str = ""
) -> ServingError | None:
    """The measured server's own failure, or None when it serves as it should (or was not asked)."""
    server = inputs.server
    if state is None or server is None:
        return None
    context = FailureContext(stack=inputs.stack, port=server.port, env=server.env, memory=server.memory)
    return serving_failure(
        inputs.connection,
        state,
        log_path=server.log_path,
        stack=inputs.stack,
        answered_errors=answered_errors,
        context=context,
    )
