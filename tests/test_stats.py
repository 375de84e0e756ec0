"""Statistics against values from published tables, and the summary of a load generator document."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
from scipy import stats as scipy_stats

from sglang_loadgen import client, contract
from sglang_loadgen.document import SCHEMA, Document, Level, Record, Repetition
from sglang_loadgen.streaming import RequestRecord
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results import stats, summary


@pytest.mark.parametrize(
    ("runs", "t_975"),
    [(2, 12.706), (3, 4.303), (5, 2.776), (10, 2.262), (30, 2.045), (121, 1.980)],
)
def test_ci95_half_width_is_the_published_t_quantile_times_the_standard_error(
    runs: int, t_975: float
) -> None:
    values = [float(v % 7) for v in range(runs)]
    low, high = stats.ci95(values)
    standard_error = stats.stdev(values) / math.sqrt(runs)
    assert (high - low) / 2 / standard_error == pytest.approx(t_975, abs=5e-4)
    assert (low + high) / 2 == pytest.approx(stats.mean(values))


WELCH = stats.Noise(launch_cv_pct=0.0, min_effect_pct=0.0)
"""No launch floor and no margin: the comparison is Welch's test alone."""


def test_a_difference_at_the_published_critical_t_has_p_five_percent() -> None:
    # Two runs each, sample variance 2, so each mean's variance is 1: Welch's df is 2, whose
    # 97.5 % t quantile is 4.303.
    shift = 4.3027 * math.sqrt(2)
    difference = stats.compare_runs([0.0, 2.0], [shift, shift + 2.0], WELCH)
    assert difference.p_value == pytest.approx(0.05, abs=1e-4)
    assert not stats.compare_runs([0.0, 2.0], [shift - 0.5, shift + 1.5], WELCH).significant
    assert stats.compare_runs([0.0, 2.0], [shift + 0.5, shift + 2.5], WELCH).significant


def test_welchs_interval_of_the_difference_is_the_published_t_quantile_times_its_standard_error() -> None:
    # The example above: each mean's variance is 1 and Welch's df is 2, so the interval's half width
    # is 4.303 * sqrt(2) (here in percent of the reference's mean); it just touches zero when p is 5 %.
    shift = 4.3027 * math.sqrt(2)
    difference = stats.compare_runs([0.0, 2.0], [shift, shift + 2.0], WELCH)
    reference = shift + 1.0
    assert difference.change_pct == pytest.approx(-shift / reference * 100)
    assert difference.change_ci95_pct is not None
    low, high = difference.change_ci95_pct
    assert (high - low) / 2 == pytest.approx(4.3027 * math.sqrt(2) / reference * 100, abs=1e-3)
    assert high == pytest.approx(0.0, abs=1e-3)
    assert stats.compare_runs([1.0], [2.0, 3.0], WELCH).change_ci95_pct is None
    assert stats.compare_runs([5.0, 5.0], [4.0, 4.0], WELCH).change_ci95_pct == (25.0, 25.0)


def test_mean_stdev_and_ci95_of_five_runs() -> None:
    runs = [88.0, 89.0, 89.5, 90.0, 91.0]
    assert stats.mean(runs) == pytest.approx(89.5)
    assert stats.stdev(runs) == pytest.approx(math.sqrt(5.0 / 4))
    low, high = stats.ci95(runs)
    half = 2.7764 * math.sqrt(5.0 / 4) / math.sqrt(5)
    assert low == pytest.approx(89.5 - half, abs=1e-3)
    assert high == pytest.approx(89.5 + half, abs=1e-3)
    assert stats.ci95([54.1]) == (54.1, 54.1)


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert stats.percentile(values, 50) == pytest.approx(50.5)
    assert stats.percentile(values, 90) == pytest.approx(90.1)
    assert stats.percentile(values, 99) == pytest.approx(99.01)
    assert stats.percentile([7.0], 99) == 7.0


