"""Every fault the emulator offers, driven through `pulumi up`: the update names the failure with its
class, the server log's last lines and a fix that names a value other than the one already set.

One stack serves every case: each sets its own faults and settings, and the next `up` replaces
what the last one left (its environment, probe and claim stay), so the cases cost a launch each.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime

import pytest

from sglang_emulator.faults import FAULT_NAMES
from sglang_stacks.errors import (
    FAILURE_TAG,
    RECORDS_ENV,
    ServerError,
    ServingError,
    StacksError,
    failure_from_output,
)
from sglang_stacks.results.outputs import DeploymentOutputs
from tests.faults.drill import Drill, servers, stack_config

pytestmark = pytest.mark.integration

STACK = "faulty"
# The warmup request and three measured ones (about 0.5 s each on the emulator).
BENCHMARK = (
    "  sglang-stacks:benchmark:\n    input_len: 32\n    output_len: 48\n    warmup_requests: 1\n"
    "    repetitions: 3\n    requests_per_repetition: 1\n    request_timeout_s: 2\n"
)


@dataclass(frozen=True)
class Case:
    """A fault (YAML lines under ``faults:``) and what the update then says."""

    faults: str
    error: type[StacksError]
    cause: str
    summary: str
    fix: str
    server: str = "    cuda_graph_max_bs: 128\n"
    ready_timeout_s: int = 120


CASES = {
    "crash right after ready": Case(
        "        crash_after_s: 0\n",
        ServerError,
        "nccl",
        "exited right after it became ready (nccl).",
        "NCCL aborted the communicator. Set NCCL_DEBUG=INFO in environment.env",
    ),
    # The crash lands on the benchmark's first measured request (the warmup is request 1), an
    # event of the server's own: a clock would let a loaded machine crash it before the benchmark.
    "crash during the benchmark": Case(
        "        crash_at_request: 2\n",
        ServingError,
        "nccl",
        "exited while it was being benchmarked (nccl).",
        "NCCL aborted the communicator. Set NCCL_DEBUG=INFO in environment.env",
    ),
    "crash after requests": Case(
        "        crash_after_requests: 2\n",
        ServingError,
        "crash",
        "exited while it was being benchmarked (crash).",
        "Set CUDA_LAUNCH_BLOCKING=1 in environment.env so the log names the kernel",
    ),
    "hang after requests": Case(
        "        hang_after_requests: 2\n",
        ServingError,
        "hang",
        "still runs but stopped answering during the benchmark (its health check got no answer) (hang).",
        f"`pulumi destroy -s {STACK}` stops it",
    ),
    # The update's own clock stops these two: the server must reach the phase first. On a loaded
    # machine the emulator takes about 3 s to reach its weights, so the clock gives it 10.
    "hang while loading the weights": Case(
        "        hang_at_phase: weights\n",
        ServerError,
        "start_timeout",
        "was not ready within 10 s and was stopped, while loading the weights (start_timeout).",
        "raise launch.ready_timeout_s from 10 to 20",
        ready_timeout_s=10,
    ),
    "slow readiness past the timeout": Case(
        "        slow_readiness_s: 600\n",
        ServerError,
        "start_timeout",
        "was not ready within 10 s and was stopped, while warming up",
        "raise launch.ready_timeout_s from 10 to 20",
        ready_timeout_s=10,
    ),
    "an error burst of some requests": Case(
        "        error_burst:\n          after_requests: 1\n          count: 2\n          status: 503\n",
        ServingError,
        "error_responses",
        "answered 2 of 3 measured requests at concurrency 1 (first: HTTP 503",
        "say why it failed those requests",
    ),
    "an error burst of every request": Case(
        "        error_burst:\n          after_requests: 1\n          count: 10\n          status: 503\n",
        ServingError,
        "error_responses",
        "answered 3 of 3 measured requests at concurrency 1 (first: HTTP 503",
        "say why it failed those requests",
    ),
    "port in use": Case(
        "        port_in_use: true\n",
        ServerError,
        "port_in_use",
        "exited before it became ready (port_in_use).",
        "set server.port to a port other than {port}",
    ),
    # The seeds' case: at 0.77, the smallest fraction the plan says fits, another process holding
    # 2 GiB of each GPU leaves the KV pool nothing. The fix names another fraction, from the plan
    # for this release, never the 0.77 already set.
    "out of memory at the plan's smallest fraction": Case(
        "        gpu_memory_held_mib: 2048\n",
        ServerError,
        "out_of_memory",
        "exited before it became ready (out_of_memory).",
        "Raise server.mem_fraction_static from 0.77 to 0.86: SGLang 0.5.8's memory plan counts 0.77",
        server="    cuda_graph_max_bs: 128\n    mem_fraction_static: 0.77\n",
    ),
}


@pytest.fixture(scope="module")
def port(drill: Drill) -> int:
    """The port of the one stack every case updates."""
    return drill.add_stack(STACK)


def configure(drill: Drill, port: int, case: Case, benchmark: str = BENCHMARK) -> None:
    """Rewrites the stack's config for ``case``; the stack itself (and its state) stays."""
    config = stack_config(port, drill.state, benchmark=benchmark, faults=case.faults, server=case.server)
    config = config.replace("    ready_timeout_s: 120\n", f"    ready_timeout_s: {case.ready_timeout_s}\n")
    path = drill.workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"
    header = path.read_text().split("config:\n", 1)[0]
    path.write_text(header + config)


