"""The Benchmark resource's provider: what re-measures (GPU time) and what only re-reads the kept
result, and state written by earlier versions."""

from __future__ import annotations

from typing import Any

from pulumi.output import Unknown

from sglang_stacks.components.benchmark import BenchmarkProvider
from sglang_stacks.config.benchmark_spec import BenchmarkSpec
from sglang_stacks.resources.benchmark_shape import BenchmarkInputs, BenchmarkOutputs

# The workload as the version before the package stored it: its keys, numbers as floats.
OLD_WORKLOAD = {
    "input_len": 32.0,
    "output_len": 48.0,
    "ignore_eos": True,
    "concurrency": [1.0],
    "warmup_requests": 1.0,
    "repetitions": 3.0,
    "requests_per_repetition": 1.0,
    "request_timeout_s": 600.0,
    "timeout_s": 3600.0,
}


def state(**changes: Any) -> dict[str, Any]:
    props = {
        "connection": {"kind": "local"},
        "stack": "baseline",
        "python": "/v/bin/python",
        "url": "http://127.0.0.1:30000",
        "server_instance": "abc",
        "launch_command": "python -m sglang.launch_server",
        "sglang_version": "0.5.8",
        "flags_digest": "0123",
        "workload": OLD_WORKLOAD,
        "gate": None,
        "state_dir": "/s",
        "update_id": "u1",
    }
    return {**props, **changes}


def test_state_of_the_version_before_the_package_validates_with_todays_defaults() -> None:
    inputs = BenchmarkInputs.model_validate(state())

    assert inputs.workload == BenchmarkSpec(
        input_len=32, output_len=48, warmup_requests=1, repetitions=3, requests_per_repetition=1
    )
    assert inputs.gpu_count == 1 and inputs.gpu_hour_price is None


def test_an_unchanged_workload_from_an_earlier_version_does_not_measure_again() -> None:
    news = state(workload=BenchmarkSpec.from_section(OLD_WORKLOAD).settings(), update_id="u2")

    diff = BenchmarkProvider().diff("abc", state(), news)

    assert not diff.changes


def test_a_new_server_or_workload_measures_again_and_a_gate_or_price_only_rereads() -> None:
    provider = BenchmarkProvider()
    olds = state(gpu_hour_price=None, gpu_count=8)  # as today's code stores it

    new_server = provider.diff("abc", olds, state(server_instance="def"))
    new_workload = provider.diff("abc", olds, state(workload={**OLD_WORKLOAD, "output_len": 64}))
    new_gate = provider.diff("abc", olds, state(gate={"baseline_stack": "baseline-bs128"}))
    new_price = provider.diff("abc", olds, state(gpu_hour_price=2.5, gpu_count=8))

    assert new_server.replaces == ["server_instance"]
    assert new_workload.replaces == ["workload"]
    assert new_gate.changes and new_gate.replaces == []
    assert new_price.changes and new_price.replaces == []


def test_a_python_a_preview_cannot_know_yet_does_not_announce_a_new_measurement() -> None:
    diff = BenchmarkProvider().diff("abc", state(), state(python=Unknown()))  # type: ignore[no-untyped-call]

    assert not diff.changes


def test_a_new_python_or_a_server_a_preview_cannot_know_yet_measures_again() -> None:
    provider = BenchmarkProvider()

    assert provider.diff("abc", state(), state(python="/w/bin/python")).replaces == ["python"]
    unknown_server = state(server_instance=Unknown())  # type: ignore[no-untyped-call]
    assert provider.diff("abc", state(), unknown_server).replaces == ["server_instance"]


def test_a_result_of_an_earlier_version_reads_with_the_tok_s_it_was_shown_with() -> None:
    # Earlier versions kept tok/s figures to 0.001 and the first level's tok/s a second time, to
    # 0.01: its stack output. Read today, the result shows that number, and nothing re-measures.
    result = {
        "concurrency": 1,
        "input_len": 32,
        "output_len": 48,
        "repetitions": 3,
        "tok_s_mean": 81.237,
        "tok_s_stdev": 0.112,
        "tok_s_ci95": [80.959, 81.515],
        "tok_s_runs": [81.1234, 81.2456, 81.342],
        "requests": 3,
        "errors": 0,
        "goodput": {"req_s": 1.6, "tok_s": 77.104, "pct": 95.0, "slo": {"ttft_ms": 200.0}},
    }
    olds = state(result=result, levels=[result], tok_s=81.24, goodput=result["goodput"])

    outputs = BenchmarkOutputs.model_validate(BenchmarkProvider().upgrade(olds))

    (level,) = outputs.levels
    assert level.tok_s_mean == olds["tok_s"]
    assert (level.tok_s_stdev, level.tok_s_ci95, level.tok_s_runs) == (
        0.11,
        (80.96, 81.52),
        (81.12, 81.25, 81.34),
    )
    assert level.goodput is not None and level.goodput.tok_s == 77.1
    assert not BenchmarkProvider().diff("abc", olds, state(update_id="u2")).changes