def test_welch_finds_the_campaign_regression_significant() -> None:
    baseline = [89.1, 89.9, 89.4, 89.7, 89.4]
    eagle3 = [54.3, 53.8, 54.2, 54.0, 54.2]
    difference = stats.compare_runs(eagle3, baseline, WELCH)
    assert difference.p_value is not None and difference.p_value < 1e-6
    assert difference.significant


def test_welch_matches_a_hand_computed_example() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.5]
    difference = stats.compare_runs(a, b, WELCH)
    var_a, var_b = (5.0 / 3) / 4, (6.6875 / 3) / 4  # sample variances 1.667 and 2.229, over n
    df = (var_a + var_b) ** 2 / (var_a**2 / 3 + var_b**2 / 3)
    assert difference.p_value == pytest.approx(0.2986, abs=1e-3)
    assert difference.change_ci95_pct is not None
    half = (difference.change_ci95_pct[1] - difference.change_ci95_pct[0]) / 2
    assert half == pytest.approx(scipy_stats.t.ppf(0.975, df) * math.sqrt(var_a + var_b) / 3.625 * 100)
    assert not difference.significant


def test_welch_and_the_quantiles_are_exactly_what_scipy_stats_computes() -> None:
    """The comparisons run on ``scipy.special`` (a third of ``scipy.stats``'s import): the p-value and
    interval of 500 random pairs of launches, floor included, and every quantile, are
    ``scipy.stats``'s own to the last bits."""
    draw = random.Random(7)
    noise = stats.Noise(launch_cv_pct=0.5, min_effect_pct=0.0)
    for _ in range(500):
        runs = [draw.gauss(80, draw.uniform(0.01, 3)) for _ in range(draw.randint(2, 8))]
        reference = [draw.gauss(80, draw.uniform(0.01, 3)) for _ in range(draw.randint(2, 8))]
        difference = stats.compare_runs(runs, reference, noise)
        floor = noise.launch_cv_pct / 100
        var_runs = stats.stdev(runs) ** 2 / len(runs) + (floor * stats.mean(runs)) ** 2
        var_reference = stats.stdev(reference) ** 2 / len(reference) + (floor * stats.mean(reference)) ** 2
        expected = scipy_stats.ttest_ind_from_stats(
            stats.mean(runs), math.sqrt(var_runs * len(runs)), len(runs),
            stats.mean(reference), math.sqrt(var_reference * len(reference)), len(reference),
            equal_var=False,
        )  # fmt: skip
        assert difference.p_value == pytest.approx(float(expected.pvalue), rel=1e-12, abs=1e-300)
        df = (var_runs + var_reference) ** 2 / (
            var_runs**2 / (len(runs) - 1) + var_reference**2 / (len(reference) - 1)
        )
        assert difference.change_ci95_pct is not None
        half = (difference.change_ci95_pct[1] - difference.change_ci95_pct[0]) / 2
        expected_half = scipy_stats.t.ppf(0.975, df) * math.sqrt(var_runs + var_reference)
        assert half == pytest.approx(expected_half / stats.mean(reference) * 100, rel=1e-12)
        low, high = stats.ci95(runs)
        expected_ci = scipy_stats.t.interval(0.95, len(runs) - 1, stats.mean(runs), scipy_stats.sem(runs))
        assert (low, high) == pytest.approx(expected_ci, rel=1e-12)
    assert stats.launch_margin_pct(1.0) == scipy_stats.norm.ppf(0.975) * math.sqrt(2.0)


def test_a_constant_sample_is_tested_without_a_library_warning() -> None:
    # Steady tok/s runs, rounded to 0.01, are often all equal: scipy's ttest_ind warned of
    # "precision loss" in the middle of `sweep run` and `sweep report` output.
    steady, varied = [81.23] * 5, [81.23, 81.25, 81.21, 81.24, 81.22]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        difference = stats.compare_runs(steady, varied, WELCH)

    assert difference.p_value == pytest.approx(1.0)
    assert difference.change_ci95_pct is not None  # all the spread is the varied sample's: df n - 1
    half = (difference.change_ci95_pct[1] - difference.change_ci95_pct[0]) / 2
    spread = stats.stdev(varied) / math.sqrt(5) / stats.mean(varied) * 100
    assert half == pytest.approx(scipy_stats.t.ppf(0.975, 4) * spread)


