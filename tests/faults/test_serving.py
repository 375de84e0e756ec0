"""Requests that fail on the way while the server serves on stay the benchmark's own fault. The
server's own failures while benchmarked (a crash, a hang, errors it answers) are drilled with
every other emulator fault in tests/faults/test_failures.py."""

from __future__ import annotations

import pytest

from sglang_stacks.errors import BenchmarkError, failure_from_output
from tests.faults.drill import Drill

pytestmark = pytest.mark.integration


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
