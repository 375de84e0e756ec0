"""``sweep report``: the Markdown report of a sweep (``reports/<campaign>/report.md``) with its
ranking table, failed trials, the plan's discards, and the figures beside it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sglang_stacks.campaign.figures import draw_all
from sglang_stacks.campaign.objective import describe
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.campaign.rank import Ranking, rank
from sglang_stacks.campaign.state import SweepState

__all__ = ["REPORT_FILE", "load_ranking", "write_report"]

REPORT_FILE = "report.md"


def load_ranking(plan: Plan, reports: Path) -> Ranking:
    """The ranking of the sweep recorded in ``reports/<campaign>/``."""
    state = SweepState.open(reports / plan.name, plan.name)
    return rank(plan.campaign.objective, state.trials())


def _table(ranking: Ranking) -> list[str]:
    titles = list(ranking.trials[0].labels) if ranking.trials else []
    head = [
        "#",
        "stack",
        *(t.split(".")[-1] for t in titles),
        "mean",
        "95 % interval",
        "vs best",
        "p",
        "verdict",
        "TTFT p50 ms",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in ranking.trials:
        verdict = "best" if t.rank == 1 else ("within noise" if t.within_noise else "significantly worse")
        if t.stopped_early:
            verdict += ", stopped early"
        p = "" if t.p_value is None else ("<0.001" if t.p_value < 0.001 else f"{t.p_value:.3f}")
        cells = [
            str(t.rank),
            f"`{t.stack}`",
            *t.labels.values(),
            f"{t.mean:.1f}",
            f"{t.ci95[0]:.1f} to {t.ci95[1]:.1f}",
            f"{t.change_pct:+.1f} %",
            p,
            verdict,
            "" if t.ttft_p50_ms is None else f"{t.ttft_p50_ms:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(plan: Plan, reports: Path) -> Path:
    """Write the report and its figures into ``reports/<campaign>/``; the report's path."""
    folder = reports / plan.name
    ranking = load_ranking(plan, reports)
    figures = draw_all(ranking, folder) if ranking.trials else {}
    discarded = [row for row in plan.rows if row.verdict == "discarded"]
    reasons = Counter(reason.split(":", 1)[0] for row in discarded for reason in row.reasons)
    lines = [
        f"# Campaign {plan.name}",
        "",
        plan.campaign.description,
        "",
        f"Objective: {describe(plan.campaign.objective)}. {len(plan.rows)} candidates, "
        f"{len(plan.kept())} kept by the plan, {len(discarded)} discarded before any launch; "
        f"{len(ranking.trials)} trials measured, {len(ranking.failed)} failed. Significance: Welch's "
        "t-test against the best over the repetitions, p < 0.05.",
        "",
        "## Verdict",
        "",
        ranking.verdict(),
        "",
        "## Ranking",
        "",
        *_table(ranking),
        "",
    ]
    for name, title in (
        ("objective", "Objective per trial"),
        ("pareto", "tok/s against TTFT p50"),
        ("axes", "Per-axis effect"),
    ):
        if name in figures:
            lines += [f"![{title}]({figures[name].name})", ""]
    stopped = [t for t in ranking.trials if t.stopped_early]
    if stopped:
        lines += ["## Stopped early", ""]
        lines += [f"- `{t.stack}` ({', '.join(t.labels.values())}): {t.stopped_early}." for t in stopped]
        lines.append("")
    if ranking.failed:
        lines += ["## Failed trials", "", "| stack | cause | message |", "|---|---|---|"]
        lines += [
            f"| `{r.stack}` | {r.cause} | {(r.message or '').replace('|', '/')[:200]} |"
            for r in ranking.failed
        ]
        lines.append("")
    if discarded:
        lines += ["## Discarded by the plan", ""]
        lines += [f"- {count} x `{code}`" for code, count in reasons.most_common()]
        lines.append("")
    path = folder / REPORT_FILE
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