def test_p_values_read_as_people_write_them() -> None:
    assert [stats.p_text(p) for p in (0.0004, 0.001, 0.0421, None)] == [
        "p<0.001",
        "p=0.001",
        "p=0.042",
        "p n/a",
    ]


def test_welch_with_too_few_or_constant_runs() -> None:
    assert stats.compare_runs([1.0], [2.0, 3.0], WELCH).p_value is None
    assert stats.compare_runs([5.0, 5.0], [5.0, 5.0], WELCH).p_value == 1.0
    assert stats.compare_runs([5.0, 5.0], [6.0, 6.0], WELCH).p_value == 0.0


# Two campaign trials of the same server in effect, on two pool hosts of a loaded machine: each
# launch's repetitions agree to 0.02 %, the launches differ by 0.2 %.
SAME_SERVER = ([88.31, 88.29, 88.33], [88.10, 88.12, 88.08])


def test_two_launches_of_one_server_are_within_noise_though_their_repetitions_differ_significantly() -> None:
    alone = stats.compare_runs(*SAME_SERVER, WELCH)
    assert alone.p_value is not None and alone.p_value < 0.001  # repetitions alone: "a clear winner"

    difference = stats.compare_runs(*SAME_SERVER)

    assert difference.within_noise and not difference.significant
    assert difference.describe().startswith("within noise, p=")
    # Significant by the test but under the practical margin: within noise all the same.
    tight = stats.compare_runs(*SAME_SERVER, stats.Noise(launch_cv_pct=0.0, min_effect_pct=1.0))
    assert tight.within_noise
    assert tight.describe() == "within noise: p<0.001, under the 1.0 % margin"


def test_the_default_margin_is_what_two_launches_of_one_configuration_stay_within() -> None:
    noise = stats.Noise()
    assert noise.launch_cv_pct == stats.LAUNCH_CV_PCT
    assert noise.margin_pct == pytest.approx(1.95996 * math.sqrt(2) * stats.LAUNCH_CV_PCT, rel=1e-5)
    assert stats.Noise(min_effect_pct=3.0).margin_pct == 3.0
    assert stats.Noise.declared(None) == noise and stats.Noise.declared(1.0).launch_cv_pct == 1.0


def test_identical_configurations_on_varying_launches_are_split_less_often_than_the_test_allows() -> None:
    # Simulated launches of one configuration: each launch's mean is off by the floor's spread
    # (CV 1 %), its 3 repetitions by 0.1 % more. The rule may call them different in at most 5 %
    # of pairs (its size); with the margin, far fewer.
    rng = random.Random(7)
    split = 0
    pairs = 2000
    for _ in range(pairs):
        offsets = [88.0 * (1 + rng.gauss(0, stats.LAUNCH_CV_PCT / 100)) for _ in range(2)]
        a, b = ([o * (1 + rng.gauss(0, 0.001)) for _ in range(3)] for o in offsets)
        split += stats.compare_runs(a, b).significant
    assert split / pairs <= 0.05


@pytest.mark.parametrize(
    ("runs", "reference", "change"),
    [
        ([54.3, 53.8, 54.2, 54.0, 54.2], [89.1, 89.9, 89.4, 89.7, 89.4], -39.6),  # EAGLE-3, bs 128
        ([84.1, 84.3, 84.0, 84.2, 84.2], [87.9, 88.0, 88.1, 87.9, 88.0], -4.3),  # graphs up to 256
    ],
)
def test_real_differences_of_the_seeds_stay_significant(
    runs: list[float], reference: list[float], change: float
) -> None:
    difference = stats.compare_runs(runs, reference)
    assert difference.change_pct == pytest.approx(change, abs=0.1)
    assert difference.significant and difference.describe().startswith("significant, p")