def test_every_fault_the_emulator_offers_is_drilled() -> None:
    drilled = {line.strip().split(":")[0] for case in CASES.values() for line in case.faults.splitlines()[:1]}
    assert drilled - {""} == set(FAULT_NAMES)


@pytest.mark.parametrize("name", list(CASES))
def test_a_failure_is_named_with_its_class_its_log_and_a_fix(drill: Drill, port: int, name: str) -> None:
    case = CASES[name]
    configure(drill, port, case)

    result = drill.up(STACK, check=False)

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    error = failure_from_output(output)
    assert type(error) is case.error and error.cause == case.cause, output
    assert f"SGLang on the local host {case.summary}" in output, output
    assert f"Last log lines of {drill.host_state}/logs/{STACK}-" in output, output
    assert case.fix.format(port=port) in output, output
    assert "(other)" not in output
    # An operator reads what failed in words, once: no Python class, no engine echo of it.
    assert f"{case.error.__name__}:" not in output and "sglang_stacks." not in output, output
    assert f"error: {case.cause.replace('_', ' ')} failure:" in output, output
    assert "Resource monitor has terminated" not in output, output
    if case.cause == "hang":
        # The hung server runs on until `pulumi destroy` stops it, as the fix says.
        assert servers(port), "the hung server is still running until it is destroyed"
        drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK)
        assert servers(port) == []


def test_a_bare_pulumi_up_says_the_failure_in_words_without_the_drivers_record(
    drill: Drill, port: int
) -> None:
    """An operator's own `pulumi up` (no driver asked for records): the failure in words and its fix,
    no JSON record naming a Python class after it."""
    case = CASES["port in use"]
    configure(drill, port, case)
    drill.workspace.extra_env[RECORDS_ENV] = ""
    try:
        result = drill.up(STACK, check=False)
    finally:
        del drill.workspace.extra_env[RECORDS_ENV]

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "error: port in use failure:" in output and case.fix.format(port=port) in output, output
    assert FAILURE_TAG not in output and failure_from_output(output) is None, output
    assert "ServerError" not in output and "sglang_stacks." not in output, output


def test_a_hang_at_the_default_request_timeout_is_named_within_a_minute(drill: Drill, port: int) -> None:
    """Each request may take 600 s by default: waiting for the hung requests' timeouts one after
    another kept `pulumi up` busy for 1,232 s while the server's health said within seconds that it
    hung. The benchmark watches that health and stops on it."""
    case = CASES["hang after requests"]
    configure(drill, port, case, benchmark=BENCHMARK.replace("    request_timeout_s: 2\n", ""))
    started = time.monotonic()

    result = drill.up(STACK, check=False)

    output = result.stdout + result.stderr
    ended_s = time.time()
    error = failure_from_output(output)
    assert type(error) is ServingError and error.cause == "hang", output
    assert time.monotonic() - started < 600  # not even one request's timeout was waited out
    # The server's log, in the failure's last lines: its health check turned bad (SGLang's own line),
    # and the update named the hang within a minute of that.
    failed_checks = re.findall(r"\[([0-9-]+ [0-9:]+)\] Health check failed", output)
    assert failed_checks, output
    turned_bad_s = datetime.strptime(failed_checks[0], "%Y-%m-%d %H:%M:%S").timestamp()
    assert ended_s - turned_bad_s < 60, (failed_checks, output)
    drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK)
    assert servers(port) == []


