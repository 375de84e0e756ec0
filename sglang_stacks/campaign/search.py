"""A campaign's search with Optuna, without any host or Pulumi: what ``sweep run`` does between two
launches, and what a simulation of a campaign calls the same way.

``Search`` is the campaign's study with its space (``space``: the axes as the study's parameters)
and its strategy's sampler and pruner (``samplers``). ``ask`` gives the next trial and its candidate;
the ``tell_*`` methods tell the study each outcome, with the trial's attributes: a candidate
preflight discards is infeasible (constraint ``preflight``), a trial that failed on its host
infeasible too (constraint ``launch``), a measured trial has the objective values and SLO
constraints ``evaluation`` gives it (a missed SLO is infeasible by how much it missed), and a
suggestion of a candidate already run gets that trial's outcome again.

A simulation does, per trial: ``trial, candidate = search.ask()``, ``row = plan.judge(...)``; a
discarded row is ``tell_infeasible``, else it measures levels and ``tell_measured`` (or
``tell_failed``); ``samplers.report_repetitions`` and the study's pruner decide an early stop.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from sglang_stacks.campaign.attributes import TrialAttributes, TrialRecord, write_attributes
from sglang_stacks.campaign.axes import Candidate
from sglang_stacks.campaign.evaluation import (
    LAUNCH,
    PREFLIGHT,
    Evaluation,
    constraint_values,
    evaluate,
    failure_values,
)
from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_search import Strategy
from sglang_stacks.campaign.objective import level_for
from sglang_stacks.campaign.plan import Plan, PlanRow, choose_strategy
from sglang_stacks.campaign.samplers import make_pruner, make_sampler, report_repetitions
from sglang_stacks.campaign.space import SearchSpace
from sglang_stacks.campaign.study import asking, open_study
from sglang_stacks.results.stats import BenchmarkResult, ci95

__all__ = ["Search"]


@dataclass
class Search:
    """One campaign's study with its space and strategy: asks for candidates and tells outcomes."""

    campaign: CampaignSpec
    space: SearchSpace
    study: optuna.Study
    strategy: Strategy

    @classmethod
    def in_memory(
        cls,
        campaign: CampaignSpec,
        base_stack: Mapping[str, Any],
        kept: int | None,
        total_repetitions: int = 1,
    ) -> Search:
        """A search whose study lives in memory (a simulation's), with the campaign's strategy
        (chosen for ``kept`` kept candidates when the campaign names none)."""
        strategy = choose_strategy(campaign, kept)
        space = SearchSpace.of(campaign, base_stack)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(
                directions=[goal.goal for goal in campaign.goals],
                sampler=make_sampler(campaign, strategy, space),
                pruner=make_pruner(campaign, total_repetitions),
            )
        return cls(campaign, space, study, strategy)

    @classmethod
    def open(cls, plan: Plan, folder: Path) -> Search:
        """The search of ``plan``'s campaign on its study (``study.open_study``), with the plan's
        strategy."""
        campaign = plan.campaign
        space = SearchSpace.of(campaign, plan.base)
        study = open_study(
            plan.name,
            campaign,
            folder,
            sampler=make_sampler(campaign, plan.strategy, space),
            pruner=make_pruner(campaign, space.repetitions()),
        )
        return cls(campaign, space, study, plan.strategy)

    def ask(self) -> tuple[optuna.Trial, Candidate]:
        """The next trial and its candidate (an enqueued one first)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # The driver records each trial's heartbeat itself (study.heartbeat), not study.optimize.
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            with asking(self.study):
                trial = self.study.ask(self.space.distributions())
        return trial, self.space.candidate(trial.params)

    def enqueue(self, labels: Mapping[str, str], attributes: Mapping[str, Any]) -> None:
        """Queue a candidate (by its labels) for the next ``ask``, whatever the sampler says."""
        queued = TrialAttributes.model_validate({"labels": labels, "status": "queued"} | dict(attributes))
        self.study.enqueue_trial(
            self.space.params(labels),
            user_attrs=queued.model_dump(mode="json", exclude_defaults=True) | {"status": "queued"},
        )

    def _tell(self, trial: optuna.Trial, outcome: _Outcome) -> None:
        write_attributes(self.study, trial._trial_id, **outcome.attributes)
        report_repetitions(trial, outcome.intermediate)
        for key, value in outcome.constraints.items():
            trial.set_constraint(key, value)
        if outcome.state == TrialState.COMPLETE:
            self.study.tell(trial, list(outcome.values))
        else:
            self.study.tell(trial, state=outcome.state)

    def tell_infeasible(self, trial: optuna.Trial, row: PlanRow, attributes: Mapping[str, Any]) -> None:
        """A candidate preflight discarded: infeasible, nothing launched."""
        reasons = list(row.reasons)
        cause = reasons[0].split(":", 1)[0] if reasons else PREFLIGHT
        fields = dict(attributes) | {"status": "infeasible", "cause": cause, "message": "; ".join(reasons)}
        self._tell(trial, self._failure(fields, PREFLIGHT))

    def tell_failed(
        self, trial: optuna.Trial, cause: str, message: str, attributes: Mapping[str, Any]
    ) -> None:
        """A trial that failed on its host (OOM at load, a crash, a hang): infeasible, so the
        sampler learns to avoid its region."""
        fields = dict(attributes) | {"status": "failed", "cause": cause, "message": message}
        self._tell(trial, self._failure(fields, LAUNCH))

    def tell_measured(
        self,
        trial: optuna.Trial,
        levels: Sequence[BenchmarkResult],
        attributes: Mapping[str, Any],
        *,
        stopped_early: str | None = None,
    ) -> Evaluation:
        """A measured trial: complete with its objective values (pruned when it stopped early),
        its SLO constraints set, its tok/s and interval in its attributes. The first objective's
        samples are its intermediate values, unless the trial reported them already.
        BenchmarkError when its levels lack what the campaign reads."""
        outcome, evaluation = self._measured(attributes, levels, stopped_early)
        if self.study._storage.get_trial(trial._trial_id).intermediate_values:
            outcome = dataclasses.replace(outcome, intermediate=())  # reported as it ran
        self._tell(trial, outcome)
        return evaluation

    def record(self, attributes: TrialAttributes) -> Evaluation | None:
        """Add a trial whose outcome was measured elsewhere (the saved result of a killed sweep,
        a trial of the previous release's sweep file), as the ``tell_*`` functions would have told
        it: measured (``status`` measured or done, with levels) or failed. KeyError when its labels
        are no point of the campaign's axes any more; BenchmarkError as for ``tell_measured``."""
        fields = attributes.model_dump(exclude_defaults=True, exclude={"status"})
        params = self.space.params(attributes.labels)
        evaluation = None
        if attributes.status == "failed":
            outcome = self._failure(fields | {"status": "failed"}, LAUNCH)
        else:
            outcome, evaluation = self._measured(fields, attributes.levels, attributes.stopped_early)
        self.study.add_trial(
            optuna.trial.create_trial(
                state=outcome.state,
                values=list(outcome.values) if outcome.state == TrialState.COMPLETE else None,
                params=params,
                distributions=self.space.distributions(),
                user_attrs=TrialAttributes.model_validate(outcome.attributes).model_dump(
                    mode="json", exclude_defaults=True
                ),
                intermediate_values=dict(enumerate(outcome.intermediate)),
                constraints=dict(outcome.constraints),
            )
        )
        return evaluation

    def _failure(self, attributes: Mapping[str, Any], violated: str) -> _Outcome:
        return _Outcome(
            TrialState.COMPLETE,
            tuple(failure_values(self.campaign)),
            constraint_values(self.campaign, **{violated: 1.0}),
            dict(attributes),
        )

    def _measured(
        self, attributes: Mapping[str, Any], levels: Sequence[BenchmarkResult], stopped_early: str | None
    ) -> tuple[_Outcome, Evaluation]:
        gpus = int(attributes.get("gpus", 1))
        evaluation = evaluate(self.campaign, levels, gpus)
        result = level_for(self.campaign.goals[0].level, levels)
        fields = dict(attributes) | {
            "status": "done",
            "levels": list(levels),
            "tok_s": result.tok_s_mean,
            "tok_s_ci95": ci95(result.tok_s_runs),
            "accept_length": result.accept_length,
            "stopped_early": stopped_early,
            "violations": [v.describe() for v in evaluation.violations],
        }
        intermediate = evaluation.samples if self.campaign.early_stop is not None else ()
        state = TrialState.PRUNED if stopped_early is not None else TrialState.COMPLETE
        constraints = constraint_values(self.campaign) | evaluation.constraints
        return _Outcome(state, evaluation.values, constraints, fields, intermediate), evaluation

    def requeue(self, trial: optuna.Trial, attributes: TrialAttributes, cause: str, message: str) -> None:
        """A trial that could not run because its host was held (by another driver's trial, or a
        claim of another stack): no failure of its candidate. It is failed as ``requeued`` (nothing
        launched: no GPU time, no budget spent, nothing for the sampler to learn) and its candidate
        queued again."""
        write_attributes(self.study, trial._trial_id, status="requeued", cause=cause, message=message)
        self.study.tell(trial, state=TrialState.FAIL)
        self.enqueue(attributes.labels, {"stack": attributes.stack, "replaces": trial.number})

    def tell_duplicate(
        self, trial: optuna.Trial, earlier: TrialRecord, attributes: Mapping[str, Any]
    ) -> None:
        """A suggestion of a candidate an earlier trial ran: that trial's outcome again, nothing
        launched (the sampler learns nothing new from it, and is not stuck on it)."""
        fields = dict(attributes) | {"status": "duplicate", "duplicate_of": earlier.number}
        constraints = dict(earlier.constraints) or constraint_values(self.campaign)
        if earlier.state == "COMPLETE" and earlier.values is not None:
            self._tell(trial, _Outcome(TrialState.COMPLETE, tuple(earlier.values), constraints, fields))
        else:
            self._tell(trial, _Outcome(TrialState.FAIL, (), constraints, fields))


@dataclass(frozen=True)
class _Outcome:
    """What the study is told about one trial."""

    state: TrialState
    values: tuple[float, ...]
    constraints: dict[str, float]
    attributes: dict[str, Any]
    intermediate: tuple[float, ...] = ()
