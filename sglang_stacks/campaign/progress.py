"""The search's progress on the terminal: a live table (rich) of each pool host's trial, trials
done, failed and running, the launches avoided and the best so far, and one line per event.
Without a terminal, only the event lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.objective import describe
from sglang_stacks.campaign.rank import rank

if TYPE_CHECKING:
    from sglang_stacks.campaign.sweep import Sweep

__all__ = ["best", "display", "summary"]


def best(sweep: Sweep, found: list[TrialRecord] | None = None) -> tuple[str, float] | None:
    """The feasible measured trial with the best mean (first) objective so far, and that mean."""
    campaign = sweep.plan.campaign
    ranking = rank(campaign.goals[0], sweep.records() if found is None else found, campaign.noise.noise())
    return (ranking.trials[0].stack, ranking.trials[0].mean) if ranking.trials else None


def summary(sweep: Sweep) -> str:
    """A sentence or two: trials launched, done, failed and running; the launches avoided; the
    best so far; why the search ended, when it ended early."""
    found = sweep.records()
    done = sum(r.status == "done" for r in found)
    failed = sum(r.status == "failed" for r in found)
    running = sum(r.state == "RUNNING" for r in found)
    discarded = sum(r.status == "infeasible" for r in found)
    repeated = sum(r.status == "duplicate" for r in found)
    leader = best(sweep, found)
    lead = (
        f"; best so far {leader[0]} at {leader[1]:.1f} ({describe(sweep.plan.campaign.goals[0])})"
        if leader
        else ""
    )
    ended = f" The search stopped: {sweep.ended}." if sweep.ended else ""
    avoided = f"{discarded} suggestions discarded by preflight and {repeated} repeated ones, none launched"
    if sweep.plan.listed:
        # The plan judged every candidate before the search: its count is the one `sweep plan`
        # printed, whichever of them the search happened to suggest.
        planned = sum(row.verdict == "discarded" for row in sweep.plan.rows)
        avoided = (
            f"{planned} of the {len(sweep.plan.rows)} candidates discarded by preflight before any launch "
            f"({discarded} of them suggested and told infeasible) and {repeated} repeated suggestions, "
            "none launched"
        )
    return (
        f"sweep {sweep.plan.name}: {done} done, {failed} failed, {running} running; {avoided}"
        f"{lead}.{ended} `sglang-stacks sweep report` ranks them."
    )


def _table(sweep: Sweep) -> Any:
    from rich.table import Table

    table = Table(title=f"sweep {sweep.plan.name}", expand=False)
    for column in ("host", "trial", "state"):
        table.add_column(column)
    running = {t.host: t for t in sweep.records() if t.state == "RUNNING" and t.driver == sweep.driver}
    for host in sweep.plan.campaign.pool:
        trial = running.get(host.name)
        labels = ", ".join(trial.labels.values()) if trial else ""
        table.add_row(
            host.name, f"{trial.stack} ({labels})" if trial else "-", "running" if trial else "idle"
        )
    table.caption = summary(sweep)
    return table


@contextmanager
def display(sweep: Sweep, out: TextIO) -> Iterator[Callable[[], None]]:
    """A refresh function that prints new events and, on a terminal, redraws the live table."""
    from rich.console import Console
    from rich.live import Live

    console = Console(file=out, highlight=False, soft_wrap=True)
    printed = 0

    def events() -> None:
        nonlocal printed
        while printed < len(sweep.events):
            console.print(f"sweep: {sweep.events[printed]}", markup=False)
            printed += 1

    if not console.is_terminal:
        yield events
        events()
        return
    with Live(_table(sweep), console=console, refresh_per_second=2, transient=True) as live:

        def refresh() -> None:
            events()
            live.update(_table(sweep))

        yield refresh
    events()
