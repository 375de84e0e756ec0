"""The search without any host: the campaign's axes as Optuna parameters, preflight telling the
study a doomed suggestion is infeasible before any launch, a failed launch and a missed SLO told as
constraint violations (the SLO's by how much), the interval rule as an Optuna pruner, and the
trial's attributes read back into their model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sglang_stacks.campaign.attributes import read_attributes, records
from sglang_stacks.campaign.early_stop import IntervalPruner
from sglang_stacks.campaign.evaluation import LAUNCH, PREFLIGHT, evaluate
from sglang_stacks.campaign.model import CampaignSpec, load_campaign
from sglang_stacks.campaign.plan import judge, make_plan
from sglang_stacks.campaign.report import write_report
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.space import SearchSpace
from sglang_stacks.campaign.study import open_study
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.results.stats import BenchmarkResult

ROOT = Path(__file__).resolve().parent.parent
STACKS = ROOT / "stacks"
POOL = "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}, port: 30001}\n"


def _campaign(tmp_path: Path, text: str) -> CampaignSpec:
    path = tmp_path / "search.yaml"
    path.write_text(text + POOL)
    return load_campaign(path)


def _level(concurrency: int, runs: list[float], ttft_p99: float = 100.0) -> BenchmarkResult:
    mean = sum(runs) / len(runs)
    return BenchmarkResult.model_validate(
        {
            "concurrency": concurrency,
            "input_len": 32,
            "output_len": 48,
            "repetitions": len(runs),
            "tok_s_mean": mean,
            "tok_s_stdev": 0.0,
            "tok_s_ci95": [mean, mean],
            "tok_s_runs": runs,
            "requests": len(runs),
            "errors": 0,
            "ttft_ms": {"p50": ttft_p99 / 2, "p90": ttft_p99 * 0.9, "p99": ttft_p99},
        }
    )


def _base() -> dict[str, Any]:
    return read_stack_file("baseline", STACKS).sections


def test_every_axis_form_is_a_parameter_and_its_candidate_is_the_listed_one(tmp_path: Path) -> None:
    campaign = _campaign(
        tmp_path,
        "base: baseline\naxes:\n"
        "  - {key: server.cuda_graph_max_bs, low: 16, high: 256, step: 16}\n"
        "  - {key: server.mem_fraction_static, values: [auto, 0.82]}\n"
        "  - {key: server.max_running_requests, low: 8, high: 512, log: true}\n",
    )
    space = SearchSpace.of(campaign, _base())

    kinds = {name: type(d).__name__ for name, d in space.distributions().items()}
    assert kinds == {
        "server.cuda_graph_max_bs": "IntDistribution",
        "server.mem_fraction_static": "CategoricalDistribution",
        "server.max_running_requests": "IntDistribution",
    }
    assert space.size() == 16 * 2 * 505
    params = {
        "server.cuda_graph_max_bs": 48,
        "server.mem_fraction_static": "0.82",
        "server.max_running_requests": 64,
    }
    candidate = space.candidate(params)
    assert candidate.labels == {
        "server.cuda_graph_max_bs": "48",
        "server.mem_fraction_static": "0.82",
        "server.max_running_requests": "64",
    }
    assert candidate.sections["server"]["cuda_graph_max_bs"] == 48
    assert space.params(candidate.labels) == params
    assert space.candidate(space.params(candidate.labels)).digest == candidate.digest


def test_a_doomed_suggestion_is_told_infeasible_and_nothing_is_launched() -> None:
    campaign = load_campaign(ROOT / "campaigns" / "seeds.yaml")
    plan = make_plan("seeds", campaign, STACKS)
    randomly = campaign.model_copy(
        update={"search": campaign.search.model_copy(update={"strategy": "random"})}
    )
    search = Search.in_memory(randomly, plan.base, len(plan.kept()))

    for _ in range(40):
        trial, candidate = search.ask()
        row = judge("seeds", campaign, candidate)
        if row.verdict == "discarded":
            search.tell_infeasible(trial, row, {"stack": row.stack, "labels": candidate.labels})
            break
        search.study.tell(trial, state=TrialState.FAIL)
    else:
        pytest.fail("40 random suggestions and not one EAGLE-3 at the automatic fraction")

    (told,) = [t for t in search.study.trials if t.user_attrs.get("status") == "infeasible"]
    assert told.state == TrialState.COMPLETE
    assert told.constraints == {PREFLIGHT: 1.0, LAUNCH: 0.0}
    attributes = read_attributes(told)
    assert attributes.cause == "memory-does-not-fit"
    assert attributes.gpu_hours is None and attributes.host is None  # never launched
    assert (
        told.params["speculative"].startswith("eagle3")
        and told.params["server.mem_fraction_static"] == "auto"
    )


def test_a_missed_slo_makes_the_trial_infeasible_by_how_much(tmp_path: Path) -> None:
    campaign = _campaign(
        tmp_path,
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [8, 128]}\n"
        "workload: {concurrency: [1, 16], requests_per_repetition: 16}\n"
        "objective: {metric: tok_s, at: {concurrency: 1}}\n"
        "subject_to:\n  - {metric: ttft_p99_ms, at: {concurrency: 16}, max: 500}\n",
    )
    levels = [_level(1, [90.0, 91.0]), _level(16, [600.0, 610.0], ttft_p99=612.0)]

    evaluation = evaluate(campaign, levels)

    assert evaluation.values == (90.5,)
    assert not evaluation.feasible
    (missed,) = evaluation.violations
    assert missed.describe() == "ttft_p99_ms at concurrency 16 was 612.0 ms, 112.0 ms (22 %) over its max 500"
    assert evaluation.constraints["ttft_p99_ms@concurrency=16<=500"] == pytest.approx(0.224)


def test_a_failed_launch_and_the_slo_are_constraints_the_study_keeps(tmp_path: Path) -> None:
    campaign = _campaign(
        tmp_path,
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [8, 128, 256]}\n"
        "workload: {concurrency: [1, 16], requests_per_repetition: 16}\n"
        "subject_to:\n  - {metric: ttft_p99_ms, at: {concurrency: 16}, max: 500}\n"
        "search: {strategy: tpe}\n",
    )
    plan = make_plan("search", campaign, STACKS)
    study = open_study("search", campaign, tmp_path / "reports")
    search = Search(campaign, SearchSpace.of(campaign, plan.base), study, "tpe")
    for labels, outcome in (("8", "failed"), ("128", "slow"), ("256", "fast")):
        search.enqueue({"server.cuda_graph_max_bs": labels}, {"stack": f"search-{labels}", "labels": {}})
        trial, candidate = search.ask()
        attributes = {"stack": f"search-{labels}", "labels": candidate.labels, "host": "a", "gpu_hours": 0.1}
        if outcome == "failed":
            search.tell_failed(trial, "out_of_memory", "CUDA out of memory", attributes)
        else:
            ttft = 612.0 if outcome == "slow" else 300.0
            search.tell_measured(trial, [_level(1, [88.0, 89.0]), _level(16, [700.0], ttft)], attributes)

    found = {r.stack: r for r in records(study)}
    assert [r.status for r in found.values()] == ["failed", "done", "done"]
    assert found["search-8"].constraints[LAUNCH] == 1.0 and not found["search-8"].feasible
    assert found["search-8"].values == (0.0,)  # it served nothing
    assert found["search-128"].violations == [
        "ttft_p99_ms at concurrency 16 was 612.0 ms, 112.0 ms (22 %) over its max 500"
    ]
    assert not found["search-128"].feasible and found["search-256"].feasible
    assert found["search-256"].tok_s == 88.5 and found["search-256"].launched
    assert study.best_trial.user_attrs["stack"] == "search-256"  # the only feasible one
    reopened = open_study("search", campaign, tmp_path / "reports")  # the SQLite file keeps it all
    assert [r.model_dump() for r in records(reopened)] == [r.model_dump() for r in found.values()]


def test_the_interval_pruner_stops_a_clearly_worse_trial_and_names_both_means(tmp_path: Path) -> None:
    campaign = _campaign(
        tmp_path,
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128, 512]}\n"
        "workload: {repetitions: 4}\nearly_stop: {after_repetitions: 2}\n",
    )
    plan = make_plan("search", campaign, STACKS)
    search = Search.in_memory(campaign, plan.base, 2, total_repetitions=4)
    search.enqueue({"server.cuda_graph_max_bs": "128"}, {"stack": "fast", "labels": {}})
    search.enqueue({"server.cuda_graph_max_bs": "512"}, {"stack": "slow", "labels": {}})
    fast, _ = search.ask()
    for step, value in enumerate([88.0, 88.4, 87.9, 88.2]):
        fast.report(value, step)
    search.tell_measured(fast, [_level(1, [88.0, 88.4, 87.9, 88.2])], {"stack": "fast", "labels": {}})

    slow, _ = search.ask()
    slow.report(44.0, 0)
    slow.report(44.3, 1)

    assert slow.should_prune()
    pruner = search.study.pruner
    assert isinstance(pruner, IntervalPruner)
    reason = pruner.reason(search.study, search.study.trials[slow.number])
    assert reason is not None
    assert reason.startswith("after 2 of 4 repetitions its mean 44.1 is 49.9 % below the best's (fast: 88.1;")


def test_the_default_strategy_is_grid_until_the_kept_candidates_outnumber_the_budget(tmp_path: Path) -> None:
    text = "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [64, 128, 256, 512]}\n"
    assert make_plan("s", _campaign(tmp_path, text), STACKS).strategy == "grid"
    assert make_plan("s", _campaign(tmp_path, text + "budget: {max_trials: 4}\n"), STACKS).strategy == "grid"
    assert make_plan("s", _campaign(tmp_path, text + "budget: {max_trials: 3}\n"), STACKS).strategy == "tpe"
    real = "base: baseline\naxes:\n  - {key: server.mem_fraction_static, low: 0.7, high: 0.9}\n"
    plan = make_plan("s", _campaign(tmp_path, real), STACKS)
    assert plan.strategy == "tpe" and plan.size is None and not plan.rows


def test_the_report_lists_the_pareto_front_of_several_objectives_without_a_trial_that_missed_an_slo(
    tmp_path: Path,
) -> None:
    campaign = _campaign(
        tmp_path,
        "base: baseline\naxes:\n  - {key: server.cuda_graph_max_bs, values: [8, 64, 128, 256]}\n"
        "workload: {concurrency: [1, 16], requests_per_repetition: 16}\n"
        "objectives:\n  - {metric: tok_s_per_gpu, at: {concurrency: 16}}\n"
        "  - {metric: tok_s_per_user, at: {concurrency: 1}}\n"
        "subject_to:\n  - {metric: ttft_p99_ms, at: {concurrency: 16}, max: 500}\n"
        "search: {strategy: nsga2}\n",
    )
    plan = make_plan("search", campaign, STACKS)
    search = Search.open(plan, tmp_path / "reports" / "search")
    # bs -> (single-stream tok/s, tok/s at 16 streams, TTFT p99 at 16 streams)
    measured = {"8": (90.0, 600.0, 300.0), "64": (80.0, 800.0, 300.0), "128": (70.0, 500.0, 300.0)}
    measured["256"] = (100.0, 900.0, 612.0)  # beats every other on both, but misses the SLO
    for bs, (single, loaded, ttft) in measured.items():
        search.enqueue({"server.cuda_graph_max_bs": bs}, {"stack": f"search-{bs}", "labels": {}})
        trial, candidate = search.ask()
        attributes = {"stack": f"search-{bs}", "labels": candidate.labels, "host": "a", "gpu_hours": 0.1}
        levels = [_level(1, [single, single]), _level(16, [loaded, loaded], ttft)]
        search.tell_measured(trial, levels, attributes)

    report = write_report(plan, tmp_path / "reports").read_text()

    ranked_by = "By the first objective (tok/s per GPU at concurrency 16); the Pareto front of all follows."
    assert ranked_by in report
    front = report.split("## Pareto front", 1)[1].split("##", 1)[0]
    assert "2 trial(s) no feasible trial beats on every objective at once" in front
    rows = [line for line in front.splitlines() if line.startswith("| `")]
    # Best first on the first objective; bs 128 is beaten on both, bs 256 missed its SLO.
    assert rows == ["| `search-64` | 64 | 800.0 | 80.0 |", "| `search-8` | 8 | 600.0 | 90.0 |"]
    assert "sweep promote search --trial <stack>" in front
