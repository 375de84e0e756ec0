"""The sweep's trial loop on an in-memory study, its trial stacks stood in for: a suggestion does not
read again what the study says of the trials already finished or queued (a long search's CPU grew
with the square of its trials)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.campaign import attributes
from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.model import load_campaign
from sglang_stacks.campaign.plan import Plan, PlanRow, make_plan
from sglang_stacks.campaign.search import Search
from sglang_stacks.campaign.sweep import Sweep
from sglang_stacks.campaign.trial import TrialFailure
from tests._pulumi import emulator_stack

SIZES = list(range(8, 488, 8))  # 60 candidates


def _plan(tmp_path: Path) -> Plan:
    (tmp_path / "Pulumi.base.yaml").write_text(emulator_stack(port=30000, state_dir=tmp_path))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        f"base: base\naxes:\n  - {{key: server.cuda_graph_max_bs, values: {SIZES}}}\n"
        "workload: {repetitions: 2}\nsearch: {strategy: grid}\n"
        "pool:\n  - {name: a, host: {kind: emulator, state_dir: /tmp/a}}\n"
    )
    return make_plan("c", load_campaign(campaign), tmp_path)


def _level() -> dict[str, Any]:
    return {
        "concurrency": 1,
        "input_len": 32,
        "output_len": 48,
        "repetitions": 2,
        "tok_s_mean": 88.0,
        "tok_s_stdev": 0.1,
        "tok_s_ci95": [87.1, 88.9],
        "tok_s_runs": [87.9, 88.1],
        "requests": 2,
        "errors": 0,
        "ttft_ms": {"p50": 40.0, "p90": 41.0, "p99": 42.0},
    }


class _Measured:
    """Stands in for the trial runner: every trial measures one level; its stack holds nothing."""

    def deploy(
        self, row: PlanRow, host: object, overrides: object = None, **_: object
    ) -> list[dict[str, Any]]:
        return [_level()]

    def destroy(self, stack: str, *, clear_pending: bool = False) -> None:
        del stack, clear_pending

    def settle(self, stack: str) -> list[str]:
        return []

    def failure(self, stack: str, error: Exception) -> TrialFailure:
        return TrialFailure("other", str(error))


def _sweep(tmp_path: Path, trials: object) -> Sweep:
    plan = _plan(tmp_path)
    search = Search.in_memory(plan.campaign, plan.base, len(plan.kept()), 2)
    sweep = Sweep(plan, tmp_path, tmp_path / "reports", tmp_path / "history.sqlite", search, trials)  # type: ignore[arg-type]
    sweep.prepare()
    return sweep


def test_a_suggestion_reads_no_finished_or_queued_trial_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = _sweep(tmp_path, _Measured())
    host = sweep.plan.campaign.pool[0]
    for _ in range(20):
        picked = sweep.next_trial(host)
        assert picked is not None
        sweep.run_trial(picked, host)
    before = {r.number: r.state for r in sweep.records()}  # as the progress display reads them
    assert list(before.values()).count("COMPLETE") == 20 and list(before.values()).count("WAITING") == 40
    read: list[int] = []
    record = attributes._record

    def counted(study: Any, trial: Any) -> TrialRecord | None:
        read.append(trial.number)
        return record(study, trial)

    monkeypatch.setattr(attributes, "_record", counted)

    picked = sweep.next_trial(host)

    assert picked is not None and before[picked.trial.number] == "WAITING"
    assert set(read) == {picked.trial.number}  # the queued trial it took, now running; no other
