"""The regression gate: the verdict on two results, and the check against a real history file.

Handing the host back on a regression is `sglang-stacks rollout`'s, tested through the real
Pulumi CLI in test_campaign."""

from __future__ import annotations

from pathlib import Path
from statistics import mean, stdev

import pytest

from sglang_stacks.config.spec import GateSpec
from sglang_stacks.errors import BenchmarkError, SpecError
from sglang_stacks.results import gate, history
from sglang_stacks.results.stats import BenchmarkResult, Noise
from sglang_stacks.results.verdict import judge_gate

BASELINE_RUNS = (89.4, 89.6, 89.5)
EAGLE3_RUNS = (54.0, 54.2, 54.1)


def result(
    runs: tuple[float, ...], *, output_len: int = 512, concurrency: int = 1, request_rate: float | None = None
) -> BenchmarkResult:
    average, spread = mean(runs), stdev(runs)
    return BenchmarkResult(
        concurrency=concurrency,
        request_rate=request_rate,
        input_len=1024,
        output_len=output_len,
        repetitions=len(runs),
        tok_s_mean=average,
        tok_s_stdev=spread,
        tok_s_ci95=(average - spread, average + spread),
        tok_s_runs=runs,
        ttft_ms=None,
        tpot_ms=None,
        itl_ms=None,
        accept_length=None,
        requests=len(runs),
        errors=0,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "history.sqlite"
    history.record(
        path, "baseline", "digest", "0.5.8", "python -m sglang.launch_server", result(BASELINE_RUNS)
    )
    return path


def gate_spec(on_regression: str = "fail", baseline_stack: str = "baseline") -> GateSpec:
    return GateSpec.model_validate(
        {"baseline_stack": baseline_stack, "tolerance_pct": 5, "on_regression": on_regression}
    )


def test_a_result_within_the_tolerance_passes(db: Path) -> None:
    gate.check("baseline-bs512", result((86.0, 86.2, 86.1)), gate_spec(), db)


def test_a_regression_fails_with_both_numbers(db: Path) -> None:
    with pytest.raises(BenchmarkError) as raised:
        gate.check("eagle3-bs128", result(EAGLE3_RUNS), gate_spec("fail"), db)

    message = str(raised.value)
    assert "eagle3-bs128 ran at 54.1 tok/s, 39.6 % slower than baseline's 89.5 tok/s" in message
    assert "beyond the 5 % tolerance" in message
    assert "`pulumi up -s baseline`" in message
    assert "rollout" not in message


def test_a_hand_back_gate_fails_the_same_and_points_to_rollout(db: Path) -> None:
    with pytest.raises(BenchmarkError) as raised:
        gate.check("eagle3-bs128", result(EAGLE3_RUNS), gate_spec("hand_back"), db)

    message = str(raised.value)
    assert "eagle3-bs128 ran at 54.1 tok/s, 39.6 % slower than baseline's 89.5 tok/s" in message
    assert "`sglang-stacks rollout eagle3-bs128`" in message
    assert [row.stack for row in history.rows(db)] == ["baseline"]  # judging records nothing


def test_evaluate_gives_the_verdict_without_raising(db: Path) -> None:
    verdict = gate.evaluate("eagle3-bs128", result(EAGLE3_RUNS), gate_spec(), db)

    assert not verdict.passed
    assert verdict.candidate_tok_s == pytest.approx(54.1)
    assert verdict.baseline_tok_s == pytest.approx(89.5)
    assert verdict.change_pct == pytest.approx(-39.55, abs=0.01)
    assert gate.evaluate("baseline-bs512", result((86.0, 86.2, 86.1)), gate_spec(), db).passed


def test_a_baseline_never_benchmarked_is_named(db: Path) -> None:
    with pytest.raises(BenchmarkError, match=r"baseline-bs128, which has no recorded benchmark yet"):
        gate.check("eagle3-bs128", result(EAGLE3_RUNS), gate_spec(baseline_stack="baseline-bs128"), db)


def test_only_a_baseline_result_with_the_same_workload_counts(db: Path) -> None:
    # A later baseline run with a shorter output would pass eagle3; the comparable one fails it.
    history.record(
        db,
        "baseline",
        "digest",
        "0.5.8",
        "python -m sglang.launch_server",
        result((50.0, 50.1, 50.2), output_len=64),
    )

    with pytest.raises(BenchmarkError, match=r"than baseline's 89\.5 tok/s"):
        gate.check("eagle3-bs128", result(EAGLE3_RUNS), gate_spec(), db)


def test_a_baseline_with_another_workload_is_not_compared(db: Path) -> None:
    with pytest.raises(BenchmarkError) as raised:
        gate.check("eagle3-bs128", result(EAGLE3_RUNS, output_len=64), gate_spec(), db)

    message = str(raised.value)
    assert "baseline was benchmarked with input_len 1024, output_len 512 at concurrency 1" in message
    assert "eagle3-bs128 with input_len 1024, output_len 64 at concurrency 1" in message
    assert "same sglang-stacks:benchmark workload" in message


def test_an_open_loop_result_is_matched_by_its_request_rate(db: Path) -> None:
    # An open-loop result at 4 req/s that had at most 16 requests in flight reports concurrency 16;
    # a closed loop of 16 streams is another load, and another rate is too.
    record = "python -m sglang.launch_server"
    history.record(db, "baseline", "digest", "0.5.8", record, result(BASELINE_RUNS, concurrency=16))
    open_loop = result(EAGLE3_RUNS, concurrency=16, request_rate=4.0)
    with pytest.raises(BenchmarkError) as raised:
        gate.check("eagle3-bs128", open_loop, gate_spec(), db)
    message = str(raised.value)
    assert "baseline was benchmarked with input_len 1024, output_len 512 at concurrency 16" in message
    assert "eagle3-bs128 with input_len 1024, output_len 512 at request rate 4/s" in message

    history.record(
        db, "baseline", "digest", "0.5.8", record, result((86.0, 86.1), concurrency=9, request_rate=2.0)
    )
    with pytest.raises(
        BenchmarkError, match=r"at request rate 2/s and eagle3-bs128 with .* at request rate 4/s"
    ):
        gate.check("eagle3-bs128", open_loop, gate_spec(), db)

    history.record(
        db, "baseline", "digest", "0.5.8", record, result(BASELINE_RUNS, concurrency=11, request_rate=4.0)
    )
    # Same rate: compared, whatever the most requests in flight were; 54.1 against 89.5 regressed.
    with pytest.raises(BenchmarkError, match=r"54\.1 tok/s, 39\.6 % slower than baseline's 89\.5 tok/s"):
        gate.check("eagle3-bs128", open_loop, gate_spec(), db)
    assert gate.evaluate(
        "baseline-bs512", result((89.0, 89.2, 89.1), concurrency=12, request_rate=4.0), gate_spec(), db
    ).passed


def test_the_verdict_fails_a_regression_with_both_numbers() -> None:
    verdict = judge_gate(
        result(EAGLE3_RUNS),
        result(BASELINE_RUNS),
        5,
        candidate_stack="eagle3-bs128",
        baseline_stack="baseline",
    )
    assert not verdict.passed
    assert verdict.message.startswith(
        "eagle3-bs128 ran at 54.1 tok/s, 39.6 % slower than baseline's 89.5 tok/s (significant, p<0.001), "
        "beyond the 5 % tolerance."
    )
    assert "pulumi up -s baseline" in verdict.message


def test_the_verdict_passes_within_the_tolerance() -> None:
    slower = tuple(r * 0.95 for r in BASELINE_RUNS)
    verdict = judge_gate(result(slower), result(BASELINE_RUNS), 6)
    assert verdict.passed and verdict.change_pct == pytest.approx(-5.0)
    assert verdict.message.endswith("within the 6 % tolerance.")
    assert not judge_gate(result(slower), result(BASELINE_RUNS), 2).passed


def test_a_rerun_a_launch_away_from_the_baseline_passes_even_a_strict_gate() -> None:
    # The same configuration relaunched (or on another host) is a few tenths of a percent slower,
    # with repetitions so tight that Welch's test alone calls it significant: a zero tolerance
    # failed the update for nothing. The baseline's result is another launch's, so the floor counts.
    rerun = tuple(round(r * 0.996, 2) for r in BASELINE_RUNS)

    verdict = judge_gate(result(rerun), result(BASELINE_RUNS), 0)

    assert verdict.passed, verdict.message
    assert verdict.message.endswith("beyond the 0 % tolerance but within noise, so it passes.")
    strict = judge_gate(result(rerun), result(BASELINE_RUNS), 0, noise=Noise(0.0, 0.0))
    assert not strict.passed  # without the floor and the margin it would have failed


def test_the_verdict_rejects_a_negative_tolerance_and_a_baseline_without_tok_s() -> None:
    with pytest.raises(SpecError, match="tolerance is -1 %, but it must be 0 or more"):
        judge_gate(result(EAGLE3_RUNS), result(BASELINE_RUNS), -1)
    with pytest.raises(BenchmarkError, match=r"recorded tok/s is 0\.0, so nothing can be gated"):
        judge_gate(result(EAGLE3_RUNS), result((0.0, 0.0, 0.0)), 5)