def test_a_gate_fails_only_a_slowdown_beyond_its_tolerance_and_the_margin_that_the_test_confirms() -> None:
    slower = stats.compare_runs([84.1, 84.3, 84.0], [88.0, 88.1, 87.9])  # -4.4 %
    assert slower.below(2.0) and not slower.below(5.0)
    assert not stats.compare_runs(*SAME_SERVER[::-1]).below(0.0)  # 0.2 % slower: within noise
    # One run on a side: nothing to test, so beyond both the tolerance and the margin fails.
    assert stats.compare_runs([84.0], [88.0]).below(2.0)
    assert not stats.compare_runs([87.5], [88.0]).below(0.0)


def _records(ttft_ms: Sequence[float], tpot_ms: Sequence[float | None]) -> list[Record]:
    """One record per request, four per repetition."""
    return [
        Record(
            repetition=i // 4,
            sent_s=0.1 * (i % 4),
            ttft_ms=ttft,
            tpot_ms=tpot,
            e2e_ms=ttft + 255 * (tpot or 0.0),
            completion_tokens=256,
        )
        for i, (ttft, tpot) in enumerate(zip(ttft_ms, tpot_ms, strict=True))
    ]


def _repetitions(tok_s_runs: Sequence[float]) -> list[Repetition]:
    """Each run's totals as the load generator writes them: four requests of 256 tokens at its tok/s."""
    return [
        Repetition(
            tok_s=t,
            duration_s=1024 / t,
            completion_tokens=1024,
            requests=4,
            errors=0,
            concurrency_measured=1.0,
        )
        for t in tok_s_runs
    ]


def _document(**level_changes: Any) -> Document:
    level = Level(
        concurrency=1,
        request_rate=None,
        repetitions=_repetitions([54.0, 54.2, 54.1, 53.9, 54.3]),
        requests=20,
        errors=1,
        error_samples=["HTTP 500: overloaded"],
        warmup_errors=0,
        prompt_tokens_mean=128.0,
        completion_tokens=19 * 256,
        spec_completion_tokens=4864,
        spec_verify_ct=2000,
        records=_records([float(v) for v in range(10, 30)], [18.5] * 19 + [None]),
        itl_count=300,
        itl_bunched_pct=0.0,
        itl_ms=[6.0, 6.0, 30.0] * 100,
    )
    level = dataclasses.replace(level, **level_changes)
    return Document(
        schema=SCHEMA,
        nonce=1,
        started_unix_s=0.0,
        workload=contract.Workload(input_len=128, output_len=256),
        levels=[level, dataclasses.replace(level, concurrency=8, repetitions=_repetitions([300.0, 310.0]))],
    )


def test_summarize_gives_a_flat_json_ready_result() -> None:
    result, _ = summary.summarize_levels(_document())
    assert result.concurrency == 1 and result.repetitions == 5
    assert result.tok_s_mean == pytest.approx(54.1)
    assert result.tok_s_ci95[0] < 54.1 < result.tok_s_ci95[1]
    assert result.accept_length == pytest.approx(2.432)
    assert result.ttft_ms is not None and result.ttft_ms.p50 == pytest.approx(19.5)
    assert result.itl_ms is not None and result.itl_ms.p99 == 30.0
    assert (result.requests, result.errors) == (20, 1)
    dumped = json.loads(result.model_dump_json())
    assert dumped["tok_s_runs"] == [54.0, 54.2, 54.1, 53.9, 54.3]
    assert dumped["ttft_ms"] == {"p50": 19.5, "p90": 27.1, "p95": 28.05, "p99": 28.81}
    # 19 requests of TTFT + 255 x 18.5 ms, one of 29 ms: the median is the mean of the 9th and 10th.
    assert result.e2e_ms is not None and result.e2e_ms.p50 == pytest.approx(18.5 * 255 + 18.5)
    assert result.concurrency_measured == 1.0
    assert result.goodput is None and result.cost_per_mtok is None  # no SLO, no price declared
    assert stats.BenchmarkResult.model_validate(dumped) == result


