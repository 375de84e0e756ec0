"""The canary's verdict: a regression beyond the tolerance that the runs show is caught, a change
whose runs cannot tell it from the reference is not held back, and the sentence gives both
measurements with their intervals; the gate measures again while its verdict passes a change the
interval cannot rule out, and judges all the runs pooled."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from sglang_loadgen import client, contract
from sglang_loadgen.document import SCHEMA, Document
from sglang_loadgen.streaming import RequestRecord
from sglang_stacks.components import canary as gate
from sglang_stacks.config.fleet import RolloutSpec
from sglang_stacks.results import stats, summary
from sglang_stacks.results.verdict import CanaryVerdict, judge_canary, unjudged_canary

REFERENCE_URL = "http://127.0.0.1:30012"


def result(runs: Sequence[float], ttft_p50_ms: float = 40.0) -> stats.BenchmarkResult:
    """A first level's result with these tok/s runs (one stream, as the demo fleet measures)."""
    ttft = stats.Percentiles(p50=ttft_p50_ms, p90=ttft_p50_ms, p99=ttft_p50_ms)
    return stats.BenchmarkResult(
        concurrency=1,
        input_len=32,
        output_len=48,
        repetitions=len(runs),
        tok_s_mean=stats.mean(runs),
        tok_s_stdev=stats.stdev(runs),
        tok_s_ci95=stats.ci95(runs),
        tok_s_runs=tuple(runs),
        ttft_ms=ttft,
        requests=2 * len(runs),
        errors=0,
    )


def judge(canary: stats.BenchmarkResult, ttft_tolerance_pct: float | None = None) -> CanaryVerdict:
    """The verdict on ``canary`` against REFERENCE under a 5 % tok/s tolerance."""
    return judge_canary(
        canary,
        REFERENCE,
        reference_url=REFERENCE_URL,
        tok_s_tolerance_pct=5,
        ttft_tolerance_pct=ttft_tolerance_pct,
    )


# The emulator's default profile: cuda_graph_max_bs 512 decodes at 82.0 tok/s, 128 at 89.5.
REFERENCE = result([89.2, 89.6, 89.4, 89.7, 89.3])
SLOWER_BY_8_PCT = result([82.1, 81.8, 82.3, 82.0, 81.9])


def test_an_eight_percent_slower_canary_is_caught_with_both_intervals_and_the_significance() -> None:
    verdict = judge(SLOWER_BY_8_PCT)

    assert not verdict.passed
    assert verdict.change_pct is not None
    assert verdict.change_pct == pytest.approx(-8.30, abs=0.01)
    assert verdict.change_ci95_pct is not None
    low, high = verdict.change_ci95_pct
    assert low < verdict.change_pct < high < -5  # the whole interval is beyond the tolerance
    assert verdict.p_value is not None and verdict.p_value < 0.001
    assert verdict.line.startswith("canary 82.0 tok/s (95 % CI 81.8 to 82.3) against 89.4 tok/s (95 % CI ")
    assert f"on {REFERENCE_URL}, -8.3 % (95 % CI " in verdict.line
    assert verdict.line.endswith("%, significant, p<0.001), beyond the 5 % tolerance")


def test_a_change_the_runs_cannot_tell_from_the_reference_is_not_held_back() -> None:
    # A mean 6 % below, from runs that spread over the reference's: noise, not a regression.
    noisy = result([72.0, 95.0, 80.0, 91.0, 82.0])

    verdict = judge(noisy)

    assert verdict.passed
    assert verdict.change_pct is not None and verdict.change_pct < -5
    assert verdict.p_value is not None and verdict.p_value > 0.05
    assert verdict.line.endswith("beyond the 5 % tolerance but within noise")


def test_a_canary_a_host_away_from_the_reference_is_within_noise_even_with_no_tolerance() -> None:
    # One configuration on two hosts differs by a few tenths of a percent, with repetitions tight
    # enough for Welch's test alone to call it significant; the floor between hosts counts.
    host_away = result([88.85, 88.88, 88.86, 88.87, 88.84])  # 0.6 % below

    verdict = judge_canary(
        host_away, REFERENCE, reference_url=REFERENCE_URL, tok_s_tolerance_pct=0, ttft_tolerance_pct=None
    )

    assert verdict.passed and verdict.line.endswith("beyond the 0 % tolerance but within noise")
    alone = judge_canary(
        host_away,
        REFERENCE,
        reference_url=REFERENCE_URL,
        tok_s_tolerance_pct=0,
        ttft_tolerance_pct=None,
        noise=stats.Noise(0.0, 0.0),
    )
    assert not alone.passed


def test_a_significant_change_within_the_tolerance_passes() -> None:
    slightly = result([87.2, 87.5, 87.1, 87.4, 87.3])  # 2.4 % slower, surely

    verdict = judge(slightly)

    assert verdict.passed and verdict.problems == ()
    assert verdict.line.endswith(", within the 5 % tolerance")


def test_a_slower_first_token_beyond_its_tolerance_is_caught_alone() -> None:
    late = result([89.3, 89.5, 89.4, 89.6, 89.2], ttft_p50_ms=60.0)

    verdict = judge(late, ttft_tolerance_pct=20)

    assert not verdict.passed
    assert verdict.problems == ("median TTFT 60.0 ms against 40.0 ms (tolerance 20 %)",)


