"""The sweep's progress on the terminal: a live table (rich) of trials done, running and failed,
with the best so far, and one line per event. Without a terminal, only the event lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from sglang_stacks.campaign.objective import describe, samples
from sglang_stacks.results.stats import mean

if TYPE_CHECKING:
    from sglang_stacks.campaign.runner import Sweep

__all__ = ["best", "display", "summary"]


def best(sweep: Sweep) -> tuple[str, float] | None:
    """The measured trial with the highest mean objective so far, and that mean."""
    scored = [
        (t.stack, mean(samples(sweep.plan.campaign.objective, t.levels)))
        for t in sweep.state.trials()
        if t.status in ("measured", "done") and t.levels
    ]
    return max(scored, key=lambda item: item[1]) if scored else None


def _counts(sweep: Sweep) -> dict[str, int]:
    trials = sweep.state.trials()
    return {
        s: sum(t.status == s for t in trials) for s in ("pending", "running", "measured", "done", "failed")
    }


def summary(sweep: Sweep) -> str:
    """One sentence: how many trials are done, failed and left, and the best so far."""
    counts = _counts(sweep)
    done = counts["done"] + counts["measured"]
    leader = best(sweep)
    lead = (
        f"; best so far {leader[0]} at {leader[1]:.1f} ({describe(sweep.plan.campaign.objective)})"
        if leader
        else ""
    )
    left = counts["pending"] + counts["running"]
    return (
        f"sweep {sweep.plan.name}: {done} done, {counts['failed']} failed, {left} left{lead}. "
        f"`sglang-stacks sweep report` ranks them."
    )


def _table(sweep: Sweep) -> Any:
    from rich.table import Table

    table = Table(title=f"sweep {sweep.plan.name}", expand=False)
    for column in ("host", "trial", "state"):
        table.add_column(column)
    running = {t.host: t for t in sweep.state.trials() if t.status == "running"}
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
