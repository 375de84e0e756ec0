"""Searching a campaign's space with Optuna, without any host or Pulumi: what ``sweep run`` does
between two launches, and what a simulation of a campaign calls the same way.

- ``SearchSpace``: each axis is one parameter of the study (a list or zipped axis a categorical
  one over its labels, a ``low``/``high`` interval an integer or real one); a trial's parameters
  make one ``Candidate``.
- ``choose_strategy`` and ``make_sampler``: ``grid`` (every kept candidate, enqueued in file
  order), ``random``, ``tpe`` (the default once the kept candidates outnumber the budget) and
  ``nsga2``; ``make_pruner``: the interval rule of ``early_stop`` as an Optuna pruner.
- ``evaluate``: the objectives and SLO constraints of a trial's benchmark levels.
- ``Search``: a campaign's study with its space and strategy; ``ask`` gives the next trial and
  its candidate, the ``tell_*`` methods what the study is told for each outcome, with the trial's
  attributes. A candidate preflight discards is told infeasible (constraint ``preflight``) and a
  trial that failed on its host infeasible too (constraint ``launch``), so the sampler learns to
  stay away from both; a trial that misses an SLO is infeasible by how much it missed.

A simulation does, per trial: ``trial, candidate = search.ask()``, ``row = plan.judge(...)``; a
discarded row is ``tell_infeasible``, else it measures levels and ``tell_measured`` (or
``tell_failed``); ``report_repetitions`` and the study's pruner decide an early stop.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from sglang_stacks.campaign.attributes import TrialAttributes, write_attributes
from sglang_stacks.campaign.axes import Candidate, candidate_base, combine
from sglang_stacks.campaign.early_stop import IntervalPruner
from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_axes import Axis
from sglang_stacks.campaign.model_goals import ConstraintSpec
from sglang_stacks.campaign.model_search import Strategy
from sglang_stacks.campaign.objective import level_for, measure, unit
from sglang_stacks.campaign.plan import Plan, PlanRow, choose_strategy
from sglang_stacks.campaign.study import open_study
from sglang_stacks.config.spec import BenchmarkSpec
from sglang_stacks.results.stats import ci95, mean

__all__ = [
    "LAUNCH",
    "PREFLIGHT",
    "Evaluation",
    "Search",
    "SearchSpace",
    "Violation",
    "choose_strategy",
    "evaluate",
    "failure_values",
    "make_pruner",
    "make_sampler",
    "report_repetitions",
    "startup_trials",
]

PREFLIGHT = "preflight"
"""The constraint a candidate preflight discards violates (1.0); 0 for every other trial."""
LAUNCH = "launch"
"""The constraint a trial that failed on its host violates (1.0); 0 for every other trial."""


@dataclass(frozen=True)
class SearchSpace:
    """The campaign's axes as the study's parameters, on the candidates' base sections."""

    campaign: CampaignSpec
    base: dict[str, Any]
    """The sections every candidate starts from (``candidate_base`` of the base stack)."""

    @classmethod
    def of(cls, campaign: CampaignSpec, base_stack: Mapping[str, Any]) -> SearchSpace:
        """The space of ``campaign`` over its base stack's sections."""
        return cls(campaign, candidate_base(campaign, base_stack))

    def distributions(self) -> dict[str, BaseDistribution]:
        """Axis title -> its distribution."""
        return {axis.title: _distribution(axis) for axis in self.campaign.axes}

    def repetitions(self) -> int:
        """How many repetitions each trial's benchmark measures."""
        return BenchmarkSpec.model_validate(self.base.get("benchmark") or {}).repetitions

    def size(self) -> int | None:
        """How many combinations the axes make; None when an axis is a real interval without step."""
        counts = [axis.count() for axis in self.campaign.axes]
        return None if None in counts else math.prod(c for c in counts if c is not None)

    def candidate(self, params: Mapping[str, Any]) -> Candidate:
        """The candidate of a trial's parameters (axis title -> label, or number on an interval)."""
        points: dict[str, tuple[str, dict[str, Any]]] = {}
        for axis in self.campaign.axes:
            value = params[axis.title]
            if axis.interval:
                points[axis.title] = axis.value_at(value)
            else:
                points[axis.title] = dict((label, (label, p)) for label, p in axis.points())[str(value)]
        return combine(self.base, points)

    def params(self, labels: Mapping[str, str]) -> dict[str, Any]:
        """A candidate's parameters from its labels (to enqueue or import it); KeyError when the
        labels do not name a point of every axis."""
        found: dict[str, Any] = {}
        for axis in self.campaign.axes:
            label = labels[axis.title]
            if axis.interval:
                found[axis.title] = int(label) if axis.integer else float(label)
            elif label in {point for point, _ in axis.points()}:
                found[axis.title] = label
            else:
                raise KeyError(label)
        return found

    def gpus(self, labels: Mapping[str, str]) -> int:
        """GPUs the server of the candidate with ``labels`` uses (its ``tp_size``); 1 when the labels
        are no point of the axes."""
        try:
            candidate = self.candidate(self.params(labels))
        except KeyError:
            return 1
        return int((candidate.sections.get("server") or {}).get("tp_size") or 1)

    def flags(self, candidate: Candidate) -> dict[str, str]:
        """The keys the candidate sets to something else than the base stack has, with its labels."""
        changed: dict[str, str] = {}
        for key, value in candidate.assignments.items():
            node: Any = self.base
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            unset = value is None or value == "auto"
            if (node is None and not unset) or (node is not None and node != value):
                changed[key] = "auto" if unset else ("set" if isinstance(value, dict) else str(value))
        return changed


