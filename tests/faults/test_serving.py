"""A server that fails while it is benchmarked: the update names the server's failure (its class,
its log's last lines, the fix) in the form of a failed start, not a fault of the benchmark."""

from __future__ import annotations

import pytest

from sglang_stacks.errors import BenchmarkError, ServingError, failure_from_output
from tests.faults.drill import Drill, servers

pytestmark = pytest.mark.integration


def failed_up(drill: Drill, stack: str) -> tuple[str, ServingError]:
    """The output of a failing `pulumi up` of ``stack``, and the error its record carries."""
    result = drill.up(stack, check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    error = failure_from_output(output)
    assert isinstance(error, ServingError), output
    return output, error


def test_a_server_that_crashes_during_the_benchmark_is_named_with_its_log(drill: Drill) -> None:
    drill.add_stack("crashes", faults="        crash_after_requests: 2\n")

    output, error = failed_up(drill, "crashes")

    assert error.cause == "crash"
    assert "SGLang on the local host exited while it was being benchmarked (crash)." in output
    assert f"Last log lines of {drill.host_state}/logs/crashes-" in output
    # SGLang's own last words, as the log ends.
    assert "Scheduler hit an exception" in output
    assert "Received sigquit from a child process" in output
    assert "`pulumi up -s crashes` then relaunches it" in output


def test_a_server_that_hangs_during_the_benchmark_is_named_and_destroy_stops_it(drill: Drill) -> None:
    # Two requests finish (the warmup and the first measured one), then the server's scheduler
    # stops; the load generator gives up on the next request after 2 s.
    benchmark = (
        "  sglang-stacks:benchmark:\n    input_len: 32\n    output_len: 16\n    warmup_requests: 1\n"
        "    repetitions: 2\n    requests_per_repetition: 1\n    request_timeout_s: 2\n"
    )
    port = drill.add_stack("hangs", benchmark=benchmark, faults="        hang_after_requests: 2\n")

    output, error = failed_up(drill, "hangs")

    assert error.cause == "hang"
    assert (
        "SGLang on the local host still runs but stopped answering during the benchmark (its health "
        "check got no answer) (hang)." in output
    )
    assert f"Last log lines of {drill.host_state}/logs/hangs-" in output
    assert "sglang-emulator injected fault: hang_after_requests=2" in output
    assert "`pulumi destroy -s hangs` stops it" in output
    assert servers(port), "the hung server is still running until it is destroyed"

    drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", "hangs")

    assert servers(port) == []


def test_a_burst_of_errors_during_the_benchmark_is_the_servers_failure(drill: Drill) -> None:
    burst = "        error_burst:\n          after_requests: 1\n          count: 2\n          status: 503\n"
    drill.add_stack("answers-errors", faults=burst)

    output, error = failed_up(drill, "answers-errors")

    assert error.cause == "error_responses"
    assert (
        "SGLang on the local host answered 2 of 3 measured requests at concurrency 1 (first: HTTP 503"
        in output
    )
    assert f"Last log lines of {drill.host_state}/logs/answers-errors-" in output
    assert "injected fault: error burst" in output


def test_requests_that_fail_on_the_way_stay_the_benchmarks_own_fault(drill: Drill) -> None:
    # Every request outlives its time limit while the server serves on: the load generator's own
    # fault, never blamed on the server.
    timeout = "  sglang-stacks:benchmark:\n    output_len: 160\n    request_timeout_s: 0.5\n"
    drill.add_stack("impatient", benchmark=timeout + "    warmup_requests: 0\n    repetitions: 1\n")

    result = drill.up("impatient", check=False)
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    error = failure_from_output(output)
    assert type(error) is BenchmarkError, output
    assert "TimeoutError" in output and "SGLang on the local host" not in output, output
