"""``sweep promote``: the campaign's winner, or any measured trial (``--trial <stack>``: one within
noise of the winner, a point of the Pareto front, even one that missed an SLO, said so), written
into a stack file (usually baseline) as ``sglang-stacks promote`` does: its ``server`` and
``draftModel`` sections, with the diff shown and a question asked. The trial's sections are rebuilt
from the campaign (the base stack with the trial's axis values), so the pool host's port does not
travel into the target."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.rank import rank
from sglang_stacks.campaign.report import load_records
from sglang_stacks.campaign.space import SearchSpace
from sglang_stacks.causes import cause_text
from sglang_stacks.config.stackfile import stack_file_text
from sglang_stacks.errors import SpecError
from sglang_stacks.results import promote as promote_stack

__all__ = ["promote_winner"]


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f"{key.split('.')[-1]}={value}" for key, value in labels.items())


def _measured(name: str, found: list[TrialRecord], stack: str) -> TrialRecord:
    """The measured trial of ``stack`` (its latest); SpecError saying why there is none."""
    measured = [r for r in found if r.status == "done" and r.levels]
    for record in reversed(measured):
        if record.stack == stack:
            return record
    others = [r for r in found if r.stack == stack and r.status in ("failed", "infeasible")]
    if others:
        record = others[-1]
        what = (
            "failed on its host"
            if record.status == "failed"
            else "was discarded by preflight, never launched"
        )
        raise SpecError(
            f"Trial {stack} of campaign {name} {what} ({cause_text(record.cause)}): it has no measured "
            "configuration to promote. Promote a measured trial (`sglang-stacks sweep report` lists them)."
        )
    known = sorted({r.stack for r in measured})
    raise SpecError(
        f"{stack!r} is not a measured trial of campaign {name}. Use one of: {', '.join(known) or 'none yet'}."
    )


def promote_winner(
    plan: Plan,
    *,
    reports: Path,
    stacks_dir: Path,
    target: str,
    yes: bool,
    out: TextIO,
    trial: str | None = None,
) -> int:
    """Promote the best trial (or ``trial``) into ``target``; the exit code of ``promote``."""
    found = load_records(plan, reports)
    ranking = rank(plan.campaign.goals[0], found, plan.campaign.noise.noise())
    if trial is None:
        if ranking.winner is None:
            raise SpecError(
                f"Campaign {plan.name} has no measured trial that met its constraints yet. Run "
                f"`sglang-stacks sweep run {plan.name}` first, or name a measured trial with --trial."
            )
        chosen = ranking.winner.stack
    else:
        chosen = trial
    record = _measured(plan.name, found, chosen)
    print(ranking.verdict(), file=out)
    if ranking.winner is None or chosen != ranking.winner.stack:
        print(f"Promoting {chosen} ({_labels(record.labels)}), as asked, not the best.", file=out)
    for violation in record.violations:
        print(f"Note: {chosen} missed an SLO: {violation}.", file=out)
    labels = record.labels
    space = SearchSpace.of(plan.campaign, plan.base)
    winner_text = stack_file_text(space.candidate(space.params(labels)).sections)
    return promote_stack.promote(
        chosen, target, yes=yes, stacks_dir=stacks_dir, out=out, winner_text=winner_text
    )
