"""Why a server failed, read from its log and its state: each failure class recognised with its
fix, and a failure while serving told with its class, its log's last lines and what to run."""

from __future__ import annotations

import pytest

from sglang_stacks.errors import ServingError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.server_failure import Health, ServerState, classify_failure, serving_failure

SGLANG_HINTS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
)


@pytest.mark.parametrize(
    ("log", "kind", "fix_names"),
    [
        ("launch_server.py: error: unrecognized arguments: --bogus", "bad_flag", "sglang_release"),
        (
            "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs, --cuda-graph-max-bs-decode",
            "bad_flag",
            "sglang_release",
        ),
        ("error: argument --tp-size: invalid int value: 'eight'", "bad_flag", "sglang_release"),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "out_of_memory",
            "mem_fraction_static",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory", "memory"),
        (
            "Exception: Capture cuda graph failed: NCCL error in: all_reduce, invalid usage\n" + SGLANG_HINTS,
            "nccl",
            "NCCL_ALGO",
        ),
        (
            "Exception: Capture cuda graph failed: RuntimeError: FlashInfer JIT failed to build "
            "trtllm_allreduce_fusion: compute capability 12.0 (sm_120) is not supported\n" + SGLANG_HINTS,
            "unsupported_gpu",
            "Remove the flag",
        ),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
            "address already in use",
            "port_in_use",
            "server.port",
        ),
        (
            "nohup: failed to run command '/opt/venv/bin/python': No such file or directory",
            "python_missing",
            "refresh",
        ),
        ("Received sigquit from a child process. It usually means the child failed.", "other", "log lines"),
        (
            "[TP0] Scheduler hit an exception: torch.distributed.DistBackendError: NCCL error in: x, remote "
            "process exited or there was a network error\nncclRemoteError: A call failed possibly due to a "
            "network error or a remote process exiting prematurely.",
            "nccl",
            "Another node of this multi-node server",
        ),
        (
            "torch.distributed.DistStoreError: Timed out after 600 seconds waiting for clients. 1/2 clients "
            "joined",
            "nccl",
            "fleet.dist_init_port",
        ),
    ],
)
def test_failures_are_classified_with_a_fix(log: str, kind: str, fix_names: str) -> None:
    failure = classify_failure(f"[2026-01-01 00:00:00] loading\n{log}\n")

    assert failure.kind == kind
    assert fix_names in failure.fix


SGLANG_CRASH_LOG = (
    "[2026-11-30 20:18:02 TP0] Prefill batch. #new-seq: 1, #new-token: 32\n"
    "[2026-11-30 20:18:03 TP0] Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory "
    "access was encountered\n"
    "Received sigquit from a child process. It usually means the child failed.\n"
)


@pytest.mark.parametrize(
    ("health", "log", "answered", "kind", "said"),
    [
        ("exited", SGLANG_CRASH_LOG, "", "crash", "exited while it was being benchmarked (crash)"),
        (
            "exited",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
            "",
            "out_of_memory",
            "exited while it was being benchmarked (out_of_memory)",
        ),
        (
            "unresponsive",
            "[TP0] Decode batch. #running-req: 1\n",
            "",
            "hang",
            "still runs but stopped answering during the benchmark",
        ),
        (
            "healthy",
            "",
            "2 of 3 measured requests at concurrency 1 (first: HTTP 503: busy)",
            "error_responses",
            "answered 2 of 3 measured requests at concurrency 1 (first: HTTP 503: busy) with errors",
        ),
        ("unhealthy", "", "", "error_responses", "answers its health check with an error"),
    ],
)
def test_a_server_that_fails_while_benchmarked_is_named_with_its_class_log_and_fix(
    health: Health, log: str, answered: str, kind: str, said: str
) -> None:
    failure = serving_failure(
        Connection.local(),
        ServerState(health, log),
        log_path="~/.sglang-stacks/logs/baseline-1.log",
        stack="baseline",
        answered_errors=answered,
    )

    assert isinstance(failure, ServingError) and failure.cause == kind
    message = failure.message
    assert message.startswith(f"SGLang on the local host {said}"), message
    assert "Last log lines of ~/.sglang-stacks/logs/baseline-1.log:" in message
    assert (log.strip().splitlines()[-1] if log else "(the log is empty)") in message
    assert "`pulumi up -s baseline`" in message or "`pulumi destroy -s baseline`" in message


def test_a_server_that_serves_on_is_no_failure_of_its_own() -> None:
    # Requests failed on the way (the client, the connection): the benchmark's fault, not the server's.
    healthy = ServerState("healthy", "[TP0] Decode batch. #running-req: 1\n")
    assert serving_failure(Connection.local(), healthy, log_path="x.log", stack="baseline") is None
