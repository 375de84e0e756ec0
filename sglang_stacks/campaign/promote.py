"""``sweep promote``: the sweep's winner written into a stack file (usually baseline), as
``sglang-stacks promote`` does: its ``server`` and ``draftModel`` sections, with the diff shown
and a question asked. The winner's sections are rebuilt from the campaign (the base stack with the
winner's axis values), so the pool host's port does not travel into the target."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.report import load_ranking
from sglang_stacks.campaign.search import SearchSpace
from sglang_stacks.config.stackfile import stack_file_text
from sglang_stacks.errors import SpecError
from sglang_stacks.results import promote as promote_stack

__all__ = ["promote_winner"]


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
    ranking = load_ranking(plan, reports)
    if ranking.winner is None:
        raise SpecError(
            f"Campaign {plan.name} has no measured trial yet. "
            f"Run `sglang-stacks sweep run {plan.name}` first."
        )
    chosen = ranking.winner.stack if trial is None else trial
    measured = {t.stack for t in ranking.trials}
    if chosen not in measured:
        raise SpecError(
            f"{chosen!r} is not a measured trial of {plan.name}. Use one of: {', '.join(sorted(measured))}."
        )
    print(ranking.verdict(), file=out)
    labels = next(t.labels for t in ranking.trials if t.stack == chosen)
    space = SearchSpace.of(plan.campaign, plan.base)
    winner_text = stack_file_text(space.candidate(space.params(labels)).sections)
    return promote_stack.promote(
        chosen, target, yes=yes, stacks_dir=stacks_dir, out=out, winner_text=winner_text
    )