def test_nothing_to_judge_against_passes_and_says_why() -> None:
    verdict = unjudged_canary("no replica on the current configuration answered: nothing to compare with")

    assert verdict.passed and verdict.reference_tok_s is None
    assert verdict.line == (
        "not judged: no replica on the current configuration answered: nothing to compare with"
    )


def test_a_pass_whose_interval_reaches_past_the_tolerance_is_unsettled_and_a_tight_one_is_not() -> None:
    noisy = judge(result([72.0, 95.0, 80.0, 91.0, 82.0]))
    neutral = judge(result([89.3, 89.5, 89.4, 89.6, 89.2]))
    regressed = judge(SLOWER_BY_8_PCT)

    assert noisy.passed and noisy.change_ci95_pct is not None and noisy.change_ci95_pct[0] < -5
    assert noisy.unsettled
    assert neutral.passed and not neutral.unsettled
    assert not regressed.passed and not regressed.unsettled  # a failed verdict is settled
    assert not judge_canary(
        result([72.0, 95.0, 80.0, 91.0, 82.0]),
        REFERENCE,
        reference_url=REFERENCE_URL,
        tok_s_tolerance_pct=None,
        ttft_tolerance_pct=20,
    ).unsettled  # no tok/s tolerance: nothing for the interval to reach


def document(tok_s_runs: Sequence[float]) -> Document:
    """The load generator's document of one stream, one 48-token request per run at these tok/s,
    written by its own summariser."""
    workload = contract.Workload(input_len=32, output_len=48, repetitions=len(tok_s_runs))
    runs = [
        [RequestRecord(sent_s=0.0, finished_s=48 / t, ttft_s=0.04, completion_tokens=48, prompt_tokens=32)]
        for t in tok_s_runs
    ]
    level = client.summarize_level(workload, 1, runs, [])
    return Document(schema=SCHEMA, nonce=1, started_unix_s=0.0, workload=workload, levels=[level])


def scripted(*rounds: tuple[Sequence[float], Sequence[float]]) -> tuple[gate.Measure, list[int]]:
    """A measurement that answers the canary's and the reference's runs of each round in turn, and
    the list it counts its calls in."""
    answers: Iterator[tuple[Sequence[float], Sequence[float]]] = iter(rounds)
    calls: list[int] = []

    def measure() -> tuple[Document, Document]:
        calls.append(1)
        canary, reference = next(answers)
        return document(canary), document(reference)

    return measure, calls


REFERENCE_RUNS = (89.2, 89.6, 89.4)
# An 8 % slower canary measured on a busy machine: one run caught a stall of the reference's, so the
# first measurement alone says -4.6 % (95 % CI -21 to +12 %): within the tolerance, and unable to
# rule the regression out. Pooled with a quiet second one: -6.4 %, p 0.03.
BUSY_ROUND = ((82.1, 81.9, 82.0), (89.2, 79.0, 89.6))
QUIET_ROUND = ((82.2, 81.8, 82.1), REFERENCE_RUNS)


def test_a_first_measurement_that_cannot_rule_a_regression_out_is_followed_by_another_pooled() -> None:
    first = judge_canary(
        summary.summarize_levels(document(BUSY_ROUND[0]))[0],
        summary.summarize_levels(document(BUSY_ROUND[1]))[0],
        reference_url=REFERENCE_URL,
        tok_s_tolerance_pct=5,
        ttft_tolerance_pct=None,
    )
    assert first.passed and first.unsettled  # what the gate said before it measured again
    measure, calls = scripted(BUSY_ROUND, QUIET_ROUND)

    verdict = gate.judged(RolloutSpec(), REFERENCE_URL, measure)

    assert len(calls) == 2
    assert not verdict.passed and verdict.measurements == 2
    assert verdict.line.endswith(", 6 runs a side over 2 measurements, beyond the 5 % tolerance")
    pooled = stats.compare_runs(BUSY_ROUND[0] + QUIET_ROUND[0], BUSY_ROUND[1] + QUIET_ROUND[1])
    assert verdict.change_pct == pytest.approx(pooled.change_pct, abs=0.01)
    assert verdict.p_value == pytest.approx(pooled.p_value, rel=1e-3)


def test_a_settled_verdict_takes_one_measurement_and_says_nothing_of_measurements() -> None:
    for runs in (((89.3, 89.5, 89.4), REFERENCE_RUNS), QUIET_ROUND):
        measure, calls = scripted(runs)

        verdict = gate.judged(RolloutSpec(), REFERENCE_URL, measure)

        assert len(calls) == 1 and verdict.measurements is None
        assert "measurements" not in verdict.line
        assert "measurements" not in verdict.model_dump(mode="json", exclude_none=True)


def test_runs_that_never_settle_are_judged_after_the_last_measurement_as_before() -> None:
    wild = ((72.0, 95.0, 80.0), (89.2, 79.0, 89.6))
    measure, calls = scripted(*[wild] * (gate.MEASUREMENTS + 1))

    verdict = gate.judged(RolloutSpec(), REFERENCE_URL, measure)

    assert len(calls) == gate.MEASUREMENTS
    assert verdict.passed and verdict.unsettled and verdict.measurements == gate.MEASUREMENTS
    assert f"over {gate.MEASUREMENTS} measurements" in verdict.line