def test_memory_another_process_holds_is_named_before_launch_and_the_printed_fix_serves(
    drill: Drill, port: int
) -> None:
    """Another process holds 2 GiB of each GPU, more than the KV cache the plan leaves at 0.77: the
    update names it by pid before launching anything (no minutes of weight loading to learn it), and
    the fraction it prints serves beside that process."""
    at_smallest = Case(
        "",
        ServerError,
        "gpu_memory_held",
        "",
        "",
        server=CASES["out of memory at the plan's smallest fraction"].server,
    )
    configure(drill, port, at_smallest)
    holder = subprocess.Popen(
        [sys.executable, "-m", "sglang_emulator.hold", "--mib", "2048", "--gpus", "0,1,2,3,4,5,6,7"],
        env={**os.environ, "SGLANG_EMULATOR_STATE_DIR": str(drill.state / "gpus")},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == f"holding {holder.pid}\n"

        result = drill.up(STACK, check=False)

        output = result.stdout + result.stderr
        error = failure_from_output(output)
        assert type(error) is ServerError and error.cause == "gpu_memory_held", output
        assert "not free; nothing was launched" in output, output
        assert f"pid {holder.pid} (python3) holds up to 2048 MiB on GPU 0, 1, 2, 3, 4, 5, 6, 7" in output
        assert f"`kill {holder.pid}` there" in output, output
        assert servers(port) == []
        fix = re.search(
            r"raise server\.mem_fraction_static from 0\.77 to (0\.\d\d) to serve beside it", output
        )
        assert fix, output

        server = f"    cuda_graph_max_bs: 128\n    mem_fraction_static: {fix[1]}\n"
        configure(drill, port, Case("", ServerError, "", "", "", server=server))
        served = drill.up(STACK, check=False)

        assert served.returncode == 0, served.stdout + served.stderr
        assert servers(port)
    finally:
        holder.terminate()
        holder.wait(timeout=30)
    drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK)


def test_an_up_prints_a_summary_that_ends_with_tok_s(drill: Drill) -> None:
    """The outputs a successful update prints: a screen of figures, none unknown, the preflight's
    notes and the whole memory plan left to `render`, and tok/s last, just above the resource
    counts; read back, they are the benchmark's whole result."""
    drill.add_stack("summary")

    printed = drill.up("summary").stdout

    outputs = printed.split("\nOutputs:\n", 1)[1].split("\nResources:", 1)[0].strip().splitlines()
    assert outputs[-1].split()[:2] == ["tok_s", ":"], outputs
    assert not [line for line in outputs if "<null>" in line], outputs
    sizes = [line for line in outputs if "captured_batch_sizes" in line]
    assert len(sizes) == 1 and sizes[0].split(":", 1)[1].strip().startswith('"1 2 4 8'), outputs
    assert "memory-plan" not in printed  # the plan's note, in full, is `sglang-stacks render`'s
    # The summary fits a screen: a latency's percentiles on one line, no second copy of the only
    # level, the memory plan's headline (146 lines of outputs before, 48 measured with this).
    ttft = [line for line in outputs if line.split(":")[0].strip() == "ttft_ms"]
    assert len(ttft) == 1 and ttft[0].split(":", 1)[1].strip().startswith('"p50 '), outputs
    assert not [line for line in outputs if line.startswith("    benchmark_levels")], outputs
    assert len(outputs) <= 50, outputs
    read = DeploymentOutputs.model_validate(drill.workspace.outputs("summary"))
    assert read.benchmark.ttft_ms is not None and read.benchmark.ttft_ms.p50 > 0
    assert read.levels == [read.benchmark] and read.benchmark.tok_s_mean == read.tok_s
    assert read.memory_plan is not None and read.memory_plan.verdict == "fits"
    drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", "summary")
