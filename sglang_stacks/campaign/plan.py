"""A campaign's plan: every candidate kept, or discarded with the reason, before any host is
touched, and the strategy that searches the kept ones.

Each candidate's sections are validated as a stack spec (on the pool's first host: the pool's
hosts declare like GPUs) and run through preflight, whose memory planner, SM120 rules and
speculative-shape rules are the same that stop ``pulumi up`` (``judge``). A space of more than
``PLAN_LIMIT`` candidates (or with a real interval) is not listed: the search judges each
suggestion as it comes. With ``grid``, kept candidates beyond the budget's ``max_trials`` are
marked over budget; the other strategies choose which to run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sglang_stacks.campaign.axes import Candidate, bind_host, expand, trial_stack_name
from sglang_stacks.campaign.axis_keys import check_axis_keys
from sglang_stacks.campaign.axis_values import check_axis_values
from sglang_stacks.campaign.model import CampaignSpec, load_campaign
from sglang_stacks.campaign.model_pool import describe_pool
from sglang_stacks.campaign.model_search import Strategy
from sglang_stacks.config.execution import execute_all
from sglang_stacks.config.preflight import stack_findings
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.errors import SpecError

__all__ = [
    "PLAN_LIMIT",
    "Plan",
    "PlanRow",
    "choose_strategy",
    "format_plan",
    "judge",
    "make_plan",
    "plan_campaign",
]

Verdict = Literal["kept", "discarded", "over_budget"]
PLAN_LIMIT = 20_000
"""The most candidates a plan lists (and preflights, about 1 ms each) before any trial."""


@dataclass(frozen=True)
class PlanRow:
    """One candidate's fate."""

    stack: str
    candidate: Candidate
    verdict: Verdict
    reasons: tuple[str, ...] = ()
    """Why it was discarded: ``code: message`` per preflight error, or the spec problem."""
    warnings: tuple[str, ...] = ()
    """Preflight warning codes of a kept candidate (custom all-reduce over PCIe, ...)."""
    spec: StackSpec | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Plan:
    """A campaign's candidates in order, with its name, spec, base stack and search strategy."""

    name: str
    campaign: CampaignSpec
    rows: tuple[PlanRow, ...]
    base: dict[str, Any] = field(default_factory=dict, compare=False)
    """The base stack's sections."""
    strategy: Strategy = "grid"
    size: int | None = None
    """How many combinations the axes make (None: a real interval, no end to them)."""

    @property
    def listed(self) -> bool:
        """Whether every candidate is in ``rows`` (the space is at most ``PLAN_LIMIT``)."""
        return self.size is not None and self.size <= PLAN_LIMIT

    def kept(self) -> list[PlanRow]:
        """The candidates the plan keeps, in file order."""
        return [row for row in self.rows if row.verdict == "kept"]


def choose_strategy(campaign: CampaignSpec, kept: int | None) -> Strategy:
    """The campaign's strategy, or the default: ``grid`` while the kept candidates (None: too
    many to list) fit in ``budget.max_trials``, else ``tpe``."""
    if campaign.search.strategy is not None:
        return campaign.search.strategy
    limit = campaign.budget.max_trials
    if kept is None or (limit is not None and kept > limit):
        return "tpe"
    return "grid"


def judge(name: str, campaign: CampaignSpec, candidate: Candidate) -> PlanRow:
    stack = trial_stack_name(name, candidate)
    sections = bind_host(candidate.sections, campaign.pool[0])
    try:
        spec = load_spec(sections, stack)
    except SpecError as error:
        detail = str(error).split("\n", 1)[-1].replace("  - ", "").replace("\n", " ")
        return PlanRow(stack, candidate, "discarded", (f"invalid-stack: {detail}",))
    findings = stack_findings(spec)
    errors = tuple(f"{f.code}: {f.message}" for f in findings if f.severity == "error")
    if errors:
        return PlanRow(stack, candidate, "discarded", errors, spec=spec)
    warnings = tuple(f.code for f in findings if f.severity == "warning")
    return PlanRow(stack, candidate, "kept", warnings=warnings, spec=spec)


def _execute_together(name: str, campaign: CampaignSpec, candidates: list[Candidate]) -> None:
    """Each candidate's launch resolved by its release's own code, one child interpreter per release
    for all of them, before ``judge`` asks one at a time (a child takes seconds to start)."""
    judged: list[tuple[StackSpec, str]] = []
    for candidate in candidates:
        try:
            spec = load_spec(
                bind_host(candidate.sections, campaign.pool[0]), trial_stack_name(name, candidate)
            )
        except SpecError:
            continue  # judge says why
        servers = [spec] if spec.fleet is None else [spec.for_host(i) for i in range(len(spec.fleet.hosts))]
        judged += [(server, server.environment.sglang_release) for server in servers]
    execute_all(judged)