def _distribution(axis: Axis) -> BaseDistribution:
    if not axis.interval:
        return CategoricalDistribution([label for label, _ in axis.points()])
    assert axis.low is not None and axis.high is not None
    if axis.integer:
        step = int(axis.step or 1)
        high = int(axis.low + (int(axis.high) - int(axis.low)) // step * step)
        return IntDistribution(int(axis.low), high, log=axis.log, step=step)
    high_value = float(axis.high)
    if axis.step is not None:  # Optuna wants high on the grid of low + k * step
        count = axis.count()
        assert count is not None
        high_value = float(axis.low) + (count - 1) * float(axis.step)
    return FloatDistribution(float(axis.low), high_value, log=axis.log, step=axis.step)


def startup_trials(campaign: CampaignSpec, strategy: Strategy) -> int:
    """TPE's random suggestions before its model, or NSGA-II's population."""
    if campaign.search.startup_trials is not None:
        return campaign.search.startup_trials
    if strategy == "nsga2":
        return 8
    limit = campaign.budget.max_trials
    return 10 if limit is None else min(10, max(4, limit // 4))


def make_sampler(campaign: CampaignSpec, strategy: Strategy) -> optuna.samplers.BaseSampler:
    """The sampler of ``strategy``, seeded with ``search.seed``. ``grid`` enqueues its candidates
    instead of sampling (``sweep run`` does it): a random sampler stands behind it."""
    seed = campaign.search.seed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if strategy == "tpe":
            return optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=startup_trials(campaign, strategy),
                multivariate=True,
                constant_liar=True,  # the hosts' running trials are not suggested again meanwhile
            )
        if strategy == "nsga2":
            return optuna.samplers.NSGAIISampler(
                seed=seed, population_size=startup_trials(campaign, strategy)
            )
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(campaign: CampaignSpec, total_repetitions: int) -> optuna.pruners.BasePruner:
    """The interval rule (``early_stop``) as a pruner, or none."""
    if campaign.early_stop is None:
        return optuna.pruners.NopPruner()
    return IntervalPruner(total_repetitions)


@dataclass(frozen=True)
class Violation:
    """One SLO constraint a trial missed."""

    constraint: ConstraintSpec
    measured: float

    @property
    def by(self) -> float:
        """How far beyond the bound, in the metric's unit."""
        bound = self.constraint.max if self.constraint.max is not None else self.constraint.min
        assert bound is not None
        return abs(self.measured - bound)

    def describe(self) -> str:
        """``ttft_p99_ms at concurrency 16 was 612.0 ms, 112.0 ms (22 %) over its max 500``."""
        spec = self.constraint
        bound = spec.max if spec.max is not None else spec.min
        assert bound is not None
        side = "over its max" if spec.max is not None else "under its min"
        share = f" ({self.by / abs(bound) * 100:.0f} %)" if bound else ""
        what = unit(spec.metric)
        return (
            f"{spec.metric} at {spec.at.describe()} was {self.measured:.1f} {what}, {self.by:.1f} {what}"
            f"{share} {side} {bound:g}"
        )


@dataclass(frozen=True)
class Evaluation:
    """A measured trial judged by the campaign: its objective values, the first objective's
    samples, and its SLO constraints."""

    values: tuple[float, ...]
    """Per objective: the mean of its samples."""
    samples: tuple[float, ...]
    """The first objective's samples (one per repetition for throughputs)."""
    constraints: dict[str, float] = field(default_factory=dict)
    """Constraint name -> how far beyond its bound, relative to it (0 when met)."""
    violations: tuple[Violation, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.violations


def _relative_excess(spec: ConstraintSpec, measured: float) -> float:
    if spec.max is not None:
        return max(0.0, (measured - spec.max) / (abs(spec.max) or 1.0))
    assert spec.min is not None
    return max(0.0, (spec.min - measured) / (abs(spec.min) or 1.0))


def evaluate(campaign: CampaignSpec, levels: Sequence[Mapping[str, Any]], gpus: int = 1) -> Evaluation:
    """The objectives and constraints of a trial that measured ``levels`` with a server on ``gpus``
    GPUs. Raises BenchmarkError when a level or metric the campaign reads is missing."""
    per_goal = [measure(goal.metric, goal.level, levels, gpus) for goal in campaign.goals]
    constraints = {PREFLIGHT: 0.0, LAUNCH: 0.0}
    violations: list[Violation] = []
    for spec in campaign.subject_to:
        measured = mean(measure(spec.metric, spec.at, levels, gpus))
        excess = _relative_excess(spec, measured)
        constraints[spec.name] = excess
        if excess > 0:
            violations.append(Violation(spec, measured))
    return Evaluation(tuple(mean(s) for s in per_goal), per_goal[0], constraints, tuple(violations))


def failure_values(campaign: CampaignSpec) -> list[float]:
    """What a trial that served nothing scores on each objective: no throughput, endless latency.
    The samplers rank it by its violated constraint, not by these."""
    return [0.0 if goal.goal == "maximize" else math.inf for goal in campaign.goals]


def _all_constraints(campaign: CampaignSpec, **violated: float) -> dict[str, float]:
    found = {PREFLIGHT: 0.0, LAUNCH: 0.0} | {spec.name: 0.0 for spec in campaign.subject_to}
    return found | violated


def report_repetitions(trial: optuna.Trial, samples: Sequence[float]) -> None:
    """Report the first objective's samples as the trial's intermediate values, one step per
    repetition: what the interval pruner reads."""
    for step, value in enumerate(samples):
        trial.report(value, step)


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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(
                directions=[goal.goal for goal in campaign.goals],
                sampler=make_sampler(campaign, strategy),
                pruner=make_pruner(campaign, total_repetitions),
            )
        return cls(campaign, SearchSpace.of(campaign, base_stack), study, strategy)

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
            sampler=make_sampler(campaign, plan.strategy),
            pruner=make_pruner(campaign, space.repetitions()),
        )
        return cls(campaign, space, study, plan.strategy)

    def ask(self) -> tuple[optuna.Trial, Candidate]:
        """The next trial and its candidate (an enqueued one first)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # The driver records each trial's heartbeat itself (study.heartbeat), not study.optimize.
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
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
        for step, value in enumerate(outcome.intermediate):
            trial.report(value, step)
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
        levels: Sequence[Mapping[str, Any]],
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
            _all_constraints(self.campaign, **{violated: 1.0}),
            dict(attributes),
        )

    def _measured(
        self, attributes: Mapping[str, Any], levels: Sequence[Mapping[str, Any]], stopped_early: str | None
    ) -> tuple[_Outcome, Evaluation]:
        gpus = int(attributes.get("gpus", 1))
        evaluation = evaluate(self.campaign, levels, gpus)
        result = level_for(self.campaign.goals[0].level, levels)
        fields = dict(attributes) | {
            "status": "done",
            "levels": [dict(level) for level in levels],
            "tok_s": result.tok_s_mean,
            "tok_s_ci95": ci95(result.tok_s_runs),
            "accept_length": result.accept_length,
            "stopped_early": stopped_early,
            "violations": [v.describe() for v in evaluation.violations],
        }
        intermediate = evaluation.samples if self.campaign.early_stop is not None else ()
        state = TrialState.PRUNED if stopped_early is not None else TrialState.COMPLETE
        constraints = _all_constraints(self.campaign) | evaluation.constraints
        return _Outcome(state, evaluation.values, constraints, fields, intermediate), evaluation

    def tell_duplicate(
        self, trial: optuna.Trial, earlier: optuna.trial.FrozenTrial, attributes: Mapping[str, Any]
    ) -> None:
        """A suggestion of a candidate an earlier trial ran: that trial's outcome again, nothing
        launched (the sampler learns nothing new from it, and is not stuck on it)."""
        fields = dict(attributes) | {"status": "duplicate", "duplicate_of": earlier.number}
        constraints = dict(earlier.constraints) or _all_constraints(self.campaign)
        if earlier.state == TrialState.COMPLETE and earlier.values is not None:
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
