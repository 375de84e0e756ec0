"""Why a server failed, read from its log and its state: each failure class recognised with its
fix, and a failure while serving told with its class, its log's last lines and what to run."""

from __future__ import annotations

import pytest

from sglang_stacks.config.memory_advice import MemoryAdvice
from sglang_stacks.errors import ServingError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.server_failure import (
    FailureContext,
    Health,
    ServerState,
    classify_failure,
    serving_failure,
    start_failure,
)

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
            "Set NCCL_DEBUG=INFO in environment.env",
        ),
        (
            "[TP0] Scheduler hit an exception: RuntimeError: NCCL communicator was aborted on rank 0",
            "nccl",
            "NCCL aborted the communicator. Set NCCL_DEBUG=INFO",
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
        ("Received sigquit from a child process. It usually means the child failed.", "crash", "log lines"),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "crash",
            "CUDA_LAUNCH_BLOCKING=1",
        ),
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


def plan(
    fraction: float | None,
    smallest: float | None = 0.77,
    largest: float | None = 0.93,
    gpu_count: int | None = None,
) -> MemoryAdvice:
    """The memory plan of the campaign's host (Kimi-K2.5 INT4 at TP 8) at ``fraction``."""
    return MemoryAdvice(
        release="0.5.8",
        mem_fraction_static=fraction,
        fraction_in_effect=fraction if fraction is not None else 0.856,
        smallest_fitting_fraction=smallest,
        largest_fitting_fraction=largest,
        weights_gb=72.33,
        total_gb=95.59,
        rest_needed_gb=5.75,
        cuda_graph_max_bs=128,
        tp_size=8,
        gpu_count=gpu_count,
    )


NOT_ENOUGH = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
GRAPH_OOM = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 0.50 GiB\n" + SGLANG_HINTS
)
WEIGHTS_OOM = (
    "Load weight begin. avail mem=94.00 GB\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
)


@pytest.mark.parametrize(
    ("log", "context", "fix"),
    [
        # The plan counts 0.77 as the smallest fraction that fits, and the server still ran out: the fix
        # names a fraction between the plan's smallest and largest, never the one set.
        (
            NOT_ENOUGH,
            FailureContext(memory=plan(0.77)),
            "Raise server.mem_fraction_static from 0.77 to 0.85:",
        ),
        (
            NOT_ENOUGH,
            FailureContext(memory=plan(0.7)),
            "Raise server.mem_fraction_static from 0.7 to 0.77, the",
        ),
        (
            NOT_ENOUGH,
            FailureContext(memory=plan(None, smallest=0.9)),
            "Raise server.mem_fraction_static from unset (SGLang 0.5.8 chose 0.856) to 0.90",
        ),
        (
            NOT_ENOUGH,
            FailureContext(memory=plan(0.93)),
            "No larger mem_fraction_static fits: SGLang 0.5.8's memory plan puts the fractions that fit "
            "between 0.77 and 0.93",
        ),
        (
            NOT_ENOUGH,
            FailureContext(memory=plan(0.8, smallest=None, largest=None)),
            "No mem_fraction_static fits: SGLang 0.5.8's memory plan needs the static pool to hold 72.33 GB",
        ),
        (GRAPH_OOM, FailureContext(memory=plan(0.95)), "Lower server.mem_fraction_static from 0.95 to 0.93"),
        (GRAPH_OOM, FailureContext(memory=plan(0.88)), "Lower server.cuda_graph_max_bs from 128 to 64"),
        (WEIGHTS_OOM, FailureContext(memory=plan(0.88)), "or raise server.tp_size from 8 to 16"),
        # On the campaign's 8-GPU host preflight refuses tp_size 16: the fix is more GPUs, not the flag.
        (
            WEIGHTS_OOM,
            FailureContext(memory=plan(0.88, gpu_count=8)),
            "or split the model over more GPUs than this host's 8 (tp_size 16 needs a host",
        ),
        (
            NOT_ENOUGH,
            FailureContext(memory=plan(0.93, gpu_count=8)),
            "or split the model over more GPUs than this host's 8",
        ),
        # The fraction SGLang chose, as the server itself reported it, over the plan's count of it.
        (
            "server_args=ServerArgs(tp_size=8, mem_fraction_static=0.7787, cuda_graph_max_bs=128)\n"
            + NOT_ENOUGH,
            FailureContext(memory=plan(None, smallest=0.9)),
            "Raise server.mem_fraction_static from unset (SGLang 0.5.8 chose 0.779) to 0.90",
        ),
        (
            "server_args=ServerArgs(tp_size=8, mem_fraction_static=0.88)\n" + NOT_ENOUGH,
            FailureContext(memory=plan(0.77)),
            "Raise server.mem_fraction_static from 0.77 to 0.85:",  # a fraction the stack set is its own
        ),
        (
            "NCCL WARN ... ncclInvalidUsage: NCCL_ALGO=Tree cannot be captured in a CUDA graph",
            FailureContext(env={"NCCL_ALGO": "Tree"}),
            "Remove NCCL_ALGO=Tree from environment.env (or set it to Ring)",
        ),
        (
            "RuntimeError: NCCL communicator was aborted on rank 0",
            FailureContext(env={"NCCL_DEBUG": "INFO"}),
            "NCCL_DEBUG is INFO already: the NCCL lines above the error name the rank",
        ),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address: address already in use",
            FailureContext(port=30000),
            "set server.port to a port other than 30000",
        ),
    ],
)
def test_a_fix_names_a_value_other_than_the_one_set(log: str, context: FailureContext, fix: str) -> None:
    assert fix in classify_failure(log, context).fix


def test_a_start_stopped_at_its_timeout_says_where_and_names_a_longer_one() -> None:
    log = "[TP0] Load weight begin. avail mem=94.00 GB\nsglang-emulator: injected fault: hanging\n"

    error = start_failure(Connection.local(), "timeout", log, log_path="x.log", ready_timeout_s=30)

    assert error.cause == "start_timeout"
    assert error.summary == (
        "SGLang on the local host was not ready within 30 s and was stopped, while loading the weights "
        "(start_timeout)."
    )
    assert "raise launch.ready_timeout_s from 30 to 60" in error.message


def test_a_crash_right_after_ready_is_not_called_a_failed_start() -> None:
    log = (
        "The server is fired up and ready to roll!\n"
        "[TP0] Scheduler hit an exception: RuntimeError: NCCL communicator was aborted on rank 0\n"
    )

    error = start_failure(Connection.local(), "exited", log, log_path="x.log", ready_timeout_s=30)

    assert (error.cause, error.summary) == (
        "nccl",
        "SGLang on the local host exited right after it became ready (nccl).",
    )


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