def _check_pool_fits(campaign: CampaignSpec, base: dict[str, Any]) -> None:
    """SpecError unless the pool's entries are fleets exactly when the base stack is one."""
    fleets = [entry.fleet is not None for entry in campaign.pool]
    if "fleet" in base and not all(fleets):
        raise SpecError(
            f"The base stack {campaign.base} is a fleet, but pool.{fleets.index(False)} is one host; give"
            " each pool entry a fleet (its hosts and router ports) instead of a host, as"
            " campaigns/pd-long.yaml does. Nothing was created."
        )
    if "fleet" not in base and any(fleets):
        raise SpecError(
            f"pool.{fleets.index(True)} is a fleet, but the base stack {campaign.base} has no fleet"
            " section; give that pool entry a host, or base the campaign on a fleet stack. Nothing was"
            " created."
        )


def make_plan(name: str, campaign: CampaignSpec, stacks_dir: Path) -> Plan:
    """Expand ``campaign`` over its base stack (read from ``stacks_dir``) and judge each candidate
    (when there are at most ``PLAN_LIMIT``). SpecError when an axis varies a key no stack has."""
    base = read_stack_file(campaign.base, stacks_dir).sections
    _check_pool_fits(campaign, base)
    check_axis_keys(campaign, base)
    check_axis_values(campaign)
    counts = [axis.count() for axis in campaign.axes]
    size = None if None in counts else math.prod(c for c in counts if c is not None)
    if size is None or size > PLAN_LIMIT:
        return Plan(name, campaign, (), base, choose_strategy(campaign, None), size)
    rows: list[PlanRow] = []
    kept = 0
    grid = campaign.search.strategy == "grid"
    candidates = list(expand(campaign, base))
    _execute_together(name, campaign, candidates)
    for candidate in candidates:
        row = judge(name, campaign, candidate)
        if row.verdict == "kept":
            kept += 1
            limit = campaign.budget.max_trials
            if grid and limit is not None and kept > limit:
                row = PlanRow(
                    row.stack,
                    candidate,
                    "over_budget",
                    (f"beyond budget.max_trials {limit}",),
                    row.warnings,
                    row.spec,
                )
        rows.append(row)
    return Plan(name, campaign, tuple(rows), base, choose_strategy(campaign, kept), size)


def plan_campaign(campaign_file: Path, stacks_dir: Path) -> Plan:
    """Load ``campaign_file`` and plan it; its name is the file's stem."""
    return make_plan(campaign_file.stem, load_campaign(campaign_file), stacks_dir)


def format_plan(plan: Plan) -> str:
    """The plan as a text table: every candidate, its axis labels, kept or why not."""
    titles = [axis.title.removeprefix("server.").removeprefix("environment.") for axis in plan.campaign.axes]
    header = ["stack", *titles, "verdict", "reason / warnings"]
    lines = [header]
    for row in plan.rows:
        why = "; ".join(row.reasons) if row.reasons else ", ".join(row.warnings)
        lines.append([row.stack, *row.candidate.labels.values(), row.verdict, _short(why)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    text = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)) + "  " + line[-1] for line in lines
    ]
    hosts = describe_pool(plan.campaign.pool, names=False)
    if not plan.listed:
        size = "no end of" if plan.size is None else f"{plan.size}"
        why = "a real interval" if plan.size is None else f"more than {PLAN_LIMIT} to list"
        return (
            f"The axes make {size} candidates ({why}): nothing is listed or launched. `sglang-stacks sweep "
            f"run` searches them with {_strategy(plan)} on {hosts}, preflight judging each suggestion "
            "before any launch."
        )
    counts = {v: sum(r.verdict == v for r in plan.rows) for v in ("kept", "discarded", "over_budget")}
    runs = "runs the kept ones" if plan.strategy == "grid" else "searches the kept ones"
    summary = (
        f"{len(plan.rows)} candidates: {counts['kept']} kept, {counts['discarded']} discarded by preflight"
        + (f", {counts['over_budget']} over budget" if counts["over_budget"] else "")
        + f". Nothing was launched; `sglang-stacks sweep run` {runs} on {hosts} ({_strategy(plan)})."
    )
    return "\n".join([*text, "", summary])


def _strategy(plan: Plan) -> str:
    chosen = "" if plan.campaign.search.strategy else ", the default for this space and budget"
    what = {
        "grid": "grid: every kept candidate in file order",
        "random": "random suggestions",
        "tpe": "tpe: Optuna's TPE sampler",
        "nsga2": "nsga2: Optuna's NSGA-II sampler",
    }[plan.strategy]
    seed = "" if plan.strategy == "grid" else f", seed {plan.campaign.search.seed}"
    return f"strategy {what}{seed}{chosen}"


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
