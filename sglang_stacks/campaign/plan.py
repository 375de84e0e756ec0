"""A campaign's plan: every candidate kept, or discarded with the reason, before any host is touched.

Each candidate's sections are validated as a stack spec (on the pool's first host: the pool's
hosts declare like GPUs) and run through preflight, whose memory planner, SM120 rules and
speculative-shape rules are the same that stop ``pulumi up``. Kept candidates beyond the
budget's ``max_trials`` are marked over budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sglang_stacks.campaign.axes import Candidate, bind_host, expand, trial_stack_name
from sglang_stacks.campaign.model import CampaignSpec, load_campaign
from sglang_stacks.config.preflight import run_preflight
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.config.stackfile import read_stack_file
from sglang_stacks.errors import SpecError

__all__ = ["Plan", "PlanRow", "format_plan", "make_plan", "plan_campaign"]

Verdict = Literal["kept", "discarded", "over_budget"]


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
    """A campaign's candidates in order, with its name and spec."""

    name: str
    campaign: CampaignSpec
    rows: tuple[PlanRow, ...]

    def kept(self) -> list[PlanRow]:
        """The candidates the sweep runs, in plan order."""
        return [row for row in self.rows if row.verdict == "kept"]


def _judge(name: str, campaign: CampaignSpec, candidate: Candidate) -> PlanRow:
    stack = trial_stack_name(name, candidate)
    sections = bind_host(candidate.sections, campaign.pool[0])
    try:
        spec = load_spec(sections, stack)
    except SpecError as error:
        detail = str(error).split("\n", 1)[-1].replace("  - ", "").replace("\n", " ")
        return PlanRow(stack, candidate, "discarded", (f"invalid-stack: {detail}",))
    findings = run_preflight(spec, spec.environment.sglang_release)
    errors = tuple(f"{f.code}: {f.message}" for f in findings if f.severity == "error")
    if errors:
        return PlanRow(stack, candidate, "discarded", errors, spec=spec)
    warnings = tuple(f.code for f in findings if f.severity == "warning")
    return PlanRow(stack, candidate, "kept", warnings=warnings, spec=spec)


def make_plan(name: str, campaign: CampaignSpec, stacks_dir: Path) -> Plan:
    """Expand ``campaign`` over its base stack (read from ``stacks_dir``) and judge each candidate."""
    base = read_stack_file(campaign.base, stacks_dir).sections
    rows: list[PlanRow] = []
    kept = 0
    for candidate in expand(campaign, base):
        row = _judge(name, campaign, candidate)
        if row.verdict == "kept":
            kept += 1
            limit = campaign.budget.max_trials
            if limit is not None and kept > limit:
                row = PlanRow(
                    row.stack,
                    candidate,
                    "over_budget",
                    (f"beyond budget.max_trials {limit}",),
                    row.warnings,
                    row.spec,
                )
        rows.append(row)
    return Plan(name, campaign, tuple(rows))


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
    counts = {v: sum(r.verdict == v for r in plan.rows) for v in ("kept", "discarded", "over_budget")}
    summary = (
        f"{len(plan.rows)} candidates: {counts['kept']} kept, {counts['discarded']} discarded by preflight"
        + (f", {counts['over_budget']} over budget" if counts["over_budget"] else "")
        + ". Nothing was launched; `sglang-stacks sweep run` runs the kept ones on "
        + f"{len(plan.campaign.pool)} host(s)."
    )
    return "\n".join([*text, "", summary])


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
