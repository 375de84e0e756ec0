"""Early stop without any host: when a candidate's first repetitions make it clearly worse than the
best full trial (the rule and the study's pruner), how the two parts of a continued trial join into
one result, and which result an interrupted trial keeps."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from sglang_stacks.campaign.attributes import Driver, records, write_attributes
from sglang_stacks.campaign.early_stop import clearly_worse, merge_levels
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import Plan, make_plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult, Noise, ci95
from tests._pulumi import emulator_stack


def _level(runs: list[float], concurrency: int = 1) -> BenchmarkResult:
    return BenchmarkResult.model_validate(
        {
            "concurrency": concurrency,
            "input_len": 32,
            "output_len": 48,
            "repetitions": len(runs),
            "tok_s_mean": sum(runs) / len(runs),
            "tok_s_stdev": 0.0,
            "tok_s_ci95": [0.0, 0.0],
            "tok_s_runs": runs,
            "requests": len(runs),
            "errors": 0,
            "ttft_ms": {"p50": 40.0, "p90": 41.0, "p99": 42.0},
        }
    )


BEST = ("fast", [88.0, 88.4, 87.9, 88.2])


def test_a_candidate_clearly_below_the_best_stops_with_both_means_named() -> None:
    reason = clearly_worse([44.0, 44.3], BEST, 4)

    assert reason is not None
    assert reason.startswith(
        "after 2 of 4 repetitions its mean 44.1 is 49.9 % below the best's (fast: 88.1; p"
    )
    assert reason.endswith(", beyond the 2.8 % margin)")


def test_a_candidate_whose_runs_reach_the_best_goes_on() -> None:
    # Slower on average, but two noisy runs do not tell it from the best.
    assert clearly_worse([80.0, 87.0], BEST, 4) is None


def test_a_candidate_a_launch_away_from_the_best_goes_on() -> None:
    # 0.5 % below the best, with repetitions tight enough to call that significant on their own:
    # one launch or host alone makes such a difference, so early stop must not drop it (the same
    # rule the ranking's verdict uses).
    close = [87.64, 87.66]
    assert clearly_worse(close, BEST, 4, noise=Noise(launch_cv_pct=0.0, min_effect_pct=0.0)) is not None
    assert clearly_worse(close, BEST, 4) is None


def test_a_latency_objective_stops_a_candidate_clearly_slower_to_answer() -> None:
    reason = clearly_worse([90.0, 91.0], ("quick", [40.0, 41.0, 40.5]), 4, minimize=True)

    assert reason is not None and "% above the best's (quick: 40.5; " in reason


def _campaign(tmp_path: Path, early_stop: str) -> Plan:
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        "base: base\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128, 512]}\n"
        f"workload: {{repetitions: 4}}\n{early_stop}"
        "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}}\n"
    )
    return make_plan("c", load_campaign(campaign), tmp_path)


def test_without_a_full_trial_yet_every_candidate_goes_on(tmp_path: Path) -> None:
    plan = _campaign(tmp_path, "early_stop: {after_repetitions: 2}\n")
    search = Search.open(plan, tmp_path / "reports")
    stopped, _ = search.ask()
    stopped.report(40.0, 0)
    stopped.report(40.1, 1)
    search.tell_measured(
        stopped, [_level([40.0, 40.1])], {"stack": "slow", "labels": {}}, stopped_early="..."
    )
    trial, _ = search.ask()
    trial.report(30.0, 0)
    trial.report(30.1, 1)

    assert not trial.should_prune()  # a stopped trial is no full trial to compare with


def test_the_two_parts_of_a_trial_join_into_one_result_over_all_runs() -> None:
    [joined] = merge_levels([_level([88.0, 88.4])], [_level([87.9, 88.2])])

    assert joined.tok_s_runs == (88.0, 88.4, 87.9, 88.2)
    assert joined.repetitions == 4 and joined.requests == 4
    assert abs(joined.tok_s_mean - 88.125) < 1e-9
    assert tuple(joined.tok_s_ci95) == ci95([88.0, 88.4, 87.9, 88.2])


class _NothingDeployed:
    """Stands in for the trial runner of a sweep whose trial stack holds nothing."""

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        del stack, clear_pending

    def settle(self, stack: str) -> list[str]:
        del stack
        return []


def _gone() -> Driver:
    """A driver of this machine that no longer runs."""
    child = subprocess.Popen(["true"])
    child.wait()
    return Driver(machine=socket.gethostname(), pid=child.pid, start_ticks=1)


@pytest.mark.parametrize("how", ["killed", "ctrl-c"])
@pytest.mark.parametrize(
    ("early_stop", "kept"), [("", True), ("early_stop: {after_repetitions: 2}\n", False)]
)
def test_an_interrupted_trial_keeps_its_recorded_result_unless_it_may_be_a_first_part_only(
    tmp_path: Path, early_stop: str, kept: bool, how: str
) -> None:
    plan = _campaign(tmp_path, early_stop)
    db = tmp_path / "history.sqlite"
    search = Search.open(plan, tmp_path / "reports")
    sweep = Sweep(plan, tmp_path, tmp_path / "reports", db, search, _NothingDeployed())  # type: ignore[arg-type]
    sweep.prepare()
    picked = sweep.next_trial(plan.campaign.pool[0])
    assert picked is not None
    stack = picked.attributes.stack
    write_attributes(search.study, picked.trial._trial_id, started_at=time.time() - 60)
    # The interruption came after a benchmark wrote its row: with early stop, maybe a first part's.
    history.record(db, stack, "digest", "0.5.8", "cmd", _level([88.0, 88.4]))

    if how == "killed":
        write_attributes(search.study, picked.trial._trial_id, driver=_gone())
        Sweep(plan, tmp_path, tmp_path / "reports", db, search, _NothingDeployed()).prepare()  # type: ignore[arg-type]
    else:
        sweep._interrupted(picked)  # what the trial's worker does when Ctrl-C cut its update short

    of_stack = [r for r in records(search.study) if r.stack == stack]
    if kept:
        assert [r.status for r in of_stack if r.state == "COMPLETE"] == ["done"]
        assert [r.levels[0].tok_s_runs for r in of_stack if r.state == "COMPLETE"] == [(88.0, 88.4)]
    else:
        assert [r.state for r in of_stack] == ["FAIL", "WAITING"]  # queued to run again, from the start
        assert of_stack[1].replaces == of_stack[0].number and of_stack[0].status == "interrupted"