def test_summarize_gives_one_result_per_concurrency_level_in_run_order() -> None:
    one, eight = summary.summarize_levels(json.dumps(_document().to_json()))
    assert (one.concurrency, eight.concurrency) == (1, 8)
    assert eight.tok_s_mean == 305.0 and eight.repetitions == 2


def test_without_speculation_there_is_no_accept_length() -> None:
    no_tpot = _records([10.0] * 20, [None] * 20)
    result, _ = summary.summarize_levels(
        _document(spec_completion_tokens=0, spec_verify_ct=0, records=no_tpot)
    )
    assert result.accept_length is None
    assert result.tpot_ms is None


def test_a_malformed_document_names_the_key() -> None:
    document = _document().to_json()
    del document["levels"][0]["repetitions"]
    with pytest.raises(BenchmarkError, match=r"at 'levels\.0\.repetitions': Field required"):
        summary.summarize_levels(document)
    with pytest.raises(BenchmarkError, match="printed no JSON document"):
        summary.summarize_levels("Traceback (most recent call last):")
    with pytest.raises(BenchmarkError, match="schema 'other/2'"):
        summary.summarize_levels(dict(_document().to_json(), schema="other/2"))


def test_goodput_counts_only_the_requests_within_every_limit() -> None:
    # TTFT 10..29 ms; TPOT 18.5 ms but 40 ms for the last request of each repetition.
    tpot = [18.5, 18.5, 18.5, 40.0] * 5
    document = _document(records=_records([float(v) for v in range(10, 30)], tpot))
    within_ttft = summary.summarize_levels(document, slo=stats.Slo(ttft_ms=19.0))[0].goodput
    assert within_ttft is not None
    assert within_ttft.pct == 50.0  # TTFT 10..19 of 20 requests
    # Repetitions 0 and 1 hold them all (4 each), repetition 2 holds two: all of the first two runs'
    # throughput (54.0 and 54.2 tok/s), half of the third's (54.1), none of the last two's.
    assert within_ttft.tok_s == pytest.approx((54.0 + 54.2 + 54.1 / 2 + 0 + 0) / 5, abs=1e-3)
    assert within_ttft.req_s == pytest.approx(within_ttft.tok_s / 256, abs=1e-4)
    both = summary.summarize_levels(document, slo=stats.Slo(ttft_ms=19.0, tpot_ms=20.0))[0].goodput
    assert both is not None and both.pct == 40.0  # minus the two 40 ms TPOT ones, at TTFT 13 and 17
    assert both.slo == {"ttft_ms": 19.0, "tpot_ms": 20.0}
    lenient = summary.summarize_levels(document, slo=stats.Slo(e2e_ms=1e9))[0].goodput
    assert lenient is not None and lenient.pct == 100.0


def test_a_host_price_gives_the_cost_of_a_million_output_tokens() -> None:
    (result, _) = summary.summarize_levels(_document(), gpu_hour_price=8 * 2.5)
    # 20 per hour at 54.1 tok/s: 194,760 tokens an hour.
    assert result.cost_per_mtok == pytest.approx(20 / (54.1 * 3600) * 1e6, rel=1e-4)


