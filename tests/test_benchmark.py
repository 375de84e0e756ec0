"""The benchmark's diff: what runs it again, and what a preview may announce."""

from __future__ import annotations

from pulumi.runtime import rpc

from sglang_stacks.components.benchmark import _BenchmarkProvider

OLDS = {"server_instance": "abc", "workload": {"concurrency": [1]}, "url": "http://h:1", "python": "/v/py"}


def test_a_preview_that_cannot_know_the_python_yet_announces_no_new_benchmark() -> None:
    # After an in-place environment update (new emulator code) the python is unknown in a
    # preview; it mostly stays the same, so announcing a rerun would overstate the GPU time.
    found = _BenchmarkProvider().diff("id", OLDS, {**OLDS, "python": rpc.UNKNOWN})

    assert found.changes and found.replaces == []


def test_a_new_server_or_python_runs_the_benchmark_again() -> None:
    provider = _BenchmarkProvider()

    assert provider.diff("id", OLDS, {**OLDS, "server_instance": rpc.UNKNOWN}).replaces == ["server_instance"]
    assert provider.diff("id", OLDS, {**OLDS, "python": "/w/python"}).replaces == ["python"]
    assert not provider.diff("id", OLDS, dict(OLDS)).changes
