"""Early stop without any host: when a candidate's first repetitions make it clearly worse than the
best full trial, and how the two parts of a continued trial join into one result."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.campaign.early_stop import clearly_worse, merge_levels
from sglang_stacks.campaign.model import ObjectiveSpec, load_campaign
from sglang_stacks.campaign.plan import make_plan
from sglang_stacks.campaign.runner import Sweep
from sglang_stacks.campaign.state import SweepState, TrialRecord
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult, ci95
from tests._pulumi import emulator_stack


def _level(runs: list[float], concurrency: int = 1) -> dict[str, Any]:
    return {
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


def _record(stack: str, runs: list[float], stopped: str | None = None) -> TrialRecord:
    return TrialRecord(stack=stack, labels={}, status="done", levels=[_level(runs)], stopped_early=stopped)


BEST = _record("fast", [88.0, 88.4, 87.9, 88.2])


def test_a_candidate_whose_interval_lies_below_the_best_stops_with_both_intervals_named() -> None:
    reason = clearly_worse(ObjectiveSpec(), [_level([44.0, 44.3])], [BEST], 4)

    assert reason is not None
    low, high = ci95([88.0, 88.4, 87.9, 88.2])
    assert reason.startswith("after 2 of 4 repetitions its 95 % interval (")
    assert reason.endswith(f"lies below the best's (fast: {low:.1f} to {high:.1f})")


def test_a_candidate_whose_interval_reaches_the_best_goes_on() -> None:
    # Slower on average, but two noisy runs leave an interval that reaches the best's.
    assert clearly_worse(ObjectiveSpec(), [_level([80.0, 87.0])], [BEST], 4) is None


def test_without_a_full_trial_yet_every_candidate_goes_on() -> None:
    stopped_one = _record("slow", [40.0, 40.1], stopped="after 2 of 4 repetitions ...")

    assert clearly_worse(ObjectiveSpec(), [_level([30.0, 30.1])], [stopped_one], 4) is None
    assert clearly_worse(ObjectiveSpec(), [_level([30.0, 30.1])], [], 4) is None


def test_the_two_parts_of_a_trial_join_into_one_result_over_all_runs() -> None:
    [joined] = merge_levels([_level([88.0, 88.4])], [_level([87.9, 88.2])])

    assert joined["tok_s_runs"] == [88.0, 88.4, 87.9, 88.2]
    assert joined["repetitions"] == 4 and joined["requests"] == 4
    assert abs(joined["tok_s_mean"] - 88.125) < 1e-9
    assert tuple(joined["tok_s_ci95"]) == ci95([88.0, 88.4, 87.9, 88.2])


class _NothingDeployed:
    """Stands in for the trial runner of a killed sweep whose trial stack holds nothing."""

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        del stack, clear_pending


@pytest.mark.parametrize("how", ["killed", "ctrl-c"])
@pytest.mark.parametrize(
    ("early_stop", "resumed"), [("", "done"), ("early_stop: {after_repetitions: 2}\n", "pending")]
)
def test_an_interrupted_trial_keeps_its_recorded_result_unless_it_may_be_a_first_part_only(
    tmp_path: Path, early_stop: str, resumed: str, how: str
) -> None:
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        "base: base\naxes:\n  - {key: server.cuda_graph_max_bs, values: [128]}\n"
        f"workload: {{repetitions: 4}}\n{early_stop}"
        "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}}\n"
    )
    plan = make_plan("c", load_campaign(campaign), tmp_path)
    state = SweepState.open(tmp_path / "reports", "c")
    db = tmp_path / "history.sqlite"
    sweep = Sweep(plan, tmp_path, tmp_path / "reports", db, state, _NothingDeployed())  # type: ignore[arg-type]
    sweep.sync()
    [stack] = [row.stack for row in plan.kept()]
    state.update(stack, status="running", host="a", started_at=time.time() - 60)
    # The interruption came after a benchmark wrote its row: with early stop, maybe a first part's.
    history.record(db, stack, "digest", "0.5.8", "cmd", BenchmarkResult.model_validate(_level([88.0, 88.4])))

    if how == "killed":
        sweep.recover()  # the next `sweep run` settles it
    else:
        sweep._interrupted(stack)  # what the trial's worker does when Ctrl-C cut its update short

    [record] = state.trials()
    assert record.status == resumed
    assert len(record.levels) == (1 if resumed == "done" else 0)