def test_goodput_of_a_run_where_every_request_meets_the_slo_is_its_throughput() -> None:
    # Three repetitions of four requests, each sent at once, with latencies whose rounded duration
    # used to lift goodput above the throughput (323.004 against 323.003 tok/s).
    latencies = [
        [6.059521859045944, 6.17804759552746, 6.35868623917824, 5.37592786803269],
        [5.111091488855152, 5.232662958001342, 5.085419686396307, 6.1101879854467995],
        [5.610217955008011, 6.569293367870429, 5.32379915614888, 5.300365123568952],
    ]
    runs = [
        [
            RequestRecord(sent_s=10.0 * rep, finished_s=10.0 * rep + s, ttft_s=0.02, completion_tokens=512)
            for s in run
        ]
        for rep, run in enumerate(latencies)
    ]
    level = client.summarize_level(contract.Workload(), 4, runs, [])
    document = Document(
        schema=SCHEMA, nonce=1, started_unix_s=0.0, workload=contract.Workload(), levels=[level]
    )
    (everyone,) = summary.summarize_levels(document, slo=stats.Slo(e2e_ms=1e9))
    assert everyone.goodput is not None and everyone.goodput.pct == 100.0
    assert everyone.goodput.tok_s == everyone.tok_s_mean
    # Under 6 s end to end: 1 of the first run's 4, 3 of the second's, 3 of the third's.
    (some,) = summary.summarize_levels(document, slo=stats.Slo(e2e_ms=6000))
    assert some.goodput is not None
    runs_tok_s = some.tok_s_runs
    expected = (runs_tok_s[0] * 1 / 4 + runs_tok_s[1] * 3 / 4 + runs_tok_s[2] * 3 / 4) / 3
    # Every tok/s figure of a result is kept to 0.01 (stats.TOK_S_DECIMALS), the runs' too.
    assert some.goodput.tok_s == pytest.approx(expected, abs=0.01)
    assert some.goodput.tok_s < some.tok_s_mean


def test_a_level_without_repetitions_is_named() -> None:
    document = _document().to_json()
    document["levels"][0]["repetitions"] = []
    with pytest.raises(BenchmarkError, match=r"at 'levels\.0': Value error, a level has no repetitions"):
        summary.summarize_levels(document)


def test_runs_pooled_from_two_documents_summarise_as_one_run_of_them_all() -> None:
    # The canary gate pools its measurements: the pooled level must read as if one load generator
    # run had made every repetition, request and gap of both.
    first = _document(errors=0, error_samples=[])
    second = _document(
        repetitions=_repetitions([50.0, 51.0]),
        requests=8,
        errors=2,
        error_samples=["HTTP 503"],
        prompt_tokens_mean=131.0,
        completion_tokens=6 * 256,
        spec_completion_tokens=1536,
        spec_verify_ct=800,
        records=_records([40.0] * 6, [20.0] * 6),
        itl_count=100,
        itl_bunched_pct=10.0,
        itl_ms=[8.0] * 100,
        error_kinds={"http": 2},
    )
    both = summary.pooled([first.levels[0], second.levels[0]])
    result = summary.summarize_levels(dataclasses.replace(first, levels=[both]))[0]

    assert result.tok_s_runs == (54.0, 54.2, 54.1, 53.9, 54.3, 50.0, 51.0)
    assert result.repetitions == 7 and (result.requests, result.errors) == (28, 2)
    assert both.error_samples == ["HTTP 503"] and both.error_kinds == {"http": 2}
    assert both.prompt_tokens_mean == pytest.approx((128.0 * 20 + 131.0 * 6) / 26)
    assert both.itl_bunched_pct == pytest.approx(2.5)
    assert result.accept_length == pytest.approx((4864 + 1536) / 2800, abs=1e-4)
    expected = stats.Percentiles.of([*map(float, range(10, 30)), *[40.0] * 6])
    assert result.ttft_ms is not None and expected is not None
    assert result.ttft_ms.p50 == pytest.approx(expected.p50)
    # Each record keeps its repetition, the second run's counted after the first's five: per
    # repetition goodput and an open loop's concurrency read them.
    expected_repetitions = [i // 4 for i in range(20)] + [5 + i // 4 for i in range(6)]
    assert [r.repetition for r in both.records] == expected_repetitions
    assert summary.pooled([first.levels[0]]) is first.levels[0]
    with pytest.raises(ValueError, match="nothing to pool"):
        summary.pooled([])
